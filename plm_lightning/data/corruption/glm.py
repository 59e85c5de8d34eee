"""GLM's autoregressive blank infilling (Du et al. 2022, "GLM: General Language Model Pretraining with Autoregressive
Blank Infilling", sec. 2.1-2.2 and fig. 2; the reference code's ``blocklm_utils``).

Spans of the row are blanked out: Part A is the row with each span replaced by one ``[MASK]``; Part B holds the spans
in a random order, each as ``[S] span`` (input) predicting ``span [E]`` (target). Every token carries two positions:
its position in Part A (a span's tokens take the position of their ``[MASK]``) and its position inside its span
(0 in Part A, 1.. in Part B). Part A attends bidirectionally to itself; Part B attends to Part A and causally to
itself (a prefix-LM mask with prefix = Part A), so the spans are generated autoregressively with the context of
everything not blanked and of the spans before them.

Span sampling: NLU mode draws span lengths from Poisson(3) (restricted to 1..39) until at least 15% of the tokens
are blanked, placed at random with at least one kept token between spans; generation mode blanks one span at the
end of the row whose length is uniform over 50%-100% of it (GLM's document-level objective).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.poisson_spans import poisson_span_lengths


@dataclass
class BlankInfilled:
    """One row in GLM's layout: Part A then Part B."""

    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    block_position_ids: np.ndarray
    part_a_length: int
    spans: list[tuple[int, int]]
    """(start, end) of every blanked span in the original row, in Part B's order."""


def nlu_spans(length: int, ratio: float, lam: float, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Non-overlapping spans covering at least ``ratio`` of ``length`` tokens, one kept token at least between two
    (``blocklm_utils.sample_spans``: each span's gap drawn uniformly, then sorted)."""
    lengths = poisson_span_lengths(max(1, int(np.ceil(length * ratio))), lam, rng, trim=False, min_length=1,
                                   max_length=39)
    while len(lengths) and lengths.sum() + len(lengths) - 1 > length:  # a short row: shorten, then drop, the last
        excess = int(lengths.sum()) + len(lengths) - 1 - length
        if lengths[-1] > 1:
            lengths[-1] -= min(excess, int(lengths[-1]) - 1)
        else:
            lengths = lengths[:-1]
    free = length - int(lengths.sum()) - len(lengths) + 1
    places = np.sort(rng.integers(0, free + 1, len(lengths)))
    spans, offset = [], 0
    for place, span in zip(places, lengths):
        spans.append((offset + int(place), offset + int(place) + int(span)))
        offset += int(span) + 1
    return spans


def generation_span(length: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """One span at the end of the row, its length uniform over [length / 2, length] (at least one token kept)."""
    span = int(rng.integers(max(1, length // 2), length))
    return [(length - span, length)]


def blank_infill(tokens: np.ndarray, spans: list[tuple[int, int]], rng: np.random.Generator, mask_id: int,
                 start_id: int, end_id: int) -> BlankInfilled:
    """GLM's Part A + Part B of ``tokens`` with ``spans`` blanked (sorted, non-overlapping), Part B shuffled."""
    part_a, positions_a, mask_at = [], [], []
    cursor = 0
    for start, end in spans:
        part_a.extend(tokens[cursor:start].tolist())
        mask_at.append(len(part_a))
        part_a.append(mask_id)
        cursor = end
    part_a.extend(tokens[cursor:].tolist())
    positions_a = list(range(len(part_a)))
    ids, labels = list(part_a), [IGNORE_INDEX] * len(part_a)
    positions, blocks = list(positions_a), [0] * len(part_a)
    order = rng.permutation(len(spans))
    for k in order:
        start, end = spans[k]
        span = tokens[start:end].tolist()
        ids.extend([start_id, *span])
        labels.extend([*span, end_id])
        positions.extend([mask_at[k]] * (len(span) + 1))
        blocks.extend(range(1, len(span) + 2))
    return BlankInfilled(np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64),
                         np.asarray(positions, dtype=np.int64), np.asarray(blocks, dtype=np.int64), len(part_a),
                         [spans[k] for k in order])
