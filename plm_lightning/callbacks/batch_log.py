"""A record of what every rank trained on: one JSON line per training step and rank with each row of its batch
(every tensor of the row: token ids, masks, labels, so the corruption drawn is part of it), as a fingerprint or as
its values. Two runs saw the same global batches, with the same corruption, exactly when their steps hold the same
rows (``compare_steps``), whatever their world size or number of loader workers.

Fingerprints (SHA-1, compact) compare runs whose batches have the same shapes: fixed-length packed rows. Rows a
collator pads to the longest of its batch (BART, GLM, UL2, REALM, the word-level recipes) are padded differently
when the same sample lands in another batch (another world size), so such runs are compared by ``values``: two
rows are equal when they agree on the extent both cover (which holds each row's real content, padding only beyond
it) and the longer one is constant outside it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch

Row = str | dict[str, Any]


def _row_tensors(batch: dict[str, Any]) -> tuple[int, dict[str, torch.Tensor]]:
    """(rows, the batch's tensors whose first dimension is its row count), in key order; scalars and per-batch
    values are left out."""
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and v.ndim >= 1}
    rows = max((v.shape[0] for v in tensors.values()), default=0)
    return rows, {k: tensors[k].detach().cpu().contiguous() for k in sorted(tensors) if tensors[k].shape[0] == rows}


def row_fingerprints(batch: dict[str, Any]) -> list[str]:
    """SHA-1 of each row: the bytes of every row tensor of the batch, in key order."""
    rows, tensors = _row_tensors(batch)
    digests = [hashlib.sha1() for _ in range(rows)]
    for key, array in tensors.items():
        for i, digest in enumerate(digests):
            digest.update(key.encode())
            digest.update(array[i].numpy().tobytes())
    return [d.hexdigest() for d in digests]


def row_values(batch: dict[str, Any]) -> list[dict[str, Any]]:
    """Each row as ``{key: nested list}`` over the batch's row tensors."""
    rows, tensors = _row_tensors(batch)
    return [{key: array[i].tolist() for key, array in tensors.items()} for i in range(rows)]


def _same_up_to_padding(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    if x.ndim != y.ndim:
        return False
    common = tuple(slice(0, min(p, q)) for p, q in zip(x.shape, y.shape))
    if not np.array_equal(x[common], y[common]):
        return False
    for array in (x, y):
        outside = np.ones(array.shape, dtype=bool)
        outside[common] = False
        if outside.any() and np.unique(array[outside]).size > 1:
            return False
    return True


def same_row(a: Row, b: Row) -> bool:
    """Fingerprints: equal. Values: the same keys, each equal up to padding (see the module docstring)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.keys() == b.keys() and all(_same_up_to_padding(a[k], b[k]) for k in a)


def compare_steps(a: dict[int, list[Row]], b: dict[int, list[Row]]) -> Literal["ordered", "multiset", "differs"]:
    """Whether two runs trained on the same rows at every step they share (at least one): ``ordered`` (the same
    global order too), ``multiset`` (the same rows, in another order within some step: how a step whose samples
    make several rows each, split over another number of ranks, compares), or ``differs``."""
    shared = sorted(set(a) & set(b))
    if not shared or any(len(a[s]) != len(b[s]) for s in shared):
        return "differs"
    if all(all(map(same_row, a[s], b[s])) for s in shared):
        return "ordered"
    if all(sorted(map(_sort_key, a[s])) == sorted(map(_sort_key, b[s])) for s in shared):
        return "multiset"
    return "differs"


class BatchLog(L.Callback):
    """Appends ``{"step", "rank", "world", "rows"}`` to ``path`` (one file per rank: ``path`` with ``.rank<r>``
    before its suffix when the world has several) before every training step; ``rows="values"`` writes each row's
    values instead of its fingerprint (larger files; compares runs whose batches pad differently)."""

    def __init__(self, path: str, rows: Literal["fingerprint", "values"] = "fingerprint") -> None:
        if rows not in ("fingerprint", "values"):
            raise ValueError(f"BatchLog rows={rows!r} is not one of fingerprint, values")
        self.path = Path(path)
        self.rows = rows

    def _file(self, trainer: L.Trainer) -> Path:
        if trainer.world_size == 1:
            return self.path
        return self.path.with_name(f"{self.path.stem}.rank{trainer.global_rank}{self.path.suffix}")

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if not isinstance(batch, dict):
            return
        rows = row_fingerprints(batch) if self.rows == "fingerprint" else row_values(batch)
        row = {"step": int(trainer.global_step) + 1, "rank": int(trainer.global_rank),
               "world": int(trainer.world_size), "rows": rows}
        file = self._file(trainer)
        file.parent.mkdir(parents=True, exist_ok=True)
        with open(file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def global_rows(files: list[Path]) -> dict[int, list[Row]]:
    """``{step: rows in global order}`` from the files of one run's ranks. Rank r's row j of a step sits at global
    place r + j R (the ``BlockSampler``'s positions) when every rank holds one row per sample; where a sample makes
    several rows (word2vec's pairs: a rank's row count varies) the step's rows are taken as a multiset, sorted.
    A step logged twice (a resumed run repeats the steps after its checkpoint) keeps its last record."""
    records: dict[tuple[int, int], dict] = {}
    for file in files:
        for line in Path(file).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                records[(row["step"], row["rank"])] = row
    steps: dict[int, list[Row]] = {}
    for step in sorted({s for s, _ in records}):
        ranks = [records[k] for k in sorted(records) if k[0] == step]
        world = ranks[0]["world"]
        if len(ranks) != world:
            raise ValueError(f"step {step}: {len(ranks)} of {world} ranks logged")
        counts = {len(r["rows"]) for r in ranks}
        if len(counts) == 1:
            per = counts.pop()
            steps[step] = [ranks[place % world]["rows"][place // world] for place in range(per * world)]
        else:
            steps[step] = sorted((row for r in ranks for row in r["rows"]), key=_sort_key)
    return steps


def _sort_key(row: Row) -> str:
    return row if isinstance(row, str) else json.dumps(row, sort_keys=True)
