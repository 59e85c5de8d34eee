"""Downstream classification data: local GLUE-style TSV / JSONL files, and offline tasks built from the embedded corpus
whose labels come from the text's own structure, so the loop runs anywhere.

The tokenizer is the pretrained model's own (the model's ``tokenizer``); texts are encoded as one segment
(``[CLS] a [SEP]``) or a pair (``[CLS] a [SEP] b [SEP]``, segment ids 0/1) for BERT-like vocabularies, and as
``a <delim> b <eos>`` for byte-level ones (GPT's linearised input), cut to ``max_length``.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from plm_lightning.data.sampling import KeyedList, ResumableDataLoader, resumable_loader
from plm_lightning.data.sources import embedded_corpus, split_sentences
from plm_lightning.errors import ConfigError

GLUE_TASKS: dict[str, tuple[tuple[str, ...], str]] = {
    "cola": (("sentence",), "label"), "sst2": (("sentence",), "label"), "mrpc": (("#1 String", "#2 String"), "Quality"),
    "qqp": (("question1", "question2"), "is_duplicate"), "stsb": (("sentence1", "sentence2"), "score"),
    "mnli": (("sentence1", "sentence2"), "gold_label"), "qnli": (("question", "sentence"), "label"),
    "rte": (("sentence1", "sentence2"), "label"), "wnli": (("sentence1", "sentence2"), "label"),
}
"""The text and label columns of each GLUE task's TSV (CoLA's headerless files: give ``text_columns`` by position)."""

OFFLINE_TASKS = ("code_or_prose", "continuation")


def _split_of(text: str) -> str:
    """A fixed split by content hash: 80% train, 10% validation, 10% test."""
    h = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 10
    return "train" if h < 8 else "validation" if h == 8 else "test"


def offline_task(name: str) -> dict[str, list[dict[str, Any]]]:
    """Examples ``{"text_a", ["text_b"], "label"}`` per split of an offline task on the embedded corpus:

    * ``code_or_prose``: a paragraph of the Python documentation; 1 when every line is code (indented, ``>>>`` or
      ``...``), else 0;
    * ``continuation``: two sentences; 1 when the second follows the first in its document, else 0 (a sentence of
      another document), half and half.
    """
    if name not in OFFLINE_TASKS:
        raise ConfigError(f"data.task=offline:{name} is not one of {', '.join('offline:' + t for t in OFFLINE_TASKS)}")
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "validation": [], "test": []}
    documents = list(embedded_corpus())
    if name == "code_or_prose":
        for doc in documents:
            for paragraph in doc.split("\n\n"):
                lines = [ln for ln in paragraph.splitlines() if ln.strip()]
                if len(" ".join(lines).split()) < 4:
                    continue
                code = all(ln.startswith(("   ", ">>>", "...")) for ln in lines)
                text = " ".join(ln.strip() for ln in lines)
                splits[_split_of(text)].append({"text_a": text, "label": int(code)})
        return splits
    rng = np.random.default_rng(0)
    sentences = [split_sentences(d) for d in documents]
    pool = [(i, s) for i, doc in enumerate(sentences) for s in doc]
    for i, doc in enumerate(sentences):
        for a, b in zip(doc, doc[1:]):
            if rng.random() < 0.5:
                j, b = pool[int(rng.integers(len(pool)))]
                if j == i:
                    continue
                label = 0
            else:
                label = 1
            splits[_split_of(a)].append({"text_a": a, "text_b": b, "label": label})
    return splits


def read_examples(path: str, text_columns: tuple[str, ...], label_column: str) -> list[dict[str, Any]]:
    """Rows of a TSV (header line, or columns by position when they are digits) or JSONL file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"data: no such file '{path}' (a .tsv with a header line or a .jsonl)")
    if file.suffix == ".jsonl":
        rows = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        with open(file, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            table = list(reader)
        positional = all(c.isdigit() for c in (*text_columns, label_column))
        header = list(range(max(len(r) for r in table))) if positional else table[0]
        rows = [dict(zip(map(str, header), r)) for r in (table if positional else table[1:])]
    out = []
    for n, row in enumerate(rows, 1):
        missing = [c for c in (*text_columns, label_column) if c not in row]
        if missing:
            raise ConfigError(f"data: '{path}' row {n} has no column {missing[0]!r}; its columns are "
                              f"{', '.join(map(str, row))} (set data.text_columns / data.label_column)")
        example = {"text_a": row[text_columns[0]], "label": row[label_column]}
        if len(text_columns) > 1:
            example["text_b"] = row[text_columns[1]]
        out.append(example)
    return out


class ClassificationDataModule(L.LightningDataModule):
    """Sequence (pair) classification or regression data for ``finetune.SequenceClassifier``."""

    def __init__(self, task: str = "offline:code_or_prose", train_file: str | None = None,
                 validation_file: str | None = None, test_file: str | None = None,
                 text_columns: list[str] | None = None, label_column: str | None = None, regression: bool = False,
                 max_length: int = 128, batch_size: int = 32, num_workers: int = 0, seed: int = 1234) -> None:
        """
        Args:
            task: ``offline:code_or_prose`` / ``offline:continuation`` (built from the embedded corpus), a GLUE task
                name (its columns; give the files), or ``custom`` (give files and columns).
            train_file: Local .tsv (header line) or .jsonl training examples.
            validation_file: Validation examples, same format.
            test_file: Test examples (optional).
            text_columns: One or two text columns (default: the GLUE task's, or text_a / text_b).
            label_column: The label column (default: the GLUE task's, or label).
            regression: Labels are numbers (STS-B); the model needs num_labels 1.
            max_length: Tokens per example, [CLS] and separators included.
        """
        super().__init__()
        offline = task.startswith("offline:")
        if not offline and task not in GLUE_TASKS and task != "custom":
            raise ConfigError(f"data.task={task!r} is not offline:<{'|'.join(OFFLINE_TASKS)}>, a GLUE task "
                              f"({', '.join(GLUE_TASKS)}) or custom")
        if not offline and (train_file is None or validation_file is None):
            raise ConfigError(f"data.task={task}: give data.train_file and data.validation_file (local files; "
                              "nothing is downloaded)")
        self.save_hyperparameters()
        columns, label = GLUE_TASKS.get(task, (("text_a", "text_b"), "label"))
        self.text_columns = tuple(text_columns) if text_columns else columns
        self.label_column = label_column or label
        self.task, self.regression = task, regression or task == "stsb"
        self.files = {"train": train_file, "validation": validation_file, "test": test_file}
        self.max_length, self.batch_size, self.num_workers, self.seed = max_length, batch_size, num_workers, seed
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.labels: list[str] = []
        self.tokenizer: Any = None
        """Set by the model in ``setup`` (the pretrained model's own tokenizer)."""

    def _load(self) -> dict[str, list[dict[str, Any]]]:
        if self.task.startswith("offline:"):
            return offline_task(self.task.split(":", 1)[1])
        out = {}
        for split, path in self.files.items():
            if path is not None:
                columns = tuple(c for c in self.text_columns if c)
                out[split] = read_examples(path, columns, self.label_column)
        return out

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        self.examples = self._load()
        if self.regression:
            return
        self.labels = sorted({str(e["label"]) for e in self.examples["train"]})
        for split, rows in self.examples.items():
            unseen = sorted({str(e["label"]) for e in rows} - set(self.labels))
            if unseen:
                raise ConfigError(f"data: the {split} labels {unseen[:3]} never occur in training (labels: "
                                  f"{', '.join(self.labels[:10])})")

    @property
    def num_labels(self) -> int:
        return 1 if self.regression else len(self.labels)

    def majority_baseline(self, split: str = "validation") -> float | None:
        """Accuracy of always answering the most frequent training label (classification only)."""
        if self.regression or not self.examples.get(split):
            return None
        train = [str(e["label"]) for e in self.examples["train"]]
        top = max(set(train), key=train.count)
        return float(np.mean([str(e["label"]) == top for e in self.examples[split]]))

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        a = tok.encode_batch([r["text_a"] for r in rows])
        b = tok.encode_batch([r["text_b"] for r in rows]) if "text_b" in rows[0] else [[] for _ in rows]
        ids, types = [], []
        cls, sep = tok.ids.get("cls"), tok.ids.get("sep", tok.ids.get("eos"))
        budget = self.max_length - (3 if b[0] else 2)
        for x, y in zip(a, b):
            while len(x) + len(y) > budget:  # BERT's truncation: shorten the longer text
                (x if len(x) >= len(y) else y).pop()
            first = ([cls] if cls is not None else []) + x + [sep]
            ids.append(first + (y + [sep] if y else []))
            types.append([0] * len(first) + [1] * (len(y) + 1 if y else 0))
        length = max(len(r) for r in ids)
        pad = tok.ids.get("pad", 0)
        labels = ([float(r["label"]) for r in rows] if self.regression
                  else [self.labels.index(str(r["label"])) for r in rows])
        return {"input_ids": torch.tensor([r + [pad] * (length - len(r)) for r in ids]),
                "token_type_ids": torch.tensor([t + [0] * (length - len(t)) for t in types]),
                "attention_mask": torch.tensor([[1] * len(r) + [0] * (length - len(r)) for r in ids]),
                "labels": torch.tensor(labels)}

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        return resumable_loader(KeyedList(self.examples.get(split) or []), self.collate, self.batch_size, shuffle,
                                self.seed, self.num_workers, self.trainer)

    def train_dataloader(self) -> ResumableDataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> ResumableDataLoader | list:
        return self._loader("validation", False)

    def test_dataloader(self) -> ResumableDataLoader | list:
        return self._loader("test", False)
