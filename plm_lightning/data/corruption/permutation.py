"""XLNet's permutation language modelling (Yang et al. 2019, sec. 2.2-2.3, eq. 3 and 5; the reference code's
``data_utils._sample_mask`` and ``_local_perm``), as pure seeded functions.

There is no corruption of the input: the objective lives in the attention masks. A factorization order z is sampled
per row, and only the last tokens of the order are predicted (partial prediction, eq. 5: the last 1/K, K = 6). The
predicted tokens are chosen first, as whole-word n-gram spans (n ~ 1/n over 1..5, about one span of n in every
``n * mask_alpha / mask_beta`` tokens), then the order is built around them: every other (context) token comes
before every target, so all targets see the full context, and the targets are permuted among themselves. The
order is expressed as ``perm_mask[i, j]`` (True: position i may NOT attend to j):

* a context token is visible to every position and itself sees no target (no leak);
* a target j is visible to i only if j comes strictly earlier in the order; in the query stream a target never sees
  itself (the content stream adds the diagonal back in ``XLStack``).

The order is a local permutation: positions are permuted within chunks of ``perm_size``, every chunk with the same
permutation and the chunks in sequence (the reference code's reshape-shuffle-reshape; its default perm_size is half
the sequence, so the sequence length must be a multiple of it).
"""

from __future__ import annotations

from typing import Literal

import numpy as np


def ngram_spans(word_starts: np.ndarray, num_predict: int, rng: np.random.Generator, max_gram: int = 5,
                mask_alpha: int = 6, mask_beta: int = 1, unit: Literal["word", "token"] = "word") -> list[tuple[int, int]]:
    """XLNet's ``_sample_mask`` spans ``(begin, end)``, in order, covering at most ``num_predict`` positions.

    Draw n with P(n) proportional to 1/n over 1..``max_gram`` (at most what is still needed), a context of
    ``n * mask_alpha // mask_beta`` tokens and a left part l ~ U[0, context); the span starts at the first word start
    at or after ``cursor + l`` and covers n words (``unit: word``; the released code's loop tests the span's first
    piece instead of each next one, so it covers n tokens: ``unit: token``), cut at the budget; the cursor then moves
    past the span and the right part of the context.
    """
    length = len(word_starts)
    num_predict = min(num_predict, length)
    grams = np.arange(1, max_gram + 1)
    p = 1.0 / grams
    p /= p.sum()
    spans: list[tuple[int, int]] = []
    predicted, cursor = 0, 0
    starts = np.flatnonzero(word_starts)
    while cursor < length and predicted < num_predict:
        n = min(int(rng.choice(grams, p=p)), num_predict - predicted)
        context = n * mask_alpha // mask_beta
        left = int(rng.integers(context))
        after = starts[np.searchsorted(starts, cursor + left):]
        if len(after) == 0:
            break
        begin = int(after[0])
        end = (int(after[n]) if len(after) > n else length) if unit == "word" else begin + n
        end = min(end, begin + num_predict - predicted, length)
        spans.append((begin, end))
        predicted += end - begin
        cursor = end + context - left
    return spans


def sample_span_targets(word_starts: np.ndarray, num_predict: int, rng: np.random.Generator, max_gram: int = 5,
                        mask_alpha: int = 6, mask_beta: int = 1, unit: Literal["word", "token"] = "word") -> np.ndarray:
    """Boolean ``[L]``: exactly ``min(num_predict, L)`` positions to predict: :func:`ngram_spans`, then, when the
    spans fall short at the end of the row, random single positions (as the reference code)."""
    mask = np.zeros(len(word_starts), dtype=bool)
    for begin, end in ngram_spans(word_starts, num_predict, rng, max_gram, mask_alpha, mask_beta, unit):
        mask[begin:end] = True
    missing = min(num_predict, len(mask)) - int(mask.sum())
    if missing > 0:
        mask[rng.choice(np.flatnonzero(~mask), missing, replace=False)] = True
    return mask


def factorization_ranks(length: int, perm_size: int, rng: np.random.Generator) -> np.ndarray:
    """``[L]`` rank of each position in the factorization order: one permutation of ``perm_size`` applied to every
    chunk, chunks in sequence (rank of position c * perm_size + k is c * perm_size + pi(k))."""
    if length % perm_size:
        raise ValueError(f"sequence length {length} is not a multiple of perm_size={perm_size}")
    pi = rng.permutation(perm_size)
    return (np.arange(0, length, perm_size)[:, None] + pi[None, :]).reshape(-1)


def permutation_mask(targets: np.ndarray, functional: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """``[L, L]`` perm_mask (True: i may not attend to j) for the order ``ranks``, XLNet's ``_local_perm``.

    Context tokens (neither target nor functional) take rank -1: every position sees them and they see no target.
    Functional tokens (separators, ``<cls>``) keep their rank but are never predicted. A target does not see itself
    (the query stream's rule)."""
    context = ~targets & ~functional
    in_order = ~context
    rank = np.where(context, -1, ranks)
    self_rank = np.where(targets, rank, rank + 1)
    return (self_rank[:, None] <= rank[None, :]) & in_order[None, :]
