"""UL2's Mixture-of-Denoisers (Tay et al. 2023, "UL2: Unifying Language Learning Paradigms", sec. 3.1): each row
is corrupted by one denoiser drawn from a mixture and its input starts with the denoiser's mode token.

- R (regular): T5 span corruption, mean span mu in {3, 8}, rate r = 0.15.
- X (extreme): long spans or high rates, (mu, r) in {(3, 0.5), (8, 0.5), (64, 0.15), (64, 0.5)}.
- S (sequential): prefix LM: the input is the row's first 75%, the target the last 25%.

R and X reuse :mod:`~plm_lightning.data.corruption.t5_span` exactly (sentinels, exact noise counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plm_lightning.data.corruption.t5_span import random_spans_noise_mask, span_corrupt
from plm_lightning.errors import ConfigError


@dataclass(frozen=True)
class Denoiser:
    mode: str
    """R, S or X: which mode token starts the input."""
    mean_span: float = 3.0
    rate: float = 0.15
    """Span denoisers: the noise density; S: the suffix fraction."""

    @property
    def name(self) -> str:
        return f"S({self.rate:g})" if self.mode == "S" else f"{self.mode}({self.mean_span:g}, {self.rate:g})"


UL2_DENOISERS = (Denoiser("R", 3, 0.15), Denoiser("R", 8, 0.15), Denoiser("S", rate=0.25), Denoiser("X", 3, 0.5),
                 Denoiser("X", 8, 0.5), Denoiser("X", 64, 0.15), Denoiser("X", 64, 0.5))
"""The seven denoisers of the paper's final mixture (sec. 3.1.4), in this order."""
MODE_TOKENS = {"R": "[R]", "S": "[S]", "X": "[X]"}


def mixture_weights(weights: list[float] | None) -> np.ndarray:
    """Normalised weights over :data:`UL2_DENOISERS` (None: uniform)."""
    if weights is None:
        return np.full(len(UL2_DENOISERS), 1 / len(UL2_DENOISERS))
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(UL2_DENOISERS),) or (w < 0).any() or w.sum() <= 0:
        raise ConfigError(f"data.denoiser_weights={list(weights)} needs {len(UL2_DENOISERS)} non-negative weights with "
                          f"a positive sum, one per denoiser: {', '.join(d.name for d in UL2_DENOISERS)}")
    return w / w.sum()


def denoise(tokens: np.ndarray, denoiser: Denoiser, rng: np.random.Generator, sentinels: np.ndarray, eos_id: int,
            mode_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input, target) of one row under ``denoiser``; the input starts with ``mode_id``, both end with EOS."""
    if denoiser.mode == "S":
        split = len(tokens) - max(1, int(round(len(tokens) * denoiser.rate)))
        inputs, targets = np.append(tokens[:split], eos_id), np.append(tokens[split:], eos_id)
    else:
        noise = random_spans_noise_mask(len(tokens), denoiser.rate, denoiser.mean_span, rng)
        inputs, targets = span_corrupt(tokens, noise, sentinels, eos_id)
    return np.concatenate([[mode_id], inputs]), targets
