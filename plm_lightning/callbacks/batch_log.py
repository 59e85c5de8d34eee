"""A record of what every rank trained on: one JSON line per training step and rank with a fingerprint of each row
of its batch (every tensor of the row: token ids, masks, labels, so the corruption drawn is part of it). Two runs
saw the same global sequence of samples, with the same masks, exactly when their global positions hold the same
fingerprints, whatever their world size or number of loader workers (``global_rows``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch


def row_fingerprints(batch: dict[str, Any]) -> list[str]:
    """SHA-1 of each row: the bytes of every tensor of the batch whose first dimension is the batch's, in key
    order (scalars and per-batch values are left out)."""
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and v.ndim >= 1}
    rows = max((v.shape[0] for v in tensors.values()), default=0)
    digests = [hashlib.sha1() for _ in range(rows)]
    for key in sorted(tensors):
        value = tensors[key]
        if value.shape[0] != rows:
            continue
        array = value.detach().cpu().contiguous()
        for i, digest in enumerate(digests):
            digest.update(key.encode())
            digest.update(array[i].numpy().tobytes())
    return [d.hexdigest() for d in digests]


class BatchLog(L.Callback):
    """Appends ``{"step", "rank", "world", "rows"}`` to ``path`` (one file per rank: ``path`` with ``.rank<r>``
    before its suffix when the world has several) before every training step."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _file(self, trainer: L.Trainer) -> Path:
        if trainer.world_size == 1:
            return self.path
        return self.path.with_name(f"{self.path.stem}.rank{trainer.global_rank}{self.path.suffix}")

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if not isinstance(batch, dict):
            return
        row = {"step": int(trainer.global_step) + 1, "rank": int(trainer.global_rank),
               "world": int(trainer.world_size), "rows": row_fingerprints(batch)}
        file = self._file(trainer)
        file.parent.mkdir(parents=True, exist_ok=True)
        with open(file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def global_rows(files: list[Path]) -> dict[int, list[str]]:
    """``{step: fingerprints in global order}`` from the files of one run's ranks: rank r's row j of a step sits at
    global place r + j R (the ``BlockSampler``'s positions). A step logged twice (a resumed run repeats the steps
    after its checkpoint) keeps its last record."""
    records: dict[tuple[int, int], dict] = {}
    for file in files:
        for line in Path(file).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                records[(row["step"], row["rank"])] = row
    steps: dict[int, list[str]] = {}
    for step in sorted({s for s, _ in records}):
        ranks = [records[k] for k in sorted(records) if k[0] == step]
        world = ranks[0]["world"]
        if len(ranks) != world:
            raise ValueError(f"step {step}: {len(ranks)} of {world} ranks logged")
        per = len(ranks[0]["rows"])
        steps[step] = [ranks[place % world]["rows"][place // world] for place in range(per * world)]
    return steps
