"""TrainingSamples: corrupted inputs, loss targets, predictions and generations logged during training, as W&B
tables (offline run) or as a text file and TensorBoard text with the other loggers."""

import json
import os

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from plm_lightning.callbacks import TrainingSamples
from plm_lightning.inspection import build_datamodule
from tests.conftest import ROOT

SMALL = ["--data.seq_len=64", "--data.batch_size=4"]


def _fit(recipe: str, loggers: list, steps: int = 3, **options) -> None:
    datamodule, model = build_datamodule([str(ROOT / "configs" / f"{recipe}.yaml")], SMALL)
    trainer = L.Trainer(max_steps=steps, logger=loggers, callbacks=[TrainingSamples(**options)],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0)
    trainer.fit(model, datamodule=datamodule)


def _blocks(text: str) -> list[dict[str, str]]:
    blocks = []
    for chunk in text.strip().split("\n\n"):
        lines = chunk.strip().splitlines()
        fields = dict(line.strip().split(": ", 1) for line in lines[1:] if ": " in line)
        blocks.append({"header": lines[0], **fields})
    return blocks


@pytest.mark.parametrize("recipe", ["t5", "gpt2"])
def test_text_file_and_tensorboard_get_corruption_and_generation_rows(tmp_path, recipe: str) -> None:
    csv, tb = CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")
    _fit(recipe, [csv, tb], every_n_steps=2, examples=2, max_new_tokens=5, prompt_tokens=8)
    for logger in (csv, tb):
        blocks = _blocks((tmp_path / logger.log_dir / "samples.txt").read_text())
        headers = [b["header"] for b in blocks]  # step 2 (every_n_steps) and step 3 (end of training), 2 rows each
        assert headers == [f"[samples/{kind} step {s}]" for s in (2, 3) for kind in ("corruption",) * 2 +
                           ("generation",) * 2]
        corruption = [b for b in blocks if "corruption" in b["header"]]
        generation = [b for b in blocks if "generation" in b["header"]]
        for row in corruption:
            assert len(row["targets"].split("·")) == len(row["predictions"].split("·")) > 0  # one piece a token
            assert "Ġ" not in row["targets"] + row["predictions"]  # decoded, not byte-level symbols
        if recipe == "t5":  # sentinels in the input, sentinel + span pairs as targets, the encoder input as prompt
            assert all("<extra_id_0>" in r["input"] and r["targets"].startswith("<extra_id_0>") for r in corruption)
            assert all("<extra_id_0>" in r["prompt"] and r["reference"].startswith("<extra_id_0>") for r in generation)
        else:  # a causal LM predicts every next token; its prompt is the row's first 8 tokens
            assert all(c["input"].startswith(g["prompt"]) and g["output"] for c, g in zip(corruption, generation))
    events = list((tmp_path / tb.log_dir).glob("events.out.tfevents.*"))
    assert events and b"samples/corruption" in events[0].read_bytes()


def test_wandb_offline_run_holds_the_tables(tmp_path, monkeypatch) -> None:
    import wandb

    from plm_lightning.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    environment = dict(os.environ)
    try:
        logger = WandbLogger(save_dir=str(tmp_path), project="samples")
        _fit("bert", [logger], steps=2, every_n_steps=1, examples=3)
        logger.experiment.finish()
    finally:  # an in-process run leaves W&B's service in os.environ, where later CLI subprocesses would connect to it
        wandb.teardown()
        os.environ.clear()
        os.environ.update(environment)
    tables = sorted(tmp_path.rglob("*.table.json"))
    names = {t.name.split("_")[0] for t in tables}
    assert names == {"corruption"}  # a masked LM generates nothing
    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["step", "row", "input", "targets", "predictions"] and len(table["data"]) == 3
    assert all("[MASK]" in row[2] and row[3] for row in table["data"])


def test_progress_bar_says_epoch_without_a_negative_total_or_a_version() -> None:
    """A step-budgeted run (max_epochs -1) shows "Epoch 3", not "Epoch 3/-2"; the logger version (v_num) is dropped."""
    from types import SimpleNamespace

    from plm_lightning.callbacks import ProgressBar

    bar = ProgressBar()
    bar._trainer = SimpleNamespace(max_epochs=-1)
    assert bar._get_train_description(3).strip() == "Epoch 3"
    bar._trainer = SimpleNamespace(max_epochs=5)
    assert bar._get_train_description(3).strip() == "Epoch 3/4"
    trainer = SimpleNamespace(loggers=[SimpleNamespace(version=0)], progress_bar_metrics={"train/loss": 1.0})
    assert "v_num" not in bar.get_metrics(trainer, None)
