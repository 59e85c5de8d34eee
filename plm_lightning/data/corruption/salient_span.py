"""Salient span masking (Guu et al. 2020, "REALM: Retrieval-Augmented Language Model Pre-Training", sec. 3.4):
instead of random tokens, mask one *salient span* per sentence - a named entity or a date, found in REALM by a
BERT-based tagger trained on CoNLL-2003 and a regular expression for dates - so the masked tokens need world
knowledge rather than local syntax ("United Kingdom", "July 1969").

Entities here are runs of capitalised words (:func:`plm_lightning.corpus.knowledge_units.capitalised_runs`: a lone
sentence-initial capital is sentence case, not an entity); dates are runs of month names, day numbers next to a
month, and years 1000-2099. The span's every token becomes ``[MASK]`` and carries the loss.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from plm_lightning.corpus.knowledge_units import capitalised_runs
from plm_lightning.data.corruption.counter_rng import uniforms
from plm_lightning.data.corruption.token_mask import IGNORE_INDEX

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec")
_YEAR = re.compile(r"^(1\d{3}|20\d{2})s?$")
_DAY = re.compile(r"^([1-9]|[12]\d|3[01])(st|nd|rd|th)?,?$")


def _date_words(words: Sequence[str]) -> list[bool]:
    """Per word, whether it belongs to a date: a month name, a year, or a day number next to a month."""
    month = [w.lower().rstrip(".,") in MONTHS for w in words]
    year = [bool(_YEAR.match(w)) for w in words]
    day = [bool(_DAY.match(w)) and ((i > 0 and month[i - 1]) or (i + 1 < len(words) and month[i + 1]))
           for i, w in enumerate(words)]
    # "May" alone is as often a name or a verb: a month name counts only next to a day or a year
    near = [(i > 0 and (year[i - 1] or day[i - 1])) or (i + 1 < len(words) and (year[i + 1] or day[i + 1]))
            for i in range(len(words))]
    return [y or d or (m and n) for y, d, m, n in zip(year, day, month, near)]


def salient_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """Word ranges ``[start, end)`` of the entities and dates of a sentence, in order, not overlapping."""
    units, inside = capitalised_runs(words)
    dates = _date_words(words)
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        if dates[i]:
            j = i
            while j < len(words) and dates[j]:
                j += 1
        elif inside[i]:
            j = i
            while j < len(words) and inside[j] and units[j] == units[i] and not dates[j]:
                j += 1
        else:
            i += 1
            continue
        spans.append((i, j))
        i = j
    return spans


def mask_salient_span(ids: np.ndarray, token_words: np.ndarray, spans: Sequence[tuple[int, int]], key: np.uint64,
                      mask_id: int, stream: int = 11) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(input ids, labels, the chosen word span): one of ``spans`` (word ranges; ``token_words`` gives each token's
    word, -1 for none) drawn uniformly from the sample's counter ``key``, all its tokens replaced by ``mask_id``;
    labels hold the original ids there and -100 elsewhere. ``spans`` must not be empty."""
    if not spans:
        raise ValueError("mask_salient_span: the sentence has no salient span")
    pick = min(int(uniforms(np.uint64(key), 1, stream)[0, 0] * len(spans)), len(spans) - 1)
    start, end = spans[pick]
    chosen = (token_words >= start) & (token_words < end)
    labels = np.where(chosen, ids, IGNORE_INDEX).astype(np.int64)
    return np.where(chosen, mask_id, ids).astype(np.int64), labels, (start, end)


def replace_span(tokens: np.ndarray, span: np.ndarray, substitute: np.ndarray) -> tuple[np.ndarray, int]:
    """``tokens`` with every non-overlapping occurrence of the token sequence ``span`` (left to right) replaced by
    ``substitute``, which must have the same length, and the number of occurrences replaced.

    The counterfactual copy of :class:`plm_lightning.data.realm.REALMCollator`: a document where the masked
    answer is swapped for another entity, so that only reading it - not remembering the true fact - predicts it."""
    if len(span) != len(substitute) or not len(span):
        raise ValueError(f"replace_span: span ({len(span)} tokens) and substitute ({len(substitute)}) must have the "
                         "same, non-zero length")
    out, n, count, free = tokens.copy(), len(span), 0, 0
    if len(tokens) < n:
        return out, 0
    for i in np.flatnonzero((np.lib.stride_tricks.sliding_window_view(tokens, n) == span).all(1)):
        if i >= free:  # left to right, skipping matches that overlap the last one replaced
            out[i: i + n] = substitute
            count, free = count + 1, i + n
    return out, count
