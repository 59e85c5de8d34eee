"""``export`` writes a model card (``README.md``) that huggingface_hub's own parser reads back with its metadata, and
whose text states what the checkpoint records: objective, corruption settings, steps, tokens, FLOPs, last losses."""

import pytest
import torch

from tests.conftest import ROOT, run_cli


@pytest.mark.slow
def test_export_writes_a_model_card_the_hub_parser_reads(tmp_path):
    from huggingface_hub import ModelCard

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--trainer.max_steps", "3",
                   "--trainer.log_every_n_steps", "1", "--data.seq_len", "64"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    res = run_cli(["export", str(ckpt), str(tmp_path / "hf"), "--license", "apache-2.0"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    assert card.data.license == "apache-2.0" and card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "text-generation"
    assert {"plm-lightning", "causallm", "gpt2"} <= set(card.data.tags)
    meta = torch.load(ckpt, weights_only=True)["plm_lightning"]
    assert meta["tokens_seen"] == 3 * 32 * 64 and meta["flops_seen"] > 0  # every real token of 3 full batches
    text = card.text
    assert f"| tokens seen (real tokens of the inputs, all ranks) | {meta['tokens_seen']} |" in text
    assert f"{meta['flops_seen']:.3e}" in text and "| optimizer steps | 3 |" in text
    assert "plm_lightning.objectives.CausalLM" in text and "| `packing` | `contiguous` |" in text
    assert "`train/loss`" in text  # the run's metrics.csv beside the checkpoint


def test_a_card_without_a_license_says_so_and_leaves_the_field_out(tmp_path):
    from huggingface_hub import ModelCard

    from plm_lightning.interop.model_card import model_card

    ckpt = {"global_step": 0, "plm_lightning": {"objective": "MaskedLM", "tokens_seen": 0},
            "hyper_parameters": {"_class_path": "plm_lightning.objectives.MaskedLM", "mask_prob": 0.15},
            "datamodule_hyper_parameters": {"source": "wikitext/wikitext-103-raw-v1", "masking_scheme": "span"}}
    path = tmp_path / "README.md"
    path.write_text(str(model_card(ckpt, tmp_path / "x.ckpt", "BertForMaskedLM", "bert")))
    card = ModelCard.load(path)
    assert card.data.license is None and card.data.datasets == ["wikitext/wikitext-103-raw-v1"]
    assert "not stated (export --license)" in card.text and "| `masking_scheme` | `span` |" in card.text
    assert "No `metrics.csv` was found" in card.text and "not counted" in card.text
