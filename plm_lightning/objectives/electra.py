"""ELECTRA: replaced token detection with a small MLM generator (Clark et al. 2020), and the embedding-sharing
switches DeBERTaV3 compares (He et al. 2023).

corruption: the MLM masking of the data module (ELECTRA: 15%, 85% [MASK] / 15% kept, no random tokens), then the
masked positions are filled with samples from the generator | attention: bidirectional | loss: the generator's MLM
loss at the masked positions + ``rtd_weight`` x the discriminator's binary loss at *every* real token:

    L = sum_x L_MLM(x, theta_G) + lambda * L_Disc(x, theta_D),  lambda = 50          (Clark et al. 2020, eq. 1)

A sampled token equal to the original counts as original (sec. 2). Sampling is not back-propagated through (the
generator is trained by maximum likelihood, not adversarially). Downstream use and ``export`` take the
discriminator; ``export --part generator`` writes the generator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.errors import ConfigError
from plm_lightning.interop.electra import generator_config  # noqa: F401 (the generator shape; re-exported)
from plm_lightning.nn import BackboneConfig, Encoder, LMHead
from plm_lightning.nn.embeddings import EmbeddingSharing, share_embeddings
from plm_lightning.nn.flops import training_flops
from plm_lightning.nn.heads import TokenDetectionHead
from plm_lightning.objectives.base import PretrainingModule


class ELECTRA(PretrainingModule):
    """Generator (a small masked LM) + discriminator (the backbone, with a per-token replaced/original head)."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args, generator_size_divisor: int = 4, generator_num_layers: int | None = None,  # noqa: ANN002
                 generator_num_heads: int | None = None,
                 rtd_weight: float = 50.0, generator_weight: float = 1.0, sampling_temperature: float = 1.0,
                 embedding_sharing: EmbeddingSharing = "shared", **kwargs) -> None:  # noqa: ANN003
        """
        Args:
            generator_size_divisor: Generator hidden size = discriminator hidden size / this (Clark et al. 2020,
                sec. 3.2 and Table 6: 1/4 for Small and Large, 1/3 for Base; 1/4 to 1/2 work best).
            generator_num_layers: Generator depth; null = the discriminator's (ELECTRA). DeBERTaV3 uses half.
            generator_num_heads: Generator attention heads; null = one per 64 dimensions (the reference code).
            rtd_weight: lambda of eq. 1 (50).
            generator_weight: Weight of the generator's MLM loss (1).
            sampling_temperature: Temperature of the generator's softmax when sampling replacements (1).
            embedding_sharing: shared (ELECTRA), gdes (DeBERTaV3's stop-gradient + residual) or none.
        """
        if embedding_sharing not in ("shared", "gdes", "none"):
            raise ConfigError(f"model.embedding_sharing={embedding_sharing!r} is not one of shared, gdes, none")
        if sampling_temperature <= 0:
            raise ConfigError(f"model.sampling_temperature={sampling_temperature} must be > 0")
        self.generator_size_divisor = generator_size_divisor
        self.generator_num_layers, self.generator_num_heads = generator_num_layers, generator_num_heads
        self.rtd_weight, self.generator_weight = rtd_weight, generator_weight
        self.sampling_temperature = sampling_temperature
        self.embedding_sharing = embedding_sharing
        super().__init__(*args, **kwargs)
        _ = self.generator_cfg  # a bad divisor fails at construction time

    @property
    def generator_cfg(self) -> BackboneConfig:
        return generator_config(self.config, self.generator_size_divisor, self.generator_num_layers,
                                self.generator_num_heads)

    @property
    def discriminator_cfg(self) -> BackboneConfig:
        """The backbone's config with the (shared) embedding size made explicit."""
        return self.config.replace(embedding_size=self.generator_cfg.embedding_size)

    def build(self) -> None:
        self.generator = Encoder(self.generator_cfg)
        self.lm_head = LMHead(self.generator_cfg, transform=True, bias=True)
        self.backbone = Encoder(self.discriminator_cfg)
        share_embeddings(self.generator.embeddings, self.backbone.embeddings, self.embedding_sharing)
        self.rtd_head = TokenDetectionHead(self.config)

    def stacks(self) -> list[nn.Module]:
        return [self.backbone, self.generator]

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.tie(self.generator.embeddings.token)

    def loss_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """Every real token carries the discriminator's loss."""
        return batch["attention_mask"].bool()

    @torch.no_grad()
    def sample_replacements(self, logits: Tensor) -> Tensor:
        """Tokens drawn from the generator's softmax at the masked positions (no gradient through sampling)."""
        probs = F.softmax(logits.float() / self.sampling_temperature, dim=-1)
        return torch.multinomial(probs, 1).squeeze(-1)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        labels, input_ids = batch["labels"], batch["input_ids"]
        mlm_loss, lm = self.lm_loss(*self.run_stack_for_loss(self.generator, batch, labels), keep_logits=True)
        logits = lm.pop("lm_logits")
        positions = labels != IGNORE_INDEX
        replaced_ids = input_ids.clone()
        replaced_ids[positions] = self.sample_replacements(logits)
        original = torch.where(positions, labels, input_ids)
        real = self.loss_positions(batch)
        is_replaced = (replaced_ids != original)[real]
        rtd_logits = self.rtd_head(self.run_stack(self.backbone, batch, replaced_ids))[real].float()
        rtd_loss = F.binary_cross_entropy_with_logits(rtd_logits, is_replaced.float())
        with torch.no_grad():
            rtd_accuracy = ((rtd_logits > 0) == is_replaced).float().mean()
            replaced_fraction = is_replaced.float().mean()
        loss = self.generator_weight * mlm_loss + self.rtd_weight * rtd_loss
        return {"loss": loss, "mlm_loss": mlm_loss, "rtd_loss": rtd_loss, "rtd_accuracy": rtd_accuracy,
                "replaced_fraction": replaced_fraction, "lm_loss": mlm_loss, **lm}

    def _set_flops(self, batch: dict[str, Tensor], loss_tokens: int, backward: bool) -> None:
        """Discriminator (+ its token head on every token) and generator (+ its sparse LM head)."""
        b, n = batch["input_ids"].shape
        h = self.config.hidden_size
        detector = (3 if backward else 1) * 2 * b * n * (h * h + h)
        self.flops_per_batch = (training_flops(self.config, b, n, 0, head_transform=False, backward=backward)
                                + detector
                                + training_flops(self.generator_cfg, b, n, loss_tokens, backward=backward))
