"""A corpus of any size to packed shards with flat memory: partitions (``partitions``) read document by document,
tokenized in batches and packed as they go (``packing.packed_rows``), in worker processes, on one or many machines.

Every partition is packed alone into its own shard (``shards``): the rows depend on the partition and the recipe,
never on the number of workers or nodes, so 1 worker, 4 workers and 2 nodes x 2 workers write the same shards, read
back in partition order. A shard directory is renamed into place only when complete, so a preparation killed at any
point continues where it stopped and ends with the same shards as an uninterrupted one. Everything the rows depend on
(the files, the tokenizer, the packing) keys the shard set's directory, so a changed corpus or recipe gets new
shards and is never mixed with old ones.

Held-out documents are chosen by a keyed hash of their text (``val_fraction`` of them), so the split needs no count
of the corpus and a document lands in the same split wherever it sits. The pair modes (NSP/SOP/...) draw a random
segment B from the documents within ``PAIR_WINDOW_TOKENS`` of the current one in its partition (BERT's
create_pretraining_data draws from all documents of the files it is given, Megatron's from its dataset), with a
generator seeded by (seed, partition, split).
"""

from __future__ import annotations

import contextlib
import gc
import glob
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from plm_lightning.corpus import partitions as partition_files
from plm_lightning.corpus import sources
from plm_lightning.corpus.blocks import (
    FORMAT_VERSION,
    PackedBlocks,
    pack_translation_pairs,
    packed_rows,
    reads_sentences,
    rows_to_blocks,
)
from plm_lightning.corpus.knowledge_units import KnowledgeSpec, Phrase
from plm_lightning.corpus.partitions import Partition, read_pairs, read_partition, text_batches
from plm_lightning.corpus.phrase_table import load_phrase_table
from plm_lightning.corpus.shards import ShardedBlocks, ShardWriter, read_meta, write_meta
from plm_lightning.corpus.tokenized import TokenizedDocument, flagged_pairs, tokenize_documents
from plm_lightning.corpus.tokenizer import TextTokenizer
from plm_lightning.corpus.world import is_world_spec
from plm_lightning.errors import ConfigError
from plm_lightning.files import atomic_write, process_alive
from plm_lightning.progress import ByteProgress

SHARDS_VERSION = 1
PAIR_WINDOW_TOKENS = 500_000
"""Tokens of other documents on each side of a document that its pairs may draw segment B from."""
BATCH_BYTES = 1 << 20
"""Text tokenized at once by one worker (``tokenizers``' batch encoder): bounds a worker's buffers."""
ROWS_PER_WRITE = 1024
SPLITS = ("train", "val")


@dataclass(frozen=True)
class PackingJob:
    """What a worker needs to pack any partition (picklable: sent to spawned worker processes)."""

    tokenizer_file: str
    mode: str
    length: int
    val_fraction: float
    seed: int
    text_field: str = "text"
    segmenter: str = "tokenizer"
    sentence_splitter: str = "pysbd"
    """Sentence boundaries of the sentence-level modes (:mod:`~plm_lightning.corpus.sentences`)."""
    window: int = PAIR_WINDOW_TOKENS
    knowledge: KnowledgeSpec | None = None
    """ERNIE's phrase and entity units, marked on every token (``phrases_file``: the corpus's fitted phrase table,
    :mod:`~plm_lightning.corpus.phrase_table`; None with a phrase lexicon)."""
    phrases_file: str | None = None
    languages: tuple[int, int] | None = None
    """``mode="translation"``: the language ids of a parallel corpus's two sides (XLM's TLM pairs)."""
    where: str = "data.source"
    """The config key that names the corpus, for errors (not part of the rows)."""

    def key(self) -> dict[str, Any]:
        """What the rows depend on, as JSON (the files by their content)."""
        fields = {f.name: getattr(self, f.name) for f in dataclass_fields(self) if f.name != "where"}
        if not reads_sentences(self.mode) or self.sentence_splitter == "pysbd":
            del fields["sentence_splitter"]  # a document-level mode's rows do not depend on it; pysbd's keep their key
        fields["knowledge"] = self.knowledge.cache_key() if self.knowledge is not None else None
        fields["phrases_file"] = (hashlib.sha256(Path(self.phrases_file).read_bytes()).hexdigest()
                                  if self.phrases_file is not None else None)
        return fields


