"""SpanBERT span masking (Joshi et al. 2020, sec. 3.1): sample span lengths (in words) from Geo(p = 0.2) limited to
1..``max_span_length`` = 10 and renormalised, as in SpanBERT's released code (mean 3.8 words; clipping instead
would give 4.46), start each span at a uniformly random word, mask complete words, repeat until ``mask_prob`` of the
tokens are chosen; the 80/10/10 replacement is decided once per span.

Spans never overlap and lie inside the sequence: a sampled length keeps its value and only its start is re-drawn
(among starts where it fits) when it would collide, so collisions do not bias lengths towards short spans. A span
that would exceed the budget is shortened to the words that fit, so the budget is met without cutting a word.
Randomness: one generator per sample, seeded by its counter key (seed, epoch, index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from plm_lightning.data.corruption.token_mask import MaskingConfig, masking_budgets, replace_selected
from plm_lightning.data.corruption.whole_word import word_ids
from plm_lightning.errors import ConfigError


@dataclass(frozen=True)
class SpanConfig:
    span_geometric_p: float = 0.2
    max_span_length: int = 10

    def length_distribution(self) -> np.ndarray:
        """P(length = 1..max_span_length): p (1 - p)^(l - 1), renormalised over the allowed lengths."""
        lengths = np.arange(1, self.max_span_length + 1)
        weights = self.span_geometric_p * (1 - self.span_geometric_p) ** (lengths - 1)
        return weights / weights.sum()

    def __post_init__(self) -> None:
        if not 0.0 < self.span_geometric_p <= 1.0:
            raise ConfigError(f"data.span_geometric_p={self.span_geometric_p} must be in (0, 1]")
        if self.max_span_length < 1:
            raise ConfigError(f"data.max_span_length={self.max_span_length} must be >= 1")


def ngram_distribution(max_ngram: int) -> np.ndarray:
    """ALBERT's n-gram masking (Lan et al. 2020, sec. 4.1): P(n) = (1/n) / sum_k (1/k) for n = 1..max_ngram."""
    if max_ngram < 1:
        raise ConfigError(f"data.max_ngram={max_ngram} must be >= 1")
    weights = 1.0 / np.arange(1, max_ngram + 1)
    return weights / weights.sum()


def sample_spans(maskable: np.ndarray, word_starts: np.ndarray, keys: ArrayLike, mask_prob: float,
                 length_probabilities: np.ndarray) -> np.ndarray:
    """``[B, L]`` span index per position (-1 outside spans); spans are numbered from 0 within each row.

    ``length_probabilities[k]`` is P(span of k + 1 words): SpanBERT's truncated geometric
    (:meth:`SpanConfig.length_distribution`) or ALBERT's 1/n law (:func:`ngram_distribution`).
    """
    words, starts = word_ids(maskable, word_starts)
    budgets = masking_budgets(maskable.sum(1), mask_prob)
    span_of = np.full(maskable.shape, -1, dtype=np.int64)
    for row, key in enumerate(np.atleast_1d(np.asarray(keys, dtype=np.uint64))):
        n_words = int(starts[row].sum())
        if n_words == 0:
            continue
        lengths = np.bincount(words[row][words[row] >= 0], minlength=n_words)
        rng = np.random.default_rng(int(key))
        word_span = np.full(n_words, -1, dtype=np.int64)
        total, n_spans, misses = 0, 0, 0
        while total < budgets[row] and misses < 10 * n_words:
            length = min(int(rng.choice(length_probabilities.size, p=length_probabilities)) + 1, n_words)
            for _ in range(20):  # re-draw the start, not the length, on a collision
                start = int(rng.integers(0, n_words - length + 1))
                if not (word_span[start:start + length] >= 0).any():
                    break
            else:
                misses += 1
                continue
            fits = int(np.searchsorted(np.cumsum(lengths[start:start + length]), budgets[row] - total, side="right"))
            if fits == 0:
                misses += 1
                continue
            word_span[start:start + fits] = n_spans
            total += int(lengths[start:start + fits].sum())
            n_spans += 1
        span_of[row] = np.where(words[row] >= 0, word_span[np.maximum(words[row], 0)], -1)
    return span_of


def mask_spans(
    input_ids: np.ndarray,
    maskable: np.ndarray,
    word_starts: np.ndarray,
    keys: ArrayLike,
    cfg: MaskingConfig,
    spans: SpanConfig,
    mask_token_id: int,
    random_token_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SpanBERT corruption of a batch: ``(corrupted, labels, span_ids)``; the replacement kind is drawn per span."""
    keys = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    span_ids = sample_spans(maskable, word_starts, keys, cfg.mask_prob, spans.length_distribution())
    corrupted, labels = replace_selected(input_ids, span_ids >= 0, keys, cfg, mask_token_id, random_token_ids,
                                         groups=span_ids)
    return corrupted, labels, span_ids


def mask_ngrams(
    input_ids: np.ndarray,
    maskable: np.ndarray,
    word_starts: np.ndarray,
    keys: ArrayLike,
    cfg: MaskingConfig,
    max_ngram: int,
    mask_token_id: int,
    random_token_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """ALBERT n-gram masking of a batch: n-grams of complete words, n ~ 1/n over 1..``max_ngram``, the 80/10/10
    replacement per token as in ALBERT's create_pretraining_data."""
    keys = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    span_ids = sample_spans(maskable, word_starts, keys, cfg.mask_prob, ngram_distribution(max_ngram))
    return replace_selected(input_ids, span_ids >= 0, keys, cfg, mask_token_id, random_token_ids)


def span_boundaries(span_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every position inside a span: the index just left of the span (s - 1), just right of it (e + 1) and its
    offset from the span start, as used by the Span Boundary Objective (Joshi et al. 2020, eq. 1); -1 elsewhere."""
    b, n = span_ids.shape
    left = np.full((b, n), -1, dtype=np.int64)
    right = np.full((b, n), -1, dtype=np.int64)
    offset = np.full((b, n), -1, dtype=np.int64)
    inside = span_ids >= 0
    pos = np.arange(n)
    # a span starts where the span id changes and is not -1
    prev = np.concatenate([np.full((b, 1), -1), span_ids[:, :-1]], axis=1)
    nxt = np.concatenate([span_ids[:, 1:], np.full((b, 1), -1)], axis=1)
    is_start, is_end = inside & (prev != span_ids), inside & (nxt != span_ids)
    start_pos = np.maximum.accumulate(np.where(is_start, pos, 0), axis=1)
    end_pos = np.flip(np.minimum.accumulate(np.flip(np.where(is_end, pos, n - 1), axis=1), axis=1), axis=1)
    left[inside] = (start_pos - 1)[inside]
    right[inside] = np.minimum(end_pos + 1, n - 1)[inside]
    offset[inside] = (pos[None, :] - start_pos)[inside]
    return left, right, offset
