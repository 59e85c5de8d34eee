"""ERNIE 2.0's sentence reordering (Sun et al. 2020, sec. 4.2.2): "a given paragraph is randomly split into 1 to m
segments and then all of the combinations are shuffled by a random permuted order. We let the pre-trained model
to reorganize these permuted segments, modeled as a k-class classification problem where k = sum_{n=1}^{m} n!"."""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np


def reorder_classes(max_segments: int) -> int:
    """k = sum_{n=1}^{m} n!: one class per (number of segments, order)."""
    return sum(math.factorial(n) for n in range(1, max_segments + 1))


def permutation_class(order: list[int] | np.ndarray) -> int:
    """The class of putting ``n = len(order)`` segments in ``order``: the classes of fewer segments first, then the
    lexicographic rank of ``order`` among the n! orders (0 = the original order)."""
    n = len(order)
    offset = reorder_classes(n - 1) if n > 1 else 0
    rank, rest = 0, list(range(n))
    for i, value in enumerate(order):
        position = rest.index(int(value))
        rank += position * math.factorial(n - 1 - i)
        rest.pop(position)
    return offset + rank


def class_permutation(label: int) -> tuple[int, ...]:
    """Inverse of :func:`permutation_class`."""
    n = 1
    while label >= math.factorial(n):
        label -= math.factorial(n)
        n += 1
    return next(p for i, p in enumerate(permutations(range(n))) if i == label)


def reorder_segments(word_starts: np.ndarray, real: int, max_segments: int, key: int) -> tuple[np.ndarray, int]:
    """Shuffle the content of one ``[CLS] ... [SEP]`` row of ``real`` tokens as whole segments.

    The content (positions 1 .. real-2) is cut before n - 1 distinct word starts into n ~ U{1..m} segments (fewer
    when the row has fewer words) which are laid out in a uniformly random order. Returns ``(index, label)``:
    ``new[i] = old[index[i]]`` for every per-token array of the row, and the reordering class.
    """
    rng = np.random.default_rng(int(key))
    index = np.arange(len(word_starts))
    content = np.arange(1, max(1, real - 1))
    candidates = np.flatnonzero(word_starts[2:max(2, real - 1)]) + 2  # never before the first content token
    n = min(int(rng.integers(1, max_segments + 1)), len(candidates) + 1)
    if n == 1 or content.size == 0:
        return index, 0
    cuts = np.sort(rng.choice(candidates, n - 1, replace=False))
    segments = np.split(content, cuts - 1)
    order = rng.permutation(n)
    index[1:real - 1] = np.concatenate([segments[k] for k in order])
    return index, permutation_class(order)
