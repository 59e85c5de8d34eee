"""Input embeddings: token (+ ALBERT factorization), segment and absolute position, summed then normalised; and the
ways two stacks share them (ELECTRA's generator and discriminator, DeBERTaV3's gradient-disentangled sharing)."""

from __future__ import annotations

from collections.abc import Mapping
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

    per_row_inputs: tuple[str, ...] = ("task_type_ids",)
    """Id inputs that are one per row when the batch has none (ERNIE 2.0's task of a sample)."""

    def input_tables(self) -> dict[str, nn.Module]:
        """The additive id tables by the batch key they read, in the order they are summed: GLM's intra-span
        positions, segments, ERNIE 2.0's task types, then any added with :meth:`add_input`."""
        tables = {"block_position_ids": self.block_position, "token_type_ids": self.segment,
                  "task_type_ids": self.task}
        extra = dict(self.extra_inputs.items()) if hasattr(self, "extra_inputs") else {}
        return {key: table for key, table in {**tables, **extra}.items() if table is not None}

    def input_keys(self) -> tuple[str, ...]:
        """The batch keys of ``StackInputs.ids`` these embeddings read."""
        return tuple(self.input_tables())

    def add_input(self, key: str, table: nn.Module) -> None:
        """A new per-batch id input: ``table(ids)`` (``[B, L]`` or ``[B]`` ids to ``[..., E]``) is added to the
        embeddings wherever ``StackInputs.ids`` holds ``key`` (id 0 where it does not). Registered under
        ``extra_inputs.<key>``; an objective adds its own input this way, without editing ``nn/``."""
        if key in self.input_keys():
            raise ValueError(f"the embeddings already read an id input {key!r}")
        if not hasattr(self, "extra_inputs"):
            self.extra_inputs = nn.ModuleDict()
        self.extra_inputs[key] = table

    def forward(self, input_ids: Tensor, ids: Mapping[str, Tensor] | None = None,
                position_ids: Tensor | None = None, token_embeds: Tensor | None = None) -> Tensor:
        """``ids``: per-token ``[B, L]`` or per-row ``[B]`` ids for :meth:`input_tables` by batch key (0 where a
        key is missing; a key without a table is an error). ``token_embeds`` ``[B, L, E]``: the token table's rows
        for ``input_ids`` looked up already (:class:`~plm_lightning.nn.backbone.EncoderDecoder` looks up both
        stacks' tokens at once)."""
        ids = ids or {}
        tables = self.input_tables()
        unknown = sorted(set(ids) - set(tables))
        if unknown:
            raise ValueError(f"the embeddings have no table for {unknown}; they read {sorted(tables)}")
        x = self.token(input_ids) if token_embeds is None else token_embeds
        if self.scale is not None:
            x = x * self.scale
        if self.kind in ("learned", "sinusoidal"):
            x = self.add_positions(x, input_ids, position_ids)
        for key, table in tables.items():
            given = ids.get(key)
            if given is None:  # id 0: one per row for per-row inputs (task types), else per token
                given = torch.zeros_like(input_ids[:, :1] if key in self.per_row_inputs else input_ids)
            x = x + table(given if given.dim() == 2 else given[:, None])
        if self.norm is not None:
            x = self.norm(x)
        x = self.dropout(x)
        return self.project(x) if self.project is not None else x

    def add_positions(self, x: Tensor, input_ids: Tensor, position_ids: Tensor | None) -> Tensor:
        """``x`` plus the absolute position embedding (learned or sinusoidal) of ``position_ids`` (0-based;
        default 0.., or RoBERTa's count of real tokens)."""
        if position_ids is None and self.positions_from_padding:  # RoBERTa: pads take row offset - 1
            real = (input_ids != self.pad_token_id).long()
            position_ids = torch.cumsum(real, dim=1) * real - 1
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        position_ids = position_ids + self.position_offset  # 0-based positions -> rows (RoBERTa starts at 2)
        if self.kind == "learned":
            return x + self.position(position_ids)
        return x + self.sinusoid[position_ids].to(x.dtype)


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
