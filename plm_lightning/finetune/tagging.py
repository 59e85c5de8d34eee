"""Token classification (BIO tagging) on a pretrained backbone: each final hidden state through dropout and a linear
layer over the tags, cross-entropy on the first sub-word of each word (BERT, Devlin et al. 2019, sec. 5.3, no CRF).
Scored with entity-level F1 (conlleval) and token accuracy."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.base import FinetuneModule
from plm_lightning.finetune.metrics import tagging_metrics
from plm_lightning.finetune.tagging_data import IGNORE
from plm_lightning.finetune.transfer import Transfer
from plm_lightning.nn.stack_inputs import text_inputs


class TokenClassifier(FinetuneModule):
    """A tagger on the backbone of ``init_from`` (a checkpoint of ours or a transformers directory)."""

    def __init__(self, init_from: str | None = None, num_labels: int = 5, dropout: float = 0.1,
                 learning_rate: float = 5e-5, weight_decay: float = 0.01, warmup_ratio: float = 0.1,
                 random_init: bool = False, tokenizer: str | None = None,
                 transfer: Transfer | None = None) -> None:
        """
        Args:
            init_from: The pretrained model: a plm_lightning checkpoint or a transformers directory (a
                ``*ForTokenClassification`` one brings its head too).
            num_labels: Tags, O included (each entity type has B- and I-).
            dropout: Before the classifier (0.1).
            learning_rate: AdamW's peak rate (BERT on CoNLL-2003: 5e-5).
            weight_decay: AdamW's decoupled weight decay.
            warmup_ratio: Linear warm-up share of the steps, then linear decay.
            random_init: Same architecture from random weights (the no-pretraining control).
            tokenizer: A tokenizer.json (or directory) to use instead of the checkpoint's; its vocabulary must fit.
            transfer: ULMFiT's discriminative rates, slanted triangular schedule and gradual unfreezing, or adapters
                (``finetune.transfer.Transfer``; default: plain full fine-tuning).
        """
        super().__init__()
        if num_labels < 2:
            raise ConfigError(f"model.num_labels={num_labels} must be >= 2 (O and at least one B- tag)")
        self.save_hyperparameters()
        self.attach_pretrained(init_from, random_init, tokenizer, transfer)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.backbone_config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, 0.0, 0.02)
        nn.init.zeros_(self.classifier.bias)
        self.labels = ["O"] + [f"{p}-T{i}" for i in range(num_labels) for p in "BI"][: num_labels - 1]
        self._build_metrics()
        self.load_head(init_from)

    def _build_metrics(self) -> None:
        self.val_metrics, self.test_metrics = tagging_metrics(self.labels, IGNORE)

    def check_data(self, data: Any) -> None:
        super().check_data(data)
        self._build_metrics()  # the entity metric reads the data's tag names

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        hidden = self.backbone(input_ids, text_inputs(self.backbone, attention_mask, token_type_ids)).last_hidden_state
        return self.classifier(self.dropout(hidden))

    def step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        logits = self(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)
        return logits, loss

    def update_metrics(self, metrics: MetricCollection, batch: dict[str, Any], outputs: Tensor) -> None:
        metrics.update(outputs.argmax(-1), batch["labels"])
