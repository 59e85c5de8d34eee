"""Fine-tuning slice: offline tasks whose labels come from the text, GLUE-style file loading with clear errors, and a
classifier head on our BERT and GPT-2 checkpoints that learns from the CLI."""

import csv

import pytest

from plm_lightning.errors import ConfigError
from plm_lightning.finetune import ClassificationDataModule, offline_task
from plm_lightning.finetune.formats import read_examples
from plm_lightning.finetune.tasks import _prose_sentences
from tests.conftest import ROOT, run_cli, tiny_pretrained


@pytest.fixture(scope="module")
def continuation():
    return offline_task("continuation")


def test_offline_code_or_prose_labels_come_from_the_layout():
    task = offline_task("code_or_prose")
    assert task == offline_task("code_or_prose")  # fixed, deterministic splits
    train = task["train"]
    assert len(train) > 5000 and {e["label"] for e in train} == {0, 1}
    symbols = lambda t: sum(c in "()[]{}:=<>._\"'" for c in t) / len(t)  # noqa: E731
    code = sum(symbols(e["text_a"]) for e in train if e["label"] == 1) / sum(e["label"] == 1 for e in train)
    prose = sum(symbols(e["text_a"]) for e in train if e["label"] == 0) / sum(e["label"] == 0 for e in train)
    assert code > 2 * prose  # code paragraphs are dense in brackets and operators
    texts = {split: {e["text_a"] for e in rows} for split, rows in task.items()}
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["validation"]


def test_offline_continuation_pairs_follow_each_other_when_labelled_so(continuation):
    follows = {(a, b) for doc in _prose_sentences().values() for a, b in zip(doc, doc[1:])}
    rows = continuation["validation"]
    positives = [r for r in rows if r["label"] == 1]
    assert 0.4 < len(positives) / len(rows) < 0.6
    assert all((r["text_a"], r["text_b"]) in follows for r in positives)
    assert sum((r["text_a"], r["text_b"]) in follows for r in rows if r["label"] == 0) < 0.01 * len(rows)


def test_glue_tsv_columns_labels_and_errors(tmp_path):
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    train.write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    dev.write_text("sentence\tlabel\nfine\t2\n")
    assert read_examples(str(train), ("sentence",), "label") == [{"text_a": "good film", "label": "1"},
                                                                  {"text_a": "bad film", "label": "0"}]
    with pytest.raises(ConfigError, match="no column 'score'"):
        read_examples(str(train), ("sentence",), "score")
    data = ClassificationDataModule(task="sst2", train_file=str(train), validation_file=str(dev))
    with pytest.raises(ConfigError, match=r"validation labels \['2'\] never occur in training"):
        data.setup("fit")
    dev.write_text("sentence\tlabel\nfine\t1\n")
    data = ClassificationDataModule(task="sst2", train_file=str(train), validation_file=str(dev))
    data.setup("fit")
    assert data.num_labels == 2 and data.majority_baseline() in (0.0, 1.0)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrained")
    return {family: tiny_pretrained(root / f"{family}.ckpt", family) for family in ("bert", "gpt2")}


def _finetune(config, ckpt, tmp_path, steps, *extra):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "finetune" / f"{config}.yaml"), "--model.init_from",
                   str(ckpt), "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
                   "--trainer.limit_val_batches", "5", "--trainer.log_every_n_steps", "5",
                   "--trainer.default_root_dir", str(tmp_path / "ft"), "--trainer.logger.init_args.save_dir",
                   str(tmp_path / "ft"), *extra], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (metrics,) = (tmp_path / "ft").rglob("metrics.csv")
    with open(metrics) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["bert", "gpt2"])
def test_classifier_head_learns_on_our_checkpoints(recipe, pretrained, tmp_path):
    rows = _finetune("code-or-prose", pretrained[recipe], tmp_path, 30)
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses
    val = [r for r in rows if r.get("val/accuracy")][-1]
    assert 0.8 < float(val["val/majority_baseline"]) < 0.95 and 0 <= float(val["val/accuracy"]) <= 1


@pytest.mark.slow
@pytest.mark.parametrize("config,metric,architecture", [
    ("markup-spans", "val/entity_f1", "BertForTokenClassification"),
    ("cloze-spans", "val/exact_match", "BertForQuestionAnswering"),
    ("next-sentence", "val/accuracy", "BertForMultipleChoice")])
def test_every_offline_task_runs_from_its_config_and_exports(config, metric, architecture, pretrained, tmp_path):
    rows = _finetune(config, pretrained["bert"], tmp_path, 6, "--data.batch_size", "4")
    val = [r for r in rows if r.get(metric)][-1]
    assert 0 <= float(val[metric]) <= 1 and val["val/majority_baseline"] and val["val/loss"]
    (ckpt,) = (tmp_path / "ft").rglob("last.ckpt")
    res = run_cli(["export", str(ckpt), str(tmp_path / "hf")], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert architecture in (tmp_path / "hf" / "config.json").read_text()
