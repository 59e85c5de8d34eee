"""Extractive question answering on a pretrained backbone (BERT on SQuAD, Devlin et al. 2019, sec. 4.2-4.3): a start
vector S and an end vector E (one linear layer with two outputs); P(start = i) = softmax_i(S . T_i), likewise for the
end; the loss is the mean of the two cross-entropies; the prediction is the span i <= j (at most ``max_answer_length``
tokens) maximising S . T_i + E . T_j over every window of the context. SQuAD v2.0 (sec. 4.3): the no-answer score
s_null = S . C + E . C at [CLS] wins when it beats the best span by more than ``null_threshold``.
Scored with SQuAD's exact match and token F1 (torchmetrics' implementation of the official script), as fractions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.text import SQuAD

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.base import FinetuneModule
from plm_lightning.finetune.transfer import Transfer
from plm_lightning.nn.stack_inputs import text_inputs


class SQuADScore(SQuAD):
    """torchmetrics' SQuAD (the official v1.1 script's normalisation) as fractions, under our metric names."""

    def compute(self) -> dict[str, Tensor]:
        scores = super().compute()
        return {"exact_match": scores["exact_match"] / 100, "f1": scores["f1"] / 100}


def best_span(start: Tensor, end: Tensor, in_context: Tensor, max_answer_length: int) -> tuple[float, int, int]:
    """(score, i, j) of the best span i <= j < i + max_answer_length with both ends in the context."""
    scores = start[:, None] + end[None, :]
    n = len(start)
    allowed = torch.ones(n, n, dtype=torch.bool, device=start.device).triu().tril(max_answer_length - 1)
    allowed &= in_context[:, None] & in_context[None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    flat = int(scores.argmax())
    return float(scores.flatten()[flat]), flat // n, flat % n


class SpanExtractor(FinetuneModule):
    """Start/end span prediction on the backbone of ``init_from`` (an encoder of ours or a transformers directory)."""

    def __init__(self, init_from: str | None = None, max_answer_length: int = 30, null_threshold: float = 0.0,
                 learning_rate: float = 5e-5, weight_decay: float = 0.01, warmup_ratio: float = 0.1,
                 random_init: bool = False, tokenizer: str | None = None,
                 transfer: Transfer | None = None) -> None:
        """
        Args:
            init_from: The pretrained encoder: a plm_lightning checkpoint or a transformers directory (a
                ``*ForQuestionAnswering`` one brings its head too).
            max_answer_length: Longest predicted answer in tokens (BERT: 30).
            null_threshold: SQuAD v2.0: answer nothing when s_null > best span score + this (tuned on dev in BERT).
            learning_rate: AdamW's peak rate (BERT on SQuAD: 5e-5).
            weight_decay: AdamW's decoupled weight decay.
            warmup_ratio: Linear warm-up share of the steps, then linear decay.
            random_init: Same architecture from random weights (the no-pretraining control).
            tokenizer: A tokenizer.json (or directory) to use instead of the checkpoint's; its vocabulary must fit.
            transfer: ULMFiT's discriminative rates, slanted triangular schedule and gradual unfreezing, or adapters
                (``finetune.transfer.Transfer``; default: plain full fine-tuning).
        """
        super().__init__()
        self.save_hyperparameters()
        self.attach_pretrained(init_from, random_init, tokenizer, transfer)
        if self.causal:
            raise ConfigError("model.init_from: extractive QA reads the whole context at every position; give an "
                              "encoder (MLM, ELECTRA, ERNIE 2.0), not a causal LM")
        self.qa_outputs = nn.Linear(self.backbone_config.hidden_size, 2)
        nn.init.normal_(self.qa_outputs.weight, 0.0, 0.02)
        nn.init.zeros_(self.qa_outputs.bias)
        metrics = MetricCollection({"squad": SQuADScore()})
        self.val_metrics, self.test_metrics = metrics.clone(prefix="val/"), metrics.clone(prefix="test/")
        self.allow_null = False
        self.load_head(init_from)

    def check_data(self, data: Any) -> None:
        self.allow_null = data.has_impossible

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        hidden = self.backbone(input_ids, text_inputs(self.backbone, attention_mask, token_type_ids)).last_hidden_state
        start, end = self.qa_outputs(hidden).float().unbind(-1)
        return start, end

    def step(self, batch: dict[str, Any]) -> tuple[tuple[Tensor, Tensor], Tensor]:
        start, end = self(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))
        if batch.get("attention_mask") is not None:
            pad = batch["attention_mask"] == 0
            start, end = start.masked_fill(pad, -1e4), end.masked_fill(pad, -1e4)
        loss = (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2
        return (start, end), loss

    def predict_answers(self, batch: dict[str, Any], start: Tensor, end: Tensor) -> list[str]:
        """The answer text of each question of the batch, over all its windows."""
        best: dict[int, tuple[float, str]] = {}
        null: dict[int, float] = {}
        in_context = batch["spans"][..., 0] >= 0
        for f, q in enumerate(batch["feature_question"].tolist()):
            score, i, j = best_span(start[f], end[f], in_context[f], self.hparams.max_answer_length)
            null[q] = min(null.get(q, float("inf")), float(start[f, 0] + end[f, 0]))
            if score > best.get(q, (float("-inf"), ""))[0]:
                context = batch["questions"][q]["context"]
                best[q] = (score, context[int(batch["spans"][f, i, 0]):int(batch["spans"][f, j, 1])])
        answers = []
        for q in range(len(batch["questions"])):
            score, text = best.get(q, (float("-inf"), ""))
            answers.append("" if self.allow_null and null[q] > score + self.hparams.null_threshold else text)
        return answers

    def update_metrics(self, metrics: MetricCollection, batch: dict[str, Any], outputs: tuple[Tensor, Tensor]) -> None:
        answers = self.predict_answers(batch, *outputs)
        questions = batch["questions"]
        metrics.update([{"prediction_text": a, "id": q["id"]} for a, q in zip(answers, questions)],
                       [{"answers": {"text": q["answers"], "answer_start": [0] * len(q["answers"])}, "id": q["id"]}
                        for q in questions])
