"""Helpers shared by the benchmark scripts (run by hand; figures go to the issue notes, never into tests)."""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable

import torch


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


MATMULS = ("mm", "addmm", "addmm_", "bmm", "baddbmm")


def _layout(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.dtype


def record_matmuls(fn: Callable[[], None]) -> list[tuple]:
    """The dense matrix products one call of ``fn`` runs (forward, backward, optimizer): each aten op with its
    operands' layouts (shape, strides, dtype), in order. SDPA's kernels and the other ops are left out."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[tuple] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            if func.__name__.split(".")[0] in MATMULS:
                calls.append((func, [_layout(a) if isinstance(a, torch.Tensor) else a for a in args],
                              {k: _layout(v) for k, v in (kwargs or {}).items() if isinstance(v, torch.Tensor)}))
            return func(*args, **(kwargs or {}))

    with Recorder():
        fn()
    return calls


def matmul_replay(calls: list[tuple], copies: int = 1) -> Callable[[], None]:
    """A function that runs the recorded products again on random operands of the same layouts (results are fresh
    tensors, or the ``out=`` operand, as in the recorded run): the time a step would take if it did nothing but its
    matrix products. Operands are made once per layout and shared by the calls of that layout, which keeps them
    warm in the caches; ``copies`` > 1 makes that many of each and deals them out in turn, so consecutive calls of
    a layout read other memory, as the step's distinct activations and weights do."""
    operands: dict[tuple, torch.Tensor] = {}
    turn: dict[tuple, itertools.cycle] = {}

    def operand(layout: tuple) -> torch.Tensor:
        key = (layout, next(turn.setdefault(layout, itertools.cycle(range(copies)))))
        if key not in operands:  # over random storage (a layout may be broadcast: stride 0)
            shape, stride, dtype = layout
            operands[key] = torch.randn(1 + sum((n - 1) * st for n, st in zip(shape, stride)), dtype=dtype).as_strided(
                shape, stride)
        return operands[key]

    def build(x: object) -> object:
        return operand(x) if isinstance(x, tuple) and len(x) == 3 and isinstance(x[0], tuple) else x

    prepared = [(func, [build(a) for a in args], {k: operand(v) for k, v in kwargs.items()})
                for func, args, kwargs in calls]

    def replay() -> None:
        for func, args, kwargs in prepared:
            func(*args, **kwargs)

    return replay
