"""Text-to-text data for ``finetune.TextToText``: classification tasks written as T5 writes them (Raffel et al. 2020,
appendix D: ``"sst2 sentence: <text>"`` -> ``"positive"``; ``"stsb sentence1: ... sentence2: ..."`` -> ``"3.8"``,
scores rounded to the nearest 0.2), several tasks mixed in one training stream (sec. 3.5.2):

* ``examples_proportional``: r_m = min(e_m, K) / sum_n min(e_n, K), K the artificial dataset size limit;
* ``temperature``: those rates raised to 1/T and renormalised (T = 1 is examples-proportional, large T is equal);
* ``equal``: every task alike.

Tasks are the offline ones (``offline:code_or_prose``, ``offline:continuation``) and the GLUE tasks read from a
local GLUE directory (``<glue_dir>/SST-2/train.tsv`` ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.data import GLUE_TASKS, FinetuneDataModule, pad_rows
from plm_lightning.finetune.formats import read_examples
from plm_lightning.finetune.tasks import offline_task

VERBALIZERS: dict[str, dict[str, str]] = {
    "code_or_prose": {"0": "prose", "1": "code"}, "continuation": {"0": "no", "1": "yes"},
    "cola": {"0": "unacceptable", "1": "acceptable"}, "sst2": {"0": "negative", "1": "positive"},
    "mrpc": {"0": "not_equivalent", "1": "equivalent"}, "qqp": {"0": "not_duplicate", "1": "duplicate"},
    "wnli": {"0": "not_entailment", "1": "entailment"},
}
"""Label -> target word (T5's words for GLUE; labels already words, as MNLI's, stay as they are)."""
FIELDS: dict[str, tuple[str, ...]] = {
    "code_or_prose": ("paragraph",), "continuation": ("sentence1", "sentence2"), "cola": ("sentence",),
    "sst2": ("sentence",), "mrpc": ("sentence1", "sentence2"), "qqp": ("question1", "question2"),
    "stsb": ("sentence1", "sentence2"), "mnli": ("premise", "hypothesis"), "qnli": ("question", "sentence"),
    "rte": ("sentence1", "sentence2"), "wnli": ("sentence1", "sentence2"),
}
GLUE_DIRS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "qqp": "QQP", "stsb": "STS-B", "mnli": "MNLI",
             "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def mixing_rates(sizes: dict[str, int], mixing: str, limit: int | None, temperature: float) -> dict[str, float]:
    """T5's mixing rates (sec. 3.5.2) for tasks of ``sizes`` examples."""
    capped = {t: min(n, limit) if limit else n for t, n in sizes.items()}
    if mixing == "equal":
        return {t: 1 / len(sizes) for t in sizes}
    total = sum(capped.values())
    rates = {t: n / total for t, n in capped.items()}
    if mixing == "temperature":
        scaled = {t: r ** (1 / temperature) for t, r in rates.items()}
        rates = {t: r / sum(scaled.values()) for t, r in scaled.items()}
    return rates


def round_score(value: float) -> str:
    """STS-B's target string: the score rounded to the nearest 0.2 (T5, sec. 2.4)."""
    return f"{round(value * 5) / 5:.1f}"


