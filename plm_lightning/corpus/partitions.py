"""A corpus on disk read as a stream of documents, cut into partitions that worker processes and machines read apart.

A partition is a list of byte ranges of text files (or of row ranges of Parquet files and Arrow datasets) holding
about ``partition_bytes`` of text: a large file is cut into several partitions, small files are grouped into one.
The plan depends only on the files (names, sizes) and ``partition_bytes``, never on how many workers or nodes read
it, so the packed result is the same on one process as on many (Megatron-LM's ``preprocess_data.py`` partitions
its input the same way; Hadoop's line records are the model for cutting a text file at byte offsets).

A partition owns the documents that *start* inside its byte ranges: a reader that begins mid-document skips to the
next document boundary, and the last document of a range is read to its end. Formats:

* ``.txt``: documents separated by an empty line (BERT's pretraining format).
* ``.jsonl`` (and ``.json`` when compressed, as C4 ships it): one JSON object per line, the text in ``text_field``.
* ``.parquet``: the ``text_field`` column, partitioned by row groups.
* ``.gz`` / ``.bz2`` / ``.xz`` / ``.zst`` around ``.txt``/``.jsonl``/``.json``: read whole (no seeking), one file
  per partition at most; ``.zst`` needs ``zstandard``.
* a directory saved by ``datasets`` (``save_to_disk``) or a dataset name: row ranges of the memory-mapped Arrow table.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from plm_lightning.errors import ConfigError

COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
PLAIN_SUFFIXES = (".txt", ".jsonl", ".parquet")
DEFAULT_PARTITION_BYTES = 8 << 20
"""8 MiB of text per partition: a few seconds of one worker's tokenization (balanced work for a few workers on 100 MB), about
1,200 partitions for 10 GB (the shards are memory-mapped a few at a time)."""
MAX_LINE_BYTES = 1 << 30
"""The longest JSON line read (a JSON object is parsed whole)."""
MAX_DOCUMENT_CHARS = 1 << 20
"""Longer documents are cut into documents of at most this many characters (at whitespace where there is some),
with a warning: no tokenizer, sentence splitter or packer ever holds more of one document at once."""


@dataclass(frozen=True)
class Segment:
    """Part of one input: bytes ``[start, stop)`` of a text file, row groups of a Parquet file, rows of a dataset.
    ``kind`` is ``txt``, ``jsonl``, ``tsv`` (a parallel corpus), ``parquet`` or ``dataset``; ``compression`` the
    codec suffix of a compressed file (then ``start, stop`` cover the whole compressed file)."""

    path: str
    kind: str
    start: int
    stop: int
    compression: str | None = None
    split: str = "train"
    """A dataset's split."""
    weight: int = 0
    """Bytes of a Parquet segment (row groups' sizes) or a dataset segment (estimated), for progress."""

    @property
    def size(self) -> int:
        """Bytes this segment covers (compressed bytes for a compressed file), for partitioning and progress."""
        return self.stop - self.start if self.kind in ("txt", "jsonl", "tsv") else self.weight


