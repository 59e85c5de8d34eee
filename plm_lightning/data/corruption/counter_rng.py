"""Counter-based random numbers for corruption: every draw is a pure function of (seed, epoch, sample index,
position, stream), computed for a whole batch with a few vectorised numpy operations.

The mixer is SplitMix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators"), the finaliser
also used to seed xoshiro generators. Unlike one ``np.random.Generator`` per sample, no per-sample object is built,
and a sample's draws do not depend on which batch, worker or rank it lands in.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """One SplitMix64 step applied elementwise to a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def row_keys(seed: int, epochs: ArrayLike, indices: ArrayLike) -> np.ndarray:
    """One well-mixed uint64 key per sample from (seed, epoch, sample index)."""
    base = splitmix64(np.asarray([seed], dtype=np.uint64))
    k = splitmix64(base ^ np.asarray(epochs, dtype=np.uint64))
    return splitmix64(k ^ np.asarray(indices, dtype=np.uint64))


def uniforms(keys: ArrayLike, length: int, stream: int) -> np.ndarray:
    """``[rows, length]`` uniforms in [0, 1): position j of row r in ``stream`` is a function of (key_r, j, stream).

    The key is mixed before it meets the counter, so raw keys (0, 1, 2, ...) give independent rows too: unmixed,
    key r at position j and key r ^ 1 at position j ^ 1 would draw the same number."""
    keys = splitmix64(np.atleast_1d(np.asarray(keys, dtype=np.uint64)))
    counter = np.arange(length, dtype=np.uint64) | (np.uint64(stream) << np.uint64(40))
    z = splitmix64(splitmix64(keys[:, None] ^ counter[None, :]))
    return (z >> _S11).astype(np.float64) * (1.0 / (1 << 53))