def available_cores() -> int:
    """CPU cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def is_validation(document: str, seed: int, val_fraction: float) -> bool:
    """Whether ``document`` is held out: a hash of its text keyed by ``seed`` below ``val_fraction``."""
    if val_fraction <= 0:
        return False
    digest = hashlib.blake2b(document.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "little") < val_fraction * 2.0**64


def tokenized_stream(documents: Iterable[str], tokenizer: TextTokenizer, by_sentence: bool, segmenter: str,
                     batch_bytes: int = BATCH_BYTES, knowledge: KnowledgeSpec | None = None,
                     phrases: set[Phrase] | None = None, splitter: str = "pysbd") -> Iterator[TokenizedDocument]:
    """:func:`~plm_lightning.corpus.blocks.tokenize_documents` over a stream, ``batch_bytes`` of text at a time
    (ERNIE's units from ``knowledge`` with the corpus's phrase table ``phrases``; sentences by ``splitter``)."""
    for batch in text_batches(documents, batch_bytes):
        yield from tokenize_documents(batch, tokenizer, by_sentence, knowledge, segmenter, False, phrases, splitter)


def partition_rng(seed: int, partition: int, split: int) -> np.random.Generator:
    """The pair modes' generator of one split of one partition; partition 0's training rows draw as the in-memory
    packer does (``default_rng(seed)``), so a one-partition corpus packs exactly as in memory."""
    return np.random.default_rng(seed if (partition, split) == (0, 0) else [seed, partition, split])


_TOKENIZERS: dict[str, TextTokenizer] = {}
_PHRASES: dict[str | None, set[Phrase]] = {}


def _tokenizer(file: str) -> TextTokenizer:
    if file not in _TOKENIZERS:
        _TOKENIZERS[file] = TextTokenizer.load(file)
    return _TOKENIZERS[file]


def _phrases(job: PackingJob) -> set[Phrase] | None:
    """The phrase table of ``job`` (read once per process): the fitted file's, the lexicon's, or None without
    knowledge units."""
    if job.knowledge is None:
        return None
    if job.phrases_file not in _PHRASES:
        _PHRASES[job.phrases_file] = (load_phrase_table(job.phrases_file) if job.phrases_file is not None
                                      else job.knowledge.phrase_table([]))
    return _PHRASES[job.phrases_file]


@contextlib.contextmanager
def rare_garbage_collection() -> Iterator[None]:
    """Python's cyclic garbage collector made rare while a partition packs, and the objects that exist before it
    (the imported libraries) frozen out of its scans: packing allocates millions of token lists, none of them in a
    reference cycle (reference counting frees them), and each allocation burst triggered collections that scanned
    every live object; they took about a fifth of a sentence-level recipe's packing time (bert, 16 MB:
    20.6-20.9 s with the default collector, 15.9-16.9 s without these scans) at the same peak memory. Restored on
    exit, so the packing process (with one worker, the training process) collects as before."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def pack_partition(job: PackingJob, partition: Partition, root: Path,
                   progress: Callable[[int], None] | None = None) -> dict:
    """Pack one partition into ``root/part-NNNNN`` (written under a temporary name, renamed when complete); returns
    its statistics."""
    target = root / shard_name(partition.index)
    if is_packed(target):  # packed meanwhile by another node sharing the cache directory
        return read_meta(target)
    with rare_garbage_collection():
        return _pack_partition(job, partition, target, root, progress)


