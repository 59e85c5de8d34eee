"""Deterministic, resumable sample order: every sample key is ``(epoch, index, position)`` so corruption can be seeded
by (seed, epoch, index), schedules can read the progress, and a run resumed mid-epoch skips exactly the batches it had
already consumed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from plm_lightning.errors import ConfigError


class BlockSampler(DistributedSampler):
    """Shuffled (by seed and epoch) or sequential order, sharded over ``num_replicas`` ranks.

    A `DistributedSampler` subclass so Lightning keeps it under DDP/FSDP (it only replaces plain samplers) and
    calls ``set_epoch`` on it every epoch.
    """

    def __init__(self, num_samples: int, shuffle: bool, seed: int, num_replicas: int = 1, rank: int = 0,
                 drop_last: bool = True, lazy: bool = False) -> None:
        self.n = num_samples
        super().__init__(range(num_samples), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self.skip = 0
        self.lazy = lazy
        """Compute the order per chunk of positions (:class:`LazyPermutation`) instead of holding the epoch's
        permutation: memory independent of the number of samples (a corpus streamed into shards)."""

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """``(epoch, index, position)``: ``position`` is the sample's place in the epoch's global order (all ranks),
        so ``epoch + position / total_size`` is the training progress a schedule (ERNIE's stages) can read."""
        if self.lazy:
            yield from self._lazy_iter()
            return
        order = self.epoch_order()
        order = order[: self.total_size] if self.drop_last else np.resize(order, self.total_size)
        positions = np.arange(self.rank, self.total_size, self.num_replicas)
        mine = order[positions]
        skip, self.skip = self.skip, 0
        for index, position in zip(mine[skip:], positions[skip:]):
            yield (self.epoch, int(index), int(position))

    def _lazy_iter(self, chunk: int = 1 << 16) -> Iterator[tuple[int, int, int]]:
        permutation = LazyPermutation(self.n, self.seed, self.epoch) if self.shuffle else None
        skip, self.skip = self.skip, 0
        first = self.rank + skip * self.num_replicas
        for start in range(first, self.total_size, chunk * self.num_replicas):
            positions = np.arange(start, min(self.total_size, start + chunk * self.num_replicas), self.num_replicas)
            wrapped = positions % self.n  # without drop_last the order repeats from its start, as np.resize does
            indices = permutation(wrapped) if permutation is not None else wrapped
            for index, position in zip(indices.tolist(), positions.tolist()):
                yield (self.epoch, index, position)

    def epoch_order(self) -> np.ndarray:
        """The sample indices of this epoch in global order (all ranks), a function of (seed, epoch) only."""
        if not self.shuffle:
            return np.arange(self.n)
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.n)

    def __len__(self) -> int:
        return self.num_samples


