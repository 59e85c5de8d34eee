"""Text-to-text fine-tuning (T5): labels as words and rounded scores, T5's mixing rates, a tiny T5 that learns its
targets, and a fine-tuned T5 exported as T5ForConditionalGeneration with the same logits."""

import pytest
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.finetune import TextToText, TextToTextDataModule, mixing_rates
from plm_lightning.finetune.text_to_text_data import round_score
from plm_lightning.interop.io import export_checkpoint
from tests.conftest import tiny_pretrained


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return tiny_pretrained(tmp_path_factory.mktemp("pretrained") / "t5.ckpt", "t5")


def test_mixing_rates_are_t5s():
    sizes = {"a": 1000, "b": 100, "c": 10}
    rates = mixing_rates(sizes, "examples_proportional", None, 1.0)
    assert rates == pytest.approx({"a": 1000 / 1110, "b": 100 / 1110, "c": 10 / 1110})
    capped = mixing_rates(sizes, "examples_proportional", 100, 1.0)
    assert capped == pytest.approx({"a": 100 / 210, "b": 100 / 210, "c": 10 / 210})
    hot = mixing_rates(sizes, "temperature", None, 2.0)
    root = {k: (v / 1110) ** 0.5 for k, v in sizes.items()}
    assert hot == pytest.approx({k: v / sum(root.values()) for k, v in root.items()})
    assert mixing_rates(sizes, "temperature", None, 1.0) == pytest.approx(rates)
    assert mixing_rates(sizes, "equal", None, 1.0) == pytest.approx({k: 1 / 3 for k in sizes})


def test_targets_are_words_and_rounded_scores():
    data = TextToTextDataModule(tasks=["offline:code_or_prose", "offline:continuation"], mixing="equal")
    row = data.to_text("code_or_prose", {"text_a": ">>> x = 1", "label": 1})
    assert row == {"task": "code_or_prose", "input": "code_or_prose paragraph: >>> x = 1", "target": "code"}
    pair = data.to_text("continuation", {"text_a": "A.", "text_b": "B.", "label": 0})
    assert pair["input"] == "continuation sentence1: A. sentence2: B." and pair["target"] == "no"
    assert [round_score(x) for x in (3.8, 3.89, 3.91, 0.09, 2.5)] == ["3.8", "3.8", "4.0", "0.0", "2.4"]
    data.setup("fit")
    tasks = [r["task"] for r in data.examples["train"]]
    assert 0.45 < tasks.count("code_or_prose") / len(tasks) < 0.55  # equal mixing of two tasks
    assert data.choices == {"code_or_prose": ["code", "prose"], "continuation": ["no", "yes"]}
    with pytest.raises(ConfigError, match="set data.glue_dir"):
        TextToTextDataModule(tasks=["sst2"])
    with pytest.raises(ConfigError, match="is not one of offline:code_or_prose"):
        TextToTextDataModule(tasks=["offline:markup_spans"])


def test_adapters_are_refused_on_a_whole_encoder_decoder(t5):
    from plm_lightning.finetune import Transfer

    with pytest.raises(ConfigError, match="adapters go into one-stack backbones"):
        TextToText(init_from=t5, transfer=Transfer(adapter_size=8))


def test_tiny_t5_learns_its_targets_and_exports_to_transformers(t5, tmp_path):
    torch.manual_seed(0)
    model = TextToText(init_from=t5, learning_rate=3e-3)
    data = TextToTextDataModule(tasks=["offline:code_or_prose", "offline:continuation"], max_length=48)
    data.tokenizer = model.tokenizer
    data.setup("fit")
    model.check_data(data)
    rows = data.examples["train"][:8]
    batch = data.collate(rows)
    assert batch["decoder_input_ids"][0, 0] == model.tokenizer.ids["pad"]  # T5 starts the decoder from pad
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        _, loss = model.step(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses
    model.eval()
    with torch.no_grad():
        predicted = model.predict_strings(batch)
    assert sum(p == r["target"] for p, r in zip(predicted, rows)) >= 6, (predicted, [r["target"] for r in rows])
    # a fine-tuned T5 is a T5ForConditionalGeneration
    transformers = pytest.importorskip("transformers")
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "ft.ckpt")
    assert export_checkpoint(tmp_path / "ft.ckpt", tmp_path / "hf") == "T5ForConditionalGeneration"
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        theirs = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    decoder_input_ids=batch["decoder_input_ids"]).logits
        ours = model.model.lm_head(model.model.decode(batch))
    keep = batch["decoder_attention_mask"].bool()
    torch.testing.assert_close(ours[keep], theirs[keep], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_t5_mixture_recipe_runs_from_its_config(t5, tmp_path):
    import csv

    from tests.conftest import ROOT, run_cli

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "finetune" / "t5-mixture.yaml"), "--model.init_from", t5,
                   "--trainer.max_steps", "4", "--trainer.val_check_interval", "4", "--trainer.limit_val_batches", "2",
                   "--data.batch_size", "8", "--data.mixing", "temperature", "--trainer.default_root_dir",
                   str(tmp_path / "ft"), "--trainer.logger.init_args.save_dir", str(tmp_path / "ft")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (metrics,) = (tmp_path / "ft").rglob("metrics.csv")
    with open(metrics) as f:
        val = [r for r in csv.DictReader(f) if r.get("val/average")][-1]
    assert 0 <= float(val["val/code_or_prose/accuracy"]) <= 1 and val["val/majority_baseline"]
