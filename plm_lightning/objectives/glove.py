"""GloVe (Pennington et al. 2014, eq. 8-9): sum f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2 with
f(x) = min(1, (x / x_max)^alpha), x_max = 100, alpha = 3/4, AdaGrad (lr 0.05); the vectors are W + W~ (sec. 4.2).
On the static embeddings' base (``objectives.static_embeddings``), trained on ``data.examples: cooccurrence``."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.objectives.static_embeddings import StaticEmbeddings


class GloVe(StaticEmbeddings):
    """Weighted least squares on the log co-occurrence counts (``data.examples: cooccurrence``)."""

    examples = "cooccurrence"

    def __init__(self, dim: int = 100, learning_rate: float = 0.05, x_max: float = 100.0, alpha: float = 0.75) -> None:
        """
        Args:
            dim: Vector size (GloVe: 50 to 300).
            learning_rate: AdaGrad's rate (GloVe: 0.05).
            x_max: Counts at or above x_max weigh 1 (GloVe: 100).
            alpha: Exponent of the weighting below x_max (GloVe: 3/4).
        """
        if x_max <= 0 or alpha <= 0:
            raise ConfigError(f"model.x_max={x_max} and model.alpha={alpha} must be positive (GloVe: 100, 0.75)")
        super().__init__(dim, learning_rate, 1.0)
        self.save_hyperparameters()

    def build(self, vocab_size: int) -> None:
        dim = self.hparams.dim
        self.word = nn.Embedding(vocab_size, dim)
        self.context = nn.Embedding(vocab_size, dim)
        self.word_bias, self.context_bias = nn.Embedding(vocab_size, 1), nn.Embedding(vocab_size, 1)
        for table in (self.word, self.context):
            nn.init.uniform_(table.weight, -0.5 / dim, 0.5 / dim)  # glove.c: (rand - 0.5) / dim
        for table in (self.word_bias, self.context_bias):
            nn.init.uniform_(table.weight, -0.5 / dim, 0.5 / dim)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adagrad(self.parameters(), lr=self.hparams.learning_rate)

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        i, j, x = batch["row"], batch["col"], batch["count"]
        prediction = ((self.word(i) * self.context(j)).sum(-1) + self.word_bias(i)[:, 0] + self.context_bias(j)[:, 0])
        weight = torch.clamp((x / self.hparams.x_max) ** self.hparams.alpha, max=1.0)
        return (weight * (prediction - torch.log(x)) ** 2).mean()

    def vectors(self) -> Tensor:
        return self.word.weight + self.context.weight
