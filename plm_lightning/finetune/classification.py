"""Sequence classification and regression on a pretrained backbone, the backbone reused as is.

BERT (Devlin et al. 2019, sec. 4.1 / fig. 4): the [CLS] state through the pretraining pooler (dense + tanh), dropout
and a linear layer; GPT (Radford et al. 2018, sec. 3.3): the last real token's state, dropout and a linear layer
without bias (W_y). Cross-entropy for classes; with ``num_labels: 1``, regression with mean squared error (STS-B).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassMatthewsCorrCoef
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.base import ENCODERS, FinetuneModule
from plm_lightning.finetune.transfer import Transfer
from plm_lightning.nn import Pooler
from plm_lightning.nn.stack_inputs import StackInputs, text_inputs


def last_token_states(hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """The state of each row's last real token (GPT's extract token), from right-padded batches."""
    last = (attention_mask.sum(1) - 1 if attention_mask is not None
            else torch.full((len(hidden),), hidden.shape[1] - 1, device=hidden.device))
    return hidden[torch.arange(len(hidden), device=hidden.device), last.long()]


def concat_pooling(hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """ULMFiT's concat pooling (Howard & Ruder 2018, sec. 3.3): [h_T, maxpool(H), meanpool(H)] over the real tokens."""
    if attention_mask is None:
        attention_mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    real = attention_mask.bool()[..., None]
    maximum = hidden.masked_fill(~real, float("-inf")).amax(1)
    mean = (hidden * real).sum(1) / real.sum(1).clamp(min=1)
    return torch.cat([last_token_states(hidden, attention_mask), maximum, mean], dim=-1)


def sequence_pooler(module: FinetuneModule, pretrained: Any, pooling: str,
                    modes: tuple[str, ...] = ("auto", "first", "last")) -> tuple[str, Pooler | None]:
    """The pooling mode (``auto``: first for BERT-like encoders, last for causal models, summary for encoder-decoders
    and XLNet) and, for ``first``, BERT's pooler, initialised from the pretrained NSP/SOP pooler when there is one
    (and weights are not reset); for ``summary``, a dense + tanh on the last real state (BART's head, XLNet's
    sequence summary)."""
    if pooling not in modes:
        raise ConfigError(f"model.pooling={pooling!r} is not one of {', '.join(modes)}")
    encoder_decoder = hasattr(module.backbone, "decoder")
    if encoder_decoder and pooling not in ("auto", "summary"):
        raise ConfigError(f"model.pooling={pooling!r}: an encoder-decoder is read at its decoder's last token "
                          "(pooling auto or summary)")
    # XLNet puts its <cls> last and reads it through a dense + tanh "sequence summary" (Yang et al. 2019, sec. 3.3)
    xlnet = module.backbone_config.position_embedding == "xl_relative" and not module.causal
    if pooling == "auto":
        mode = "summary" if encoder_decoder or xlnet else "last" if module.causal else "first"
    else:
        mode = pooling
    if mode == "summary":  # dense + tanh on the last real state (BART: of the decoder, which read the same text)
        return mode, Pooler(module.backbone_config.hidden_size)
    if mode != "first":
        return mode, None
    pooler = Pooler(module.backbone_config.hidden_size)
    head = getattr(pretrained, "sentence_head", None)
    if head is not None and not module.hparams.random_init:  # BERT pretrained with NSP: its pooler is trained
        pooler.load_state_dict(head.pooler.state_dict())
    return mode, pooler


def sequence_states(module: Any, input_ids: Tensor, attention_mask: Tensor | None,
                    token_type_ids: Tensor | None = None) -> Tensor:
    """The last hidden states the head reads: the backbone's, or for an encoder-decoder the decoder's with the same
    text on both sides, shifted right from the decoder's start token (BART, Lewis et al. 2020, sec. 3.1)."""
    if not hasattr(module.backbone, "decoder"):
        return module.backbone(input_ids, text_inputs(module.backbone, attention_mask, token_type_ids)).last_hidden_state
    start = torch.full_like(input_ids[:, :1], module.decoder_start_id)
    decoder_ids = torch.cat([start, input_ids[:, :-1]], dim=1)
    _, decoded = module.backbone(input_ids, decoder_ids, StackInputs(attention_mask=attention_mask),
                                 StackInputs(attention_mask=attention_mask))
    return decoded.last_hidden_state


