"""Streaming packed blocks with litdata, for corpora that do not fit on one disk.

``write_streams`` turns a recipe's packed blocks into litdata's chunked format (``litdata.optimize``), one directory
per split, with the tokenizer and a ``plm_lightning.json`` that says how the blocks were packed. Training then reads
them with ``StreamingDataset`` / ``StreamingDataLoader`` from a local directory or an object store (``s3://``,
``gs://``, ``azure://``): chunks are downloaded as they are needed, several corpora mix by weight
(``CombinedStreamingDataset``), and the loader's state (samples yielded per worker, the epoch, the shuffle seed) is
saved in Lightning checkpoints, so a run killed mid-epoch resumes at the same sample.

Each streamed sample carries the fields of ``BlockDataset`` (its global index and the epoch seed the corruption, as
for local blocks), so every collator works on it unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from plm_lightning.corpus.blocks import BLOCK_FIELDS, PackedBlocks
from plm_lightning.errors import ConfigError

STREAM_META_FILE = "plm_lightning.json"
TOKENIZER_FILE = "tokenizer.json"
SCALAR_FIELDS = ("segment_b_start", "sentence_label")
REMOTE_PREFIXES = ("s3://", "gs://", "gcs://", "azure://", "hf://", "http://", "https://")


def is_remote(uri: str) -> bool:
    return uri.startswith(REMOTE_PREFIXES)


class BlockItems:
    """``litdata.optimize``'s item function: the blocks ``[start, stop)`` of a split saved by ``PackedBlocks.save``
    (memory-mapped in each worker process; picklable, so litdata's spawned workers can run it)."""

    def __init__(self, directory: str, split: str) -> None:
        self.directory, self.split = directory, split

    def __call__(self, span: tuple[int, int]) -> Iterator[dict[str, Any]]:
        blocks = PackedBlocks.load(Path(self.directory), self.split)
        fields = [name for name in BLOCK_FIELDS if getattr(blocks, name) is not None]
        for index in range(*span):
            yield {name: int(getattr(blocks, name)[index]) if name in SCALAR_FIELDS
                   else np.ascontiguousarray(getattr(blocks, name)[index]) for name in fields}


def write_streams(blocks: dict[str, PackedBlocks], output_dir: Path, meta: dict[str, Any], tokenizer_file: str | None,
                  chunk_bytes: str = "64MB", num_workers: int = 1, blocks_per_item: int = 1024) -> dict[str, int]:
    """Write each split's blocks as a litdata dataset under ``output_dir/SPLIT``, with the tokenizer and ``meta``
    (how the blocks were packed); returns the blocks written per split."""
    from litdata import optimize

    output_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for split, split_blocks in blocks.items():
            counts[split] = len(split_blocks)
            if not counts[split]:
                continue
            split_blocks.save(Path(tmp), split)  # the workers memory-map these files
            spans = [(i, min(i + blocks_per_item, len(split_blocks))) for i in range(0, len(split_blocks),
                                                                                       blocks_per_item)]
            with _private_litdata_cache(Path(tmp) / f"litdata-{split}"):
                optimize(fn=BlockItems(tmp, split), inputs=spans, output_dir=str(output_dir / split),
                         chunk_bytes=chunk_bytes, num_workers=min(num_workers, len(spans)), mode="overwrite")
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, output_dir / TOKENIZER_FILE)
    (output_dir / STREAM_META_FILE).write_text(json.dumps({**meta, "blocks": counts}, indent=2))
    return counts


@contextmanager
def _private_litdata_cache(directory: Path) -> Iterator[None]:
    """litdata.optimize stages chunks in one cache folder per machine (``~/.lightning/chunks``): two optimize runs at
    once overwrite each other's chunks and index. Give this run a folder of its own (inherited by its workers)."""
    keys = {"DATA_OPTIMIZER_CACHE_FOLDER": directory / "chunks", "DATA_OPTIMIZER_DATA_CACHE_FOLDER": directory / "data"}
    before = {key: os.environ.get(key) for key in keys}
    os.environ.update({key: str(path) for key, path in keys.items()})
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def read_stream_meta(uri: str) -> dict[str, Any] | None:
    """A local stream directory's ``plm_lightning.json`` (None for an object-store URI: its config must say how the
    blocks were packed)."""
    if is_remote(uri):
        return None
    path = Path(uri).expanduser()
    if not (path / "train" / "index.json").is_file():
        raise ConfigError(f"data.streaming: '{uri}' holds no litdata train split ({path / 'train' / 'index.json'} "
                          "is missing); write one with `python -m plm_lightning optimize --config RECIPE.yaml DIR`")
    meta = path / STREAM_META_FILE
    return json.loads(meta.read_text()) if meta.is_file() else None


def check_stream_meta(uri: str, meta: dict[str, Any] | None, packing: str, length: int) -> None:
    """The streams must have been packed as the recipe packs: same mode and block length."""
    if meta is None:
        return
    for key, want in (("packing", packing), ("length", length)):
        if meta.get(key) != want:
            raise ConfigError(f"data.streaming: '{uri}' was written with {key}={meta.get(key)!r} but this recipe "
                              f"reads {key}={want!r}; write the streams with the recipe's data settings")


def has_split(uri: str, split: str) -> bool:
    """Whether a stream directory holds ``split`` (an object-store URI is assumed to)."""
    return is_remote(uri) or (Path(uri).expanduser() / split / "index.json").is_file()


def stream_tokenizer(uri: str) -> str:
    """The tokenizer a local stream directory was written with."""
    path = Path(uri).expanduser() / TOKENIZER_FILE
    if is_remote(uri) or not path.is_file():
        raise ConfigError(f"data.tokenizer: '{uri}' carries no {TOKENIZER_FILE}; set data.tokenizer to the "
                          "tokenizer.json the streams were written with")
    return str(path)


