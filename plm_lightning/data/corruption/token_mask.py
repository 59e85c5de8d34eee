"""BERT token masking, Devlin et al. 2019, sec. 3.1 "Task #1: Masked LM" and appendix C.2.

Choose exactly ``round(mask_prob * n)`` of the ``n`` maskable tokens (at least one); of those, replace a fraction
``mask_replace_prob`` by [MASK], ``random_replace_prob`` by a random token and leave the rest unchanged. The model
predicts the original token at every chosen position and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def replace_selected(
    input_ids: np.ndarray,
    selected: np.ndarray,
    rng: np.random.Generator,
    cfg: MaskingConfig,
    mask_token_id: int,
    random_token_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the [MASK] / random / unchanged replacement to the ``selected`` positions (boolean, same shape).

    Returns ``(corrupted, labels)`` with labels = original ids at selected positions and -100 elsewhere. Shared by
    every scheme that chooses positions differently (tokens, whole words, spans, entities).
    """
    corrupted = input_ids.copy()
    labels = np.full_like(input_ids, IGNORE_INDEX)
    labels[selected] = input_ids[selected]
    idx = np.flatnonzero(selected)
    draw = rng.random(idx.size)
    to_mask = idx[draw < cfg.mask_replace_prob]
    to_random = idx[(draw >= cfg.mask_replace_prob) & (draw < cfg.mask_replace_prob + cfg.random_replace_prob)]
    corrupted[to_mask] = mask_token_id
    if to_random.size:
        corrupted[to_random] = random_token_ids[rng.integers(0, random_token_ids.size, to_random.size)]
    return corrupted, labels


def mask_tokens(
    input_ids: np.ndarray,
    maskable: np.ndarray,
    rng: np.random.Generator,
    cfg: MaskingConfig,
    mask_token_id: int,
    random_token_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Token-level MLM corruption of one sequence. ``maskable`` marks non-special, non-pad positions."""
    candidates = np.flatnonzero(maskable)
    budget = masking_budget(candidates.size, cfg.mask_prob)
    selected = np.zeros(input_ids.shape, dtype=bool)
    selected[rng.choice(candidates, size=budget, replace=False)] = True
    return replace_selected(input_ids, selected, rng, cfg, mask_token_id, random_token_ids)