def _pack_partition(job: PackingJob, partition: Partition, target: Path, root: Path,
                    progress: Callable[[int], None] | None) -> dict:
    tokenizer = _tokenizer(job.tokenizer_file)
    tmp = root / f".tmp-{shard_name(partition.index)}-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    stats: dict = {"partition": partition.index, "bytes": partition.size, "rows": {}, "tokens": {}, "documents": {}}
    for split_id, split in enumerate(SPLITS):
        writer = ShardWriter(tmp, split)
        writer.append(_empty_blocks(job, tokenizer))  # fixes the fields, for empty splits too
        counts = {"documents": 0}
        if split == "train" or job.val_fraction > 0:
            rng = partition_rng(job.seed, partition.index, split_id)
            report = progress if split == "train" else None
            blocks = (_translation_blocks(job, partition, tokenizer, rng, split == "val", counts, report)
                      if job.mode == "translation" else
                      _packed_blocks(job, partition, tokenizer, rng, split == "val", counts, report))
            tokens = 0
            for batch in blocks:
                writer.append(batch)
                tokens += int(np.count_nonzero(np.asarray(batch.document_ids) >= 0))
            stats["tokens"][split] = tokens
        writer.close()
        stats["rows"][split] = writer.rows
        stats["documents"][split] = counts["documents"]
    write_meta(tmp, stats)
    try:
        os.replace(tmp, target)
    except OSError:  # packed meanwhile by another process (another node): the same rows, keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return stats


def _empty_blocks(job: PackingJob, tokenizer: TextTokenizer) -> PackedBlocks:
    if job.mode == "translation":
        ids = tokenizer.ids
        return pack_translation_pairs([], job.length, ids["cls"], ids["sep"], ids["pad"], job.languages,
                                      np.random.default_rng(0))
    return rows_to_blocks([], job.mode, job.length, tokenizer, job.knowledge is not None)


def _packed_blocks(job: PackingJob, partition: Partition, tokenizer: TextTokenizer, rng: np.random.Generator,
                   validation: bool, counts: dict, progress: Callable[[int], None] | None) -> Iterator[PackedBlocks]:
    """The blocks of one split of a partition of documents, ``ROWS_PER_WRITE`` rows at a time."""
    documents = _split_documents(read_partition(partition, job.text_field, progress), job, validation, counts)
    tokenized = tokenized_stream(documents, tokenizer, reads_sentences(job.mode), job.segmenter,
                                 knowledge=job.knowledge, phrases=_phrases(job), splitter=job.sentence_splitter)
    rows = packed_rows(tokenized, job.mode, job.length, tokenizer, rng, window=job.window)
    for batch in _batched(rows, ROWS_PER_WRITE):
        yield rows_to_blocks(batch, job.mode, job.length, tokenizer, job.knowledge is not None)


def _translation_blocks(job: PackingJob, partition: Partition, tokenizer: TextTokenizer, rng: np.random.Generator,
                        validation: bool, counts: dict, progress: Callable[[int], None] | None
                        ) -> Iterator[PackedBlocks]:
    """XLM's TLM blocks of one split of a partition of a parallel corpus (``pack_translation_pairs``), a pair per
    block, ``ROWS_PER_WRITE`` pairs at a time; a pair is held out by the hash of its ``source<TAB>target`` line."""
    pairs = (p for p in read_pairs(partition, job.where, progress)
             if is_validation(f"{p[0]}\t{p[1]}", job.seed, job.val_fraction) == validation)
    ids = tokenizer.ids
    for batch in _batched(pairs, ROWS_PER_WRITE):
        counts["documents"] += len(batch)
        yield pack_translation_pairs(flagged_pairs(batch, tokenizer, job.segmenter), job.length, ids["cls"],
                                     ids["sep"], ids["pad"], job.languages, rng)


def _split_documents(documents: Iterable[str], job: PackingJob, validation: bool, counts: dict) -> Iterator[str]:
    for doc in documents:
        if is_validation(doc, job.seed, job.val_fraction) == validation:
            counts["documents"] += 1
            yield doc


