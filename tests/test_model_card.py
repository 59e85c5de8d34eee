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


def test_the_card_carries_the_scores_evaluate_wrote_beside_the_checkpoint(tmp_path):
    import json

    from huggingface_hub import ModelCard

    from plm_lightning.interop.model_card import model_card

    ckpt = {"global_step": 5, "plm_lightning": {"objective": "CausalLM", "tokens_seen": 10},
            "hyper_parameters": {}, "datamodule_hyper_parameters": {}}
    report = {"lm_eval_version": "0.4.13", "settings": {"num_fewshot": 0, "limit": None, "pll": None},
              "tasks": {"world_order": {"sample_len": 60, "acc,none": 0.95, "acc_stderr,none": 0.03},
                        "world_text": {"word_perplexity,none": 28.8, "bits_per_byte,none": 0.75}}}
    (tmp_path / "last.lm-eval.json").write_text(json.dumps(report))  # what `evaluate last.ckpt` writes
    path = tmp_path / "README.md"
    path.write_text(str(model_card(ckpt, tmp_path / "last.ckpt", "GPT2LMHeadModel", "gpt2")))
    card = ModelCard.load(path)
    results = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert results == {("world_order", "acc"): 0.95, ("world_text", "word_perplexity"): 28.8,
                       ("world_text", "bits_per_byte"): 0.75}
    assert card.data.model_name == "last" and "| world_order | acc | 0.9500 | 0.0300 |" in card.text
    assert "lm-eval 0.4.13: 0 shots" in card.text


def _exportable(tmp_path):
    from tests.conftest import tiny_pretrained

    return tiny_pretrained(tmp_path / "gpt2.ckpt", "gpt2")


def test_push_to_hub_creates_the_repository_and_uploads_the_export_in_one_commit(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from tests.conftest import cli_error, cli_output

    calls = []

    class Api:  # huggingface_hub's client, recorded instead of sent
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))

        def upload_folder(self, **kwargs):
            calls.append(("upload_folder", kwargs))
            return type("Commit", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    ckpt, out = _exportable(tmp_path), tmp_path / "hf"
    text = cli_output(["export", ckpt, str(out), "--push-to-hub", "me/tiny-gpt2", "--private"], capsys)
    assert "pushed to the Hub: https://huggingface.co/me/tiny-gpt2/commit/abc" in text
    assert calls[1] == ("create_repo", "me/tiny-gpt2", {"repo_type": "model", "private": True, "exist_ok": True})
    upload = calls[2][1]
    assert upload["repo_id"] == "me/tiny-gpt2" and upload["folder_path"] == str(out)
    assert {"config.json", "README.md", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    error = cli_error(["export", ckpt, str(tmp_path / "other"), "--push-to-hub", "me/bad name"], capsys)
    assert "'me/bad name' is not a Hub repository id" in error and not (tmp_path / "other").exists()


def test_push_to_hub_in_offline_mode_stops_at_the_network_with_one_line(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from tests.conftest import cli_error

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets at import
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    ckpt, out = _exportable(tmp_path), tmp_path / "hf"
    error = cli_error(["export", ckpt, str(out), "--push-to-hub", "me/tiny-gpt2"], capsys)
    assert "huggingface_hub is in offline mode (HF_HUB_OFFLINE), so nothing was sent" in error
    assert (out / "config.json").is_file()  # the export itself is kept
