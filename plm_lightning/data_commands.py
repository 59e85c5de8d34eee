"""The CLI's data commands: ``prepare`` (a corpus through the C4 filters, as JSONL), ``pack`` (a recipe's corpus
tokenized and packed into shards, on one machine or as one node's share) and ``optimize`` (a recipe's packed blocks
as litdata streams)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from plm_lightning.errors import CommandParser, ConfigError
from plm_lightning.files import writable_path


def run_prepare(argv: list[str]) -> None:
    from plm_lightning.corpus.c4_filters import STEPS, Cleaner, CleaningConfig
    from plm_lightning.corpus.sentences import SENTENCE_SPLITTERS

    parser = CommandParser(prog="plm_lightning prepare",
                           description="Clean a corpus with the C4 filters (T5 paper sec. 2.2) and write it as JSONL, with a "
                                       "report of what each step removed.")
    parser.add_argument("source", help="a data.source: .txt/.jsonl/.parquet files, a directory or glob of them, a "
                                       "saved Hugging Face dataset, or 'embedded'")
    parser.add_argument("out", help="the JSONL file to write, one {\"text\": page} per line (a data.source itself)")
    parser.add_argument("--steps", default=None,
                        help=f"comma-separated steps, run in order, of {', '.join(STEPS)}; default: all of them in "
                             "that order (bad_words only with --bad-words)")
    parser.add_argument("--bad-words", default=None, help="a UTF-8 file, one word or phrase per line")
    parser.add_argument("--min-words", type=int, default=5, help="fewest words a line keeps")
    parser.add_argument("--min-sentences", type=int, default=3, help="fewest sentences a page keeps")
    parser.add_argument("--language", default="en", help="the language a page must be in (ISO 639-1)")
    parser.add_argument("--language-threshold", type=float, default=0.99, help="its least langid probability")
    parser.add_argument("--dedup-span", type=int, default=3, help="sentences per deduplicated span")
    parser.add_argument("--sentence-splitter", default="pysbd", choices=SENTENCE_SPLITTERS,
                        help="what counts sentences and cuts the deduplicated spans: pysbd (rule-based, ~0.3 MB/s a "
                             "core) or blingfire (compiled, ~30x faster)")
    parser.add_argument("--text-field", default="text", help="the text column of .jsonl/.parquet/dataset sources")
    parser.add_argument("--report", default=None, help="also write the report as JSON to this file")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes for a corpus on disk (default: one per CPU core); any number gives the "
                             "same pages and report")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers={args.workers} must be >= 1")
    out = writable_path(args.out, "prepare: the output")
    if out.suffix != ".jsonl":
        raise ConfigError(f"prepare: the output '{args.out}' must be a .jsonl file")
    if args.steps is not None:
        steps = tuple(s.strip() for s in args.steps.split(",") if s.strip())
    else:
        steps = tuple(s for s in STEPS if s != "bad_words" or args.bad_words)
    config = CleaningConfig(steps=steps, min_words=args.min_words, min_sentences=args.min_sentences,
                            bad_words=args.bad_words, language=args.language,
                            language_threshold=args.language_threshold, dedup_span=args.dedup_span,
                            sentence_splitter=args.sentence_splitter)
    from plm_lightning.corpus.clean_partitions import clean_corpus
    from plm_lightning.corpus.pack_partitions import available_cores, corpus_partitions
    from plm_lightning.corpus.sources import load_documents
    from plm_lightning.files import atomic_write
    from plm_lightning.progress import progress_bar

    if out.exists() and not out.is_file():
        raise ConfigError(f"prepare: the output '{args.out}' exists and is not a file")
    out.parent.mkdir(parents=True, exist_ok=True)
    planned = corpus_partitions(args.source, args.text_field, "train")
    if planned is not None:  # a corpus on disk: streamed, partition by partition
        report = clean_corpus(planned[0], args.text_field, config, out, args.workers or available_cores())
        kept_pages = report.pages_out
    else:  # the embedded corpus, the knowledge world: built in memory anyway
        pages = load_documents(args.source, args.text_field)[0]
        cleaner = Cleaner(config)
        kept = list(cleaner.run(pages, progress_bar(len(pages), "cleaning pages")))
        atomic_write(out, lambda tmp: tmp.write_text("".join(json.dumps({"text": p}) + "\n" for p in kept),
                                                     encoding="utf-8"))
        report, kept_pages = cleaner.report, len(kept)
    if args.report:
        atomic_write(Path(args.report), lambda tmp: tmp.write_text(json.dumps(report.as_dict(), indent=1),
                                                                   encoding="utf-8"))
    print(report.table())
    print(f"wrote {kept_pages:,} pages to {out}")


def chunk_bytes(text: str) -> int:
    """``--chunk-bytes``: a byte count, plain or with litdata's units (``64MB``, ``1.5gb``), checked before any work
    (litdata would raise in its worker, after the corpus was tokenized)."""
    from litdata.utilities.format import _FORMAT_TO_RATIO, _convert_bytes_to_int

    value = text.strip()
    try:
        size = int(value) if value.isdigit() else _convert_bytes_to_int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise ConfigError(f"--chunk-bytes={text!r} must be a positive size: bytes, or a number with a unit of "
                          f"{', '.join(_FORMAT_TO_RATIO)} (e.g. 64MB)")
    return size


def run_optimize(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning optimize",
                           description="Write a recipe's packed blocks as litdata streams (train/ and val/ chunks, the "
                                       "tokenizer and how the blocks were packed) for `fit --data.streaming DIR`.")
    parser.add_argument("--config", action="append", help="recipe YAML (repeatable); --data.* overrides follow")
    parser.add_argument("out", help="the directory to write (upload it to an object store to stream from there)")
    parser.add_argument("--chunk-bytes", default="64MB", help="litdata chunk size (e.g. 64MB)")
    parser.add_argument("--workers", type=int, default=1, help="litdata worker processes")
    args, rest = parser.parse_known_args(argv)
    if not args.config:
        raise ConfigError("plm_lightning optimize: give --config RECIPE.yaml")
    if args.workers < 1:
        raise ConfigError(f"--workers={args.workers} must be >= 1")
    writable_path(args.out, "optimize: the output")
    chunk_bytes(args.chunk_bytes)
    from plm_lightning.corpus.streaming import write_streams
    from plm_lightning.recipe_cli import build_recipe as build_datamodule

    datamodule, _ = build_datamodule(args.config, rest)
    if datamodule.streaming is not None or "train" not in datamodule.blocks:
        raise ConfigError("plm_lightning optimize: the recipe must read data.source (not data.streaming) and pack "
                          "one kind of block")
    meta = {"packing": datamodule.packing, "length": datamodule.packed_length(), "seed": datamodule.seed,
            "source": datamodule.source or "embedded", "datamodule": type(datamodule).__name__}
    counts = write_streams(datamodule.blocks, Path(args.out), meta, datamodule.tokenizer.file, args.chunk_bytes,
                           args.workers)
    print(f"wrote {counts.get('train', 0):,} training and {counts.get('val', 0):,} validation blocks of "
          f"{meta['length']} tokens to {args.out}")


def run_pack(argv: list[str]) -> None:
    parser = CommandParser(prog="plm_lightning pack",
                           description="Tokenize and pack a recipe's corpus on disk into shards now, as `fit` does "
                                       "before its first step: in worker processes, resumable, on one machine or as "
                                       "one node's share of many (docs/multi-node.md). `fit` with the same recipe "
                                       "then trains from the shards.")
    parser.add_argument("--config", action="append", help="recipe YAML (repeatable); --data.* overrides follow")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: data.preparation_workers, else one per CPU core)")
    parser.add_argument("--num-nodes", type=int, default=1, help="machines sharing the work (default 1)")
    parser.add_argument("--node-rank", type=int, default=0,
                        help="this machine's rank in [0, num-nodes): it packs partitions i with i %% num-nodes == rank")
    parser.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    args, rest = parser.parse_known_args(argv)
    if not args.config:
        raise ConfigError("plm_lightning pack: give --config RECIPE.yaml (and --data.source FILES)")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers={args.workers} must be >= 1")
    from plm_lightning.corpus.pack_partitions import shard_statistics
    from plm_lightning.recipe_cli import build_recipe as build_datamodule

    datamodule, _ = build_datamodule(args.config, rest, prepare=False)
    if args.workers is not None:
        datamodule.preparation_workers = args.workers
    start = time.monotonic()
    roots = datamodule.prepare_corpora((args.num_nodes, args.node_rank))
    if not roots:
        raise ConfigError("plm_lightning pack: data.source must be files, a directory, a glob or a dataset on disk "
                          f"(got {datamodule.source or 'embedded'!r}; the embedded corpus, the knowledge world, "
                          "data.max_documents and ERNIE's knowledge units are packed in memory by fit itself)")
    stats: dict = {"partitions": 0, "total_partitions": 0, "bytes": 0, "rows": {}, "tokens": {}, "documents": {}}
    for root in roots:
        part = shard_statistics(root)
        stats["partitions"] += part["partitions"]
        stats["bytes"] += part["bytes"]
        stats["total_partitions"] += len(json.loads((root / "plan.json").read_text())["partitions"])
        for key in ("rows", "tokens", "documents"):
            for split, value in part.get(key, {}).items():
                stats[key][split] = stats[key].get(split, 0) + value
    stats.update(seconds=time.monotonic() - start, workers=datamodule.preparation_workers,
                 directory=str(roots[0]), directories=[str(r) for r in roots])
    if args.json:
        print(json.dumps(stats))
        return
    rows, tokens = stats["rows"], stats["tokens"]
    print(f"packed {stats['partitions']} of {stats['total_partitions']} partitions ({stats['bytes'] / 1e6:,.1f} MB "
          f"of text) into {rows.get('train', 0):,} training and {rows.get('val', 0):,} validation blocks "
          f"({sum(tokens.values()):,} tokens) in {', '.join(stats['directories'])}")
    if stats["partitions"] < stats["total_partitions"]:
        print(f"{stats['total_partitions'] - stats['partitions']} partitions are other nodes' share: run `pack` with "
              "their --node-rank, then `fit` finds every shard")
