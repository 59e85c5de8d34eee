"""Input embeddings: token (+ ALBERT factorization), segment and absolute position, summed then normalised; and the
ways two stacks share them (ELECTRA's generator and discriminator, DeBERTaV3's gradient-disentangled sharing)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.dropout import Dropout
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
        self.task = nn.Embedding(cfg.task_type_vocab_size, dim) if cfg.task_type_vocab_size > 0 else None
        self.position: nn.Embedding | None = None
        self.positions_from_padding = cfg.positions_from_padding
        self.pad_token_id = cfg.pad_token_id
        self.scale = dim ** 0.5 if cfg.embedding_scale else None
        absolute = cfg.position_embedding == "learned" or (cfg.position_embedding == "disentangled"
                                                           and cfg.position_biased_input)
        if absolute:
            self.position = nn.Embedding(cfg.max_position_embeddings, dim)
        elif cfg.position_embedding == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_table(cfg.max_position_embeddings, dim), persistent=False)
        self.block_position = (nn.Embedding(cfg.max_position_embeddings, dim) if cfg.block_position_embedding
                               else None)
        self.kind = "learned" if absolute else cfg.position_embedding
        self.norm = make_norm(cfg.norm, dim, cfg.norm_eps, cfg.has_bias("norm")) if cfg.embedding_norm else None
        self.dropout = Dropout(cfg.dropout)
        self.project = nn.Linear(dim, cfg.hidden_size) if dim != cfg.hidden_size else None

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None, task_type_ids: Tensor | None = None,
                block_position_ids: Tensor | None = None, token_embeds: Tensor | None = None) -> Tensor:
        """``task_type_ids``: ``[B]`` (one task per sample) or ``[B, L]``; 0 when not given. ``block_position_ids``
        ``[B, L]``: GLM's intra-span positions (0 when not given). ``token_embeds`` ``[B, L, E]``: the token table's
        rows for ``input_ids`` looked up already (:class:`~plm_lightning.nn.backbone.EncoderDecoder` looks up both
        stacks' tokens at once)."""
        length = input_ids.shape[1]
        x = self.token(input_ids) if token_embeds is None else token_embeds
        if self.scale is not None:
            x = x * self.scale
        if self.kind in ("learned", "sinusoidal"):
            if position_ids is None and self.positions_from_padding:  # RoBERTa: pads take row offset - 1
                real = (input_ids != self.pad_token_id).long()
                position_ids = torch.cumsum(real, dim=1) * real - 1
            if position_ids is None:
                position_ids = torch.arange(length, device=input_ids.device)[None]
            position_ids = position_ids + self.position_offset  # 0-based positions -> rows (RoBERTa starts at 2)
            if self.kind == "learned":
                x = x + self.position(position_ids)
            else:
                x = x + self.sinusoid[position_ids].to(x.dtype)
        if self.block_position is not None:
            x = x + self.block_position(block_position_ids if block_position_ids is not None
                                        else torch.zeros_like(input_ids))
        if self.segment is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.segment(token_type_ids)
        if self.task is not None:
            if task_type_ids is None:
                task_type_ids = torch.zeros_like(input_ids[:, :1])
            x = x + self.task(task_type_ids if task_type_ids.dim() == 2 else task_type_ids[:, None])
        if self.norm is not None:
            x = self.norm(x)
        x = self.dropout(x)
        return self.project(x) if self.project is not None else x


EmbeddingSharing = Literal["shared", "gdes", "none"]
SHARED_PARTS = ("position", "segment", "norm")


class GradientDisentangledEmbedding(nn.Module):
    """DeBERTaV3's Gradient-Disentangled Embedding Sharing (He et al. 2023, sec. 3.2, eq. 7):
    ``E_D = sg(E_G) + E_delta``. The discriminator reads the generator's table through a stop-gradient plus its own
    residual ``E_delta`` (initialised to zero), so the replaced-token-detection loss never pulls on ``E_G`` (no
    "tug-of-war") while the discriminator still starts from, and follows, what the generator learns.

    The source embedding is held by reference, not registered: it stays a parameter of the generator only.
    """

    def __init__(self, source: nn.Embedding) -> None:
        super().__init__()
        object.__setattr__(self, "source", source)  # a reference, not a submodule
        self.delta = nn.Parameter(torch.zeros_like(source.weight))
        self.padding_idx = source.padding_idx

    @property
    def weight(self) -> Tensor:
        """``sg(E_G) + E_delta``: the discriminator's effective table (what export writes)."""
        return self.source.weight.detach() + self.delta

    def forward(self, input_ids: Tensor) -> Tensor:
        return F.embedding(input_ids, self.weight, self.padding_idx)


def share_embeddings(owner: Embeddings, reader: Embeddings, mode: EmbeddingSharing) -> None:
    """Make ``reader`` (ELECTRA's discriminator) use ``owner``'s (the generator's) input embeddings in place.

    ``shared``: one token, position, segment table and one embedding norm for both (Clark et al. 2020, sec. 3.2:
    "we share the embeddings (both the token and positional embeddings)"; the reference code shares the whole
    ``embeddings`` scope). ``gdes``: the token table through :class:`GradientDisentangledEmbedding`, the rest
    shared. ``none``: separate tables (the no-sharing row of both papers' ablations). Both need the same
    embedding size; a smaller generator projects it to its own width (``Embeddings.project``).
    """
    if mode == "none":
        return
    if owner.token.weight.shape != reader.token.weight.shape:
        raise ValueError(f"embedding sharing needs equal tables, got {tuple(owner.token.weight.shape)} and "
                         f"{tuple(reader.token.weight.shape)}")
    reader.token = owner.token if mode == "shared" else GradientDisentangledEmbedding(owner.token)
    for part in SHARED_PARTS:
        setattr(reader, part, getattr(owner, part))
