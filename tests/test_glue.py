"""``glue --ckpt``: every GLUE task (and SuperGLUE's BoolQ / RTE) fine-tuned from one checkpoint into one table, read
offline from local ``save_to_disk`` copies in the hub copies' own layout (features, ClassLabel names, split names)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from plm_lightning.errors import ConfigError
from tests.conftest import cli_error, tiny_pretrained

datasets = pytest.importorskip("datasets")

WORDS = "the a cat dog sat ran on under mat box red blue quickly slowly big small".split()
LAYOUT = {  # the columns and label classes of nyu-mll/glue and aps/super_glue (``None``: a float score)
    "cola": (("sentence",), ["unacceptable", "acceptable"]), "sst2": (("sentence",), ["negative", "positive"]),
    "mrpc": (("sentence1", "sentence2"), ["not_equivalent", "equivalent"]),
    "qqp": (("question1", "question2"), ["not_duplicate", "duplicate"]), "stsb": (("sentence1", "sentence2"), None),
    "mnli": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"]),
    "qnli": (("question", "sentence"), ["entailment", "not_entailment"]),
    "rte": (("sentence1", "sentence2"), ["entailment", "not_entailment"]),
    "wnli": (("sentence1", "sentence2"), ["not_entailment", "entailment"]),
    "boolq": (("question", "passage"), ["False", "True"]),
    "superglue-rte": (("premise", "hypothesis"), ["entailment", "not_entailment"]),
}
SPLITS = {"mnli": ("train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched")}


def _split(columns: tuple[str, ...], labels: list[str] | None, rows: int, seed: int, test: bool) -> object:
    rng = random.Random(seed)
    features = {c: datasets.Value("string") for c in columns}
    features["label"] = datasets.Value("float32") if labels is None else datasets.ClassLabel(names=labels)
    features["idx"] = datasets.Value("int32")
    table = {c: [" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) for _ in range(rows)] for c in columns}
    table["label"] = ([-1] * rows if test and labels else [rng.uniform(0, 5) for _ in range(rows)] if labels is None
                      else [rng.randrange(len(labels)) for _ in range(rows)])
    table["idx"] = list(range(rows))
    return datasets.Dataset.from_dict(table, features=datasets.Features(features))


def glue_copy(root: Path, tasks: tuple[str, ...] = tuple(LAYOUT), rows: int = 24) -> Path:
    """``DIR/<task>``: each task's DatasetDict saved with save_to_disk, as ``load_dataset(...)`` returns it."""
    for n, task in enumerate(tasks):
        columns, labels = LAYOUT[task]
        names = SPLITS.get(task, ("train", "validation", "test"))
        copy = datasets.DatasetDict({s: _split(columns, labels, rows if s == "train" else rows // 2, 10 * n + i,
                                               s.startswith("test")) for i, s in enumerate(names)})
        copy.save_to_disk(str(root / task))
    return root


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_pretrained(tmp_path_factory.mktemp("glue") / "last.ckpt", "bert")


def test_positive_class_f1_is_sklearns_f1_of_that_label():
    import torch
    from sklearn.metrics import f1_score

    from plm_lightning.finetune.classification import PositiveClassF1

    gen = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(50, 2, generator=gen), torch.randint(0, 2, (50,), generator=gen)
    for positive in (0, 1):
        metric = PositiveClassF1(positive)
        metric.update(logits[:20], labels[:20])
        metric.update(logits[20:], labels[20:])
        assert float(metric.compute()) == pytest.approx(f1_score(labels, logits.argmax(1), pos_label=positive))


