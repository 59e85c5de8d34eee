"""GLUE (Wang et al. 2018) and SuperGLUE's BoolQ and RTE (Wang et al. 2019) the way MosaicBERT and Cramming report
them: one checkpoint fine-tuned on every task, one table of the tasks' own metrics.

Each task is read from ``datasets`` (the hub copies ``nyu-mll/glue`` and ``aps/super_glue``, from the local cache when
there is no network) or from a local directory holding one ``DatasetDict.save_to_disk`` copy per task
(``DIR/cola``, ``DIR/mnli`` ...), in the hub copies' column layout. Metrics (GLUE paper, table 1): Matthews
correlation for CoLA, F1 of the positive class and accuracy for MRPC and QQP, Pearson and Spearman correlation for
STS-B, accuracy elsewhere, MNLI on its matched and mismatched validation sets. A task's score is the mean of its
metrics and the benchmark's average the mean of the task scores (GLUE's leaderboard rule), in percent. Beside each
metric: what always answering the training set's majority class scores (regression: its mean, whose correlation is
undefined), the floor a score must clear to mean anything.

Fine-tuning follows BERT (Devlin et al. 2019, sec. 4.1): [CLS] (a decoder: its last token) through a linear layer,
AdamW at one rate with 10% linear warm-up and linear decay, batch 32, 3 epochs, 128 tokens. The validation splits
are the scores (GLUE's test labels are private).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from plm_lightning.errors import ConfigError

GLUE_DATASET, SUPERGLUE_DATASET = "nyu-mll/glue", "aps/super_glue"
"""The hub copies lm-evaluation-harness reads too."""


@dataclass(frozen=True)
class BenchmarkTask:
    """One task of the benchmark: where it lives, its columns (the hub copy's) and what it reports."""

    name: str
    dataset: str
    config: str
    text_columns: tuple[str, ...]
    num_labels: int
    metrics: tuple[str, ...]
    """The task's reported metrics (``f1_positive``: F1 of ``positive``; ``mismatched_accuracy``: accuracy on the
    split ``splits["test"]``), averaged into its score."""
    positive: int | None = None
    """The positive class of a binary task scored by F1 (the dataset's label index; GLUE: 1)."""
    splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "validation": "validation"})
    label_column: str = "label"

    @property
    def regression(self) -> bool:
        return self.num_labels == 1


def _glue(name: str, columns: tuple[str, ...], num_labels: int = 2, metrics: tuple[str, ...] = ("accuracy",),
          **kwargs: Any) -> BenchmarkTask:
    return BenchmarkTask(name, GLUE_DATASET, name, columns, num_labels, metrics, **kwargs)


BENCHMARK_TASKS: dict[str, BenchmarkTask] = {t.name: t for t in (
    _glue("cola", ("sentence",), metrics=("mcc",)),
    _glue("sst2", ("sentence",)),
    _glue("mrpc", ("sentence1", "sentence2"), metrics=("f1_positive", "accuracy"), positive=1),
    _glue("qqp", ("question1", "question2"), metrics=("f1_positive", "accuracy"), positive=1),
    _glue("stsb", ("sentence1", "sentence2"), num_labels=1, metrics=("pearson", "spearman")),
    _glue("mnli", ("premise", "hypothesis"), num_labels=3, metrics=("accuracy", "mismatched_accuracy"),
          splits={"train": "train", "validation": "validation_matched", "test": "validation_mismatched"}),
    _glue("qnli", ("question", "sentence")),
    _glue("rte", ("sentence1", "sentence2")),
    _glue("wnli", ("sentence1", "sentence2")),
    BenchmarkTask("boolq", SUPERGLUE_DATASET, "boolq", ("question", "passage"), 2, ("accuracy",)),
    BenchmarkTask("superglue-rte", SUPERGLUE_DATASET, "rte", ("premise", "hypothesis"), 2, ("accuracy",)),
)}
BENCHMARKS = {"glue": tuple(n for n, t in BENCHMARK_TASKS.items() if t.dataset == GLUE_DATASET),
              "superglue": ("boolq", "superglue-rte")}
"""Names ``--tasks`` accepts for a whole benchmark."""


def benchmark_tasks(spec: str) -> list[BenchmarkTask]:
    """The tasks of ``spec``: comma-separated task names and benchmark names (``glue``, ``superglue``), in order,
    each once; one line naming what would be valid otherwise."""
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        found = BENCHMARKS.get(part) or ((part,) if part in BENCHMARK_TASKS else None)
        if found is None:
            raise ConfigError(f"glue: --tasks {part!r} is not a task ({', '.join(BENCHMARK_TASKS)}) or a benchmark "
                              f"({', '.join(BENCHMARKS)})")
        names += [n for n in found if n not in names]
    if not names:
        raise ConfigError("glue: --tasks names no task")
    return [BENCHMARK_TASKS[n] for n in names]