def _batched(rows: Iterable[Any], n: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def shard_name(index: int) -> str:
    return f"part-{index:05d}"


def shard_set_dir(cache_dir: Path, job: PackingJob, partitions: list[Partition], fingerprint: str) -> Path:
    """Where the shards of ``job`` over ``partitions`` live: keyed by everything the rows depend on."""
    from plm_lightning.corpus.block_cache import tokenizer_hash

    key_fields = {"v": SHARDS_VERSION, "format": FORMAT_VERSION, "source": fingerprint,
                  "partitions": [[asdict(s) for s in p.segments] for p in partitions],
                  "tokenizer": tokenizer_hash(_tokenizer(job.tokenizer_file), job.tokenizer_file),
                  **{k: v for k, v in job.key().items() if k != "tokenizer_file"}}
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir / "shards" / f"{job.mode}-{job.length}-{key}"


def prepare_shards(job: PackingJob, partitions: list[Partition], fingerprint: str, cache_dir: Path,
                   workers: int = 1, nodes: tuple[int, int] = (1, 0), progress: bool = True,
                   share_first: tuple[int, int] | None = None) -> Path:
    """Pack every partition of this node's share (``nodes`` = (number of nodes, this node's rank): partition ``i``
    goes to node ``i % number``) that is not packed yet, with ``workers`` processes; returns the shard set's
    directory. ``share_first`` = (number of nodes, rank) instead packs *every* missing partition, this node's share
    first: nodes that share the cache directory split the work (a partition another node has finished meanwhile is
    skipped), and a node with a cache of its own still ends with every shard (``fit`` on several nodes)."""
    num_nodes, rank = nodes
    if num_nodes < 1 or not 0 <= rank < num_nodes:
        raise ConfigError(f"--num-nodes={num_nodes} --node-rank={rank}: the rank must lie in [0, {num_nodes})")
    if workers < 1:
        raise ConfigError(f"data.preparation_workers={workers} must be >= 1")
    root = shard_set_dir(cache_dir, job, partitions, fingerprint)
    root.mkdir(parents=True, exist_ok=True)
    plan = {"job": job.key(), "source": fingerprint, "partitions": [[asdict(s) for s in p.segments]
                                                                      for p in partitions]}
    if not (root / "plan.json").is_file():
        atomic_write(root / "plan.json", lambda tmp: tmp.write_text(json.dumps(plan, indent=1)))
    _remove_stale_tmp(root)
    todo = [p for p in partitions if p.index % num_nodes == rank and not is_packed(root / shard_name(p.index))]
    if share_first is not None:
        count, mine = share_first
        missing = [p for p in partitions if not is_packed(root / shard_name(p.index))]
        todo = sorted(missing, key=lambda p: (p.index % count != mine, p.index))
    if not todo:
        return root
    total = sum(p.size for p in todo)
    bar = ByteProgress(total, f"packing {len(todo)} of {len(partitions)} partitions ({job.mode}, {workers} "
                          f"worker{'s' if workers > 1 else ''})", progress)
    run_in_workers(partial(pack_partition, job, root=root), todo, workers, bar)
    return root


def run_in_workers(fn: Callable[..., Any], items: list, workers: int, bar: ByteProgress) -> list:
    """``fn(item, progress=report)`` for every item, in ``workers`` processes (or in this one for one worker or one
    item), ``report(n)`` advancing ``bar`` by ``n`` bytes; the results in the order of ``items``. A worker's error is
    raised here (a ``ConfigError`` keeps its one line)."""
    try:
        if workers == 1 or len(items) <= 1:
            bar.start()
            return [fn(item, progress=bar.advance) for item in items]
        import multiprocessing as mp

        # fork where the platform has it (as torch's DataLoader workers do): spawn would re-import a user's script
        context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        queue = context.Queue()
        with ProcessPoolExecutor(min(workers, len(items)), mp_context=context, initializer=_worker_init,
                                 initargs=(queue,)) as pool:
            futures = [pool.submit(_in_worker, fn, item) for item in items]  # forks every worker before the bar
            bar.start()
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                while not queue.empty():
                    bar.advance(queue.get())
                for future in done:
                    future.result()
            while not queue.empty():
                bar.advance(queue.get())
            return [f.result() for f in futures]
    finally:
        bar.close()


_QUEUE = None


def _worker_init(queue) -> None:  # noqa: ANN001
    global _QUEUE
    _QUEUE = queue
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one worker, one core


def _in_worker(fn: Callable[..., Any], item: Any) -> Any:
    pending = [0]

    def report(n: int) -> None:
        pending[0] += n
        if pending[0] >= 1 << 20:
            _QUEUE.put(pending[0])
            pending[0] = 0

    result = fn(item, progress=report)
    _QUEUE.put(pending[0])
    return result


def is_packed(directory: Path) -> bool:
    return read_meta(directory) is not None


def _remove_stale_tmp(root: Path) -> None:
    """Temporary shards left by killed processes of this machine (another machine's are left alone: it may run)."""
    host = socket.gethostname()
    for tmp in root.glob(".tmp-part-*"):
        parts = tmp.name.rsplit("-", 2)
        if len(parts) == 3 and parts[1] == host and parts[2].isdigit() and not process_alive(int(parts[2])):
            shutil.rmtree(tmp, ignore_errors=True)


def load_shards(root: Path) -> dict[str, ShardedBlocks]:
    """The train/validation blocks of a complete shard set, memory-mapped; a one-line error if parts are missing."""
    plan = json.loads((root / "plan.json").read_text())
    n = len(plan["partitions"])
    dirs = [root / shard_name(i) for i in range(n)]
    metas = [read_meta(d) for d in dirs]
    missing = [i for i, m in enumerate(metas) if m is None]
    if missing:
        raise ConfigError(f"data: {len(missing)} of {n} partitions of '{root}' are not packed yet (first: "
                          f"{shard_name(missing[0])}); run `python -m plm_lightning pack` for the missing node ranks")
    return {split: ShardedBlocks.open(dirs, split, [m["rows"][split] for m in metas]) for split in SPLITS}


def shard_statistics(root: Path) -> dict:
    """Totals over the packed partitions of a shard set: bytes, documents, rows and tokens per split."""
    totals: dict = {"partitions": 0, "bytes": 0}
    for directory in sorted(root.glob("part-*")):
        meta = read_meta(directory)
        if meta is None:
            continue
        totals["partitions"] += 1
        totals["bytes"] += meta["bytes"]
        for key in ("rows", "tokens", "documents"):
            for split, value in meta[key].items():
                totals.setdefault(key, {}).setdefault(split, 0)
                totals[key][split] += value
    return totals


def corpus_partitions(source: str | None, text_field: str, split: str,
                      partition_bytes: int = partition_files.DEFAULT_PARTITION_BYTES) -> tuple[list[Partition], str] | None:
    """The partitions of a corpus on disk (files, directories, globs, saved or named ``datasets``) and its
    fingerprint; None for the corpora built in memory (the embedded corpus, the knowledge world, Fake-English)."""
    if source in (None, "", sources.EMBEDDED) or source.startswith(sources.FAKE_PREFIX) or is_world_spec(source):
        return None
    if sources.is_saved_dataset(source):
        return partition_files.plan_dataset_partitions(source, text_field, split, partition_bytes)
    if Path(source).expanduser().exists() or glob.glob(os.path.expanduser(source)):
        files = sources.resolve_files(source)
        for f in files:
            if partition_files.file_kind(f) is None or partition_files.file_kind(f)[1] is None:
                sources._check_text_file(f)
        partitions = partition_files.plan_partitions(files, text_field, partition_bytes)
        if not partitions:
            raise ConfigError(f"data.source: '{source}' contains no text")
        return partitions, sources._file_fingerprint(files, text_field)
    if any(ch in source for ch in "*?") or source.endswith(sources.TEXT_SUFFIXES) or source.startswith((".", "~", "/")):
        sources.resolve_files(source)  # raises the missing-file error
    return partition_files.plan_dataset_partitions(source, text_field, split, partition_bytes)


__all__ = ["PackingJob", "is_validation", "load_shards", "pack_partition", "prepare_shards",
           "shard_statistics"]
