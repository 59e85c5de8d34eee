"""One Transformer layer: self-attention, optional cross-attention, feed-forward; pre- or post-norm."""

from __future__ import annotations

from torch import Tensor, nn

from plm_lightning.nn.attention import LayerCache, MultiHeadAttention, take_rows
from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.disentangled import DisentangledSelfAttention
from plm_lightning.nn.dropout import Dropout
from plm_lightning.nn.feedforward import FeedForward
from plm_lightning.nn.norms import make_norm
from plm_lightning.nn.unpad import Unpadding
from plm_lightning.nn.varlen import Segments
from plm_lightning.nn.xl_relative import RelativeSelfAttention


class TransformerBlock(nn.Module):
    """Post-norm: ``x = norm(x + drop(f(x)))`` (Vaswani et al. 2017, BERT).
    Pre-norm: ``x = x + drop(f(norm(x)))`` (GPT-2, Radford et al. 2019 sec. 2.3; Xiong et al. 2020)."""

    def __init__(self, cfg: BackboneConfig, cross_attention: bool = False, attention_norm: bool = True,
                 layer_index: int = 0) -> None:
        """``attention_norm=False`` leaves out the pre-norm before self-attention (ModernBERT's first layer).
        ``layer_index`` (0-based) matters only with ``cfg.scale_attention_by_layer``."""
        super().__init__()
        self.pre_norm = cfg.is_pre_norm
        by_head_dim = cfg.scale_attention_by_head_dim and cfg.position_embedding != "t5_relative"  # T5: unscaled
        scale = cfg.head_dim ** -0.5 if by_head_dim else 1.0
        if cfg.scale_attention_by_layer:
            scale /= layer_index + 1

        def attention(cross: bool) -> MultiHeadAttention:
            return MultiHeadAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout, cfg.has_bias("attention"),
                                      cfg.attention_backend, scale=scale, cross_attention=cross,
                                      upcast=cfg.upcast_attention)

        if cfg.position_embedding == "disentangled":
            span = cfg.relative_position_buckets if cfg.relative_position_buckets > 0 else cfg.max_relative_positions
            self.self_attn = DisentangledSelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout,
                                                       cfg.has_bias("attention"), cfg.attention_backend, span,
                                                       cfg.share_attention_key, cfg.dropout)
        elif cfg.position_embedding == "xl_relative":
            self.self_attn = RelativeSelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attention_dropout,
                                                   cfg.attention_backend, cfg.relative_segments)
        else:
            self.self_attn = attention(cross=False)
        self.self_attn_norm = (make_norm(cfg.norm, cfg.hidden_size, cfg.norm_eps, cfg.has_bias("norm")) if attention_norm
                               else nn.Identity())
        self.cross_attn = attention(cross=True) if cross_attention else None
        self.cross_attn_norm = (make_norm(cfg.norm, cfg.hidden_size, cfg.norm_eps, cfg.has_bias("norm"))
                                if cross_attention else None)
        self.ffn = FeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.activation, cfg.has_bias("ffn"),
                               cfg.ffn_dropout)
        self.ffn_norm = make_norm(cfg.norm, cfg.hidden_size, cfg.norm_eps, cfg.has_bias("norm"))
        self.dropout = Dropout(cfg.dropout)

    def tensor_parallel_plan(self) -> dict[str, str]:
        """How Megatron-style tensor parallelism splits this block (``objectives.scale.apply_tensor_parallel``): the
        attentions by heads, the feed-forward's first layer (and gate) by columns, its second layer by rows."""
        plan = {"self_attn": "attention", "ffn.fc_in": "colwise", "ffn.fc_out": "rowwise"}
        if self.ffn.fc_gate is not None:
            plan["ffn.fc_gate"] = "colwise"
        if self.cross_attn is not None:
            plan["cross_attn"] = "attention"
        return plan

    def _residual(self, x: Tensor, norm: nn.Module, fn, *args, skip: Tensor | None = None,  # noqa: ANN001
                  **kwargs) -> Tensor:
        """``skip`` is the residual stream when it differs from ``fn``'s input (queries at a subset of positions)."""
        skip = x if skip is None else skip
        if self.pre_norm:
            return skip + self.dropout(fn(norm(x), *args, **kwargs))
        return norm(skip + self.dropout(fn(x, *args, **kwargs)))

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        position_bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        encoder_out: Tensor | None = None,
        encoder_mask: Tensor | None = None,
        encoder_position_bias: Tensor | None = None,
        query_index: Tensor | None = None,
        unpadding: Unpadding | None = None,
        relative: tuple[Tensor, Tensor] | None = None,
        query: Tensor | None = None,
        cache: LayerCache | None = None,
        memory: Tensor | None = None,
        segments: Segments | None = None,
    ) -> Tensor:
        """``query_index`` ``[B, K]``: the output only at these positions (``[B, K, H]``); they still attend to all.
        ``unpadding``: ``x`` holds the real tokens only, ``[1, T, H]`` (see ``plm_lightning.nn.unpad``).
        ``relative``: DeBERTa's (relative embedding table, relative positions) or Transformer-XL's ``XLRelative``.
        ``query``: a separate query stream (DeBERTa's Enhanced Mask Decoder, XLNet's query stream; its rows at
        ``query_index`` or at every position), keys/values from ``x``. ``memory``: Transformer-XL's hidden states of
        earlier segments, extra keys/values before ``x``. ``segments``: self-attention over the blocks of a flat stream
        (``plm_lightning.nn.varlen``)."""
        skip = query if query is not None else take_rows(x, query_index) if query_index is not None else None
        given = {"unpadding": unpadding, "relative": relative, "query": query, "memory": memory, "segments": segments,
                 "cache": None if cache is None else cache.self_attn}
        extra = {k: v for k, v in given.items() if v is not None}
        x = self._residual(x, self.self_attn_norm, self.self_attn, mask=mask, is_causal=is_causal,
                           position_bias=position_bias, rope=rope, query_index=query_index, skip=skip, **extra)
        if self.cross_attn is not None:
            if encoder_out is None:
                raise ValueError("this block has cross-attention: pass encoder_out")
            x = self._residual(x, self.cross_attn_norm, self.cross_attn, mask=encoder_mask,
                               position_bias=encoder_position_bias, kv=encoder_out,
                               **({"cache": cache.cross_attn} if cache is not None else {}))
        return self._residual(x, self.ffn_norm, self.ffn)
