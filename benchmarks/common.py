"""Helpers shared by the benchmark scripts (run by hand; figures go to the issue notes, never into tests)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def interleaved_timing(fns: dict[str, Callable[[], None]], warmup: int = 2, repeats: int = 6) -> dict[str, dict]:
    """Seconds per call of each function, calls interleaved A B A B ... so machine noise hits them alike.

    Returns per function its ``median`` and ``min`` seconds, and ``ratio_to_first``: the median over repeats of
    (this function's time / the first function's time in the same round), robust to the machine drifting.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    first = samples[next(iter(fns))]
    return {k: {"median": statistics.median(v), "min": min(v),
                "ratio_to_first": statistics.median(b / a for a, b in zip(first, v))} for k, v in samples.items()}


def step_parser(choices: list[str]) -> argparse.ArgumentParser:
    """The options every training-step benchmark takes; ``--only`` picks among ``choices`` (default all)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--only", nargs="*", choices=choices, default=choices)
    return parser
