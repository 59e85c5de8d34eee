"""Downstream data: the shared DataModule of every task (offline task or local files, fixed splits, the model's own
tokenizer, resumable loaders) and the sentence (pair) classification and multiple-choice data built on it.

The tokenizer is the pretrained model's (``model.tokenizer``, handed over in the model's ``setup``). Texts are encoded
as one segment (``[CLS] a [SEP]``) or a pair (``[CLS] a [SEP] b [SEP]``, segment ids 0/1) for BERT-like vocabularies,
and as ``a <delim> b <eos>`` for byte-level ones (GPT's linearised input, Radford et al. 2018, fig. 1), cut to
``max_length`` by shortening the longer text first (BERT's ``_truncate_seq_pair``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from plm_lightning.data.sampling import KeyedList, ResumableDataLoader, resumable_loader
from plm_lightning.errors import ConfigError
from plm_lightning.finetune.formats import read_choices, read_examples, read_hf_dataset
from plm_lightning.finetune.tasks import OFFLINE_TASKS, offline_task

GLUE_TASKS: dict[str, tuple[tuple[str, ...], str]] = {
    "cola": (("sentence",), "label"), "sst2": (("sentence",), "label"), "mrpc": (("#1 String", "#2 String"), "Quality"),
    "qqp": (("question1", "question2"), "is_duplicate"), "stsb": (("sentence1", "sentence2"), "score"),
    "mnli": (("sentence1", "sentence2"), "gold_label"), "qnli": (("question", "sentence"), "label"),
    "rte": (("sentence1", "sentence2"), "label"), "wnli": (("sentence1", "sentence2"), "label"),
}
"""The text and label columns of each GLUE task's TSV (CoLA's headerless files: give ``text_columns`` by position)."""
SIMILARITY = ("mrpc", "qqp", "stsb")
"""Tasks whose pairs have no inherent order (GPT feeds both orders)."""
HF_GLUE_COLUMNS: dict[str, tuple[tuple[str, ...], str]] = {
    "cola": (("sentence",), "label"), "sst2": (("sentence",), "label"), "mrpc": (("sentence1", "sentence2"), "label"),
    "qqp": (("question1", "question2"), "label"), "stsb": (("sentence1", "sentence2"), "label"),
    "mnli": (("premise", "hypothesis"), "label"), "qnli": (("question", "sentence"), "label"),
    "rte": (("sentence1", "sentence2"), "label"), "wnli": (("sentence1", "sentence2"), "label"),
}
"""The columns of the GLUE tasks as the ``datasets`` hub copy (``glue``, config = task) names them."""


def pair_frame(tokenizer: Any, a: list[int], b: list[int] | None, max_length: int) -> tuple[list[int], list[int], int]:
    """``[CLS] a [SEP] (b [SEP])`` (GPT: ``a <eos> (b <eos>)``) cut to ``max_length``: ids, segment ids and where
    ``b`` starts. ``a`` and ``b`` are shortened in place, the longer first."""
    cls, sep = tokenizer.ids.get("cls"), tokenizer.ids.get("sep", tokenizer.ids.get("eos"))
    b = b if b else []
    budget = max_length - (1 if cls is not None else 0) - (2 if b else 1)
    while len(a) + len(b) > budget:
        (a if len(a) >= len(b) else b).pop()
    first = ([cls] if cls is not None else []) + a + [sep]
    ids = first + (b + [sep] if b else [])
    return ids, [0] * len(first) + [1] * (len(ids) - len(first)), len(first)


def pad_rows(rows: list[list[int]], value: int, length: int | None = None) -> torch.Tensor:
    length = length or max(len(r) for r in rows)
    return torch.tensor([r + [value] * (length - len(r)) for r in rows])


def encoder_inputs(tokenizer: Any, ids: list[list[int]], types: list[list[int]]) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``token_type_ids`` and ``attention_mask``."""
    return {"input_ids": pad_rows(ids, tokenizer.ids.get("pad", 0)), "token_type_ids": pad_rows(types, 0),
            "attention_mask": pad_rows([[1] * len(r) for r in ids], 0)}