@dataclass(frozen=True)
class Partition:
    """The unit of work of the preparation workers and nodes: segments in corpus order, and its place among all."""

    index: int
    segments: tuple[Segment, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


def file_kind(path: Path) -> tuple[str, str | None] | None:
    """``(kind, compression)`` of a corpus file by its suffixes, or None when it is not one."""
    suffixes = [s.lower() for s in path.suffixes]
    compression = suffixes[-1] if suffixes and suffixes[-1] in COMPRESSIONS else None
    inner = suffixes[-2] if compression and len(suffixes) >= 2 else (suffixes[-1] if suffixes else "")
    if compression:
        kinds = {".txt": "txt", ".jsonl": "jsonl", ".json": "jsonl"}
        return (kinds[inner], compression) if inner in kinds else None
    return {".txt": ("txt", None), ".jsonl": ("jsonl", None), ".parquet": ("parquet", None)}.get(inner)


def plan_partitions(files: list[Path], text_field: str, partition_bytes: int = DEFAULT_PARTITION_BYTES
                    ) -> list[Partition]:
    """Cut ``files`` (in order) into partitions of about ``partition_bytes``."""
    if partition_bytes < 1:
        raise ConfigError(f"data.partition_bytes={partition_bytes} must be a positive number of bytes")
    segments: list[Segment] = []
    for path in files:
        kind = file_kind(path)
        if kind is None:  # a single file named without a known suffix reads as text, as before
            kind = ("txt", None)
        size = path.stat().st_size
        if size == 0:
            continue
        if kind[0] == "parquet":
            segments.extend(_parquet_segments(path, text_field, partition_bytes))
        elif kind[1] is not None:
            segments.append(Segment(str(path), kind[0], 0, size, kind[1], weight=size))
        else:
            segments.extend(Segment(str(path), kind[0], start, min(size, start + partition_bytes))
                            for start in range(0, size, partition_bytes))
    return _group(segments, partition_bytes)


def plan_pair_partitions(path: Path, partition_bytes: int = DEFAULT_PARTITION_BYTES) -> list[Partition]:
    """Byte ranges of a parallel corpus (``source<TAB>target`` lines, read by :func:`read_pairs`)."""
    size = path.stat().st_size
    return _group([Segment(str(path), "tsv", start, min(size, start + partition_bytes))
                   for start in range(0, size, partition_bytes)], partition_bytes)


def read_pairs(partition: Partition, where: str, progress: Callable[[int], None] | None = None
               ) -> Iterator[tuple[str, str]]:
    """The sentence pairs of a parallel corpus's partition (the lines that start in it); a line that is not
    ``source<TAB>target`` is a one-line error naming ``where`` (the config key), the file and the byte."""
    for segment in partition.segments:
        lines = _lines(segment, progress or (lambda n: None))
        next(lines)
        for offset, line, owned in lines:
            if not owned:
                break
            text = _decode(segment, offset, line).rstrip("\r\n")
            if not text.strip():
                continue
            fields = text.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ConfigError(f"{where}: '{segment.path}' line at byte {offset} is not 'source<TAB>target' (one "
                                  "tab, two non-empty sides)")
            yield fields[0].strip(), fields[1].strip()


def plan_dataset_partitions(source: str, text_field: str, split: str, partition_bytes: int = DEFAULT_PARTITION_BYTES
                            ) -> tuple[list[Partition], str]:
    """Row ranges of a saved or named ``datasets`` dataset, and its fingerprint."""
    ds = open_dataset(source, text_field, split)
    rows = len(ds)
    nbytes = max(1, int(ds.data.nbytes))
    per_row = max(1, nbytes // max(1, rows))
    step = max(1, partition_bytes // per_row)
    segments = [Segment(source, "dataset", start, min(rows, start + step), split=split,
                        weight=(min(rows, start + step) - start) * per_row) for start in range(0, rows, step)]
    return _group(segments, partition_bytes), f"hf-{source}-{ds._fingerprint}"


def _group(segments: list[Segment], partition_bytes: int) -> list[Partition]:
    """Consecutive segments into partitions of at most about ``partition_bytes`` (a segment is never cut here)."""
    partitions: list[list[Segment]] = []
    size = 0
    for seg in segments:
        if not partitions or size + seg.size > partition_bytes:
            partitions.append([])
            size = 0
        partitions[-1].append(seg)
        size += seg.size
    return [Partition(i, tuple(p)) for i, p in enumerate(partitions)]


def _parquet_segments(path: Path, text_field: str, partition_bytes: int) -> list[Segment]:
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as err:  # pyarrow raises its own error types for non-parquet bytes
        raise ConfigError(f"data.source: '{path}' is not a readable parquet file ({err})") from err
    names = meta.schema.names
    if text_field not in names:
        raise ConfigError(f"data.text_field: parquet file '{path}' has no column {text_field!r}; columns: "
                          f"{', '.join(names)}")
    out: list[Segment] = []
    start, size = 0, 0
    for g in range(meta.num_row_groups):
        size += meta.row_group(g).total_byte_size
        if size >= partition_bytes or g == meta.num_row_groups - 1:
            out.append(Segment(str(path), "parquet", start, g + 1, weight=max(1, size)))
            start, size = g + 1, 0
    return out


def is_saved_dataset(path: str) -> bool:
    """A directory written by ``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    p = Path(path).expanduser()
    return p.is_dir() and any((p / marker).is_file() for marker in ("dataset_info.json", "state.json",
                                                                      "dataset_dict.json"))


def open_dataset(source: str, text_field: str, split: str):  # noqa: ANN201 - a datasets.Dataset
    """A saved (``save_to_disk``) or named ``datasets`` dataset's ``split``, its text column checked."""
    try:
        import datasets
    except ImportError as err:
        raise ConfigError(
            f"data.source: '{source}' is not a local file, directory or glob, and the `datasets` package is not "
            "installed to load it as a Hugging Face dataset (pip install 'plm-lightning[datasets]')"
        ) from err
    try:
        ds = datasets.load_from_disk(source) if is_saved_dataset(source) else datasets.load_dataset(source, split=split)
    except Exception as err:
        raise ConfigError(f"data.source: cannot load dataset '{source}': {err}") from err
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ConfigError(f"data.split: dataset '{source}' has no split {split!r}; splits: {', '.join(ds)}")
        ds = ds[split]
    if text_field not in ds.column_names:
        raise ConfigError(f"data.text_field: dataset '{source}' has no column {text_field!r}; "
                          f"columns: {', '.join(ds.column_names)}")
    return ds


def read_partition(partition: Partition, text_field: str, progress: Callable[[int], None] | None = None
                   ) -> Iterator[str]:
    """The documents of ``partition`` in order; ``progress(n)`` is called as ``n`` more bytes are read."""
    for segment in partition.segments:
        yield from read_segment(segment, text_field, progress)


def read_segment(segment: Segment, text_field: str, progress: Callable[[int], None] | None = None) -> Iterator[str]:
    report = progress or (lambda n: None)
    try:
        if segment.kind == "parquet":
            documents = _parquet_documents(segment, text_field, report)
        elif segment.kind == "dataset":
            documents = _dataset_documents(segment, text_field, report)
        elif segment.kind == "txt":
            documents = _text_documents(segment, _lines(segment, report, MAX_DOCUMENT_CHARS))
        else:
            documents = _jsonl_documents(segment, _lines(segment, report), text_field)
        for number, document in enumerate(documents):
            if len(document) <= MAX_DOCUMENT_CHARS:
                yield document
                continue
            pieces = cut_document(document)
            _warn_cut(segment, f"document {number + 1} of the range at byte {segment.start}", len(document),
                      len(pieces))
            yield from pieces
    except FileNotFoundError as err:
        raise ConfigError(f"data.source: '{segment.path}' vanished while it was read (moved or deleted?)") from err


def _open_compressed(path: str, compression: str) -> io.BufferedIOBase:
    if compression == ".gz":
        return gzip.open(path, "rb")
    if compression == ".bz2":
        return bz2.open(path, "rb")
    if compression == ".xz":
        return lzma.open(path, "rb")
    try:
        import zstandard
    except ImportError as err:
        raise ConfigError(f"data.source: '{path}' is zstd-compressed; pip install zstandard to read it") from err
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")))  # noqa: SIM115


def cut_document(text: str, limit: int = MAX_DOCUMENT_CHARS) -> list[str]:
    """``text`` as pieces of at most ``limit`` characters (see :func:`_cut_head`), stripped, empty ones dropped."""
    pieces, rest = _cut_head(text, limit)
    return [p for p in (*pieces, rest.strip()) if p]


def _cut_head(text: str, limit: int) -> tuple[list[str], str]:
    """Cut pieces of at most ``limit`` characters off the front of ``text``, each after the last newline (else
    whitespace) of its second half, or at ``limit`` when that half has none (one endless word); returns the stripped
    non-empty pieces and the rest (at most ``limit`` characters, unstripped: more of it may follow)."""
    pieces = []
    while len(text) > limit:
        window = text[:limit]
        cut = window.rfind("\n", limit // 2)
        if cut < 0:
            cut = max(window.rfind(" ", limit // 2), window.rfind("\t", limit // 2))
        cut = cut + 1 if cut >= 0 else limit
        if text[:cut].strip():
            pieces.append(text[:cut].strip())
        text = text[cut:]
    return pieces, text


def _warn_cut(segment: Segment, where: str, chars: int, pieces: int) -> None:
    warnings.warn(f"data.source: '{segment.path}', {where}: a document of {chars:,} characters is cut into {pieces} "
                  f"documents of at most {MAX_DOCUMENT_CHARS:,}", stacklevel=3)


def _lines(segment: Segment, report: Callable[[int], None], chunk: int = MAX_LINE_BYTES
           ) -> Iterator[tuple[int, bytes, bool]]:
    """``(offset, line, owned)`` for the lines of a text segment, after a first ``(-1, b"", may_start)`` that says
    whether a document may start at the first line (false when the range starts inside a document, which belongs to
    the range before). A line is owned when it starts inside the range; lines after the range are read on while the
    caller wants them (its last document ends)."""
    if segment.compression is not None:
        with _open_compressed(segment.path, segment.compression) as f:
            yield -1, b"", True
            offset = 0
            for line in iter(lambda: _readline(f, chunk), b""):
                yield offset, line, True
                offset += len(line)
        report(segment.stop - segment.start)
        return
    with open(segment.path, "rb") as f:
        offset, may_start = segment.start, True
        if offset > 0:
            f.seek(offset - 1)
            offset += len(f.readline()) - 1  # skip to the first line that starts at or after `start`
            f.seek(offset - min(offset, 3))
            before = f.read(min(offset, 3))  # the end of the line before: is it empty?
            end = len(before) - (2 if before.endswith(b"\r\n") else 1)
            may_start = before[end - 1: end] == b"\n" if end > 0 else offset == len(before)
        yield -1, b"", may_start
        reported = 0
        for line in iter(lambda: _readline(f, chunk), b""):
            owned = offset < segment.stop
            yield offset, line, owned
            offset += len(line)
            if owned and offset - segment.start - reported >= 1 << 20:
                done = min(offset, segment.stop) - segment.start
                report(done - reported)
                reported = done
        report(segment.stop - segment.start - reported)


def _readline(f: io.BufferedIOBase, chunk: int) -> bytes:
    """A line, or its next ``chunk`` bytes when it is longer, completed to a whole UTF-8 character."""
    line = f.readline(chunk)
    if len(line) == chunk and not line.endswith(b"\n"):
        for back in range(1, min(4, len(line)) + 1):  # the last character's lead byte: how long is it?
            lead = line[-back]
            if lead & 0xC0 != 0x80:
                length = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
                if length > back:
                    line += f.read(length - back)
                break
    return line


def _decode(segment: Segment, offset: int, line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"data.source: '{segment.path}' is not UTF-8 text at byte {offset + err.start}; is it "
                          "binary?") from err


def _text_documents(segment: Segment, lines: Iterator[tuple[int, bytes, bool]]) -> Iterator[str]:
    """Documents separated by empty lines: the ones that start in the segment (see :func:`_lines`). A document
    that grows past :data:`MAX_DOCUMENT_CHARS` (lines arrive in chunks of at most that many bytes) is cut as it is
    read, so memory stays bounded whatever the file holds (one 50 MB line, a gigabyte of zeros)."""
    _, _, may_start = next(lines)
    skipping = not may_start
    current: list[str] = []
    size, start, warned = 0, None, False  # start: the byte where the document being read began
    for offset, line, owned in lines:
        empty = line in (b"\n", b"\r\n")
        if skipping:
            skipping = not empty
            continue
        if empty:
            text = "".join(current).replace("\r\n", "\n").strip()
            current, size, start, warned = [], 0, None, False
            if text:
                yield text
            continue
        if start is None:
            if not owned:  # a document that starts after the range: the next range's
                return
            start = offset
        current.append(_decode(segment, offset, line))
        size += len(current[-1])
        if size > MAX_DOCUMENT_CHARS:
            done, rest = _cut_head("".join(current).replace("\r\n", "\n"), MAX_DOCUMENT_CHARS)
            if not warned:
                warned = True
                warnings.warn(f"data.source: '{segment.path}', the document at byte {start}: longer than "
                              f"{MAX_DOCUMENT_CHARS:,} characters, cut into documents of at most that length as "
                              "it is read", stacklevel=2)
            yield from done
            current, size = [rest], len(rest)
    text = "".join(current).replace("\r\n", "\n").strip()
    if text:
        yield text


def _jsonl_documents(segment: Segment, lines: Iterator[tuple[int, bytes, bool]], text_field: str) -> Iterator[str]:
    """One JSON object per line, the lines that start in the segment."""
    next(lines)
    for offset, line, owned in lines:
        if not owned:
            return
        if not line.strip():
            continue
        where = f"'{segment.path}' line at byte {offset}" if segment.compression is None else (
            f"'{segment.path}' (decompressed) line at byte {offset}")
        try:
            record = json.loads(_decode(segment, offset, line))
        except json.JSONDecodeError as err:
            raise ConfigError(f"data.source: {where} is not valid JSON ({err.msg})") from err
        if not isinstance(record, dict) or text_field not in record:
            raise ConfigError(f"data.text_field: {where} has no field {text_field!r}")
        if record[text_field]:
            yield str(record[text_field])


def _parquet_documents(segment: Segment, text_field: str, report: Callable[[int], None]) -> Iterator[str]:
    import pyarrow.parquet as pq

    groups = list(range(segment.start, segment.stop))
    with pq.ParquetFile(segment.path) as f:
        sizes = [f.metadata.row_group(g).total_byte_size for g in groups]
        for g, size in zip(groups, sizes):
            for batch in f.iter_batches(batch_size=1024, row_groups=[g], columns=[text_field]):
                yield from (t for t in batch.column(0).to_pylist() if t)
            report(size)


def _dataset_documents(segment: Segment, text_field: str, report: Callable[[int], None]) -> Iterator[str]:
    ds = open_dataset(segment.path, text_field, segment.split)
    step = 1024
    per_row = segment.weight // max(1, segment.stop - segment.start)
    for start in range(segment.start, segment.stop, step):
        stop = min(segment.stop, start + step)
        yield from (t for t in ds[start:stop][text_field] if t)
        report((stop - start) * per_row)


def text_batches(texts: Iterable[str], batch_bytes: int) -> Iterator[list[str]]:
    """``texts`` in consecutive batches of about ``batch_bytes`` characters (the last one shorter): what one worker
    hands ``tokenizers``' batch encoder at a time."""
    batch: list[str] = []
    size = 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def sample_documents(partitions: list[Partition], text_field: str, budget_bytes: int) -> Iterator[str]:
    """About ``budget_bytes`` of text spread over the whole corpus, for training a tokenizer: the first
    ``budget_bytes / len(partitions)`` bytes of documents of every partition (all of a corpus under the budget, in
    order). Deterministic; only one document is held at a time."""
    share = budget_bytes / max(1, len(partitions))
    for partition in partitions:
        taken = 0
        for doc in read_partition(partition, text_field):
            yield doc
            taken += len(doc.encode("utf-8"))
            if taken >= share:
                break