class LazyPermutation:
    """A pseudo-random permutation of ``range(n)`` keyed by (seed, epoch) and evaluated per element: a 4-round
    Feistel network over the smallest even number of bits that covers ``n``, with cycle walking to stay below ``n``
    (Black & Rogaway 2002, "Ciphers with Arbitrary Finite Domains", sec. 2 and 5). O(1) memory for any ``n``;
    vectorised over numpy arrays of positions."""

    ROUNDS = 4

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        if n < 1:
            raise ValueError(f"a permutation of {n} elements")
        self.n = n
        bits = max(2, (n - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = np.random.default_rng([seed, epoch, 0xFE1]).integers(0, 2**63, size=self.ROUNDS, dtype=np.uint64)

    def _round(self, right: np.ndarray, key: np.uint64) -> np.ndarray:
        """SplitMix64's finaliser of (right + key): a bijective mix of 64 bits, cut to the half width."""
        z = right + key
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & self.mask

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(self.half), x & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        return (left << np.uint64(self.half)) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        x = np.asarray(positions, dtype=np.uint64)
        with np.errstate(over="ignore"):
            y = self._encrypt(x)
            outside = y >= self.n
            while outside.any():  # cycle walking: at most a few steps, the domain is < 4n
                y[outside] = self._encrypt(y[outside])
                outside = y >= self.n
        return y.astype(np.int64)


def smoothed_probabilities(sizes: np.ndarray | list[int], alpha: float) -> np.ndarray:
    """Exponentially smoothed sampling, q_i = p_i^alpha / sum_j p_j^alpha with p_i = n_i / sum_k n_k (Lample &
    Conneau 2019, sec. 3.1, eq. 1; alpha 0.5 in XLM, 0.7 in multilingual BERT, 0.3 in XLM-R and mT5): alpha < 1
    up-samples the small corpora, alpha = 1 keeps the natural mix, alpha -> 0 tends to uniform."""
    sizes = np.asarray(sizes, dtype=np.float64)
    if alpha <= 0:
        raise ValueError(f"alpha={alpha} must be > 0")
    if sizes.size == 0 or (sizes <= 0).any():
        raise ValueError(f"every corpus needs at least one sample to be sampled (sizes {sizes.astype(int).tolist()})")
    q = (sizes / sizes.sum()) ** alpha
    return q / q.sum()


class MixtureSampler(BlockSampler):
    """Samples from several streams (corpora) concatenated in one index space: each of an epoch's draws picks a
    stream with probability ``weights`` and then that stream's next block in a per-epoch permutation, cycling when a
    small stream is up-sampled past its size. An epoch has as many draws as there are blocks in all streams.

    ``weights`` ``[S]``, or ``[K, S]`` with ``stage_epochs`` (K - 1 increasing progress values, in epochs): a draw
    at training progress p (epoch + its place in the epoch) uses the weights of its stage, so a schedule such as
    ERNIE 2.0's continual tasks can bring a stream in part-way through training.
    """

    def __init__(self, sizes: list[int], weights: np.ndarray, seed: int, num_replicas: int = 1, rank: int = 0,
                 stage_epochs: tuple[float, ...] = ()) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
        self.stage_epochs = np.asarray(stage_epochs, dtype=np.float64)
        if len(self.stage_epochs) != self.weights.shape[0] - 1:
            raise ValueError(f"{self.weights.shape[0]} stages of weights need {self.weights.shape[0] - 1} stage_epochs")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        super().__init__(int(self.sizes.sum()), shuffle=True, seed=seed, num_replicas=num_replicas, rank=rank)

    def epoch_order(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.epoch])
        stage = np.searchsorted(self.stage_epochs, self.epoch + np.arange(self.n) / self.n, side="right")
        cumulative = np.cumsum(self.weights, axis=1)
        cumulative /= cumulative[:, -1:]
        streams = np.minimum((rng.random(self.n)[:, None] >= cumulative[stage]).sum(1), len(self.sizes) - 1)
        order = np.empty(self.n, dtype=np.int64)
        for s, size in enumerate(self.sizes):
            where = np.flatnonzero(streams == s)
            if where.size:
                cycles = -(-where.size // size)
                local = np.concatenate([rng.permutation(size) for _ in range(cycles)])[: where.size]
                order[where] = self.offsets[s] + local
        return order


class ResumableDataLoader(DataLoader):
    """A DataLoader whose ``state_dict`` records where the epoch stands; Lightning saves it in checkpoints and
    restores it on ``--ckpt_path``, so a run killed mid-epoch resumes with the next unseen sample.

    The position is kept in *global* samples (all ranks), so it survives a change of world size (elastic
    determinism, as MosaicML streaming promises it): a run on R processes that consumed S samples of the epoch's
    global order resumes on R' processes at global position S, each rank r' reading positions S + r' + k R'. The
    corruption of a sample is a function of (seed, epoch, index), so the resumed run also draws the same masks.
    ``num_workers`` does not enter the order at all. S must split evenly over the new ranks (keep the global batch,
    ``batch_size x devices x num_nodes``, and it does)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._consumed = 0
        self._start = 0
        self._epoch = 0
        self._pending: dict[str, int] | None = None

    def _replicas(self) -> int:
        return int(getattr(self.sampler, "num_replicas", 1))

    def __iter__(self):  # noqa: ANN204
        sampler = self.sampler
        self._epoch = getattr(sampler, "epoch", 0)
        self._consumed, self._start = 0, 0
        pending, self._pending = self._pending, None
        if isinstance(sampler, BlockSampler) and pending and pending.get("epoch") == self._epoch:
            self._start = min(self._resume_skip(pending), len(sampler))
            sampler.skip = self._start
        for batch in super().__iter__():
            self._consumed += 1
            yield batch

    def _resume_skip(self, state: dict[str, int]) -> int:
        """Samples of this rank to skip: the state's global samples over this loader's ranks (a state written
        before global positions were recorded: its batches at this batch size)."""
        if "samples_consumed" not in state:
            return state.get("batches_consumed", 0) * self.batch_size
        samples, replicas = int(state["samples_consumed"]), self._replicas()
        if samples % replicas:
            raise ConfigError(f"ckpt_path: the run stopped after {samples} samples of epoch {state['epoch']}, which "
                              f"do not split over {replicas} data-parallel ranks; resume with a global batch "
                              "(data.batch_size x devices x num_nodes) that divides it, e.g. the original one")
        return samples // replicas

    def state_dict(self) -> dict[str, int]:
        per_rank = self._start + self._consumed * self.batch_size
        return {"epoch": self._epoch, "batches_consumed": per_rank // self.batch_size,
                "samples_consumed": per_rank * self._replicas()}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Applied at the next ``__iter__``, after Lightning has set the sampler's epoch."""
        self._pending = dict(state)


class InterleavedSampler(BlockSampler):
    """Every block of several concatenated streams once, in a fixed order that spreads each stream evenly over the
    epoch, so a validation pass cut short (``limit_val_batches``) still sees every language in its proportion."""

    def __init__(self, sizes: list[int], seed: int, num_replicas: int = 1, rank: int = 0) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        super().__init__(int(self.sizes.sum()), shuffle=False, seed=seed, num_replicas=num_replicas, rank=rank,
                         drop_last=False)

    def epoch_order(self) -> np.ndarray:
        fraction = np.concatenate([(np.arange(n) + 0.5) / n for n in self.sizes if n > 0])
        return np.argsort(fraction, kind="stable")


class SegmentStreamSampler(BlockSampler):
    """Transformer-XL's ordered batches (the reference code's ``LMOrderedIterator``): the blocks, in corpus order,
    are cut into ``S = batch_size x num_replicas`` contiguous streams, and batch t holds segment t of every stream,
    so row b of one batch continues row b of the batch before (what the memory carries over). Same order every epoch.

    Global position ``t S + s`` (step t) holds segment t of stream s, which rank ``s mod R`` reads as row ``s // R``
    (the ``BlockSampler``'s positions r + R j): the global sequence, and which stream a position continues, do not
    depend on how the S streams are split over ranks, so a run resumed on another number of processes (the same
    global batch) continues every stream."""

    def __init__(self, num_samples: int, batch_size: int, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(num_samples, shuffle=False, seed=0, num_replicas=num_replicas, rank=rank, drop_last=True)
        self.batch_size = batch_size
        streams = batch_size * num_replicas
        self.segments = num_samples // streams
        if self.segments == 0:
            raise ValueError(f"{num_samples} blocks cannot fill {streams} streams (batch_size x devices)")
        self.total_size = streams * self.segments
        self.num_samples = self.total_size // num_replicas

    def epoch_order(self) -> np.ndarray:
        """Global position t S + s holds segment t of stream s (blocks ``s x segments`` onwards)."""
        streams = self.batch_size * self.num_replicas
        t, s = np.meshgrid(np.arange(self.segments), np.arange(streams), indexing="ij")
        order = np.empty(self.total_size, dtype=np.int64)
        order[(t * streams + s).reshape(-1)] = (s * self.segments + t).reshape(-1)
        return order


class KeyedList(Dataset):
    """A list addressed by a ``BlockSampler``'s ``(epoch, index, position)`` keys (or plain indices)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: int | tuple[int, ...]) -> Any:
        return self.items[key[1] if isinstance(key, tuple) else key]


def data_replicas(trainer: Any) -> tuple[int, int]:
    """(replicas, rank) over which the data is split: the strategy's data-parallel ranks (tensor-parallel ranks of
    one data-parallel group read the same batches), else every process."""
    if trainer is None:
        return 1, 0
    kwargs = getattr(trainer.strategy, "distributed_sampler_kwargs", None)
    if kwargs and "num_replicas" in kwargs:
        return int(kwargs["num_replicas"]), int(kwargs["rank"])
    return trainer.world_size, trainer.global_rank


def resumable_loader(dataset: Dataset, collate_fn: Any, batch_size: int, shuffle: bool, seed: int,
                     num_workers: int = 0, trainer: Any = None) -> ResumableDataLoader | list:
    """Every sample of ``dataset`` once per epoch (shuffled by seed and epoch, or in order), sharded over the
    trainer's ranks, in a loader that resumes mid-epoch; ``[]`` for an empty dataset."""
    if len(dataset) == 0:
        return []
    replicas, rank = data_replicas(trainer)
    sampler = BlockSampler(len(dataset), shuffle=shuffle, seed=seed, num_replicas=replicas, rank=rank, drop_last=False)
    return ResumableDataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn,
                               num_workers=num_workers, generator=torch.Generator().manual_seed(seed))