class FinetuneDataModule(L.LightningDataModule):
    """Examples of one task from an offline task (``offline:<name>``) or local files, per split; subclasses read
    their file format (:meth:`read_file`) and batch (:meth:`collate`)."""

    KIND = "classification"
    """The kind of offline task this data takes (see ``finetune.tasks.OFFLINE_TASKS``)."""

    def __init__(self, task: str, train_file: str | None, validation_file: str | None, test_file: str | None,
                 max_length: int, batch_size: int, num_workers: int, seed: int, named_tasks: tuple[str, ...] = ()) -> None:
        super().__init__()
        offline = task.startswith("offline:")
        hub = task.startswith("hf:") and self.KIND == "classification"
        kinds = [n for n, (k, _) in OFFLINE_TASKS.items() if k == self.KIND]
        if hub:
            pass
        elif (task.split(":", 1)[1].partition("=")[0] not in kinds) if offline else \
                (task not in named_tasks and task != "custom"):
            named = f", a named task ({', '.join(named_tasks)})" if named_tasks else ""
            raise ConfigError(f"data.task={task!r} is not offline:<{'|'.join(kinds)}>{named} or custom")
        if not offline and not hub and (train_file is None or validation_file is None):
            raise ConfigError(f"data.task={task}: give data.train_file and data.validation_file (local files; "
                              "nothing is downloaded)")
        self.task = task
        self.files = {"train": train_file, "validation": validation_file, "test": test_file}
        self.max_length, self.batch_size, self.num_workers, self.seed = max_length, batch_size, num_workers, seed
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.tokenizer: Any = None
        """Set by the model in ``setup`` (the pretrained model's own tokenizer)."""

    def read_file(self, path: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def read_hf(self, spec: str) -> dict[str, list[dict[str, Any]]]:
        raise ConfigError(f"data.task=hf:{spec}: datasets-hub tasks are read for classification data only")

    def check(self) -> None:
        """Validate the loaded examples (labels seen in training ...); a ConfigError otherwise."""

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        if self.task.startswith("offline:"):
            self.examples = offline_task(self.task.split(":", 1)[1], self.KIND)
        elif self.task.startswith("hf:"):
            self.examples = self.read_hf(self.task[3:])
        else:
            self.examples = {split: self.read_file(path) for split, path in self.files.items() if path is not None}
        self.check()

    def majority_baseline(self, split: str = "validation") -> float | None:
        return None

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        return resumable_loader(KeyedList(self.examples.get(split) or []), self.collate, self.batch_size, shuffle,
                                self.seed, self.num_workers, self.trainer)

    def train_dataloader(self) -> ResumableDataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> ResumableDataLoader | list:
        return self._loader("validation", False)

    def test_dataloader(self) -> ResumableDataLoader | list:
        return self._loader("test", False)


class ClassificationDataModule(FinetuneDataModule):
    """Sequence (pair) classification or regression data for ``finetune.SequenceClassifier``."""

    def __init__(self, task: str = "offline:code_or_prose", train_file: str | None = None,
                 validation_file: str | None = None, test_file: str | None = None,
                 text_columns: list[str] | None = None, label_column: str | None = None, regression: bool = False,
                 both_orders: bool | None = None, splits: dict[str, str] | None = None,
                 positive_label: str | int | None = None, max_length: int = 128, batch_size: int = 32,
                 num_workers: int = 0, seed: int = 1234) -> None:
        """
        Args:
            task: ``offline:code_or_prose`` / ``offline:continuation`` (built from the embedded corpus), a GLUE task
                name (its columns; give the files), ``hf:<name>[:<config>]`` or ``hf:<dir saved by datasets>``
                (a ``datasets`` dataset, e.g. ``hf:glue:sst2``), or ``custom`` (give files and columns).
            train_file: Local .tsv (header line) or .jsonl training examples.
            validation_file: Validation examples, same format.
            test_file: Test examples (optional).
            text_columns: One or two text columns (default: the GLUE task's, or text_a / text_b).
            label_column: The label column (default: the GLUE task's, or label).
            regression: Labels are numbers (STS-B); the model needs num_labels 1.
            both_orders: Also feed each pair as (b, a) and add the two representations, as GPT does for similarity
                (Radford et al. 2018, sec. 3.3); default: for the similarity tasks (mrpc, qqp, stsb: by name, as the
                config of ``hf:nyu-mll/glue:mrpc`` or the directory ``hf:DIR/mrpc``) with a tokenizer without [CLS]
                (a GPT's).
            splits: ``hf:`` data: the dataset's split for each of ours (train, validation, test), e.g. MNLI's
                ``{validation: validation_matched, test: validation_mismatched}``; each must exist (default: the
                usual names, only train required).
            positive_label: A binary task's positive class (a label, or its index in the labels): also logs the F1
                of that class (``val/f1_positive``), GLUE's F1 for MRPC and QQP.
            max_length: Tokens per example, [CLS] and separators included.
        """
        super().__init__(task, train_file, validation_file, test_file, max_length, batch_size, num_workers, seed,
                         tuple(GLUE_TASKS))
        self.save_hyperparameters()
        columns, label = GLUE_TASKS.get(task, (("text_a", "text_b"), "label"))
        self.explicit_columns = bool(text_columns)
        self.text_columns = tuple(text_columns) if text_columns else columns
        self.label_column = label_column or label
        self.regression = regression or task == "stsb"
        self.both_orders = both_orders
        self.splits, self.positive_label = splits, positive_label
        name, _, config = task[3:].partition(":") if task.startswith("hf:") else (task, "", "")
        self.similarity = (config or Path(name).name) in SIMILARITY
        """A GLUE similarity task (mrpc, qqp, stsb): pairs without an inherent order."""
        self.labels: list[str] = []
        self.label_names: list[str] | None = None
        """The label names of an ``hf:`` dataset's ClassLabel column, in its order (None: labels sorted)."""
        self.positive_index: int | None = None

    def read_file(self, path: str) -> list[dict[str, Any]]:
        return read_examples(path, tuple(c for c in self.text_columns if c), self.label_column)

    def read_hf(self, spec: str) -> dict[str, list[dict[str, Any]]]:
        """``hf:glue:sst2`` (the hub copy's columns) or ``hf:<saved dir>`` with ``text_columns`` / ``label_column``."""
        name, _, config = spec.partition(":")
        glue = HF_GLUE_COLUMNS.get(config) if Path(name).name == "glue" else None
        columns, label = glue or (self.text_columns, self.label_column)
        if self.explicit_columns:
            columns, label = self.text_columns, self.label_column
        if config == "stsb" and glue:
            self.regression = True
        examples, self.label_names = read_hf_dataset(spec, tuple(c for c in columns if c), label, self.splits)
        return examples

    def check(self) -> None:
        if self.splits is not None and not self.task.startswith("hf:"):
            raise ConfigError(f"data.splits names a datasets dataset's splits; data.task={self.task!r} is not hf:...")
        if self.regression:
            if self.positive_label is not None:
                raise ConfigError("data.positive_label: a regression task has no classes (unset it)")
            return
        # a ClassLabel column brings its classes in its own order (the dataset's ids); other labels: those of training
        self.labels = list(self.label_names) if self.label_names else \
            sorted({str(e["label"]) for e in self.examples["train"]})
        for split, rows in self.examples.items():
            unseen = sorted({str(e["label"]) for e in rows} - set(self.labels))
            if unseen:
                raise ConfigError(f"data: the {split} labels {unseen[:3]} never occur in training (labels: "
                                  f"{', '.join(self.labels[:10])})")
        self.positive_index = self._positive_index()

    def _positive_index(self) -> int | None:
        positive = self.positive_label
        if positive is None:
            return None
        if len(self.labels) != 2:
            raise ConfigError(f"data.positive_label={positive!r}: F1 of a positive class is for binary tasks; this one "
                              f"has {len(self.labels)} labels ({', '.join(self.labels[:10])})")
        if isinstance(positive, int) and not isinstance(positive, bool) and 0 <= positive < 2:
            return positive
        if str(positive) in self.labels:
            return self.labels.index(str(positive))
        raise ConfigError(f"data.positive_label={positive!r} is not one of the labels ({', '.join(self.labels)}) "
                          "or their index 0/1")

    @property
    def num_labels(self) -> int:
        return 1 if self.regression else len(self.labels)

    def majority_label(self) -> str:
        """The most frequent training label (classification)."""
        train = [str(e["label"]) for e in self.examples["train"]]
        return max(set(train), key=train.count)

    def majority_baseline(self, split: str = "validation") -> float | None:
        """Accuracy of always answering the most frequent training label (classification only)."""
        if self.regression or not self.examples.get(split):
            return None
        top = self.majority_label()
        return float(np.mean([str(e["label"]) == top for e in self.examples[split]]))

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        a = tok.encode_batch([r["text_a"] for r in rows])
        b = tok.encode_batch([r["text_b"] for r in rows]) if "text_b" in rows[0] else [None] * len(rows)
        framed = [pair_frame(tok, list(x), list(y) if y else None, self.max_length) for x, y in zip(a, b)]
        labels = ([float(r["label"]) for r in rows] if self.regression
                  else [self.labels.index(str(r["label"])) for r in rows])
        batch = {**encoder_inputs(tok, [f[0] for f in framed], [f[1] for f in framed]), "labels": torch.tensor(labels)}
        both = self.both_orders if self.both_orders is not None else (self.similarity and "cls" not in tok.ids)
        if both and b[0] is not None:
            swapped = encoder_inputs(tok, *zip(*[pair_frame(tok, list(y), list(x), self.max_length)[:2]
                                                 for x, y in zip(a, b)]))
            batch.update(swapped_input_ids=swapped["input_ids"], swapped_attention_mask=swapped["attention_mask"])
        return batch


class ChoiceDataModule(FinetuneDataModule):
    """Multiple-choice data for ``finetune.MultipleChoice``: each (context, choice) pair is one sequence
    (``[CLS] context [SEP] choice [SEP]``; GPT: ``context <eos> choice <eos>``), ``labels`` the right choice's index."""

    KIND = "choice"

    def __init__(self, task: str = "offline:next_sentence", train_file: str | None = None,
                 validation_file: str | None = None, test_file: str | None = None, max_length: int = 128,
                 batch_size: int = 16, num_workers: int = 0, seed: int = 1234) -> None:
        """
        Args:
            task: ``offline:next_sentence`` (built from the embedded corpus) or ``custom`` (SWAG-style JSONL files).
            train_file: JSONL rows with context, choices (or endings) and label.
            validation_file: Validation rows, same format.
            test_file: Test rows (optional).
            max_length: Tokens per (context, choice) sequence.
            batch_size: Questions per batch (each is num_choices sequences).
        """
        super().__init__(task, train_file, validation_file, test_file, max_length, batch_size, num_workers, seed)
        self.save_hyperparameters()

    def read_file(self, path: str) -> list[dict[str, Any]]:
        return read_choices(path)

    def check(self) -> None:
        counts = {len(e["choices"]) for rows in self.examples.values() for e in rows}
        if len(counts) > 1:
            raise ConfigError(f"data: every question needs the same number of choices; found {sorted(counts)}")

    def majority_baseline(self, split: str = "validation") -> float | None:
        """Accuracy of always answering the most frequent right index of the training questions."""
        rows = self.examples.get(split)
        if not rows:
            return None
        train = [e["label"] for e in self.examples["train"]]
        top = max(set(train), key=train.count)
        return float(np.mean([e["label"] == top for e in rows]))

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        tok = self.tokenizer
        contexts = tok.encode_batch([r["context"] for r in rows])
        choices = tok.encode_batch([c for r in rows for c in r["choices"]])
        n = len(rows[0]["choices"])
        framed = [pair_frame(tok, list(contexts[i // n]), c, self.max_length) for i, c in enumerate(choices)]
        return {**encoder_inputs(tok, [f[0] for f in framed], [f[1] for f in framed]),
                "labels": torch.tensor([r["label"] for r in rows]), "num_choices": n}