def _streamed_dataset_class() -> type:
    from litdata import StreamingDataset
    from litdata.streaming.sampler import ChunkedIndex

    class StreamedBlocks(StreamingDataset):
        """A litdata split of packed blocks whose samples look like ``BlockDataset``'s; ``offset`` keeps the indices
        (which seed the corruption) of several mixed corpora apart."""

        def __init__(self, uri: str, offset: int, **kwargs: Any) -> None:
            super().__init__(uri, **kwargs)
            self.offset = offset

        def __getitem__(self, index: ChunkedIndex | int) -> dict[str, Any]:
            item = super().__getitem__(index)
            position = index.index if isinstance(index, ChunkedIndex) else int(index)
            epoch = max(0, self.current_epoch - 1)  # litdata counts epochs from 1
            # iterating: this worker's samples so far over its share of the epoch; random access: as BlockDataset
            done = (self.global_index / self.stop_length if isinstance(index, ChunkedIndex)
                    and getattr(self, "stop_length", 0) else position / max(1, len(self)))
            sample: dict[str, Any] = {"index": self.offset + position, "epoch": epoch, "progress": epoch + done,
                                      "segment_b_start": None, "sentence_label": None, "word_starts": None}
            for name, value in item.items():
                sample[name] = np.array(value) if isinstance(value, np.ndarray) else int(value)
            return sample

    return StreamedBlocks


def streaming_dataset(uris: Sequence[str], split: str, shuffle: bool, seed: int,
                      weights: Sequence[float] | None = None, replicas: tuple[int, int] = (1, 0)) -> Any:
    """One ``StreamingDataset`` of ``split``, or a ``CombinedStreamingDataset`` of several corpora: drawn by
    ``weights`` for training (the epoch ends when one corpus runs out), every block of each once otherwise; split
    over ``replicas`` = (data-parallel ranks, this process's), see ``read_as_replica``."""
    from litdata import CombinedStreamingDataset

    streamed = _streamed_dataset_class()
    datasets, offset = [], 0
    for uri in uris:
        location = uri.rstrip("/") + "/" + split
        dataset = streamed(location, offset, shuffle=shuffle, drop_last=shuffle, seed=seed)
        read_as_replica(dataset, *replicas)
        datasets.append(dataset)
        offset += len(dataset)
    if len(datasets) == 1:
        return datasets[0]
    return CombinedStreamingDataset(datasets, seed=seed, weights=list(weights) if weights is not None else None,
                                    iterate_over_all=not shuffle)


def read_as_replica(dataset: Any, replicas: int, rank: int) -> None:
    """Split a ``StreamingDataset`` over the data-parallel ranks: litdata splits it over every process it detects
    (torch.distributed's world), but the ranks of one tensor-parallel group must read the same samples."""
    from litdata.utilities.env import _DistributedEnv

    nodes = dataset.distributed_env.num_nodes
    dataset.distributed_env = _DistributedEnv(replicas, rank, nodes if replicas % nodes == 0 else 1)


def streaming_loader(dataset: Any, replicas: int, **kwargs: Any) -> Any:
    """A ``StreamingDataLoader`` that refuses, with a one-line error, a saved position from another number of
    data-parallel ranks (litdata replays each rank's count of samples on its own split, which another world size
    splits differently: the run would silently repeat and skip samples)."""
    from litdata import StreamingDataLoader

    class ReplicaCheckedLoader(StreamingDataLoader):
        def load_state_dict(self, obj: dict[str, Any]) -> None:
            saved = _saved_world_sizes(obj.get("dataset", {}))
            if saved and saved != {replicas}:
                raise ConfigError(f"ckpt_path: the checkpoint's data.streaming position was saved by {min(saved)} "
                                  f"data-parallel ranks, this run has {replicas}; litdata resumes a stream mid-epoch "
                                  "only under the same number (resume with it, or start a new epoch without "
                                  "--ckpt_path)")
            super().load_state_dict(obj)

    return ReplicaCheckedLoader(dataset, **kwargs)


def _saved_world_sizes(state: Any) -> set[int]:
    """The ``world_size`` entries of a (possibly combined) litdata dataset state."""
    if not isinstance(state, dict):
        return set()
    found = {int(state["world_size"])} if "world_size" in state else set()
    return found.union(*(_saved_world_sizes(v) for v in state.values()))


def check_streaming(uris: Sequence[str] | None, weights: Sequence[float] | None, owner: type, base: type) -> None:
    """``data.streaming`` / ``data.streaming_weights`` of data module class ``owner``: streaming replaces ``base``'s
    one kind of packed block, so a subclass that builds its own data (overrides its block loading or loaders) is
    refused."""
    if uris is None:
        if weights is not None:
            raise ConfigError("data.streaming_weights needs data.streaming")
        return
    if not uris:
        raise ConfigError("data.streaming is an empty list; give litdata directories or URIs (or null)")
    if any(getattr(owner, hook) is not getattr(base, hook) for hook in ("_load_blocks", "_loader", "train_dataloader")):
        raise ConfigError(f"data.streaming: {owner.__name__} builds its own data (several streams or extra inputs); "
                          "streaming serves the recipes that read one kind of packed block")
    if weights is None:
        return
    if len(weights) != len(uris):
        raise ConfigError(f"data.streaming_weights has {len(weights)} values for {len(uris)} data.streaming corpora")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ConfigError(f"data.streaming_weights={list(weights)} must be non-negative with a positive sum")
