"""Span lengths drawn from Poisson(lambda) until a masking budget is met: the sampler BART's text infilling (Lewis et
al. 2020, sec. 2.2; fairseq ``DenoisingDataset.add_whole_word_mask``) and GLM's blank infilling (Du et al. 2022,
sec. 2.1) share.

fairseq draws ``budget`` lengths at a time until their running sum reaches the budget, then cuts the first length
that crosses it so the lengths sum to the budget exactly. Zero lengths stay in the result: BART turns each into an
insertion of one mask token (a span of length 0, "which corresponds to the insertion of a [MASK] token").

GLM (``blocklm_utils``) draws from Poisson restricted to 1..39 ("we randomly sample spans ... until at least 15% of
the original tokens are masked") and keeps the last length whole: ``trim=False, min_length=1, max_length=39``.
"""

from __future__ import annotations

import numpy as np


def poisson_span_lengths(budget: int, lam: float, rng: np.random.Generator, trim: bool = True, min_length: int = 0,
                         max_length: int | None = None) -> np.ndarray:
    """Span lengths ~ Poisson(``lam``) restricted to [``min_length``, ``max_length``] until their sum reaches
    ``budget``: exactly (the last one cut, BART) with ``trim``, else at least (GLM)."""
    if budget <= 0:
        return np.zeros(0, dtype=np.int64)

    def draw() -> np.ndarray:
        x = rng.poisson(lam, size=budget).astype(np.int64)
        return x[(x >= min_length) & (x <= (max_length if max_length is not None else x.max(initial=0)))]

    lengths = draw()
    while lengths.sum() < budget:
        lengths = np.concatenate([lengths, draw()])
    total = np.cumsum(lengths)
    last = int(np.searchsorted(total, budget))  # the first length whose running sum reaches the budget
    lengths = lengths[: last + 1].copy()
    if trim:
        lengths[last] = budget - (int(total[last - 1]) if last > 0 else 0)
    return lengths
