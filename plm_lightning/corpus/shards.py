"""Packed blocks on disk as shards: one directory per corpus partition, one ``.npy`` file per split and field, read
back memory-mapped as one :class:`ShardedBlocks` whose rows run over the shards in partition order.

``.npy`` files because they are what :class:`~plm_lightning.corpus.blocks.PackedBlocks` already reads: self-describing
(dtype and shape in the header), memory-mapped by ``np.load(mmap_mode="r")`` with no dependency, random access by
row in O(1), and written row batch by row batch here (the header is written with room for any row count and
rewritten with the real one when the shard is closed), so a worker never holds more than one batch of rows.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from plm_lightning.corpus.blocks import BLOCK_FIELDS, PackedBlocks

HEADER_BYTES = 128
"""Magic, version, length and the header dict, padded with spaces: room for a shape of any row count."""
META_FILE = "meta.json"


class NpyAppender:
    """A 2-D (or 1-D) ``.npy`` file grown by appending rows."""

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.row_shape, self.rows = path, np.dtype(dtype), tuple(row_shape), 0
        self.file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.file.write(self._header())

    def _header(self) -> bytes:
        shape = (self.rows, *self.row_shape)
        text = repr({"descr": self.dtype.str, "fortran_order": False, "shape": shape})
        body = text.encode("latin1")
        pad = HEADER_BYTES - 10 - len(body) - 1
        if pad < 0:
            raise ValueError(f"shape {shape} does not fit an .npy header of {HEADER_BYTES} bytes")
        return b"\x93NUMPY\x01\x00" + (HEADER_BYTES - 10).to_bytes(2, "little") + body + b" " * pad + b"\n"

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path.name}: rows of shape {rows.shape[1:]}, expected {self.row_shape}")
        self.file.write(rows.tobytes())
        self.rows += rows.shape[0]

    def close(self) -> None:
        self.file.seek(0)
        self.file.write(self._header())
        self.file.close()


class ShardWriter:
    """The blocks of one split of one partition, appended batch by batch (``PackedBlocks`` of any row count)."""

    def __init__(self, directory: Path, split: str) -> None:
        self.directory, self.split = directory, split
        self.files: dict[str, NpyAppender] = {}
        self.fields: tuple[str, ...] | None = None

    def append(self, blocks: PackedBlocks) -> None:
        fields = tuple(name for name in BLOCK_FIELDS if getattr(blocks, name) is not None)
        if self.fields is None:
            self.fields = fields
            for name in fields:
                value = getattr(blocks, name)
                self.files[name] = NpyAppender(self.directory / f"{self.split}.{name}.npy", value.dtype,
                                               value.shape[1:])
        elif fields != self.fields:
            raise ValueError(f"blocks with fields {fields} after {self.fields}")
        for name in fields:
            self.files[name].append(getattr(blocks, name))

    @property
    def rows(self) -> int:
        return next(iter(self.files.values())).rows if self.files else 0

    def close(self) -> None:
        for f in self.files.values():
            f.close()


class ShardedArray:
    """One field of a split over all shards: ``array[i]`` reads row ``i`` from its shard's memory map. At most
    ``open_limit`` shards are mapped at once (least recently used closed first), so a corpus of thousands of shards
    does not exhaust file descriptors."""

    open_limit = 64

    def __init__(self, files: list[Path], offsets: np.ndarray, dtype: np.dtype, row_shape: tuple[int, ...]) -> None:
        self.files, self.offsets, self.dtype, self.row_shape = files, offsets, np.dtype(dtype), row_shape
        self._open: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self), *self.row_shape)

    @property
    def ndim(self) -> int:
        return 1 + len(self.row_shape)

    def _shard(self, k: int) -> np.ndarray:
        array = self._open.get(k)
        if array is None:
            array = np.load(self.files[k], mmap_mode="r")
            self._open[k] = array
            if len(self._open) > self.open_limit:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(k)
        return array

    def __getitem__(self, index: int | np.integer | slice) -> np.ndarray:
        if isinstance(index, slice):
            return np.stack([self[i] for i in range(*index.indices(len(self)))]) if len(self) else np.empty(
                (0, *self.row_shape), self.dtype)
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        k = int(np.searchsorted(self.offsets, i, side="right") - 1)
        return self._shard(k)[i - int(self.offsets[k])]

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """The whole field in memory (small corpora, tests): row access is what training uses."""
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_open": OrderedDict()}  # DataLoader workers map their own


class ShardedBlocks(PackedBlocks):
    """The blocks of one split over every shard, with the fields of :class:`PackedBlocks`."""

    @classmethod
    def open(cls, shard_dirs: list[Path], split: str, rows: list[int]) -> ShardedBlocks:
        offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        fields = {}
        for name in BLOCK_FIELDS:
            files = [d / f"{split}.{name}.npy" for d in shard_dirs]
            if not files or not files[0].is_file():
                fields[name] = None
                continue
            dtype, row_shape = _npy_layout(files[0])
            fields[name] = ShardedArray(files, offsets, dtype, row_shape)
        return cls(**fields)

    def __len__(self) -> int:
        return len(self.input_ids)

    def save(self, directory: Path, split: str) -> None:
        for name in BLOCK_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out = NpyAppender(directory / f"{split}.{name}.npy", value.dtype, value.row_shape)
                for start in range(0, len(value), 4096):
                    out.append(value[start: min(len(value), start + 4096)])
                out.close()


def _npy_layout(path: Path) -> tuple[np.dtype, tuple[int, ...]]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
    return dtype, tuple(shape[1:])


def file_digest(path: Path, chunk: int = 1 << 23) -> str:
    """BLAKE2b (128-bit) of a file's bytes, read in chunks of 8 MiB."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_meta(directory: Path, meta: dict) -> None:
    """Write ``directory``'s metadata last, with each of its files' size, modification time and checksum, which
    :func:`read_meta` checks."""
    files = {}
    for f in sorted(directory.iterdir()):
        if f.name != META_FILE and f.is_file():
            stat = f.stat()
            files[f.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "blake2b": file_digest(f)}
    (directory / META_FILE).write_text(json.dumps({**meta, "files": files}, indent=1))


