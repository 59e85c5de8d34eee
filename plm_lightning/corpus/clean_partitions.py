"""``prepare`` over a corpus of any size: the C4 steps of :mod:`~plm_lightning.corpus.c4_filters` run partition by
partition in worker processes, with memory bounded by one partition's buffers.

Every step but ``dedup`` looks at one page. C4's span deduplication (Raffel et al. 2020, sec. 2.2: "we discarded
all but one of any three-sentence span occurring more than once") needs the whole corpus; in memory it is a set of
every span seen so far. Here it takes two passes and a sort on disk, as external-memory deduplication does:

1. every partition runs the steps up to ``dedup`` and writes, for every span window, ``(hash of the span,
   partition, page, window)`` into one of ``DEDUP_SHARDS`` files chosen by the hash;
2. each hash shard is sorted by (hash, partition, page, window): the first row of each hash is the span's first
   occurrence in corpus order, every later row a duplicate window, written back per partition;
3. every partition runs all the steps again, ``dedup`` dropping exactly the duplicate windows of each page.

The result (pages, report) is the in-memory cleaner's, in corpus order, for any number of workers (spans are
compared by a 128-bit hash of their normalised text, not the text itself).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from plm_lightning.corpus.c4_filters import Cleaner, CleaningConfig, CleaningReport, StepCount
from plm_lightning.corpus.pack_partitions import run_in_workers
from plm_lightning.corpus.partitions import Partition, read_partition
from plm_lightning.files import atomic_write
from plm_lightning.progress import ByteProgress

DEDUP_SHARDS = 64
WINDOW = np.dtype([("h0", "<u8"), ("h1", "<u8"), ("partition", "<i4"), ("page", "<i8"), ("start", "<i4")])


def span_hash(key: str) -> tuple[int, int]:
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


class _SpanRecorder(Cleaner):
    """Pass 1: the steps up to ``dedup``, recording every span window instead of judging it."""

    def __init__(self, config: CleaningConfig, partition: int) -> None:
        steps = config.steps[: config.steps.index("dedup") + 1]
        super().__init__(CleaningConfig(**{**config.__dict__, "steps": steps}))
        self.partition, self.page, self.windows = partition, 0, []

    def seen_before(self, key: str, start: int) -> bool:
        self.windows.append((*span_hash(key), self.partition, self.page, start))
        return False


class _DuplicateRemover(Cleaner):
    """Pass 3: every step, ``dedup`` dropping the windows found to repeat an earlier span."""

    def __init__(self, config: CleaningConfig, duplicates: dict[int, set[int]]) -> None:
        super().__init__(config)
        self.duplicates, self.page = duplicates, 0

    def seen_before(self, key: str, start: int) -> bool:
        return start in self.duplicates.get(self.page, ())


def record_windows(config: CleaningConfig, text_field: str, work: Path, partition: Partition,
                   progress: Callable[[int], None] | None = None) -> int:
    """Pass 1 for one partition: its span windows, split by hash into the shard files; returns how many."""
    recorder = _SpanRecorder(config, partition.index)
    for page in read_partition(partition, text_field, progress):
        recorder.clean(page)
        recorder.page += 1
    windows = np.array(recorder.windows, dtype=WINDOW)
    shard_of = windows["h0"] % DEDUP_SHARDS
    for shard in range(DEDUP_SHARDS):
        directory = work / "windows" / f"{shard:02d}"
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / f"{partition.index:05d}.npy", windows[shard_of == shard])
    return len(windows)


def find_duplicates(work: Path, shard: int, progress: Callable[[int], None] | None = None) -> int:
    """Pass 2 for one hash shard: every window but the first of each span, written per partition."""
    files = sorted((work / "windows" / f"{shard:02d}").glob("*.npy"))
    windows = np.concatenate([np.load(f) for f in files]) if files else np.zeros(0, WINDOW)
    order = np.lexsort((windows["start"], windows["page"], windows["partition"], windows["h1"], windows["h0"]))
    windows = windows[order]
    repeat = np.zeros(len(windows), dtype=bool)
    repeat[1:] = (windows["h0"][1:] == windows["h0"][:-1]) & (windows["h1"][1:] == windows["h1"][:-1])
    duplicates = windows[repeat]
    for partition in np.unique(duplicates["partition"]):
        rows = duplicates[duplicates["partition"] == partition]
        directory = work / "duplicates" / f"{int(partition):05d}"
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / f"{shard:02d}.npy", np.stack([rows["page"], rows["start"].astype(np.int64)], axis=1))
    if progress is not None:
        progress(1)
    return int(repeat.sum())


def clean_partition(config: CleaningConfig, text_field: str, work: Path, partition: Partition,
                    progress: Callable[[int], None] | None = None) -> dict:
    """Pass 3 for one partition: its cleaned pages as JSON lines; returns its report."""
    duplicates: dict[int, set[int]] = {}
    for f in sorted((work / "duplicates" / f"{partition.index:05d}").glob("*.npy")):
        for page, start in np.load(f).tolist():
            duplicates.setdefault(page, set()).add(start)
    cleaner = _DuplicateRemover(config, duplicates) if "dedup" in config.steps else Cleaner(config)
    out = work / "pages" / f"{partition.index:05d}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for page in read_partition(partition, text_field, progress):
            cleaned = cleaner.clean(page)
            cleaner.page += 1
            if cleaned is not None:
                f.write(json.dumps({"text": cleaned}) + "\n")
    return cleaner.report.as_dict()


def clean_corpus(partitions: list[Partition], text_field: str, config: CleaningConfig, out: Path,
                 workers: int = 1, progress: bool = True) -> CleaningReport:
    """The C4 steps over every partition, the pages written to ``out`` (JSON lines, corpus order); the report."""
    total = sum(p.size for p in partitions)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.work-") as tmp:
        work = Path(tmp)
        if "dedup" in config.steps:
            run_in_workers(partial(record_windows, config, text_field, work), partitions, workers,
                           ByteProgress(total, "prepare: span windows", progress))
            run_in_workers(partial(find_duplicates, work), list(range(DEDUP_SHARDS)), workers,
                           ByteProgress(DEDUP_SHARDS, "prepare: repeated spans", False))
        reports = run_in_workers(partial(clean_partition, config, text_field, work), partitions, workers,
                                 ByteProgress(total, "prepare: cleaning", progress))

        def concatenate(tmp_out: Path) -> None:
            with open(tmp_out, "wb") as f:
                for p in partitions:
                    with open(work / "pages" / f"{p.index:05d}.jsonl", "rb") as part:
                        shutil.copyfileobj(part, f)

        atomic_write(out, concatenate)
    report = CleaningReport(steps={name: StepCount() for name in config.steps})
    for part in reports:
        report.add(_report_from_dict(part))
    return report


def _report_from_dict(d: dict) -> CleaningReport:
    return CleaningReport(d["pages_in"], d["lines_in"], d["pages_out"], d["lines_out"],
                          {name: StepCount(c["pages_removed"], c["lines_removed"]) for name, c in d["steps"].items()})
