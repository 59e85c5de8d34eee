"""Corpus preparation under faults: a packing SIGKILLed while a shard is written, just before or after a shard is
renamed into place, or between partitions, then run again, gives shards identical by content to an uninterrupted
run, and leaves no temporary file behind; a truncated or altered shard file is found (size, modification time and
checksum recorded when the shard completed) and repacked with one warning; two packings of the same corpus into the
same cache at once end with one intact shard set."""

import hashlib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from plm_lightning.corpus import pack_partitions as corpus_packing
from plm_lightning.corpus.pack_partitions import PackingJob, corpus_partitions, load_shards, prepare_shards
from plm_lightning.corpus.shards import META_FILE, NpyAppender
from plm_lightning.corpus.sources import embedded_corpus
from plm_lightning.corpus.tokenizer import train_tokenizer
from tests.conftest import ROOT

PARTITION_BYTES = 30_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """80 documents of the embedded corpus as JSON lines (several partitions) and a GPT-2 tokenizer trained on them."""
    root = tmp_path_factory.mktemp("faults")
    docs = list(embedded_corpus())[:80]
    path = root / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    train_tokenizer("gpt2", docs, 1200).save(root / "tok")
    return {"path": str(path), "tokenizer": str(root / "tok" / "tokenizer.json")}


def _prepare(corpus: dict[str, str], cache: Path, workers: int = 1) -> Path:
    partitions, fingerprint = corpus_partitions(corpus["path"], "text", "train", partition_bytes=PARTITION_BYTES)
    assert len(partitions) >= 4
    job = PackingJob(corpus["tokenizer"], "contiguous", 64, 0.1, seed=3)
    return prepare_shards(job, partitions, fingerprint, cache, workers, progress=False)


def _contents(root: Path) -> dict[str, str]:
    """SHA-256 of every shard file (metadata aside: it records modification times)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.npy"))}


def _leftovers(cache: Path) -> list[str]:
    return [str(p) for p in cache.rglob("*") if p.name.startswith(".tmp") or ".tmp" in p.name]


def _killed_preparation(corpus: dict[str, str], cache: str, point: str) -> None:
    """Runs in a child process: packs, and SIGKILLs itself at ``point``."""
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    calls = {"n": 0}
    if point == "writing a shard":
        append = NpyAppender.append

        def dying_append(self, rows):  # noqa: ANN001, ANN202
            calls["n"] += 1
            if calls["n"] == 40:  # in the second or third partition, part of its rows written
                die()
            return append(self, rows)

        NpyAppender.append = dying_append
    elif point in ("before a rename", "after a rename"):
        replace = os.replace

        def dying_replace(src, dst):  # noqa: ANN001, ANN202
            if Path(str(dst)).name == "part-00002":
                if point == "before a rename":
                    die()
                replace(src, dst)
                die()
            return replace(src, dst)

        corpus_packing.os.replace = dying_replace
    elif point == "between partitions":
        pack = corpus_packing.pack_partition

        def dying_pack(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = pack(*args, **kwargs)
            calls["n"] += 1
            if calls["n"] == 2:
                die()
            return out

        corpus_packing.pack_partition = dying_pack
    _prepare(corpus, Path(cache))


@pytest.fixture(scope="module")
def reference(corpus: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("reference")
    contents = _contents(_prepare(corpus, cache))
    assert not _leftovers(cache)
    return contents


@pytest.mark.slow
@pytest.mark.parametrize("point", ["writing a shard", "before a rename", "after a rename", "between partitions"])
def test_killed_packing_then_rerun_gives_the_uninterrupted_shards(point, corpus, reference, tmp_path):
    child = mp.get_context("spawn").Process(target=_killed_preparation, args=(corpus, str(tmp_path), point))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL, child.exitcode
    roots = list((tmp_path / "shards").iterdir())
    assert len(roots) == 1
    finished_before = sorted(p.name for p in roots[0].glob("part-*"))
    assert len(finished_before) < len({name.split('/')[0] for name in reference})  # partitions were left to pack
    if point != "between partitions":
        assert _leftovers(tmp_path) or point == "after a rename", point  # a partial shard was left behind
    root = _prepare(corpus, tmp_path)
    assert _contents(root) == reference
    assert not _leftovers(tmp_path)
    assert all(len(v) > 0 for v in load_shards(root).values())


def _one_warning(corpus: dict[str, str], cache: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _prepare(corpus, cache)
    return [str(w.message) for w in caught]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["truncated", "altered", "removed"])
def test_a_damaged_shard_file_is_found_and_repacked_with_one_warning(fault, corpus, reference, tmp_path):
    root = _prepare(corpus, tmp_path)
    victim = root / "part-00001" / "train.input_ids.npy"
    data = victim.read_bytes()
    if fault == "truncated":
        victim.write_bytes(data[: len(data) - 7])
    elif fault == "altered":  # same size: only the checksum can tell
        flipped = bytearray(data)
        flipped[-3] ^= 0x01
        victim.write_bytes(bytes(flipped))
    else:
        victim.unlink()
    messages = _one_warning(corpus, tmp_path)
    assert len(messages) == 1, messages
    assert "part-00001" in messages[0] and "train.input_ids.npy" in messages[0] and "rebuilding" in messages[0]
    assert "\n" not in messages[0]
    assert _contents(root) == reference
    assert _one_warning(corpus, tmp_path) == []  # repaired: nothing to say the next time


@pytest.mark.slow
def test_an_untouched_shard_set_is_checked_without_reading_it(corpus, tmp_path, monkeypatch):
    """A file with its recorded size and modification time is taken as it is (one stat per file); only a file
    touched since is read for its checksum."""
    from plm_lightning.corpus import shards

    root = _prepare(corpus, tmp_path)
    read = []
    monkeypatch.setattr(shards, "file_digest", lambda path, *a: read.append(path) or "")
    _prepare(corpus, tmp_path)
    assert read == []
    victim = root / "part-00000" / "val.input_ids.npy"
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 10**9))
    monkeypatch.undo()
    assert _one_warning(corpus, tmp_path) == []  # touched, same bytes: the checksum says so
    meta = json.loads((root / "part-00000" / META_FILE).read_text())
    assert set(meta["files"]["val.input_ids.npy"]) == {"size", "mtime_ns", "blake2b"}


@pytest.mark.slow
def test_two_pack_commands_on_one_cache_at_once_end_with_one_intact_shard_set(corpus, tmp_path):
    cache = tmp_path / "cache"
    args = [sys.executable, "-m", "plm_lightning", "pack", "--config", str(ROOT / "configs" / "gpt2.yaml"),
            "--data.source", corpus["path"], "--data.partition_bytes", str(PARTITION_BYTES), "--data.seq_len", "64",
            "--data.cache_dir", str(cache), "--workers", "2"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    runs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (_, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-3000:]
        assert "Traceback" not in err
    (root,) = (cache / "shards").iterdir()
    plan = json.loads((root / "plan.json").read_text())
    assert sorted(p.name for p in root.glob("part-*")) == [f"part-{i:05d}" for i in range(len(plan["partitions"]))]
    assert not _leftovers(cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # intact: reading it back warns of nothing
        blocks = load_shards(root)
    assert len(blocks["train"]) > 0
