"""One Transformer layer: self-attention, optional cross-attention, feed-forward; pre- or post-norm."""

from __future__ import annotations

from torch import Tensor, nn

from plm_lightning.nn.attention import MultiHeadAttention, take_rows
from plm_lightning.nn.config import BackboneConfig
from plm_lightning.nn.disentangled import DisentangledSelfAttention
from plm_lightning.nn.dropout import Dropout
from plm_lightning.nn.feedforward import FeedForward
from plm_lightning.nn.layer_attention import EVERY_POSITION, LayerAttention
from plm_lightning.nn.norms import make_norm
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

    def forward(self, x: Tensor, attention: LayerAttention = EVERY_POSITION, query: Tensor | None = None) -> Tensor:
        """``attention``: this layer's share of the batch's :class:`~plm_lightning.nn.attention_plan.AttentionPlan`
        (mask, positions, layout, cache, the encoder for cross-attention). With ``attention.query_index`` ``[B, K]``
        the output holds only these positions (``[B, K, H]``; they still attend to all). ``query``: a separate query
        stream (DeBERTa's Enhanced Mask Decoder, XLNet's query stream; its rows at ``query_index`` or at every
        position), keys and values from ``x``."""
        index = attention.query_index
        skip = query if query is not None else take_rows(x, index) if index is not None else None
        x = self._residual(x, self.self_attn_norm, self.self_attn, attention.self_attention(), skip=skip,
                           **({"query": query} if query is not None else {}))
        if self.cross_attn is not None:
            x = self._residual(x, self.cross_attn_norm, self.cross_attn, attention.cross_attention())
        return self._residual(x, self.ffn_norm, self.ffn)
