"""The corruption of ERNIE's denoising entity auto-encoder (dEA; Zhang et al. 2019, sec. 3.4): token-entity
alignments, not tokens, are noised, and the model predicts every aligned entity from its token.

For each alignment: with probability 0.05 the entity is replaced by another random entity (the model must correct
errors of the aligner), with 0.15 the alignment is masked (the token gets no entity; the model must find it from
the text), else it is kept. The candidates of a sequence's predictions are the entities aligned in it (eq. 7's
softmax over "all entities in the given entity sequence").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from plm_lightning.data.corruption.counter_rng import uniforms
from plm_lightning.data.corruption.token_mask import IGNORE_INDEX
from plm_lightning.errors import ConfigError

NO_ENTITY = -1
_STREAM = 40  # uniform streams 40, 41: disjoint from the token masking's


@dataclass(frozen=True)
class AlignmentNoise:
    """ERNIE's 5% replaced / 15% masked alignments."""

    replace_prob: float = 0.05
    mask_prob: float = 0.15

    def __post_init__(self) -> None:
        if min(self.replace_prob, self.mask_prob) < 0 or self.replace_prob + self.mask_prob > 1:
            raise ConfigError(f"entity alignment noise: replace_prob={self.replace_prob} and mask_prob="
                              f"{self.mask_prob} must be >= 0 and sum to at most 1")


def corrupt_alignments(entity_ids: np.ndarray, keys: ArrayLike, num_entities: int,
                       cfg: AlignmentNoise = AlignmentNoise()) -> tuple[np.ndarray, np.ndarray]:
    """(the entity ids the model sees, which alignments were corrupted) for ``entity_ids`` ``[B, T]`` (-1 where a
    token has no entity), one counter key per row. A replacement is never the original entity."""
    ids = np.asarray(entity_ids, dtype=np.int64)
    keys = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    draw = uniforms(keys, ids.shape[1], stream=_STREAM)
    aligned = ids != NO_ENTITY
    replace = aligned & (draw < cfg.replace_prob) & (num_entities > 1)
    masked = aligned & ~replace & (draw < cfg.replace_prob + cfg.mask_prob)
    other = np.floor(uniforms(keys, ids.shape[1], stream=_STREAM + 1) * max(1, num_entities - 1)).astype(np.int64)
    other = other + (other >= ids)  # skip the original: uniform over the other entities
    seen = np.where(replace, other, np.where(masked, NO_ENTITY, ids))
    return seen, replace | masked


def candidate_entities(entity_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``[B, C]`` the distinct entities aligned in each row, padded with -1; ``[B, T]`` each aligned token's
    index among its row's candidates, -100 elsewhere): the targets of the dEA softmax."""
    ids = np.asarray(entity_ids, dtype=np.int64)
    rows = [np.unique(row[row != NO_ENTITY]) for row in ids]
    width = max(1, max(len(r) for r in rows))
    candidates = np.full((len(rows), width), NO_ENTITY, dtype=np.int64)
    labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
    for b, row in enumerate(rows):
        candidates[b, : len(row)] = row
        where = ids[b] != NO_ENTITY
        labels[b, where] = np.searchsorted(row, ids[b, where])
    return candidates, labels
