"""Extractive question answering data (SQuAD v1.1/v2.0 and the offline ``cloze_spans`` task) for
``finetune.SpanExtractor``.

Each question becomes one or more features ``[CLS] question [SEP] context window [SEP]``: a context longer than the
model sees is cut into windows ``doc_stride`` tokens apart (BERT's ``run_squad.py``: max_seq_length 384, doc_stride
128, max_query_length 64). A window that does not hold the whole answer (and an unanswerable question) points at
[CLS] (position 0). Every feature keeps each token's character span in the context, so a predicted token span maps
back to the original text.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.data import FinetuneDataModule, encoder_inputs, pad_rows
from plm_lightning.finetune.formats import read_squad


def qa_features(tokenizer: Any, question: str, context: str, answers: list[dict[str, Any]], max_length: int,
                doc_stride: int, max_query_length: int) -> list[dict[str, Any]]:
    """The windows of one question: ids, segment ids, per-token context character spans ((-1, -1) outside the
    context) and the answer's start/end token (0, 0 when the window does not hold it)."""
    cls, sep = tokenizer.ids.get("cls"), tokenizer.ids.get("sep")
    if cls is None or sep is None:
        raise ConfigError("extractive QA needs a tokenizer with [CLS] and [SEP] roles (an encoder's)")
    query = tokenizer.encode_batch([question])[0][:max_query_length]
    encoding = tokenizer.tokenizer.encode(context, add_special_tokens=False)
    ids, spans = encoding.ids, encoding.offsets
    room = max_length - len(query) - 3
    if room < 1:
        raise ConfigError(f"data.max_length={max_length} leaves no room for the context after a {len(query)}-token "
                          "question")
    answer = answers[0] if answers else None
    features, start = [], 0
    while True:
        window = range(start, min(start + room, len(ids)))
        offset = len(query) + 2  # [CLS] question [SEP]
        first, last = 0, 0
        if answer is not None:
            a_start, a_end = answer["start"], answer["start"] + len(answer["text"])
            inside = [i for i in window if spans[i][1] > a_start and spans[i][0] < a_end]
            if inside and spans[window[0]][0] <= a_start and spans[window[-1]][1] >= a_end:
                first, last = inside[0] - start + offset, inside[-1] - start + offset
        features.append({
            "ids": [cls, *query, sep, *(ids[i] for i in window), sep],
            "types": [0] * offset + [1] * (len(window) + 1),
            "spans": [(-1, -1)] * offset + [tuple(spans[i]) for i in window] + [(-1, -1)],
            "start": first, "end": last})
        if window.stop >= len(ids):
            return features
        start += min(doc_stride, room)


class QADataModule(FinetuneDataModule):
    """Questions with a context and answer spans: ``offline:cloze_spans``, or SQuAD JSON files (``squad``,
    ``squad_v2``, ``custom``)."""

    KIND = "qa"

    def __init__(self, task: str = "offline:cloze_spans", train_file: str | None = None,
                 validation_file: str | None = None, test_file: str | None = None, max_length: int = 384,
                 doc_stride: int = 128, max_query_length: int = 64, batch_size: int = 32, num_workers: int = 0,
                 seed: int = 1234) -> None:
        """
        Args:
            task: ``offline:cloze_spans`` (built from the embedded corpus), ``squad``, ``squad_v2`` or ``custom``
                (local SQuAD-format JSON files).
            train_file: Training questions.
            validation_file: Validation questions.
            test_file: Test questions (optional).
            max_length: Tokens per feature (BERT: 384).
            doc_stride: Tokens between the starts of two windows of one context (BERT: 128).
            max_query_length: Question tokens kept (BERT: 64).
            batch_size: Questions per batch (a long context adds features).
        """
        super().__init__(task, train_file, validation_file, test_file, max_length, batch_size, num_workers, seed,
                         ("squad", "squad_v2"))
        self.save_hyperparameters()
        self.doc_stride, self.max_query_length = doc_stride, max_query_length
        self.has_impossible = False

    def read_file(self, path: str) -> list[dict[str, Any]]:
        return read_squad(path)

    def check(self) -> None:
        self.has_impossible = any(e["impossible"] for rows in self.examples.values() for e in rows)

    def majority_baseline(self, split: str = "validation") -> float | None:
        """Exact match of always answering the most frequent training answer."""
        rows = self.examples.get(split)
        if not rows:
            return None
        top = Counter(e["answers"][0]["text"] if e["answers"] else "" for e in self.examples["train"]).most_common(1)[0][0]
        return sum(top in ([a["text"] for a in e["answers"]] or [""]) for e in rows) / len(rows)

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        features, owner = [], []
        for i, r in enumerate(rows):
            for f in qa_features(self.tokenizer, r["question"], r["context"], r["answers"], self.max_length,
                                 self.doc_stride, self.max_query_length):
                features.append(f)
                owner.append(i)
        ids = [f["ids"] for f in features]
        return {**encoder_inputs(self.tokenizer, ids, [f["types"] for f in features]),
                "start_positions": torch.tensor([f["start"] for f in features]),
                "end_positions": torch.tensor([f["end"] for f in features]),
                "spans": pad_rows([[list(s) for s in f["spans"]] for f in features], [-1, -1]),  # type: ignore[list-item]
                "feature_question": torch.tensor(owner),
                "questions": [{"id": r["id"], "context": r["context"],
                               "answers": [a["text"] for a in r["answers"]] or [""]} for r in rows]}