def test_matthews_correlation_is_sklearns_with_zero_for_a_constant_classifier():
    import torch
    from sklearn.metrics import matthews_corrcoef

    from plm_lightning.finetune.classification import MatthewsCorrelation

    gen = torch.Generator().manual_seed(1)
    for classes in (2, 3):
        logits, labels = torch.randn(40, classes, generator=gen), torch.randint(0, classes, (40,), generator=gen)
        metric = MatthewsCorrelation(classes)
        metric.update(logits, labels)
        assert float(metric.compute()) == pytest.approx(matthews_corrcoef(labels, logits.argmax(1)), abs=1e-6)
        constant = torch.zeros(40, classes)
        constant[:, 1] = 1.0
        metric = MatthewsCorrelation(classes)
        metric.update(constant, labels)
        assert float(metric.compute()) == 0.0 == matthews_corrcoef(labels, constant.argmax(1))


def test_task_names_and_benchmarks_expand_in_order_and_a_typo_is_one_line():
    from plm_lightning.finetune.glue import benchmark_tasks

    assert [t.name for t in benchmark_tasks("glue")] == ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli",
                                                          "rte", "wnli"]
    assert [t.name for t in benchmark_tasks("rte,superglue,rte")] == ["rte", "boolq", "superglue-rte"]
    with pytest.raises(ConfigError, match="'colaa' is not a task .*cola.* or a benchmark .*glue, superglue"):
        benchmark_tasks("sst2,colaa")


def test_a_glue_copy_is_read_in_its_own_label_order_with_mnlis_two_validation_sets(tmp_path):
    from plm_lightning.finetune.glue import BENCHMARK_TASKS, GlueSettings, majority_scores, task_data

    root = glue_copy(tmp_path, ("mnli", "mrpc"))
    data = task_data(BENCHMARK_TASKS["mnli"], str(root), GlueSettings())
    data.setup("fit")
    assert data.labels == ["entailment", "neutral", "contradiction"]  # the ClassLabel ids, not sorted names
    assert {s: len(r) for s, r in data.examples.items()} == {"train": 24, "validation": 12, "test": 12}
    saved = datasets.load_from_disk(str(root / "mnli"))
    assert data.examples["test"][0]["text_a"] == saved["validation_mismatched"][0]["premise"]
    mrpc = task_data(BENCHMARK_TASKS["mrpc"], str(root), GlueSettings())
    mrpc.setup("fit")
    assert mrpc.positive_index == 1 and mrpc.labels[1] == "equivalent"
    assert mrpc.similarity and not data.similarity  # a GPT reads MRPC's pairs in both orders, MNLI's in one
    # the floor: always the majority training class, scored independently here
    train = [r["label"] for r in mrpc.examples["train"]]
    top = max(set(train), key=train.count)
    gold = [r["label"] for r in mrpc.examples["validation"]]
    accuracy = sum(g == top for g in gold) / len(gold)
    hits = sum(g == "equivalent" for g in gold)
    f1 = 2 * hits / (len(gold) + hits) if top == "equivalent" else 0.0
    assert majority_scores(mrpc, BENCHMARK_TASKS["mrpc"]) == pytest.approx({"f1_positive": f1, "accuracy": accuracy})


def test_a_copy_missing_a_split_or_a_column_is_one_line(tmp_path, capsys, bert):
    from plm_lightning.finetune.glue import BENCHMARK_TASKS, GlueSettings, task_data

    columns, labels = LAYOUT["mnli"]
    datasets.DatasetDict({"train": _split(columns, labels, 8, 0, False),
                          "validation_matched": _split(columns, labels, 4, 1, False)}).save_to_disk(
        str(tmp_path / "mnli"))
    with pytest.raises(ConfigError, match=r"has no split 'validation_mismatched' \(for test\); it has train, "
                                          "validation_matched"):
        task_data(BENCHMARK_TASKS["mnli"], str(tmp_path), GlueSettings()).setup("fit")
    datasets.DatasetDict({"train": _split(("sentence",), ["negative", "positive"], 8, 0, False),
                          "validation": _split(("text",), ["negative", "positive"], 4, 1, False)}).save_to_disk(
        str(tmp_path / "sst2"))
    with pytest.raises(ConfigError, match="split validation has no column 'sentence'; its columns are text, label"):
        task_data(BENCHMARK_TASKS["sst2"], str(tmp_path), GlueSettings()).setup("fit")
    line = cli_error(["glue", "--ckpt", bert, "--data", str(tmp_path), "--tasks", "cola"], capsys)
    assert f"has no cola/; save it with datasets.load_dataset('nyu-mll/glue', 'cola').save_to_disk('{tmp_path}" in line
    assert "--epochs=0 must be >= 1" in cli_error(["glue", "--ckpt", bert, "--epochs", "0"], capsys)


