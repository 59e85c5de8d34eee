"""Corpus preparation at scale: wall time, MB/s per worker, peak memory of all processes together and tokens written,
for recipes x corpus sizes x worker counts, beside ``tokenizers``' own ``encode_batch`` and a nanoGPT-style
``datasets.map(num_proc)`` + memmap preparation of the same corpus, in one run.

    python benchmarks/corpus_preparation.py --sizes 100MB,1GB,3GB --recipes gpt2,t5 --workers 1,2
    python benchmarks/corpus_preparation.py --sizes 100MB --recipes bert --workers 2 --no-baseline
    python benchmarks/corpus_preparation.py --sizes 100MB,1GB,3GB --recipes bert --sentence-splitters pysbd,blingfire
    python benchmarks/corpus_preparation.py --sizes 100MB,1GB,3GB --recipes gpt2 --baseline-up-to 1GB

The corpus is synthetic, written from the embedded corpus (no download): its documents over and over, each pass
shuffled and numbered, as JSON lines. Every measured step is a separate process (``python -m plm_lightning pack``
and the baselines) with ``RAYON_NUM_THREADS=1``, so a worker is one core; memory is the peak over time of the summed
RSS of the process and its children, sampled from /proc every 0.25 s (pages a forked worker shares with its parent
counted in each: an upper bound), and the summed PSS beside it (shared pages split between the processes).
Results print as JSON lines, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"gpt2": "gpt2", "bert": "bert", "t5": "t5"}
SENTENCE_RECIPES = {"bert"}
"""Recipes whose packing reads sentences: measured once per ``--sentence-splitters`` entry."""


def parse_size(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def write_corpus(path: Path, size: int) -> None:
    """``size`` bytes of JSON lines from the embedded corpus, each pass in another order and numbered."""
    if path.is_file() and path.stat().st_size >= size:
        return
    from plm_lightning.corpus.sources import embedded_corpus

    docs = list(embedded_corpus())
    rng = random.Random(0)
    written, copy = 0, 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        while written < size:
            rng.shuffle(docs)
            for doc in docs:
                line = json.dumps({"text": f"(copy {copy}) {doc}"}) + "\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                if written >= size:
                    break
            copy += 1
    tmp.replace(path)


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from each process's ``/proc/PID/task/*/children`` (cheap: the sampler
    must not take CPU from the workers it measures)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in bytes: PSS shares the pages a forked worker shares with its parent."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``cmd``; its wall time, peak summed RSS of its process tree, and its stdout."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, cwd=ROOT)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        sizes = [_memory(p) for p in _descendants(proc.pid)]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_pss = max(peak_pss, sum(p for _, p in sizes))
        time.sleep(0.25)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return {"seconds": time.monotonic() - start, "peak_rss_mb": peak_rss / 2**20, "peak_pss_mb": peak_pss / 2**20,
            "stdout": out}


def train_tokenizer(recipe: str, corpus: Path, out: Path) -> dict:
    """The recipe's tokenizer, trained on the recipe's bounded sample of ``corpus`` (timed in a child process)."""
    code = f"""
import json, time
from plm_lightning.inspection import build_datamodule
dm, _ = build_datamodule([{str(ROOT / 'configs' / f'{recipe}.yaml')!r}], ['--data.source', {str(corpus)!r},
                         '--data.cache_dir', {str(out / 'cache')!r}], prepare=False)
t = time.monotonic()
tok = dm.tokenizer
print(json.dumps({{"file": tok.file, "vocab": tok.vocab_size, "train_seconds": time.monotonic() - t}}))
"""
    result = measure([sys.executable, "-c", code])
    return {**json.loads(result["stdout"].strip().splitlines()[-1]), "peak_rss_mb": result["peak_rss_mb"]}


def encode_batch_reference(tokenizer: str, corpus: Path, sample_bytes: int) -> dict:
    """``tokenizers``' ``encode_batch`` (and ``.ids``) alone on the first ``sample_bytes`` of the corpus, one core."""
    code = f"""
import json, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file({tokenizer!r})
docs, size = [], 0
with open({str(corpus)!r}, encoding="utf-8") as f:
    for line in f:
        docs.append(json.loads(line)["text"]); size += len(docs[-1].encode())
        if size >= {sample_bytes}: break
batches, batch, n = [], [], 0
for d in docs:
    batch.append(d); n += len(d)
    if n >= 1 << 20: batches.append(batch); batch, n = [], 0
batches.append(batch)
t = time.monotonic()
tokens = sum(len(e.ids) for b in batches for e in tok.encode_batch(b, add_special_tokens=False))
dt = time.monotonic() - t
print(json.dumps({{"mb_per_s": size / dt / 1e6, "tokens": tokens, "bytes": size}}))
"""
    result = measure([sys.executable, "-c", code], {"RAYON_NUM_THREADS": "1"})
    return json.loads(result["stdout"].strip().splitlines()[-1])


