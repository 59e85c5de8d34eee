"""DistilBERT (Sanh et al. 2019): a student with half the teacher's layers, initialised from every other teacher layer
(sec. 3: "taking one layer out of two"), trained on the teacher's MLM data with

    L = alpha_ce * L_ce + alpha_mlm * L_mlm + alpha_cos * L_cos

L_ce: the distillation loss sum_i t_i log s_i between the teacher's and the student's softmax at temperature T over
the vocabulary (Hinton et al. 2015), at the masked positions, scaled by T^2 (the released ``distiller.py``:
KL divergence, batch mean); L_mlm: the student's own masked-LM cross-entropy; L_cos: 1 - cos(h_s, h_t) between the
last hidden states, averaged over the real tokens. The teacher (any MaskedLM checkpoint of ours or transformers
BERT/RoBERTa directory) is frozen and in eval mode. Defaults are the released training command's (alpha_ce 5,
alpha_mlm 2, alpha_cos 1, T 2).

corruption: token masking (data.MaskedLMDataModule) | attention: bidirectional | loss: masked positions (CE, MLM) and
every real token (cosine).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.objectives.masked_lm import MaskedLM


def student_layer_indices(teacher_layers: int, student_layers: list[int] | None) -> list[int]:
    """The teacher layers the student's layers start from: every other one (0, 2, 4, ...) unless given."""
    chosen = list(range(0, teacher_layers, 2)) if student_layers is None else list(student_layers)
    if not chosen or any(not 0 <= i < teacher_layers for i in chosen) or chosen != sorted(set(chosen)):
        raise ConfigError(f"model.student_layers={student_layers} must be increasing indices of the teacher's "
                          f"{teacher_layers} layers")
    return chosen


class DistilBERT(MaskedLM):
    """A student MaskedLM distilled from ``teacher``; the other MaskedLM options (optimizer, schedule ...) apply."""

    def __init__(self, *args: Any, teacher: str | None = None, student_layers: list[int] | None = None,
                 temperature: float = 2.0, alpha_ce: float = 5.0, alpha_mlm: float = 2.0, alpha_cos: float = 1.0,
                 **kwargs: Any) -> None:
        """
        Args:
            teacher: The teacher: a MaskedLM checkpoint of ours or a transformers BERT/RoBERTa directory.
            student_layers: Teacher layers the student's layers are initialised from, in order (default: every
                other one, 0, 2, 4, ...: half the depth).
            temperature: Softmax temperature T of the distillation loss (2).
            alpha_ce: Weight of the soft-target cross-entropy (5.0).
            alpha_mlm: Weight of the student's masked-LM loss (2.0).
            alpha_cos: Weight of the cosine loss on the last hidden states (1.0).
        """
        if not teacher:
            raise ConfigError("model.teacher is required: a MaskedLM checkpoint or a transformers BERT directory")
        if temperature <= 0 or min(alpha_ce, alpha_mlm, alpha_cos) < 0:
            raise ConfigError("model.temperature must be > 0 and the alphas >= 0")
        from plm_lightning.objectives.loading import load_pretrained

        teacher_model, self_tokenizer = load_pretrained(teacher, ("MaskedLM",), "model.teacher")
        layers = student_layer_indices(teacher_model.config.num_layers, student_layers)
        overrides = {**teacher_model.config.to_dict(), "num_layers": len(layers)}
        kwargs.update(backbone_overrides=overrides, vocab_size=teacher_model.config.vocab_size)
        super().__init__(*args, **kwargs)
        self.save_hyperparameters()
        self.teacher_layers = layers
        self.teacher = teacher_model.requires_grad_(False).eval()
        self.teacher_tokenizer = self_tokenizer
        self.strict_loading = False  # checkpoints leave the frozen teacher out; it is rebuilt from model.teacher
        self.copy_teacher_weights()

    def copy_teacher_weights(self) -> None:
        """Embeddings, LM head and the chosen layers of the teacher into the student."""
        teacher = self.teacher.state_dict()
        own = self.state_dict()
        with torch.no_grad():
            for key, value in own.items():
                if key.startswith("teacher."):
                    continue
                source = key
                if key.startswith("backbone.layers."):
                    parts = key.split(".")
                    parts[2] = str(self.teacher_layers[int(parts[2])])
                    source = ".".join(parts)
                if source in teacher and teacher[source].shape == value.shape:
                    value.copy_(teacher[source])

    def train(self, mode: bool = True) -> DistilBERT:
        super().train(mode)
        self.teacher.eval()  # the teacher's dropout stays off
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict(*args, **kwargs).items() if not k.startswith("teacher.")}

    def check_data(self, data: DataContract) -> None:
        super().check_data(data)
        tokenizer = data.tokenizer
        if tokenizer is not None and tokenizer.tokenizer.get_vocab() != self.teacher_tokenizer.tokenizer.get_vocab():
            raise ConfigError(f"data.tokenizer '{tokenizer.name}' is not the teacher's tokenizer; give the teacher's "
                              f"(export the teacher and set data.tokenizer to that directory)")

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        hidden = self.encode(batch)
        with torch.no_grad():
            teacher_hidden = self.teacher.encode(batch)
        labels = batch["labels"]
        positions = labels != -100
        mlm_loss, lm = self.lm_loss(hidden, labels, keep_logits=True)
        with torch.no_grad():
            teacher_logits = self.teacher.lm_head(teacher_hidden, positions).float()
        t = self.hparams.temperature
        ce_loss = F.kl_div(F.log_softmax(lm.pop("lm_logits").float() / t, -1), F.softmax(teacher_logits / t, -1),
                           reduction="batchmean") * t ** 2
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(labels, dtype=torch.bool)
        cos_loss = (1 - F.cosine_similarity(hidden[real].float(), teacher_hidden[real].float(), dim=-1)).mean()
        hp = self.hparams
        loss = hp.alpha_ce * ce_loss + hp.alpha_mlm * mlm_loss + hp.alpha_cos * cos_loss
        return {"loss": loss, "lm_loss": mlm_loss, "mlm_loss": mlm_loss, "ce_loss": ce_loss, "cos_loss": cos_loss, **lm}