def test_the_hub_copy_out_of_reach_is_one_line_pointing_at_local_copies(monkeypatch, capsys, bert):
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # this machine has no hub: fail fast
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    line = cli_error(["glue", "--ckpt", bert, "--tasks", "cola", "--out", str(Path(bert).with_name("hub.json"))],
                     capsys)
    assert line.startswith("plm_lightning: error: glue: cola: data.task=hf:nyu-mll/glue:cola: cannot load it")
    assert line.endswith("or --data DIR: one save_to_disk copy per task")


def test_glue_fine_tunes_every_task_into_one_table_and_a_rerun_scores_only_what_is_missing(tmp_path, capsys, bert):
    from plm_lightning.cli import main
    from plm_lightning.finetune.glue import BENCHMARK_TASKS

    root = glue_copy(tmp_path / "copy")
    args = ["glue", "--ckpt", bert, "--data", str(root), "--tasks", "glue,superglue", "--max-steps", "2",
            "--batch-size", "8", "--max-length", "32"]
    main(args)
    printed = capsys.readouterr().out
    report_file = Path(bert).with_name("last.glue.json")
    report = json.loads(report_file.read_text())
    assert list(report["tasks"]) == list(LAYOUT)
    for name, row in report["tasks"].items():
        task = BENCHMARK_TASKS[name]
        assert list(row["metrics"]) == list(task.metrics) and row["steps"] == 2
        assert row["score"] == pytest.approx(sum(row["metrics"].values()) / len(task.metrics))
        assert all(-1 <= v <= 1 for v in row["metrics"].values())
        assert row["examples"]["train"] == 24 and row["examples"]["validation"] == 12
        floors = list(row["majority"].values())
        assert len(floors) == len(task.metrics) and (floors == [None, None]) == (name == "stsb")
        assert f"| {name} |" in printed
    assert report["tasks"]["mnli"]["examples"]["test"] == 12  # validation_mismatched
    glue = [report["tasks"][n]["score"] for n in ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte",
                                                   "wnli")]
    assert report["average"]["glue"] == pytest.approx(sum(glue) / 9)
    assert "**glue average** (9 of 9 tasks)" in printed and "**superglue average** (2 of 2 tasks)" in printed
    assert (Path(bert).with_name("last.glue-logs") / "cola" / "version_0" / "hparams.yaml").is_file()
    # killed after some tasks: the rerun scores only the missing ones
    del report["tasks"]["qnli"], report["tasks"]["boolq"]
    report_file.write_text(json.dumps(report))
    main(args)
    again = capsys.readouterr().out
    assert again.count("already scored") == 9 and "fine-tuning on qnli" in again and "fine-tuning on boolq" in again
    assert set(json.loads(report_file.read_text())["tasks"]) == set(LAYOUT)
    # export's model card carries the table, and its model-index the Hub reads back
    from huggingface_hub import ModelCard

    from tests.conftest import cli_output

    cli_output(["export", bert, str(tmp_path / "hf")], capsys)
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    results = {(r.dataset_type, r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results}
    final = json.loads(report_file.read_text())
    assert results[("nyu-mll/glue", "cola", "Matthews correlation")] == round(
        100 * final["tasks"]["cola"]["metrics"]["mcc"], 2)
    assert ("aps/super_glue", "rte", "accuracy") in results and len(results) == 15
    assert "## GLUE (fine-tuned)" in card.text and "| **glue average** | task score mean |" in card.text