class TextToTextDataModule(FinetuneDataModule):
    """Mixed text-to-text classification tasks; ``train`` is a seeded draw from the mixture, ``validation`` every
    task's own split."""

    KIND = "classification"

    def __init__(self, tasks: list[str] | None = None, glue_dir: str | None = None,
                 mixing: Literal["examples_proportional", "temperature", "equal"] = "examples_proportional",
                 mixing_limit: int | None = None, temperature: float = 2.0, max_eval_examples: int | None = 500,
                 max_length: int = 128, batch_size: int = 32, num_workers: int = 0, seed: int = 1234) -> None:
        """
        Args:
            tasks: Offline tasks (``offline:code_or_prose``, ``offline:continuation``) and GLUE task names (read
                from ``glue_dir``).
            glue_dir: A local GLUE directory (SST-2/train.tsv, SST-2/dev.tsv, ...; MNLI's dev_matched.tsv).
            mixing: examples_proportional, temperature or equal (T5, sec. 3.5.2).
            mixing_limit: K, the artificial size limit of examples-proportional and temperature mixing (T5: 2^21).
            temperature: T of temperature-scaled mixing (T5's best: 2).
            max_eval_examples: Validation examples kept per task (None: all).
            max_length: Input tokens, the task prefix and EOS included.
            batch_size: Examples per batch (of any tasks).
        """
        tasks = list(tasks or ["offline:code_or_prose", "offline:continuation"])
        super().__init__("offline:code_or_prose", None, None, None, max_length, batch_size, num_workers, seed)
        self.save_hyperparameters()
        if mixing not in ("examples_proportional", "temperature", "equal"):
            raise ConfigError(f"data.mixing={mixing!r} is not one of examples_proportional, temperature, equal")
        if temperature <= 0:
            raise ConfigError(f"data.temperature={temperature} must be > 0")
        for task in tasks:
            name = task.split(":", 1)[1] if task.startswith("offline:") else task
            if name not in FIELDS or (task.startswith("offline:") != (name in ("code_or_prose", "continuation"))):
                raise ConfigError(f"data.tasks: {task!r} is not one of offline:code_or_prose, offline:continuation, "
                                  f"{', '.join(GLUE_TASKS)}")
            if not task.startswith("offline:") and glue_dir is None:
                raise ConfigError(f"data.tasks: {task} is read from local files; set data.glue_dir (nothing is "
                                  "downloaded)")
        self.tasks = [t.split(":", 1)[-1] for t in tasks]
        self.task_specs, self.glue_dir = tasks, glue_dir
        self.mixing, self.mixing_limit, self.temperature = mixing, mixing_limit, temperature
        self.max_eval_examples = max_eval_examples
        self.choices: dict[str, list[str]] = {}
        self.rates: dict[str, float] = {}
        self.start_id: int | None = None
        """The decoder's start token, set by the model."""

    def _task_examples(self, spec: str) -> dict[str, list[dict[str, Any]]]:
        if spec.startswith("offline:"):
            return offline_task(spec.split(":", 1)[1], "classification")
        columns, label = GLUE_TASKS[spec]
        root = Path(self.glue_dir).expanduser() / GLUE_DIRS[spec]
        dev = "dev_matched.tsv" if spec == "mnli" else "dev.tsv"
        return {"train": read_examples(str(root / "train.tsv"), columns, label),
                "validation": read_examples(str(root / dev), columns, label)}

    def to_text(self, task: str, row: dict[str, Any]) -> dict[str, Any]:
        fields = FIELDS[task]
        parts = [task] + [f"{f}: {row[k]}" for f, k in zip(fields, ("text_a", "text_b"))]
        label = str(row["label"])
        target = round_score(float(label)) if task == "stsb" else VERBALIZERS.get(task, {}).get(label, label)
        return {"task": task, "input": " ".join(parts), "target": target}

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        rng = np.random.default_rng(self.seed)
        per_task = {t: self._task_examples(spec) for t, spec in zip(self.tasks, self.task_specs)}
        train = {t: [self.to_text(t, r) for r in ex["train"]] for t, ex in per_task.items()}
        self.choices = {t: sorted({r["target"] for r in rows}) for t, rows in train.items() if t != "stsb"}
        self.rates = mixing_rates({t: len(rows) for t, rows in train.items()}, self.mixing, self.mixing_limit,
                                  self.temperature)
        total = sum(min(len(r), self.mixing_limit) if self.mixing_limit else len(r) for r in train.values())
        draws = rng.choice(len(self.tasks), size=total, p=[self.rates[t] for t in self.tasks])
        orders = {t: rng.permutation(len(train[t])) for t in self.tasks}
        used = dict.fromkeys(self.tasks, 0)
        mixture = []
        for i in draws:  # without replacement within a task until it is used up, then again
            task = self.tasks[int(i)]
            mixture.append(train[task][int(orders[task][used[task] % len(train[task])])])
            used[task] += 1
        validation = []
        for t, ex in per_task.items():
            rows = [self.to_text(t, r) for r in ex["validation"]]
            validation += rows[:self.max_eval_examples] if self.max_eval_examples else rows
        self.examples = {"train": mixture, "validation": validation}

    @property
    def num_labels(self) -> int:
        return sum(len(c) for c in self.choices.values())

    def majority_baseline(self, split: str = "validation") -> float | None:
        """Mean over the classification tasks of always answering the task's most frequent training target."""
        scores = []
        for task, choices in self.choices.items():
            train = [r["target"] for r in self.examples["train"] if r["task"] == task]
            gold = [r["target"] for r in self.examples[split] if r["task"] == task]
            if train and gold and choices:
                top = max(set(train), key=train.count)
                scores.append(float(np.mean([g == top for g in gold])))
        return float(np.mean(scores)) if scores else None

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        tok = self.tokenizer
        eos, pad = tok.ids["eos"], tok.ids.get("pad", 0)
        start = self.start_id if self.start_id is not None else pad
        inputs = [ids[: self.max_length - 1] + [eos] for ids in tok.encode_batch([r["input"] for r in rows])]
        targets = [ids + [eos] for ids in tok.encode_batch([r["target"] for r in rows])]
        decoder = [[start] + t[:-1] for t in targets]
        return {"input_ids": pad_rows(inputs, pad), "attention_mask": pad_rows([[1] * len(r) for r in inputs], 0),
                "decoder_input_ids": pad_rows(decoder, pad),
                "decoder_attention_mask": pad_rows([[1] * len(r) for r in decoder], 0),
                "labels": pad_rows(targets, -100), "tasks": [r["task"] for r in rows],
                "targets": [r["target"] for r in rows]}
