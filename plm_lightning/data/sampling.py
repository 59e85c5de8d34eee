"""Deterministic, resumable sample order: every sample key is ``(epoch, index, position)`` so corruption can be seeded
by (seed, epoch, index), schedules can read the progress, and a run resumed mid-epoch skips exactly the batches it had
already consumed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, DistributedSampler


class BlockSampler(DistributedSampler):
    """Shuffled (by seed and epoch) or sequential order, sharded over ``num_replicas`` ranks.

    A `DistributedSampler` subclass so Lightning keeps it under DDP/FSDP (it only replaces plain samplers) and
    calls ``set_epoch`` on it every epoch.
    """

    def __init__(self, num_samples: int, shuffle: bool, seed: int, num_replicas: int = 1, rank: int = 0,
                 drop_last: bool = True) -> None:
        self.n = num_samples
        super().__init__(range(num_samples), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self.skip = 0

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """``(epoch, index, position)``: ``position`` is the sample's place in the epoch's global order (all ranks),
        so ``epoch + position / total_size`` is the training progress a schedule (ERNIE's stages) can read."""
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(self.n) if self.shuffle
                 else np.arange(self.n))
        order = order[: self.total_size] if self.drop_last else np.resize(order, self.total_size)
        positions = np.arange(self.rank, self.total_size, self.num_replicas)
        mine = order[positions]
        skip, self.skip = self.skip, 0
        for index, position in zip(mine[skip:], positions[skip:]):
            yield (self.epoch, int(index), int(position))

    def __len__(self) -> int:
        return self.num_samples


class ResumableDataLoader(DataLoader):
    """A DataLoader whose ``state_dict`` records (epoch, batches consumed); Lightning saves it in checkpoints and
    restores it on ``--ckpt_path``, so a run killed mid-epoch resumes with the next unseen batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._consumed = 0
        self._epoch = 0
        self._pending: dict[str, int] | None = None

    def __iter__(self):  # noqa: ANN204
        sampler = self.sampler
        self._epoch = getattr(sampler, "epoch", 0)
        self._consumed = 0
        pending, self._pending = self._pending, None
        if isinstance(sampler, BlockSampler) and pending and pending.get("epoch") == self._epoch:
            self._consumed = min(pending.get("batches_consumed", 0), len(self))
            sampler.skip = self._consumed * self.batch_size
        for batch in super().__iter__():
            self._consumed += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self._epoch, "batches_consumed": self._consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Applied at the next ``__iter__``, after Lightning has set the sampler's epoch."""
        self._pending = dict(state)
