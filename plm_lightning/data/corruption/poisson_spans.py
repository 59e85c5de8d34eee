"""Span lengths drawn from Poisson(lambda) until a masking budget is met: the sampler BART's text infilling (Lewis et
al. 2020, sec. 2.2; fairseq ``DenoisingDataset.add_whole_word_mask``) and GLM's blank infilling (Du et al. 2022,
sec. 2.1) share.

fairseq draws ``budget`` lengths at a time until their running sum reaches the budget, then cuts the first length
that crosses it so the lengths sum to the budget exactly. Zero lengths stay in the result: BART turns each into an
insertion of one mask token (a span of length 0, "which corresponds to the insertion of a [MASK] token").
"""

from __future__ import annotations

import numpy as np


def poisson_span_lengths(budget: int, lam: float, rng: np.random.Generator) -> np.ndarray:
    """Span lengths ~ Poisson(``lam``) whose sum is exactly ``budget`` (the last one trimmed); zeros included."""
    if budget <= 0:
        return np.zeros(0, dtype=np.int64)
    lengths = rng.poisson(lam, size=budget).astype(np.int64)
    while lengths.sum() < budget:
        lengths = np.concatenate([lengths, rng.poisson(lam, size=budget).astype(np.int64)])
    total = np.cumsum(lengths)
    last = int(np.searchsorted(total, budget))  # the first length whose running sum reaches the budget
    lengths = lengths[: last + 1].copy()
    lengths[last] = budget - (int(total[last - 1]) if last > 0 else 0)
    return lengths