def damage(directory: Path, meta: dict) -> str | None:
    """What is wrong with a cache entry's files against what its metadata recorded (None: nothing): a file missing
    or of another size; a file modified since (another modification time) whose checksum no longer matches. A file
    with its recorded time is not read again, so a check costs one ``stat`` per file."""
    for name, recorded in (meta.get("files") or {}).items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        recorded = recorded if isinstance(recorded, dict) else {"size": recorded}  # entries of before checksums
        stat = path.stat()
        if stat.st_size != recorded["size"]:
            return f"{name} has {stat.st_size} of its {recorded['size']} bytes"
        if "blake2b" in recorded and stat.st_mtime_ns != recorded.get("mtime_ns") \
                and file_digest(path) != recorded["blake2b"]:
            return f"{name} was altered (checksum mismatch)"
    return None


def read_meta(directory: Path) -> dict | None:
    """The metadata of a complete cache entry; None when there is none, and when its files are damaged (truncated,
    missing): the entry is then removed, with one warning, so it is built again."""
    try:
        meta = json.loads((directory / META_FILE).read_text())
        problem = None if isinstance(meta, dict) else f"{META_FILE} holds no object"
    except OSError:
        return None
    except ValueError:  # written whole before the entry was renamed into place: this is damage
        meta, problem = {}, f"{META_FILE} is not JSON"
    problem = problem or damage(directory, meta)
    if problem is not None:
        warnings.warn(f"data: cache entry '{directory}' is damaged ({problem}); rebuilding it", stacklevel=2)
        shutil.rmtree(directory, ignore_errors=True)
        return None
    return meta

