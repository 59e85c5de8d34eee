"""Sequence classification and regression on a pretrained backbone, the backbone reused as is.

BERT (Devlin et al. 2019, sec. 4.1 / fig. 4): the [CLS] state through the pretraining pooler (dense + tanh), dropout
and a linear layer; GPT (Radford et al. 2018, sec. 3.3): the last real token's state, dropout and a linear layer.
Cross-entropy for classes; with ``num_labels: 1``, regression with mean squared error (STS-B).
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassMatthewsCorrCoef
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from plm_lightning.errors import ConfigError
from plm_lightning.nn import Pooler
from plm_lightning.objectives.schedules import lr_lambda

ENCODERS = ("MaskedLM", "ELECTRA", "ERNIE2", "CausalLM")


class SequenceClassifier(L.LightningModule):
    """A classifier head on the backbone of ``init_from`` (a checkpoint of ours or a transformers directory)."""

    def __init__(self, init_from: str | None = None, num_labels: int = 2, pooling: Literal["auto", "first", "last"] = "auto",
                 dropout: float = 0.1, learning_rate: float = 2e-5, weight_decay: float = 0.01,
                 warmup_ratio: float = 0.1) -> None:
        """
        Args:
            init_from: The pretrained model: a plm_lightning checkpoint (MLM, ELECTRA, ERNIE 2.0, causal LM) or a
                transformers directory we import.
            num_labels: Classes; 1 = regression.
            pooling: first ([CLS] through the pooler: encoders), last (the last real token: decoders), or auto.
            dropout: Before the classifier (BERT, GPT: 0.1).
            learning_rate: AdamW's peak rate (BERT's grid: 2e-5 to 5e-5).
            weight_decay: AdamW's decoupled weight decay (0.01).
            warmup_ratio: Linear warm-up over this share of the steps, then linear decay (BERT: 0.1).
        """
        super().__init__()
        if not init_from:
            raise ConfigError("model.init_from is required: a plm_lightning checkpoint or a transformers directory")
        if num_labels < 1:
            raise ConfigError(f"model.num_labels={num_labels} must be >= 1 (1 = regression)")
        if pooling not in ("auto", "first", "last"):
            raise ConfigError(f"model.pooling={pooling!r} is not one of auto, first, last")
        self.save_hyperparameters()
        from plm_lightning.interop.io import load_pretrained

        pretrained, self.tokenizer = load_pretrained(init_from, ENCODERS, "model.init_from")
        self.backbone = pretrained.backbone
        causal = bool(getattr(pretrained, "causal", False))
        self.pooling = ("last" if causal else "first") if pooling == "auto" else pooling
        hidden = pretrained.config.hidden_size
        self.pooler = None
        if self.pooling == "first":
            self.pooler = Pooler(hidden)
            head = getattr(pretrained, "sentence_head", None)
            if head is not None:  # BERT pretrained with NSP: its pooler is trained
                self.pooler.load_state_dict(head.pooler.state_dict())
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, num_labels)
        nn.init.normal_(self.classifier.weight, 0.0, 0.02)
        nn.init.zeros_(self.classifier.bias)
        if num_labels == 1:
            metrics = MetricCollection({"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef()})
        else:
            metrics = MetricCollection({"accuracy": MulticlassAccuracy(num_labels, average="micro"),
                                        "f1": MulticlassF1Score(num_labels, average="macro"),
                                        "mcc": MulticlassMatthewsCorrCoef(num_labels)})
        self.val_metrics, self.test_metrics = metrics.clone(prefix="val/"), metrics.clone(prefix="test/")
        self.val_loss = MeanMetric()

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None)
        if data is None or not hasattr(data, "num_labels"):
            return
        data.setup(stage)
        data.tokenizer = self.tokenizer
        if data.num_labels != self.hparams.num_labels:
            raise ConfigError(f"model.num_labels={self.hparams.num_labels} but the data has {data.num_labels} "
                              f"{'(regression)' if data.num_labels == 1 else 'labels: ' + ', '.join(data.labels[:10])}; "
                              f"set model.num_labels={data.num_labels}")
        self.majority_baseline = data.majority_baseline()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        hidden = self.backbone(input_ids, attention_mask, token_type_ids).last_hidden_state
        if self.pooling == "first":
            pooled = self.pooler(hidden)
        else:
            last = (attention_mask.sum(1) - 1 if attention_mask is not None
                    else torch.full((len(hidden),), hidden.shape[1] - 1, device=hidden.device))
            pooled = hidden[torch.arange(len(hidden), device=hidden.device), last.long()]
        logits = self.classifier(self.dropout(pooled))
        return logits[:, 0] if self.hparams.num_labels == 1 else logits

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.hparams.num_labels == 1:
            return F.mse_loss(logits.float(), labels.float())
        return F.cross_entropy(logits.float(), labels)

    def _step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        logits = self(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))
        return logits, self.loss(logits, batch["labels"])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        _, loss = self._step(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        logits, loss = self._step(batch)
        self.val_loss.update(loss, weight=len(batch["labels"]))
        self.val_metrics.update(logits.float(), batch["labels"])

    def on_validation_epoch_end(self) -> None:
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        if getattr(self, "majority_baseline", None) is not None:  # beside the model's accuracy, always
            self.log("val/majority_baseline", self.majority_baseline)
        self.log_dict(self.val_metrics.compute(), prog_bar=True)
        self.val_loss.reset()
        self.val_metrics.reset()

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        logits, _ = self._step(batch)
        self.test_metrics.update(logits.float(), batch["labels"])

    def on_test_epoch_end(self) -> None:
        self.log_dict(self.test_metrics.compute())
        self.test_metrics.reset()

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        decay = [p for p in self.parameters() if p.requires_grad and p.ndim >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.ndim < 2]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": hp.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=hp.learning_rate)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        schedule = lr_lambda(int(hp.warmup_ratio * total), total, "linear", 0.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, schedule),
                                                         "interval": "step"}}
