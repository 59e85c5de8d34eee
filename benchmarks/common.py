"""Helpers shared by the benchmark scripts (run by hand; figures go to the issue notes, never into tests)."""

from __future__ import annotations

import time
from collections.abc import Callable


def interleaved_timing(fns: dict[str, Callable[[], None]], warmup: int = 2, repeats: int = 6) -> dict[str, float]:
    """Median seconds per call of each function, calls interleaved so machine noise hits all of them alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
