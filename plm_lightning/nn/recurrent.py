"""Recurrent encoders: ELMo's character-CNN token encoder, its bidirectional LSTM language model and ``ScalarMix``
(Peters et al. 2018, "Deep contextualized word representations", sec. 3; the reference bilm-tf).

* Token encoder (Jozefowicz et al. 2016; Kim et al. 2016): each word's UTF-8 bytes between begin/end-of-word marks,
  embedded, convolved with filters of widths 1..7, max-pooled over the characters, ReLU, two highway layers
  ``y = g * relu(W x) + (1 - g) * x`` with ``g = sigmoid(W_g x)``, and a linear projection; or a plain word embedding.
* biLM: a forward and a backward stack of LSTMs with projections (LSTMP), residual connections between layers; both
  directions share the token encoder (and the softmax, in the objective).
* ``ScalarMix``: ELMo^task = gamma sum_j s_j h_j with s = softmax(w) over the L + 1 layers (eq. 1), h_0 = [x; x].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Highway(nn.Module):
    """Srivastava et al. 2015: ``g * relu(W x) + (1 - g) * x`` per layer, the gate's bias starting at -2 (bilm-tf)."""

    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.transforms = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.gates = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        for gate in self.gates:
            nn.init.constant_(gate.bias, -2.0)

    def forward(self, x: Tensor) -> Tensor:
        for transform, gate in zip(self.transforms, self.gates):
            g = torch.sigmoid(gate(x))
            x = g * F.relu(transform(x)) + (1 - g) * x
        return x


class CharCNNEncoder(nn.Module):
    """Character ids ``[B, T, C]`` -> token vectors ``[B, T, projection_dim]``."""

    def __init__(self, filters: list[list[int]], num_chars: int, char_pad: int, char_dim: int = 16,
                 highway_layers: int = 2, projection_dim: int = 512) -> None:
        """``num_chars`` characters, ``char_pad`` the padding one (ELMo's: ``corpus.characters``)."""
        super().__init__()
        self.chars = nn.Embedding(num_chars, char_dim, padding_idx=char_pad)
        self.convolutions = nn.ModuleList(nn.Conv1d(char_dim, n, width) for width, n in filters)
        width = sum(n for _, n in filters)
        self.highway = Highway(width, highway_layers)
        self.projection = nn.Linear(width, projection_dim)

    def forward(self, chars: Tensor) -> Tensor:
        b, t, c = chars.shape
        x = self.chars(chars.reshape(b * t, c)).transpose(1, 2)  # [BT, char_dim, C]
        pooled = [F.relu(conv(x).max(dim=-1).values) for conv in self.convolutions]
        return self.projection(self.highway(torch.cat(pooled, dim=-1))).reshape(b, t, -1)


class BiLM(nn.Module):
    """Forward and backward LSTMP stacks over the token vectors; ``forward`` returns every layer of both."""

    def __init__(self, dim: int, hidden: int, layers: int, dropout: float = 0.1) -> None:
        super().__init__()
        lstm = lambda: nn.LSTM(dim, hidden, batch_first=True, proj_size=dim if hidden > dim else 0)  # noqa: E731
        self.forward_layers = nn.ModuleList(lstm() for _ in range(layers))
        self.backward_layers = nn.ModuleList(lstm() for _ in range(layers))
        self.dropout = nn.Dropout(dropout)

    @staticmethod
    def _run(layers: nn.ModuleList, x: Tensor, dropout: nn.Module) -> list[Tensor]:
        outputs = []
        for i, lstm in enumerate(layers):
            y, _ = lstm(dropout(x))
            x = y + x if i > 0 else y  # residual connections between the LSTM layers (sec. 3.1 / bilm-tf)
            outputs.append(x)
        return outputs

    def forward(self, tokens: Tensor, lengths: Tensor | None = None) -> tuple[list[Tensor], list[Tensor]]:
        """(forward layers, backward layers), each ``[B, T, dim]``, position t of both about token t. The backward
        stack reads each row's real tokens (``lengths``, right padding) reversed, so it starts at the row's last
        token, never at padding."""
        forward = self._run(self.forward_layers, tokens, self.dropout)
        index = reversal_index(tokens.shape[0], tokens.shape[1], lengths, tokens.device)[..., None]
        reverse = lambda x: x.gather(1, index.expand(-1, -1, x.shape[-1]))  # noqa: E731 (its own inverse)
        backward = self._run(self.backward_layers, reverse(tokens), self.dropout)
        return forward, [reverse(h) for h in backward]


def reversal_index(batch: int, length: int, lengths: Tensor | None, device: torch.device) -> Tensor:
    """``[B, T]`` positions that reverse each row's first ``lengths`` entries and leave its padding in place."""
    t = torch.arange(length, device=device)[None].expand(batch, -1)
    if lengths is None:
        return t.flip(1)
    return torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)


class ScalarMix(nn.Module):
    """ELMo's task-specific combination of the L + 1 layers (eq. 1): ``gamma * sum_j softmax(w)_j h_j``."""

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    @property
    def weights(self) -> Tensor:
        return torch.softmax(self.scalars, dim=0)

    def forward(self, layers: list[Tensor]) -> Tensor:
        if len(layers) != len(self.scalars):
            raise ValueError(f"ScalarMix over {len(self.scalars)} layers got {len(layers)}")
        return self.gamma * sum(w * h for w, h in zip(self.weights, layers))


class AttentionalDecoder(nn.Module):
    """The attentional LSTM decoder of CoVe's MT-LSTM (McCann et al. 2017, sec. 3; Luong et al. 2015's global
    attention with input feeding): at step t, h_t = LSTM([z_{t-1}; h~_{t-1}], h_{t-1}), alpha_t = softmax(H (W_1 h_t
    + b_1)) over the encoder states H, h~_t = tanh(W_2 [H^T alpha_t; h_t] + b_2)."""

    def __init__(self, embedding_dim: int, hidden: int, context_dim: int, layers: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        self.cells = nn.ModuleList(nn.LSTMCell(embedding_dim + hidden if i == 0 else hidden, hidden)
                                   for i in range(layers))
        self.query = nn.Linear(hidden, context_dim)
        self.combine = nn.Linear(context_dim + hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.hidden = hidden

    def forward(self, embedded: Tensor, context: Tensor, context_mask: Tensor) -> Tensor:
        """``embedded`` ``[B, T, E]`` (teacher-forced previous targets), ``context`` ``[B, S, C]`` with
        ``context_mask`` ``[B, S]`` -> the attentional states h~ ``[B, T, hidden]``."""
        b, steps, _ = embedded.shape
        states = [(embedded.new_zeros(b, self.hidden), embedded.new_zeros(b, self.hidden)) for _ in self.cells]
        feed = embedded.new_zeros(b, self.hidden)
        outputs = []
        for t in range(steps):
            x = torch.cat([embedded[:, t], feed], dim=-1)
            for i, cell in enumerate(self.cells):
                states[i] = cell(self.dropout(x), states[i])
                x = states[i][0]
            scores = torch.einsum("bsc,bc->bs", context, self.query(x)).masked_fill(~context_mask, float("-inf"))
            attended = torch.einsum("bs,bsc->bc", torch.softmax(scores, dim=-1), context)
            feed = torch.tanh(self.combine(torch.cat([attended, x], dim=-1)))
            outputs.append(feed)
        return self.dropout(torch.stack(outputs, dim=1))