def task_source(task: BenchmarkTask, data_dir: str | None) -> str:
    """The ``hf:`` spec of ``task``: ``DIR/<task>`` (a save_to_disk copy) or the hub copy ``dataset:config``."""
    if data_dir is None:
        return f"{task.dataset}:{task.config}"
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise ConfigError(f"glue: --data {data_dir} is not a directory (one save_to_disk copy per task: DIR/cola ...)")
    where = root / task.name
    if not where.is_dir():
        raise ConfigError(f"glue: --data {data_dir} has no {task.name}/; save it with datasets.load_dataset("
                          f"'{task.dataset}', '{task.config}').save_to_disk('{where}')")
    return str(where)


@dataclass
class GlueSettings:
    """The fine-tuning of every task (BERT's defaults; Devlin et al. 2019, A.3)."""

    epochs: int = 3
    max_steps: int = -1
    """Stop each task after this many optimizer steps (-1: the epochs)."""
    learning_rate: float = 2e-5
    batch_size: int = 32
    max_length: int = 128
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    seed: int = 1234
    random_init: bool = False
    """The control arm: the checkpoint's architecture and tokenizer from random weights."""
    accelerator: str = "cpu"
    devices: int = 1
    precision: str = "32-true"

    def check(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"glue: --epochs={self.epochs} must be >= 1")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ConfigError(f"glue: --max-steps={self.max_steps} must be >= 1 (or -1: the epochs)")
        for name in ("learning_rate", "batch_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"glue: --{name.replace('_', '-')}={getattr(self, name)} must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"glue: --warmup-ratio={self.warmup_ratio} must be in [0, 1)")


def task_data(task: BenchmarkTask, data_dir: str | None, settings: GlueSettings) -> Any:
    """The ``ClassificationDataModule`` of ``task``."""
    from plm_lightning.finetune.data import ClassificationDataModule

    return ClassificationDataModule(task=f"hf:{task_source(task, data_dir)}", text_columns=list(task.text_columns),
                                    label_column=task.label_column, regression=task.regression,
                                    splits=dict(task.splits), positive_label=task.positive,
                                    max_length=settings.max_length, batch_size=settings.batch_size,
                                    seed=settings.seed)


def majority_scores(data: Any, task: BenchmarkTask) -> dict[str, float | None]:
    """Each of ``task``'s metrics for always answering the training set's most frequent class (regression: its mean
    value, whose correlation is undefined: None)."""
    import torch

    from plm_lightning.finetune.classification import classification_metrics

    if task.regression:
        return {m: None for m in task.metrics}
    top = data.labels.index(data.majority_label())
    out: dict[str, float | None] = {}
    for split, prefix in (("validation", "val/"), ("test", "test/")):
        rows = data.examples.get(split) or []
        if not rows:
            continue
        metrics = classification_metrics(task.num_labels, data.positive_index)[0 if split == "validation" else 1]
        logits = torch.zeros(len(rows), task.num_labels)
        logits[:, top] = 1.0
        metrics.update(logits, torch.tensor([data.labels.index(str(e["label"])) for e in rows]))
        computed = {k[len(prefix):]: float(v) for k, v in metrics.compute().items()}
        for metric in task.metrics:
            key = "accuracy" if metric == "mismatched_accuracy" else metric
            if (metric == "mismatched_accuracy") == (split == "test"):
                out[metric] = computed[key]
    return out


def finetune_task(checkpoint: str, task: BenchmarkTask, data_dir: str | None, settings: GlueSettings,
                  log_dir: Path) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on ``task`` and score it on the validation split(s): its metrics, score, the majority
    floor, the example counts and the seconds it took."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from plm_lightning.callbacks import ProgressBar
    from plm_lightning.finetune.classification import SequenceClassifier

    start = time.time()
    L.seed_everything(settings.seed, workers=True, verbose=False)
    data = task_data(task, data_dir, settings)
    model = SequenceClassifier(init_from=checkpoint, num_labels=task.num_labels, dropout=settings.dropout,
                               learning_rate=settings.learning_rate, weight_decay=settings.weight_decay,
                               warmup_ratio=settings.warmup_ratio, random_init=settings.random_init)
    common = {"accelerator": settings.accelerator, "devices": settings.devices, "precision": settings.precision}
    trainer = L.Trainer(**common, max_epochs=settings.epochs, max_steps=settings.max_steps, limit_val_batches=0,
                        num_sanity_val_steps=0, enable_checkpointing=False, callbacks=[ProgressBar()],
                        logger=CSVLogger(str(log_dir), name=task.name), log_every_n_steps=10,
                        enable_model_summary=False)
    trainer.fit(model, datamodule=data)
    scorer = L.Trainer(**common, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                       enable_model_summary=False)
    validation = scorer.validate(model, datamodule=data, verbose=False)[0]
    found = {k[len("val/"):]: float(v) for k, v in validation.items() if k.startswith("val/")}
    if "test" in task.splits:
        tested = scorer.test(model, datamodule=data, verbose=False)[0]
        found["mismatched_accuracy"] = float(tested["test/accuracy"])
    metrics = {m: found[m] for m in task.metrics}
    return {"dataset": task.dataset, "config": task.config, "metrics": metrics,
            "score": sum(metrics.values()) / len(metrics), "majority": majority_scores(data, task),
            "examples": {split: len(rows) for split, rows in data.examples.items()},
            "steps": trainer.global_step, "seconds": round(time.time() - start, 1)}


