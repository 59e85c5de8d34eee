"""BERT token masking, Devlin et al. 2019, sec. 3.1 "Task #1: Masked LM" and appendix C.2.

Choose exactly ``round(mask_prob * n)`` of the ``n`` maskable tokens (at least one); of those, replace a fraction
``mask_replace_prob`` by [MASK], ``random_replace_prob`` by a random token and leave the rest unchanged. The model
predicts the original token at every chosen position and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from plm_lightning.data.corruption.counter_rng import uniforms
from plm_lightning.errors import ConfigError

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingConfig:
    mask_prob: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"data.mask_prob={self.mask_prob} must be in the open interval (0, 1)")
        for name in ("mask_replace_prob", "random_replace_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"data.{name}={getattr(self, name)} must be in [0, 1]")
        if self.mask_replace_prob + self.random_replace_prob > 1.0 + 1e-9:
            raise ConfigError(
                f"data.mask_replace_prob + data.random_replace_prob = "
                f"{self.mask_replace_prob + self.random_replace_prob:g} must be <= 1 (the rest stays unchanged)"
            )


def masking_budget(num_candidates: int, mask_prob: float) -> int:
    """Exact number of positions to predict: ``max(1, round(mask_prob * n))`` (BERT's create_pretraining_data)."""
    if num_candidates == 0:
        return 0
    return min(num_candidates, max(1, int(round(mask_prob * num_candidates))))


def masking_budgets(num_candidates: np.ndarray, mask_prob: float) -> np.ndarray:
    """:func:`masking_budget` for every row at once."""
    n = np.asarray(num_candidates)
    return np.where(n > 0, np.minimum(n, np.maximum(1, np.rint(mask_prob * n).astype(np.int64))), 0)


def replace_selected(
    input_ids: np.ndarray,
    selected: np.ndarray,
    keys: ArrayLike,
    cfg: MaskingConfig,
    mask_token_id: int,
    random_token_ids: np.ndarray,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the [MASK] / random / unchanged replacement to the ``selected`` positions (boolean, ``[B, L]``).

    Returns ``(corrupted, labels)`` with labels = original ids at selected positions and -100 elsewhere. Shared by
    every scheme that chooses positions differently (tokens, whole words, spans, entities). Draws come from
    streams 1 and 2 of the rows' counter-based keys. With ``groups`` (a non-negative group id per selected position,
    e.g. SpanBERT's span index) the replacement kind is decided once per group instead of once per token.
    """
    length = input_ids.shape[-1]
    corrupted = input_ids.copy()
    labels = np.where(selected, input_ids, IGNORE_INDEX)
    kind = uniforms(keys, length, stream=1)
    if groups is not None:  # every token of a group takes the draw at the group's index
        kind = np.take_along_axis(kind, np.clip(groups, 0, length - 1), axis=1)
    to_mask = selected & (kind < cfg.mask_replace_prob)
    to_random = selected & (kind >= cfg.mask_replace_prob) & (kind < cfg.mask_replace_prob + cfg.random_replace_prob)
    corrupted[to_mask] = mask_token_id
    if to_random.any():
        pick = (uniforms(keys, length, stream=2)[to_random] * random_token_ids.size).astype(np.int64)
        corrupted[to_random] = random_token_ids[np.minimum(pick, random_token_ids.size - 1)]
    return corrupted, labels


def mask_tokens(
    input_ids: np.ndarray,
    maskable: np.ndarray,
    keys: ArrayLike,
    cfg: MaskingConfig,
    mask_token_id: int,
    random_token_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Token-level MLM corruption of a batch ``[B, L]`` (or one sequence ``[L]``) in one vectorised pass.

    ``maskable`` marks non-special, non-pad positions; ``keys`` holds one counter key per row (see
    :func:`~plm_lightning.data.corruption.counter_rng.row_keys`; an int is fine for one sequence). Each row gets
    exactly :func:`masking_budget` positions: the maskable positions with the smallest stream-0 uniforms.
    """
    squeeze = input_ids.ndim == 1
    ids, ok = np.atleast_2d(input_ids), np.atleast_2d(maskable)
    keys = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    scores = np.where(ok, uniforms(keys, ids.shape[1], stream=0), np.inf)
    ranks = np.empty(ids.shape, dtype=np.int64)
    np.put_along_axis(ranks, np.argsort(scores, axis=1, kind="stable"), np.arange(ids.shape[1])[None, :], axis=1)
    selected = ranks < masking_budgets(ok.sum(1), cfg.mask_prob)[:, None]
    corrupted, labels = replace_selected(ids, selected, keys, cfg, mask_token_id, random_token_ids)
    return (corrupted[0], labels[0]) if squeeze else (corrupted, labels)
