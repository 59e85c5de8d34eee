"""Output heads: the tied LM head with sparse prediction, sentence-level classifiers (NSP/SOP), the SpanBERT boundary
head and ELECTRA's replaced-token detector."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.feedforward import ACTIVATIONS
from plm_lightning.nn.losses import LMLoss, linear_cross_entropy, pad_multiple_for, padded_rows, padded_size
from plm_lightning.nn.norms import make_norm


class LMHead(nn.Module):
    """Vocabulary logits ``transform(h) E^T + b`` with E the (tied) token embedding.

    ``transform`` is BERT's dense + GELU + LayerNorm (``cls.predictions.transform``); GPT-2 has none.
    Logits are computed only at the requested positions (sparse prediction): for MLM that is ~15% of tokens,
    which saves most of the V x H output matmul.

    ``pad_vocab_multiple`` (set by the objective; None: 128 on CUDA, none elsewhere): the matrix ``E`` is padded
    with zero rows to a multiple of it where it is multiplied (``nn.losses.PAD_VOCAB_MULTIPLE``), never in the
    parameters, so checkpoints and exports keep the real vocabulary; the logits returned have the real width.
    """

    pad_vocab_multiple: int | None = None

    def __init__(self, cfg: BackboneConfig, transform: bool = True, bias: bool = True) -> None:
        super().__init__()
        dim = cfg.embedding_size or cfg.hidden_size
        self.dense = nn.Linear(cfg.hidden_size, dim, bias=cfg.has_bias("head")) if transform else None
        act = cfg.head_activation or cfg.activation
        if act not in ACTIVATIONS and cfg.head_activation is not None:
            raise ValueError(f"head_activation={act!r} is not one of {', '.join(ACTIVATIONS)}")
        self.act = ACTIVATIONS[act if act in ACTIVATIONS else "gelu"]  # a gated body: gelu
        self.norm = make_norm(cfg.norm, dim, cfg.norm_eps, cfg.has_bias("norm")) if transform else None
        self.weight = nn.Parameter(torch.empty(cfg.vocab_size, dim))
        nn.init.normal_(self.weight, 0.0, cfg.initializer_range)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if bias else None

    def tie(self, embedding: nn.Embedding) -> None:
        self.weight = embedding.weight

    def forward(self, hidden: Tensor, positions: Tensor | None = None, targets: Tensor | None = None
                ) -> Tensor | LMLoss:
        """``hidden`` ``[B, L, H]``; ``positions`` a boolean ``[B, L]`` selection (sparse) or None (dense).

        With ``targets`` (one per selected row) the head returns their cross-entropy through
        :func:`~plm_lightning.nn.losses.linear_cross_entropy` instead of the logits, which it never materialises."""
        if positions is not None:
            hidden = hidden[positions]
        if self.dense is not None:
            hidden = self.norm(self.act(self.dense(hidden)))
        if targets is not None:
            return linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), self.weight, self.bias, targets.reshape(-1),
                                        pad_vocab_multiple=self.pad_vocab_multiple)
        vocab = self.weight.shape[0]
        padded = padded_size(vocab, pad_multiple_for(hidden.device, self.pad_vocab_multiple))
        if padded == vocab or hidden[..., 0].numel() < 64:
            return F.linear(hidden, self.weight, self.bias)  # aligned, or a few rows (decoding): memory-bound anyway
        dtype = torch.get_autocast_dtype(hidden.device.type) if torch.is_autocast_enabled(hidden.device.type) else None
        bias = None if self.bias is None else padded_rows(self.bias, padded, dtype)
        return F.linear(hidden, padded_rows(self.weight, padded, dtype), bias)[..., :vocab]


class Pooler(nn.Module):
    """BERT pooler: tanh(W h_[CLS] + b) (Devlin et al. 2019, sec. 3.1)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class SentenceHead(nn.Module):
    """Pooler + linear classifier over the [CLS] state: NSP (BERT) and SOP (ALBERT) use two classes."""

    def __init__(self, hidden_size: int, num_classes: int = 2) -> None:
        super().__init__()
        self.pooler = Pooler(hidden_size)
        self.classifier = nn.Linear(hidden_size, num_classes)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.pooler(hidden))


class SpanBoundaryHead(nn.Module):
    """SpanBERT's Span Boundary Objective (Joshi et al. 2020, eqs. 1-2): predict token x_i of a masked span (s, e)
    from the boundary states and the position inside the span only,

        h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}],  h1 = LayerNorm(GeLU(W1 h0)),  y_i = LayerNorm(GeLU(W2 h1)),

    then score y_i against the (tied) output embedding like the MLM head does.
    """

    def __init__(self, cfg: BackboneConfig, max_offset: int = 64) -> None:
        super().__init__()
        h, dim = cfg.hidden_size, cfg.embedding_size or cfg.hidden_size
        self.max_offset = max_offset
        self.position = nn.Embedding(max_offset, h)
        self.mlp = nn.Sequential(nn.Linear(3 * h, h), nn.GELU(), nn.LayerNorm(h, eps=cfg.norm_eps),
                                 nn.Linear(h, dim), nn.GELU(), nn.LayerNorm(dim, eps=cfg.norm_eps))

    def forward(self, hidden: Tensor, positions: Tensor, left: Tensor, right: Tensor, offset: Tensor) -> Tensor:
        """``y_i`` for every ``positions`` (boolean ``[B, L]``) given per-position boundary indices and offsets."""
        rows = positions.nonzero(as_tuple=True)[0]
        h0 = torch.cat([hidden[rows, left[positions]], hidden[rows, right[positions]],
                        self.position(offset[positions].clamp(max=self.max_offset - 1))], dim=-1)
        return self.mlp(h0)


class TokenDetectionHead(nn.Module):
    """ELECTRA's discriminator head (Clark et al. 2020, sec. 2): ``D(x, t) = sigmoid(w^T act(W h_t))``, one logit per
    token saying "this token was replaced" (``discriminator_predictions`` in the reference code)."""

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = ACTIVATIONS.get(cfg.activation, ACTIVATIONS["gelu"])
        self.prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, hidden: Tensor) -> Tensor:
        """``[B, L, H]`` -> ``[B, L]`` logits."""
        return self.prediction(self.act(self.dense(hidden))).squeeze(-1)
