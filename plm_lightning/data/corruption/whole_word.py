"""Whole-word masking (BERT-wwm, Cui et al. 2019; Google's BERT README, 2019-05-31 release): choose complete words
until the token budget of ``mask_prob`` is met, then apply the 80/10/10 replacement to each chosen token.

Selection follows BERT's create_pretraining_data: words are visited in random order, and a word that would push the
count over the budget is skipped while later (shorter) words are still tried.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from plm_lightning.data.corruption.counter_rng import uniforms
from plm_lightning.data.corruption.token_mask import MaskingConfig, masking_budgets, replace_selected


def word_ids(maskable: np.ndarray, word_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, starts)``: per position the index of its word within the row (-1 where not maskable), and where each
    word begins. A word starts at a word-start token or right after any non-maskable token, so fragments left by
    truncation never join special tokens."""
    prev_maskable = np.concatenate([np.zeros_like(maskable[:, :1]), maskable[:, :-1]], axis=1)
    starts = maskable & (word_starts | ~prev_maskable)
    return np.where(maskable, np.cumsum(starts, axis=1) - 1, -1), starts


def select_whole_words(maskable: np.ndarray, word_starts: np.ndarray, keys: ArrayLike, mask_prob: float,
                       priority: np.ndarray | None = None) -> np.ndarray:
    """Boolean ``[B, L]`` selection of complete words, at most ``masking_budget`` tokens per row.

    ``word_starts`` may mark larger units (ERNIE's phrases and entities: only a unit's first token starts it);
    ``priority`` ``[B, L]`` (read at a unit's first token) visits the prioritised units first, in random order,
    then the rest."""
    words, starts = word_ids(maskable, word_starts)
    budgets = masking_budgets(maskable.sum(1), mask_prob)
    scores = uniforms(keys, maskable.shape[1], stream=3)  # one score per word, read at its first token
    selected = np.zeros(maskable.shape, dtype=bool)
    for row in range(maskable.shape[0]):
        first = np.flatnonzero(starts[row])  # word w begins at first[w]
        n_words = first.size
        if n_words == 0:
            continue
        lengths = np.bincount(words[row][words[row] >= 0], minlength=n_words)
        chosen = np.zeros(n_words, dtype=bool)
        total = 0
        order = (np.argsort(scores[row, first], kind="stable") if priority is None
                 else np.lexsort((scores[row, first], ~priority[row, first])))
        for w in order:
            if total >= budgets[row]:
                break
            if total + lengths[w] > budgets[row]:
                continue
            chosen[w] = True
            total += lengths[w]
        selected[row] = (words[row] >= 0) & chosen[np.maximum(words[row], 0)]
    return selected


def mask_whole_words(
    input_ids: np.ndarray,
    maskable: np.ndarray,
    word_starts: np.ndarray,
    keys: ArrayLike,
    cfg: MaskingConfig,
    mask_token_id: int,
    random_token_ids: np.ndarray,
    priority: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Whole-word (or whole-unit, with ``priority``: see :func:`select_whole_words`) MLM corruption of a batch
    ``[B, L]``; returns ``(corrupted, labels)`` like ``mask_tokens``."""
    keys = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    selected = select_whole_words(maskable, word_starts, keys, cfg.mask_prob, priority)
    return replace_selected(input_ids, selected, keys, cfg, mask_token_id, random_token_ids)