def run_benchmark(checkpoint: str, tasks: list[BenchmarkTask], data_dir: str | None, settings: GlueSettings,
                  out: Path, log_dir: Path, redo: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fine-tune ``checkpoint`` on each of ``tasks``, writing the report to ``out`` after each one (atomically): a
    killed run started again with the same settings scores only the tasks it lacks (``redo``: all of them)."""
    from plm_lightning.files import atomic_write

    settings.check()
    if not Path(checkpoint).exists():
        raise ConfigError(f"glue: --ckpt {checkpoint} does not exist (a checkpoint of ours or a transformers directory)")
    sources = {t.name: task_source(t, data_dir) for t in tasks}  # a missing copy fails before anything trains
    report: dict[str, Any] = {"checkpoint": str(checkpoint), "settings": asdict(settings), "data": data_dir,
                              "tasks": {}}
    if out.is_file() and not redo:
        try:
            earlier = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            earlier = {}
        if earlier.get("settings") == report["settings"] and earlier.get("checkpoint") == report["checkpoint"]:
            report["tasks"] = {k: v for k, v in earlier.get("tasks", {}).items() if k in sources}
        elif earlier:
            log(f"glue: {out} was written with other settings or another checkpoint: its tasks are scored again")
    for task in tasks:
        if task.name in report["tasks"]:
            log(f"glue: {task.name} already scored in {out} (--redo scores it again)")
            continue
        log(f"glue: fine-tuning on {task.name} ({sources[task.name]})")
        try:
            report["tasks"][task.name] = finetune_task(checkpoint, task, data_dir, settings, log_dir)
        except ConfigError as err:  # the data's own line, said as glue's (its keys are data.*, ours are --*)
            hint = "" if data_dir else "; or --data DIR: one save_to_disk copy per task"
            raise ConfigError(f"glue: {task.name}: {err}{hint}") from err
        report["average"] = benchmark_average(report)
        atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=1), encoding="utf-8"))
    report["average"] = benchmark_average(report)
    atomic_write(out, lambda tmp: tmp.write_text(json.dumps(report, indent=1), encoding="utf-8"))
    return report


def benchmark_average(report: dict[str, Any]) -> dict[str, float]:
    """The mean task score per benchmark of the tasks scored (``glue``: of those of its tasks in the report)."""
    out = {}
    for bench, names in BENCHMARKS.items():
        scores = [report["tasks"][n]["score"] for n in names if n in report["tasks"]]
        if scores:
            out[bench] = sum(scores) / len(scores)
    return out




def benchmark_table(report: dict[str, Any]) -> str:
    """The report as a Markdown table in percent, majority-class floors beside each metric."""
    from plm_lightning.interop.model_card import GLUE_NAMES

    lines = ["| task | metric | score | majority class | train | validation |", "|---|---|---|---|---|---|"]
    for name, row in report["tasks"].items():
        metrics = " / ".join(f"{GLUE_NAMES[m]} {100 * v:.1f}" for m, v in row["metrics"].items())
        floor = " / ".join("n/a" if v is None else f"{100 * v:.1f}" for v in row["majority"].values())
        lines.append(f"| {name} | {metrics} | {100 * row['score']:.1f} | {floor} | {row['examples'].get('train', 0)} "
                     f"| {row['examples'].get('validation', 0)} |")
    for bench, value in report.get("average", {}).items():
        count = sum(n in report["tasks"] for n in BENCHMARKS[bench])
        lines.append(f"| **{bench} average** ({count} of {len(BENCHMARKS[bench])} tasks) | | **{100 * value:.1f}** "
                     "| | | |")
    return "\n".join(lines)
