"""A BiLSTM tagger on frozen word features (ELMo, CoVe, static vectors), optionally trained with Cross-View Training
(Clark et al. 2018, "Semi-Supervised Sequence Modeling with Cross-View Training", sec. 2-3.1).

The task model is a one-layer BiLSTM over the features and a primary prediction module p_theta(y_t | x) reading
both directions [h->_t; h<-_t] (one hidden layer, ReLU, then softmax). With ``cvt``, four auxiliary modules read
restricted views of the same BiLSTM: forward h->_t, backward h<-_t, future h->_{t-1} (the past only) and past
h<-_{t+1} (the future only). Labelled and unlabelled batches alternate: on labelled ones the primary module's
cross-entropy trains; on unlabelled ones each auxiliary module is trained to match the primary module's soft
prediction, L_CVT = sum_j D(p_theta(y|x), p_theta^j(y|x)) with the primary's side held fixed (eq. 1; D = KL).
The views only restrict what the task BiLSTM sees when its inputs are context-free (static vectors, ELMo's layer
0); on contextual features (full ELMo, CoVe) CVT still trains but its views leak.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.base import FinetuneModule
from plm_lightning.finetune.metrics import tagging_metrics
from plm_lightning.finetune.tagging_data import IGNORE
from plm_lightning.finetune.transfer import Transfer
from plm_lightning.finetune.word_features import WordFeatures

VIEWS = ("forward", "backward", "future", "past")


def prediction_module(width: int, hidden: int, num_labels: int) -> nn.Sequential:
    """CVT's prediction module: one hidden layer with ReLU, then the softmax layer."""
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, num_labels))


def restricted_views(forward: Tensor, backward: Tensor) -> dict[str, Tensor]:
    """CVT's four views per position t: h->_t, h<-_t, h->_{t-1} and h<-_{t+1} (zeros beyond the ends)."""
    zero = torch.zeros_like(forward[:, :1])
    return {"forward": forward, "backward": backward, "future": torch.cat([zero, forward[:, :-1]], 1),
            "past": torch.cat([backward[:, 1:], zero], 1)}


class WordTagger(FinetuneModule):
    """BIO tagging from frozen word features, with optional Cross-View Training on unlabelled sentences."""

    def __init__(self, features_from: str | None = None, num_labels: int = 5, hidden: int = 200,
                 prediction_hidden: int = 100, dropout: float = 0.5, cvt: bool = False, learning_rate: float = 1e-3,
                 weight_decay: float = 0.0, warmup_ratio: float = 0.0, transfer: Transfer | None = None) -> None:
        """
        Args:
            features_from: An ELMo, CoVe, word2vec, GloVe or fastText checkpoint of ours (frozen).
            num_labels: Tags, O included.
            hidden: BiLSTM size per direction (ELMo's NER baseline: 200; CVT: 1024 on the first layer).
            prediction_hidden: Hidden layer of the prediction modules (CVT: 512).
            dropout: On the features and the BiLSTM outputs (ELMo NER: 0.5).
            cvt: Cross-View Training on the data's unlabelled sentences (``data.unlabeled``), labelled and
                unlabelled batches alternating.
            learning_rate: AdamW's rate.
            weight_decay: AdamW's decoupled weight decay.
            warmup_ratio: Linear warm-up share of the steps, then linear decay.
            transfer: ``finetune.transfer.Transfer`` options (the schedule).
        """
        super().__init__()
        if not features_from:
            raise ConfigError("model.features_from is required: an ELMo, CoVe, word2vec, GloVe or fastText checkpoint")
        if num_labels < 2:
            raise ConfigError(f"model.num_labels={num_labels} must be >= 2")
        self.save_hyperparameters()
        from dataclasses import asdict

        self.transfer = transfer or Transfer()
        self.hparams["transfer"] = asdict(self.transfer)
        self.features = WordFeatures(features_from)
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(self.features.dim, hidden, batch_first=True, bidirectional=True)
        self.primary = prediction_module(2 * hidden, prediction_hidden, num_labels)
        self.auxiliary = nn.ModuleDict({f"view_{v}": prediction_module(hidden, prediction_hidden, num_labels)
                                        for v in VIEWS}) if cvt else None
        self.labels = ["O"] + [f"{p}-T{i}" for i in range(num_labels) for p in "BI"][: num_labels - 1]
        self._build_metrics()
        from torchmetrics import MeanMetric

        self.val_loss = MeanMetric()

    @property
    def tokenizer(self) -> WordFeatures:
        """What the data reads: a word-level extractor, so batches hold words, not token ids."""
        return self.features

    def _build_metrics(self) -> None:
        self.val_metrics, self.test_metrics = tagging_metrics(self.labels, IGNORE)

    def check_data(self, data: Any) -> None:
        super().check_data(data)
        self._build_metrics()
        data.with_unlabeled = self.hparams.cvt

    @staticmethod
    def batch_size_of(batch: dict[str, Any]) -> int:
        return len(batch["words"])

    def encode(self, words: list[list[str]]) -> tuple[Tensor, Tensor]:
        """The BiLSTM's forward and backward states ``[B, T, hidden]`` over the (padded) words."""
        x = self.dropout(self.features(words))
        lengths = torch.tensor([len(w) for w in words])
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]
        return self.dropout(out).chunk(2, dim=-1)

    def forward(self, words: list[list[str]]) -> Tensor:
        forward, backward = self.encode(words)
        return self.primary(torch.cat([forward, backward], -1))

    def cvt_loss(self, words: list[list[str]]) -> Tensor:
        """The auxiliary modules learn to match the primary module's predictions on unlabelled words."""
        forward, backward = self.encode(words)
        with torch.no_grad():
            target = F.softmax(self.primary(torch.cat([forward, backward], -1)).float(), -1)
        real = torch.zeros(target.shape[:2], dtype=torch.bool, device=target.device)
        for i, w in enumerate(words):
            real[i, :len(w)] = True
        losses = [F.kl_div(F.log_softmax(self.auxiliary[f"view_{name}"](view).float(), -1)[real], target[real],
                           reduction="batchmean") for name, view in restricted_views(forward, backward).items()]
        return torch.stack(losses).sum()

    def step(self, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        logits = self(batch["words"])
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)
        return logits, loss

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        if "unlabeled" not in batch:
            return super().training_step(batch, batch_idx)
        if batch_idx % 2 == 0:  # labelled and unlabelled batches alternate
            return super().training_step(batch["labeled"], batch_idx)
        loss = self.cvt_loss(batch["unlabeled"]["words"])
        self.log("train/cvt_loss", loss, prog_bar=True, batch_size=len(batch["unlabeled"]["words"]))
        return loss

    def update_metrics(self, metrics: MetricCollection, batch: dict[str, Any], outputs: Tensor) -> None:
        metrics.update(outputs.argmax(-1), batch["labels"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from plm_lightning.checkpoint_format import CHECKPOINT_KEY

        checkpoint[CHECKPOINT_KEY] = {"objective": type(self).__name__, "labels": list(self.labels),
                                      "features": self.features.kind}
