"""Token tagging data (BIO named entities, CoNLL-2003 and the offline ``markup_spans`` task) for
``finetune.TokenClassifier``.

Words are joined by spaces and tokenized with the pretrained model's tokenizer; each word's label sits on its first
sub-word token and the other sub-words are ignored (-100), as BERT does for CoNLL-2003 (Devlin et al. 2019, sec. 5.3).
A sentence longer than ``max_length`` tokens is cut: its last words are neither seen nor scored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.data import FinetuneDataModule, encoder_inputs, pad_rows
from plm_lightning.finetune.formats import read_conll

IGNORE = -100


def word_labels(tokenizer: Any, words: list[str], tag_ids: list[int], max_length: int) -> tuple[list[int], list[int]]:
    """``[CLS] tokens [SEP]`` ids (GPT: ``tokens <eos>``) and per-token labels: the word's tag id on its first
    sub-word, -100 elsewhere."""
    text = " ".join(words)
    owner = np.full(len(text) + 1, -1)
    at = 0
    for w, word in enumerate(words):
        owner[at:at + len(word)] = w
        at += len(word) + 1
    encoding = tokenizer.tokenizer.encode(text, add_special_tokens=False)
    ids, labels, last = [], [], -1
    for token_id, (start, end) in zip(encoding.ids, encoding.offsets):
        word = next((int(owner[c]) for c in range(start, max(end, start + 1)) if owner[c] >= 0), -1)
        ids.append(token_id)
        labels.append(tag_ids[word] if word >= 0 and word != last else IGNORE)
        last = word if word >= 0 else last
    cls, sep = tokenizer.ids.get("cls"), tokenizer.ids.get("sep", tokenizer.ids.get("eos"))
    keep = max_length - 1 - (cls is not None)
    head = [cls] if cls is not None else []
    return head + ids[:keep] + [sep], [IGNORE] * len(head) + labels[:keep] + [IGNORE]


class TaggingDataModule(FinetuneDataModule):
    """BIO-tagged sentences: ``offline:markup_spans`` or CoNLL-2003 files (``conll2003`` / ``custom``)."""

    KIND = "tagging"

    def __init__(self, task: str = "offline:markup_spans", train_file: str | None = None,
                 validation_file: str | None = None, test_file: str | None = None, tag_column: int = -1,
                 unlabeled_file: str | None = None, max_length: int = 128, batch_size: int = 32, num_workers: int = 0,
                 seed: int = 1234) -> None:
        """
        Args:
            task: ``offline:markup_spans`` (built from the embedded corpus), ``conll2003`` or ``custom`` (local
                CoNLL column files or JSONL with tokens / ner_tags).
            train_file: Training sentences.
            validation_file: Validation sentences.
            test_file: Test sentences (optional).
            tag_column: The column of the tag in CoNLL lines (CoNLL-2003: the last, -1).
            unlabeled_file: Unlabelled sentences for semi-supervised training (CVT), one per line, words split on
                spaces (the offline task brings its own: the corpus's other prose sentences).
            max_length: Tokens per sentence, [CLS] and [SEP] included.
        """
        super().__init__(task, train_file, validation_file, test_file, max_length, batch_size, num_workers, seed,
                         ("conll2003",))
        self.save_hyperparameters()
        self.tag_column = tag_column
        self.unlabeled_file = unlabeled_file
        self.with_unlabeled = False
        """Set by a model that trains on unlabelled sentences too (CVT): training batches pair both."""
        self.labels: list[str] = []

    def read_file(self, path: str) -> list[dict[str, Any]]:
        return read_conll(path, self.tag_column)

    def setup(self, stage: str | None = None) -> None:
        had = bool(self.examples)
        super().setup(stage)
        if had or self.unlabeled_file is None:
            return
        from pathlib import Path

        file = Path(self.unlabeled_file).expanduser()
        if not file.is_file():
            raise ConfigError(f"data.unlabeled_file: no such file '{self.unlabeled_file}' (one sentence per line)")
        self.examples["unlabeled"] = [{"words": line.split()} for line in file.read_text(encoding="utf-8").splitlines()
                                      if line.strip()]

    def check(self) -> None:
        train = {t for e in self.examples["train"] for t in e["tags"]}
        bad = sorted(t for t in train if t != "O" and not t.startswith(("B-", "I-")))
        if bad:
            raise ConfigError(f"data: tags {bad[:3]} are not BIO (O, B-TYPE, I-TYPE); check data.tag_column")
        # O first, then each type's B- and I- (so ids do not depend on which tags a split happens to hold)
        types = sorted({t[2:] for t in train if t != "O"})
        self.labels = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
        for split, rows in self.examples.items():
            unseen = sorted({t for e in rows for t in e.get("tags", ())} - set(self.labels))
            if unseen:
                raise ConfigError(f"data: the {split} tags {unseen[:3]} never occur in training (tags: "
                                  f"{', '.join(self.labels[:12])})")

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def majority_baseline(self, split: str = "validation") -> float | None:
        """Token accuracy of tagging every word O (its entity F1 is 0)."""
        rows = self.examples.get(split)
        if not rows:
            return None
        return float(np.mean([t == "O" for e in rows for t in e["tags"]]))

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        index = {t: i for i, t in enumerate(self.labels)}
        if getattr(self.tokenizer, "word_level", False):  # a word-level model (ELMo, CoVe features) reads words
            words = [r["words"][: self.max_length] for r in rows]
            if "tags" not in rows[0]:
                return {"words": words}
            return {"words": words, "labels": pad_rows([[index[t] for t in r["tags"][: self.max_length]] for r in rows],
                                                       IGNORE)}
        framed = [word_labels(self.tokenizer, r["words"], [index[t] for t in r["tags"]], self.max_length) for r in rows]
        ids = [f[0] for f in framed]
        return {**encoder_inputs(self.tokenizer, ids, [[0] * len(r) for r in ids]),
                "labels": pad_rows([f[1] for f in framed], IGNORE)}

    def train_dataloader(self) -> Any:
        labeled = super().train_dataloader()
        if not self.with_unlabeled:
            return labeled
        if not self.examples.get("unlabeled"):
            raise ConfigError("model.cvt needs unlabelled sentences: data.unlabeled_file, or an offline task")
        from lightning.pytorch.utilities import CombinedLoader

        return CombinedLoader({"labeled": labeled, "unlabeled": self._loader("unlabeled", True)}, "max_size_cycle")
