"""ELMo's bidirectional language model (Peters et al. 2018, sec. 3.1, eq. before 1):

    max sum_k log p(t_k | t_1..t_{k-1}; Theta_x, ->Theta_LSTM, Theta_s)
            + log p(t_k | t_{k+1}..t_N; Theta_x, <-Theta_LSTM, Theta_s)

one token encoder Theta_x (characters, or words) and one softmax Theta_s shared by a forward and a backward LSTM LM.
corruption: none | attention: none (recurrent: forward reads the past, backward the future) | loss: every next token
(forward) and every previous token (backward), their mean. ``features`` gives the L + 1 layers that ``ScalarMix``
combines for a downstream task.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from plm_lightning.corpus.characters import CHAR_PAD, NUM_CHARS
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.errors import ConfigError
from plm_lightning.nn.legacy_keys import drop_on_load
from plm_lightning.nn.losses import linear_cross_entropy
from plm_lightning.nn.recurrent import BiLM, CharCNNEncoder
from plm_lightning.objectives.static_embeddings import StaticEmbeddings

ELMO_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
"""The released ELMo's character filters (width, count): 2048 in all."""


class ELMo(StaticEmbeddings):
    """Token encoder -> forward and backward LSTMP stacks -> one shared softmax over the word vocabulary."""

    examples = "sequences"

    def __init__(self, token_encoder: Literal["chars", "words"] = "chars", filters: list[list[int]] | None = None,
                 char_dim: int = 16, highway_layers: int = 2, projection_dim: int = 512, lstm_dim: int = 4096,
                 num_layers: int = 2, dropout: float = 0.1, learning_rate: float = 0.2) -> None:
        """
        Args:
            token_encoder: chars (the character CNN + highway + projection) or words (a word embedding).
            filters: Character convolutions as [width, count] pairs (ELMo: widths 1-7, 2048 filters).
            char_dim: Character embedding size (ELMo: 16).
            highway_layers: Highway layers after the convolutions (ELMo: 2).
            projection_dim: Token and LSTM projection size (ELMo: 512).
            lstm_dim: LSTM cells per layer (ELMo: 4096, projected to projection_dim).
            num_layers: LSTM layers per direction (ELMo: 2).
            dropout: Dropout before every LSTM layer and on the softmax input (ELMo: 0.1).
            learning_rate: AdaGrad's rate (bilm-tf: 0.2).
        """
        if token_encoder not in ("chars", "words"):
            raise ConfigError(f"model.token_encoder={token_encoder!r} is not one of chars, words")
        if num_layers < 1 or projection_dim < 1 or lstm_dim < 1:
            raise ConfigError("model.num_layers, model.projection_dim and model.lstm_dim must be positive")
        super().__init__(projection_dim, learning_rate, 1.0)
        self.save_hyperparameters()

    def build(self, vocab_size: int) -> None:
        hp = self.hparams
        if hp.token_encoder == "chars":
            self.token_encoder = CharCNNEncoder(hp.filters or ELMO_FILTERS, NUM_CHARS, CHAR_PAD, hp.char_dim,
                                                hp.highway_layers, hp.projection_dim)
        else:
            self.token_encoder = nn.Embedding(vocab_size, hp.projection_dim)
        self.bilm = BiLM(hp.projection_dim, hp.lstm_dim, hp.num_layers, hp.dropout)
        self.softmax = nn.Linear(hp.projection_dim, vocab_size)
        self.dropout = nn.Dropout(hp.dropout)
        # the task's ScalarMix (eq. 1) is learnt downstream (finetune.word_features), not in the biLM: checkpoints
        # that still carry an untrained one load without it
        drop_on_load(self, "scalar_mix")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adagrad(self.parameters(), lr=self.hparams.learning_rate, initial_accumulator_value=1.0)

    def encode_tokens(self, batch: dict[str, Tensor]) -> Tensor:
        return self.token_encoder(batch["chars"] if self.hparams.token_encoder == "chars" else batch["input_ids"])

    def layers(self, batch: dict[str, Tensor]) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """(token vectors, forward layers, backward layers)."""
        x = self.encode_tokens(batch)
        forward, backward = self.bilm(x, batch.get("lengths"))
        return x, forward, backward

    def features(self, batch: dict[str, Tensor]) -> list[Tensor]:
        """The L + 1 representations of each token, ``[B, T, 2 * projection_dim]`` each: [x; x], then
        [forward_j; backward_j] per layer (the inputs of ``ScalarMix``)."""
        x, forward, backward = self.layers(batch)
        return [torch.cat([x, x], -1)] + [torch.cat([f, b], -1) for f, b in zip(forward, backward)]

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        _, forward, backward = self.layers(batch)
        ids = batch["input_ids"]
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(ids, dtype=torch.bool)
        # forward: position t predicts token t + 1; backward: position t predicts token t - 1
        next_ids = torch.where(real[:, 1:], ids[:, 1:], IGNORE_INDEX)
        previous_ids = torch.where(real[:, 1:], ids[:, :-1], IGNORE_INDEX)
        losses = []
        for hidden, targets in ((forward[-1][:, :-1], next_ids), (backward[-1][:, 1:], previous_ids)):
            keep = targets != IGNORE_INDEX
            h = self.dropout(hidden[keep])
            losses.append(linear_cross_entropy(h, self.softmax.weight, self.softmax.bias, targets[keep]).loss)
        return (losses[0] + losses[1]) / 2

    def vectors(self) -> Tensor:
        """Context-free token vectors of the vocabulary (layer 0), for neighbour queries on the token encoder."""
        words = torch.arange(len(self.vocabulary), device=self.softmax.weight.device)
        if self.hparams.token_encoder == "words":
            return self.token_encoder(words)
        from plm_lightning.corpus.characters import char_ids

        chars = torch.tensor([char_ids(w) for w in self.vocabulary.words], device=words.device)[None]
        return self.token_encoder(chars)[0]
