"""litdata streaming: packed blocks written with ``litdata.optimize`` stream back exactly, several corpora mix by
weight, and a run that streams its data resumes mid-epoch at the same sample (CLI: ``optimize``, then
``fit --data.streaming``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plm_lightning.corpus.blocks import PackedBlocks
from plm_lightning.data.datamodule import BlockDataset
from tests.conftest import ROOT, run_cli
from tests.test_cli import _train_losses

pytest.importorskip("litdata")

from plm_lightning.corpus.streaming import streaming_dataset, write_streams  # noqa: E402


def _blocks(n: int, length: int, seed: int) -> PackedBlocks:
    rng = np.random.default_rng(seed)
    return PackedBlocks(input_ids=rng.integers(0, 5000, (n, length)).astype(np.int32),
                        document_ids=np.sort(rng.integers(-1, 3, (n, length)), axis=1).astype(np.int16),
                        segment_b_start=rng.integers(1, length, n).astype(np.int32),
                        sentence_label=rng.integers(0, 2, n).astype(np.int8),
                        word_starts=rng.random((n, length)) < 0.7)


def _write(tmp_path, name: str, train: PackedBlocks, val: PackedBlocks | None = None) -> str:
    out = tmp_path / name
    splits = {"train": train} if val is None else {"train": train, "val": val}
    counts = write_streams(splits, out, {"packing": "sentence_pairs", "length": train.input_ids.shape[1]}, None,
                           chunk_bytes="8KB", blocks_per_item=40)
    assert counts == {split: len(b) for split, b in splits.items()}
    return str(out)


def test_streamed_blocks_are_the_packed_blocks_field_by_field(tmp_path):
    blocks = _blocks(150, 24, seed=0)
    uri = _write(tmp_path, "corpus", blocks, _blocks(7, 24, seed=1))
    streamed = streaming_dataset([uri], "train", shuffle=False, seed=0)
    local = BlockDataset(blocks)
    assert len(streamed) == len(local) == 150
    for i in range(len(streamed)):
        got, want = streamed[i], local[i]
        # ``position`` (a sample's place in the epoch's global order, which UniLM's per-global-batch LM reads) is
        # known to the map-style sampler only; a stream's order is litdata's, per worker
        assert want.pop("position") == i and "position" not in got
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, np.ndarray):
                assert got[key].dtype == value.dtype and np.array_equal(got[key], value), (i, key)
            else:
                assert got[key] == value, (i, key)
    samples = list(streaming_dataset([uri], "train", shuffle=True, seed=3))
    shuffled = [s["index"] for s in samples]
    assert sorted(shuffled) == list(range(150)) and shuffled != list(range(150))
    assert [s["progress"] for s in samples] == [i / 150 for i in range(150)]  # position in the epoch, as locally
    assert len(streaming_dataset([uri], "val", shuffle=False, seed=0)) == 7


def test_weighted_mixture_draws_each_corpus_by_its_weight_with_distinct_indices(tmp_path):
    a = _write(tmp_path, "a", _blocks(400, 8, seed=2))
    b = _write(tmp_path, "b", _blocks(400, 8, seed=3))
    mixture = streaming_dataset([a, b], "train", shuffle=True, seed=0, weights=[0.8, 0.2])
    indices = np.array([s["index"] for _, s in zip(range(300), mixture)])
    share_a = float((indices < 400).mean())  # corpus b's indices are offset by corpus a's 400 blocks
    assert 0.7 < share_a < 0.9, share_a
    assert len(set(indices.tolist())) == len(indices)


@pytest.mark.slow
def test_optimize_then_fit_on_streams_resumes_mid_epoch_at_the_same_sample(tmp_path):
    """``optimize`` the GPT-2 recipe's blocks, train 8 steps on the stream with a checkpoint at step 4, then resume
    from that checkpoint: steps 5..8 repeat the uninterrupted run's losses (a resumed loader that started its epoch
    over would feed other samples). The same 8 steps under tensor parallelism (2 processes, one data-parallel rank)
    repeat them too; a resume from step 4 under DDP (2 data-parallel ranks) is refused."""
    config = str(ROOT / "configs" / "gpt2.yaml")
    res = run_cli(["optimize", "--config", config, str(tmp_path / "streams"), "--data.seq_len", "64",
                   "--data.max_documents", "400"], cwd=tmp_path, fresh=True)
    assert res.returncode == 0, res.stderr[-3000:]
    meta = json.loads((tmp_path / "streams" / "plm_lightning.json").read_text())
    assert meta["packing"] == "contiguous" and meta["length"] == 64 and meta["blocks"]["train"] > 64
    (tmp_path / "every4.yaml").write_text(
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "      init_args: {every_n_train_steps: 4, save_top_k: -1}\n")
    common = ["fit", "--config", config, "--config", str(tmp_path / "every4.yaml"), "--data.streaming",
              f"[{tmp_path / 'streams'}]", "--data.seq_len", "64", "--data.batch_size", "4", "--trainer.max_steps",
              "8", "--trainer.limit_val_batches", "0", "--trainer.log_every_n_steps", "1", "--model.backbone_overrides",
              "{dropout: 0.0, attention_dropout: 0.0}"]
    for run in ("whole", "resumed"):
        (tmp_path / run).mkdir()
    res = run_cli(common, cwd=tmp_path / "whole")
    assert res.returncode == 0, res.stderr[-3000:]
    (step4,) = [p for p in (tmp_path / "whole").rglob("*.ckpt") if "step=4" in p.name]
    res = run_cli([*common, "--ckpt_path", str(step4)], cwd=tmp_path / "resumed")
    assert res.returncode == 0, res.stderr[-3000:]
    whole, resumed = _train_losses(tmp_path / "whole"), _train_losses(tmp_path / "resumed")
    assert len(whole) == 8 and len(resumed) == 4
    assert np.allclose(whole[4:], resumed, atol=1e-4), (whole, resumed)

    # tensor parallelism over 2 processes: both ranks of the group read the one data-parallel rank's samples
    tp = ["--config", str(ROOT / "configs" / "strategy" / "tp.yaml")]
    (tmp_path / "tp").mkdir()
    res = run_cli([*common, *tp, "--model.backbone_overrides", "{dropout: 0.0, attention_dropout: 0.0}"],
                  cwd=tmp_path / "tp")
    assert res.returncode == 0, res.stderr[-3000:]
    split = _train_losses(tmp_path / "tp")
    assert len(split) == 8 and np.allclose(whole, split, atol=1e-4), (whole, split)

    # another number of data-parallel ranks cannot take the saved stream position: one line, no traceback
    (tmp_path / "ddp").mkdir()
    res = run_cli([*common, "--config", str(ROOT / "configs" / "strategy" / "ddp.yaml"), "--ckpt_path", str(step4)],
                  cwd=tmp_path / "ddp")
    assert res.returncode != 0 and "saved by 1 data-parallel ranks, this run has 2" in res.stderr, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]


def test_streaming_errors_name_the_key(tmp_path):
    config = str(ROOT / "configs" / "gpt2.yaml")
    cases = {
        ("--data.streaming", f"[{tmp_path / 'nowhere'}]"): "holds no litdata train split",
        ("--data.streaming", "[a, b]", "--data.streaming_weights", "[1.0]"): "has 1 values for 2",
        ("--data.streaming_weights", "[1.0]"): "needs data.streaming",
    }
    for args, message in cases.items():
        res = run_cli(["fit", "--config", config, *args, "--trainer.max_steps", "1"], cwd=tmp_path)
        assert res.returncode != 0 and message in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