def pooled_states(module: Any, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """One vector per sequence: [CLS] through the pooler, the last real token (through BART's dense + tanh for an
    encoder-decoder), or ULMFiT's concat pooling."""
    if module.pooling == "concat":
        return concat_pooling(hidden, attention_mask)
    if module.pooling == "summary":
        return module.pooler(last_token_states(hidden, attention_mask)[:, None])
    return module.pooler(hidden) if module.pooling == "first" else last_token_states(hidden, attention_mask)


def auxiliary_lm_head(module: FinetuneModule, pretrained: Any, lm_weight: float) -> nn.Module | None:
    """GPT's auxiliary objective (Radford et al. 2018, eq. 5: L3 = L2 + lambda * L1, lambda = 0.5) needs the
    pretrained causal LM head (tied to the embeddings); None when ``lm_weight`` is 0."""
    if lm_weight < 0:
        raise ConfigError(f"model.lm_weight={lm_weight} must be >= 0 (GPT: 0.5)")
    if not lm_weight:
        return None
    if not module.causal:
        raise ConfigError("model.lm_weight: the auxiliary language-modelling loss is GPT's (next-token prediction); "
                          "give a causal LM checkpoint or set model.lm_weight=0")
    return pretrained.lm_head


def next_token_loss(lm_head: nn.Module, hidden: Tensor, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """L1 of GPT on the task's own text: next-token cross-entropy at every real token that has a successor."""
    real = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    positions = real[:, :-1] & real[:, 1:]
    loss, _, _ = lm_head(hidden[:, :-1], positions, targets=input_ids[:, 1:][positions])
    return loss


class PositiveClassF1(MulticlassF1Score):
    """F1 of one class of a binary task, as GLUE scores MRPC and QQP (scikit-learn's ``f1_score``, positive label 1)."""

    def __init__(self, positive: int) -> None:
        super().__init__(2, average="none")
        self.positive = positive

    def compute(self) -> Tensor:
        return super().compute()[self.positive]


class MatthewsCorrelation(MulticlassMatthewsCorrCoef):
    """Matthews correlation (Gorodkin's multiclass form, as scikit-learn's ``matthews_corrcoef``, which GLUE's CoLA
    scorer calls) from torchmetrics' confusion matrix, 0 where the denominator is 0 (a classifier that always answers
    one class). torchmetrics 1.9 approximates those cases with epsilons instead and gives a constant classifier a
    positive score (0.204 on 12 labels, 8 of them positive; torchmetrics issue #3355)."""

    def compute(self) -> Tensor:
        confmat = self.confmat.double()
        true, predicted = confmat.sum(1), confmat.sum(0)
        correct, total = confmat.trace(), confmat.sum()
        covariance = correct * total - (true * predicted).sum()
        denominator = (total ** 2 - (predicted ** 2).sum()) * (total ** 2 - (true ** 2).sum())
        if denominator == 0:
            return torch.zeros((), device=confmat.device)
        return (covariance / denominator.sqrt()).float()


def classification_metrics(num_labels: int, positive: int | None = None) -> tuple[MetricCollection, MetricCollection]:
    """Validation and test metrics: Pearson and Spearman correlation for regression (STS-B); accuracy, macro F1 and
    Matthews correlation (CoLA; scikit-learn's convention) for classes, and with ``positive`` the F1 of that class
    (``f1_positive``)."""
    if num_labels == 1:
        metrics = MetricCollection({"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef()})
    else:
        metrics = MetricCollection({"accuracy": MulticlassAccuracy(num_labels, average="micro"),
                                    "f1": MulticlassF1Score(num_labels, average="macro"),
                                    "mcc": MatthewsCorrelation(num_labels),
                                    **({"f1_positive": PositiveClassF1(positive)} if positive is not None else {})})
    return metrics.clone(prefix="val/"), metrics.clone(prefix="test/")


class SequenceClassifier(FinetuneModule):
    """A classifier head on the backbone of ``init_from`` (a checkpoint of ours or a transformers directory)."""

    def __init__(self, init_from: str | None = None, num_labels: int = 2,
                 pooling: Literal["auto", "first", "last", "concat", "summary"] = "auto",
                 dropout: float = 0.1, learning_rate: float = 2e-5, weight_decay: float = 0.01,
                 warmup_ratio: float = 0.1, random_init: bool = False, tokenizer: str | None = None,
                 transfer: Transfer | None = None, lm_weight: float = 0.0) -> None:
        """
        Args:
            init_from: The pretrained model: a plm_lightning checkpoint (MLM, ELECTRA, ERNIE 2.0, causal LM,
                encoder-decoder) or a transformers directory we import (a ``*ForSequenceClassification`` one brings
                its head too).
            num_labels: Classes; 1 = regression.
            pooling: first ([CLS] through the pooler: encoders), last (the last real token: decoders), summary
                (dense + tanh on the last real token: BART's decoder, XLNet), concat (ULMFiT: last token, max and
                mean over the tokens), or auto (first, last or summary by the model).
            dropout: Before the classifier (BERT, GPT: 0.1).
            learning_rate: AdamW's peak rate (BERT's grid: 2e-5 to 5e-5).
            weight_decay: AdamW's decoupled weight decay (0.01).
            warmup_ratio: Linear warm-up over this share of the steps, then linear decay (BERT: 0.1).
            random_init: Keep the architecture and tokenizer but start from random weights (the no-pretraining
                control of a transfer study).
            tokenizer: A tokenizer.json (or directory) to use instead of the checkpoint's own; its vocabulary must fit.
            transfer: ULMFiT's discriminative rates, slanted triangular schedule and gradual unfreezing, or adapters
                (``finetune.transfer.Transfer``; default: plain full fine-tuning).
            lm_weight: GPT's auxiliary language-modelling loss on the task's text, L3 = L2 + lm_weight * L1 (GPT:
                0.5; causal checkpoints only; 0 = off).
        """
        super().__init__()
        if num_labels < 1:
            raise ConfigError(f"model.num_labels={num_labels} must be >= 1 (1 = regression)")
        self.save_hyperparameters()
        pretrained = self.attach_pretrained(init_from, random_init, tokenizer, transfer, (*ENCODERS, "Seq2SeqLM"))
        self.decoder_start_id = self.tokenizer.ids.get(getattr(pretrained, "decoder_start_token", "pad"), 0)
        self.pooling, self.pooler = sequence_pooler(self, pretrained, pooling,
                                                    ("auto", "first", "last", "concat", "summary"))
        self.lm_head = auxiliary_lm_head(self, pretrained, lm_weight)
        self.dropout = nn.Dropout(dropout)
        width = self.backbone_config.hidden_size * (3 if self.pooling == "concat" else 1)
        self.classifier = nn.Linear(width, num_labels, bias=self.pooling != "last")
        nn.init.normal_(self.classifier.weight, 0.0, 0.02)
        if self.classifier.bias is not None:
            nn.init.zeros_(self.classifier.bias)
        self.val_metrics, self.test_metrics = classification_metrics(num_labels)
        self.load_head(init_from)

    def check_data(self, data: Any) -> None:
        super().check_data(data)
        positive = getattr(data, "positive_index", None)
        if positive is not None:
            self.val_metrics, self.test_metrics = classification_metrics(self.hparams.num_labels, positive)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        hidden = sequence_states(self, input_ids, attention_mask, token_type_ids)
        return self.logits(pooled_states(self, hidden, attention_mask))

    def logits(self, pooled: Tensor) -> Tensor:
        logits = self.classifier(self.dropout(pooled))
        return logits[:, 0] if self.hparams.num_labels == 1 else logits

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.hparams.num_labels == 1:
            return F.mse_loss(logits.float(), labels.float())
        return F.cross_entropy(logits.float(), labels)

    def step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        hidden = sequence_states(self, ids, mask, batch.get("token_type_ids"))
        pooled = pooled_states(self, hidden, mask)
        if "swapped_input_ids" in batch:  # GPT on similarity: both orders, representations added (sec. 3.3)
            swapped_mask = batch.get("swapped_attention_mask")
            swapped = sequence_states(self, batch["swapped_input_ids"], swapped_mask)
            pooled = pooled + pooled_states(self, swapped, swapped_mask)
        logits = self.logits(pooled)
        loss = self.loss(logits, batch["labels"])
        if self.lm_head is not None:
            loss = loss + self.hparams.lm_weight * next_token_loss(self.lm_head, hidden, ids, mask)
        return logits, loss

    def update_metrics(self, metrics: MetricCollection, batch: dict[str, Any], outputs: Tensor) -> None:
        metrics.update(outputs.float(), batch["labels"])


class MultipleChoice(FinetuneModule):
    """One score per (context, choice) sequence, softmax over a question's choices (BERT on SWAG, Devlin et al. 2019,
    sec. 4.4: a vector dotted with the [CLS] state; GPT, Radford et al. 2018, sec. 3.3: the last token of each
    linearised ``context <delim> answer``), cross-entropy on the right choice."""

    def __init__(self, init_from: str | None = None, pooling: Literal["auto", "first", "last"] = "auto",
                 dropout: float = 0.1, learning_rate: float = 2e-5, weight_decay: float = 0.01,
                 warmup_ratio: float = 0.1, random_init: bool = False, tokenizer: str | None = None,
                 transfer: Transfer | None = None, lm_weight: float = 0.0) -> None:
        """
        Args:
            init_from: The pretrained model: a plm_lightning checkpoint or a transformers directory (a
                ``*ForMultipleChoice`` one brings its head too).
            pooling: first ([CLS] through the pooler: encoders), last (the last real token: decoders), or auto.
            dropout: Before the scoring layer.
            learning_rate: AdamW's peak rate (BERT on SWAG: 2e-5).
            weight_decay: AdamW's decoupled weight decay.
            warmup_ratio: Linear warm-up share of the steps, then linear decay.
            random_init: Same architecture from random weights (the no-pretraining control).
            tokenizer: A tokenizer.json (or directory) to use instead of the checkpoint's; its vocabulary must fit.
            transfer: ULMFiT's discriminative rates, slanted triangular schedule and gradual unfreezing, or adapters
                (``finetune.transfer.Transfer``; default: plain full fine-tuning).
            lm_weight: GPT's auxiliary language-modelling loss on the task's text, L3 = L2 + lm_weight * L1 (GPT:
                0.5; causal checkpoints only; 0 = off).
        """
        super().__init__()
        self.save_hyperparameters()
        pretrained = self.attach_pretrained(init_from, random_init, tokenizer, transfer)
        self.pooling, self.pooler = sequence_pooler(self, pretrained, pooling)
        self.lm_head = auxiliary_lm_head(self, pretrained, lm_weight)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.backbone_config.hidden_size, 1, bias=self.pooling != "last")
        nn.init.normal_(self.classifier.weight, 0.0, 0.02)
        if self.classifier.bias is not None:
            nn.init.zeros_(self.classifier.bias)
        self.val_metrics, self.test_metrics = self._metrics(2)
        self.load_head(init_from)

    @staticmethod
    def _metrics(num_choices: int) -> tuple[MetricCollection, MetricCollection]:
        metrics = MetricCollection({"accuracy": MulticlassAccuracy(num_choices, average="micro")})
        return metrics.clone(prefix="val/"), metrics.clone(prefix="test/")

    def check_data(self, data: Any) -> None:
        choices = {len(e["choices"]) for e in data.examples["train"]}
        self.val_metrics, self.test_metrics = self._metrics(max(choices))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None,
                num_choices: int) -> Tensor:
        hidden = self.backbone(input_ids, text_inputs(self.backbone, attention_mask, token_type_ids)).last_hidden_state
        return self.scores(hidden, attention_mask, num_choices)

    def scores(self, hidden: Tensor, attention_mask: Tensor | None, num_choices: int) -> Tensor:
        return self.classifier(self.dropout(pooled_states(self, hidden, attention_mask))).view(-1, num_choices)

    def step(self, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        hidden = self.backbone(ids, text_inputs(self.backbone, mask, batch.get("token_type_ids"))).last_hidden_state
        logits = self.scores(hidden, mask, batch["num_choices"])
        loss = F.cross_entropy(logits.float(), batch["labels"])
        if self.lm_head is not None:
            loss = loss + self.hparams.lm_weight * next_token_loss(self.lm_head, hidden, ids, mask)
        return logits, loss

    @staticmethod
    def batch_size_of(batch: dict[str, Any]) -> int:
        return len(batch["labels"])

    def update_metrics(self, metrics: MetricCollection, batch: dict[str, Any], outputs: Tensor) -> None:
        metrics.update(outputs.float(), batch["labels"])