def pack(recipe: str, corpus: Path, tokenizer: str, workers: int, cache: Path, splitter: str = "pysbd") -> dict:
    cmd = [sys.executable, "-m", "plm_lightning", "pack", "--config", str(ROOT / "configs" / f"{recipe}.yaml"),
           "--data.source", str(corpus), "--data.tokenizer", tokenizer, "--data.cache_dir", str(cache),
           "--data.sentence_splitter", splitter, "--workers", str(workers), "--json"]
    result = measure(cmd, {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    stats = json.loads(result["stdout"].strip().splitlines()[-1])
    return {"seconds": result["seconds"], "packing_seconds": stats["seconds"],  # without the command's start-up
            "peak_rss_mb": result["peak_rss_mb"], "peak_pss_mb": result["peak_pss_mb"],
            "tokens": sum(stats["tokens"].values()),
            "rows": stats["rows"], "partitions": stats["partitions"], "directory": stats["directory"]}


def nanogpt_baseline(tokenizer: str, corpus: Path, workers: int, work: Path) -> dict:
    """nanoGPT's data/openwebtext/prepare.py on this corpus: ``datasets.map(num_proc)`` then a memmap token file."""
    code = f"""
import json, numpy as np
from datasets import load_dataset
from tokenizers import Tokenizer
tok = Tokenizer.from_file({tokenizer!r})
eos = tok.token_to_id("<|endoftext|>")
ds = load_dataset("json", data_files={str(corpus)!r}, split="train", cache_dir={str(work / 'hf')!r})
def process(batch):
    ids = [e.ids + [eos] for e in tok.encode_batch(batch["text"], add_special_tokens=False)]
    return {{"ids": ids, "len": [len(i) for i in ids]}}
ds = ds.map(process, batched=True, remove_columns=["text"], num_proc={workers} if {workers} > 1 else None)
total = int(np.sum(ds["len"], dtype=np.uint64))
arr = np.memmap({str(work / 'train.bin')!r}, dtype=np.uint16, mode="w+", shape=(total,))
idx = 0
for shard in range(64):
    part = ds.shard(num_shards=64, index=shard, contiguous=True).with_format("numpy")
    chunk = np.concatenate(part["ids"]) if len(part) else np.zeros(0, np.uint16)
    arr[idx: idx + len(chunk)] = chunk
    idx += len(chunk)
arr.flush()
print(json.dumps({{"tokens": total}}))
"""
    result = measure([sys.executable, "-c", code], {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                                                    "HF_DATASETS_CACHE": str(work / "hf")})
    return {"seconds": result["seconds"], "peak_rss_mb": result["peak_rss_mb"], "peak_pss_mb": result["peak_pss_mb"],
            "tokens": json.loads(result["stdout"].strip().splitlines()[-1])["tokens"]}


def training_rss(recipe: str, corpus: Path, tokenizer: str, cache: Path, batches: int, splitter: str = "pysbd") -> dict:
    """Peak RSS of a process that opens the packed shards and reads ``batches`` training batches (random order)."""
    code = f"""
import json, resource
from plm_lightning.inspection import build_datamodule
dm, _ = build_datamodule([{str(ROOT / 'configs' / f'{recipe}.yaml')!r}], ['--data.source', {str(corpus)!r},
    '--data.tokenizer', {tokenizer!r}, '--data.cache_dir', {str(cache)!r}, '--data.num_workers', '0',
    '--data.sentence_splitter', {splitter!r}])
loader = dm.train_dataloader()
for i, batch in enumerate(loader):
    if i + 1 >= {batches}: break
print(json.dumps({{"blocks": len(dm.blocks["train"]), "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
    result = measure([sys.executable, "-c", code])
    return json.loads(result["stdout"].strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100MB,1GB,3GB")
    parser.add_argument("--recipes", default="gpt2,bert,t5")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "corpus-bench"))
    parser.add_argument("--no-baseline", action="store_true", help="skip the nanoGPT-style datasets.map baseline")
    parser.add_argument("--train-batches", type=int, default=200, help="batches read by the training-RSS check")
    parser.add_argument("--keep", action="store_true", help="keep the shards (default: removed after each run)")
    parser.add_argument("--all-workers-up-to", default="1GB",
                        help="larger corpora run with the largest --workers count only")
    parser.add_argument("--baseline-up-to", default="3GB",
                        help="the nanoGPT baseline runs on corpora up to this size only (it takes ~8 min a GB)")
    parser.add_argument("--sentence-splitters", default="pysbd",
                        help="data.sentence_splitter values the sentence-level recipes (bert) are measured with")
    parser.add_argument("--pysbd-up-to", default="100MB",
                        help="pysbd (~0.3 MB/s a core) runs on corpora up to this size only; the others on all")
    args = parser.parse_args()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    results = []

    def emit(row: dict) -> None:
        results.append(row)
        print(json.dumps(row), flush=True)

    corpora = {}
    for size in sizes:
        corpora[size] = work / f"corpus-{size // 10**6}MB.jsonl"
        write_corpus(corpora[size], size)
    for recipe in args.recipes.split(","):
        tok = train_tokenizer(recipe, corpora[max(sizes)], work / f"tok-{recipe}")
        emit({"recipe": recipe, "step": "tokenizer", **tok})
        splitters = args.sentence_splitters.split(",") if recipe in SENTENCE_RECIPES else ["pysbd"]
        for size, splitter in ((size, sp) for size in sizes for sp in splitters):
            if recipe in SENTENCE_RECIPES and splitter == "pysbd" and size > parse_size(args.pysbd_up_to):
                continue
            for w in workers if size <= parse_size(args.all_workers_up_to) else workers[-1:]:
                # the reference right before each run: a shared machine's speed drifts over an hour
                ref = encode_batch_reference(tok["file"], corpora[min(sizes)], 32 * 10**6)
                emit({"recipe": recipe, "step": "encode_batch", **ref})
                cache = work / f"cache-{recipe}-{size}-{w}"
                row = pack(recipe, corpora[size], tok["file"], w, cache, splitter)
                mb_s, packing = size / row["seconds"] / 1e6, size / row["packing_seconds"] / 1e6
                # whole command (with its start-up: Python, torch, the recipe's config) and the packing phase alone
                emit({"recipe": recipe, "step": "pack", "splitter": splitter if recipe in SENTENCE_RECIPES else "",
                      "size_mb": size / 1e6, "workers": w,
                      "mb_per_s": mb_s, "mb_per_s_per_worker": mb_s / w,
                      "of_encode_batch": mb_s / w / ref["mb_per_s"],
                      "packing_mb_per_s_per_worker": packing / w,
                      "packing_of_encode_batch": packing / w / ref["mb_per_s"], **row})
                if w == max(workers):
                    emit({"recipe": recipe, "step": "training_rss", "size_mb": size / 1e6,
                          **training_rss(recipe, corpora[size], tok["file"], cache, args.train_batches, splitter)})
                if not args.keep:
                    subprocess.run(["rm", "-rf", str(cache)], check=False)
            if recipe == "gpt2" and not args.no_baseline and size <= parse_size(args.baseline_up_to) \
                    and splitter == splitters[0]:
                w = max(workers)
                base = work / f"nanogpt-{size}-{w}"
                row = nanogpt_baseline(tok["file"], corpora[size], w, base)
                emit({"recipe": recipe, "step": "nanogpt_datasets_map", "size_mb": size / 1e6, "workers": w,
                      "mb_per_s": size / row["seconds"] / 1e6, **row})
                subprocess.run(["rm", "-rf", str(base)], check=False)
    print("\nrecipe splitter  step                  size_MB workers   seconds   MB/s  MB/s/worker  of_encode  "
          "packing_s  packing_MB/s/worker  packing_of_encode  peak_RSS_MB  peak_PSS_MB  tokens")
    for r in results:
        if r["step"] in ("pack", "nanogpt_datasets_map"):
            print(f"{r['recipe']:6} {r.get('splitter', ''):9} {r['step']:21} "
                  f"{r['size_mb']:8.0f} {r['workers']:7} {r['seconds']:9.1f} "
                  f"{r['mb_per_s']:6.2f} {r.get('mb_per_s_per_worker', float('nan')):12.2f} "
                  f"{r.get('of_encode_batch', float('nan')):10.2f} {r.get('packing_seconds', float('nan')):10.1f} "
                  f"{r.get('packing_mb_per_s_per_worker', float('nan')):20.2f} "
                  f"{r.get('packing_of_encode_batch', float('nan')):18.2f} {r['peak_rss_mb']:12.0f} "
                  f"{r.get('peak_pss_mb', float('nan')):12.0f}  {r['tokens']:,}")


if __name__ == "__main__":
    main()
