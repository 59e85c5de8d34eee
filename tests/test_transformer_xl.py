"""Transformer-XL: ordered segment streams, memory carried between batches, and on one trained model a validation
perplexity with memory lower than without (evaluation-time memory length from the command line)."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.sampling import SegmentStreamSampler
from plm_lightning.objectives import CausalLM
from tests.conftest import ROOT, run_cli


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 200), st.integers(1, 8), st.sampled_from([1, 2, 3]))
def test_each_row_continues_the_same_stream_in_the_next_batch(blocks, batch, replicas):
    if blocks < batch * replicas:
        with pytest.raises(ValueError, match="streams"):
            SegmentStreamSampler(blocks, batch, replicas, 0)
        return
    seen = []
    for rank in range(replicas):
        keys = [k[1] for k in SegmentStreamSampler(blocks, batch, replicas, rank)]
        rows = np.array(keys).reshape(-1, batch)  # this rank's batches
        assert (np.diff(rows, axis=0) == 1).all()  # row b of batch t + 1 is the block after row b of batch t
        seen.extend(keys)
    assert len(seen) == len(set(seen)) == (blocks // (batch * replicas)) * batch * replicas  # every stream once


def test_memory_is_carried_within_a_stage_and_dropped_at_a_new_epoch():
    torch.manual_seed(0)
    model = CausalLM(backbone="tiny-transformer-xl", vocab_size=97,
                     backbone_overrides={"dropout": 0.0, "attention_dropout": 0.0, "ffn_dropout": 0.0})
    batch = {"input_ids": torch.randint(0, 97, (2, 8)), "labels": torch.randint(0, 97, (2, 8))}
    model.train()
    first = model(**batch)["loss"]
    assert model.memory["train"][0].shape == (2, 8, 64)
    second = model(**batch)["loss"]  # the same tokens, now with the first as memory
    assert not torch.allclose(first, second)
    model.on_train_epoch_start()
    assert torch.allclose(model(**batch)["loss"], first)  # a new epoch: the streams start again, no memory


@pytest.mark.slow
def test_validation_perplexity_with_memory_is_lower_than_without(tmp_path):
    config = str(ROOT / "configs" / "transformer-xl.yaml")
    small = ["--data.seq_len", "32", "--model.backbone_overrides", "{mem_len: 32}", "--trainer.limit_val_batches", "8"]
    res = run_cli(["fit", "--config", config, *small, "--trainer.max_steps", "400", "--trainer.val_check_interval", "400",
                   "--trainer.log_every_n_steps", "50"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    perplexity = {}
    for memory in ("0", "32"):
        out = run_cli(["validate", "--config", config, *small, "--ckpt_path", str(ckpt), "--model.eval_mem_len", memory],
                      cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        perplexity[memory] = float(re.search(r"val/perplexity\W+([0-9.]+)", out.stdout).group(1))
    assert perplexity["32"] < perplexity["0"] * 0.99, perplexity


@pytest.mark.parametrize("args,needles", [
    (["--model.eval_mem_len", "-2"], ["model.eval_mem_len=-2 must be >= 0"]),
    (["--data.batch_size", "100000"], ["data.batch_size=100000 streams"]),
])
def test_transformer_xl_bad_input_is_one_line(args, needles, tmp_path):
    from tests.test_cli import _one_line_error

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "transformer-xl.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)
