"""Input embeddings: token (+ ALBERT factorization), segment and absolute position, summed then normalised."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.norms import make_norm
from plm_lightning.nn.positions import sinusoidal_table


class Embeddings(nn.Module):
    """``dropout(norm(tok + seg + pos))`` (BERT, Devlin et al. 2019, Fig. 2), then the ALBERT E -> H projection.

    With ``embedding_size`` E < H this is ALBERT's factorized embedding parameterization (Lan et al. 2020, sec. 3.1):
    V x E + E x H parameters instead of V x H.
    """

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        dim = cfg.embedding_size or cfg.hidden_size
        self.position_offset = cfg.position_offset
        self.max_positions = cfg.max_position_embeddings
        self.token = nn.Embedding(cfg.vocab_size, dim, padding_idx=None)
        self.segment = nn.Embedding(cfg.type_vocab_size, dim) if cfg.type_vocab_size > 0 else None
        self.position: nn.Embedding | None = None
        if cfg.position_embedding == "learned":
            self.position = nn.Embedding(cfg.max_position_embeddings, dim)
        elif cfg.position_embedding == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_table(cfg.max_position_embeddings, dim), persistent=False)
        self.kind = cfg.position_embedding
        self.norm = make_norm(cfg.norm, dim, cfg.norm_eps) if cfg.embedding_norm else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.project = nn.Linear(dim, cfg.hidden_size) if dim != cfg.hidden_size else None

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None) -> Tensor:
        length = input_ids.shape[1]
        x = self.token(input_ids)
        if self.kind in ("learned", "sinusoidal"):
            if position_ids is None:
                position_ids = torch.arange(length, device=input_ids.device)[None] + self.position_offset
            if self.kind == "learned":
                x = x + self.position(position_ids)
            else:
                x = x + self.sinusoid[position_ids].to(x.dtype)
        if self.segment is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.segment(token_type_ids)
        if self.norm is not None:
            x = self.norm(x)
        x = self.dropout(x)
        return self.project(x) if self.project is not None else x
