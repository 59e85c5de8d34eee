"""ERNIE's knowledgeable encoder (Zhang et al. 2019, "ERNIE: Enhanced Language Representation with Informative
Entities", sec. 3.3, fig. 2): after the text layers (T-Encoder), aggregator layers (K-Encoder) that fuse each token
with the entity aligned to it.

Aggregator layer i, for a token w_j aligned with entity e_k (eqs. 1-3):

    w~ = MH-ATT(w^{i-1}),  e~ = MH-ATT(e^{i-1})                       (tokens attend to tokens, entities to entities)
    h_j = sigma(W~_t w~_j + W~_e e~_k + b~)                           (the information fusion layer)
    w_j = sigma(W_t h_j + b_t),  e_k = sigma(W_e h_j + b_e)

and for a token with no entity, h_j = sigma(W~_t w~_j + b~), w_j = sigma(W_t h_j + b_t) (eq. 4), sigma = GELU. As in
ERNIE's code (its ``BertLayerMix``/``BertLayer`` with entities), each sub-layer is a BERT post-norm residual: the
attention outputs are ``LayerNorm(x + MH-ATT(x))`` and the fused outputs ``LayerNorm(w~ + W_t h)`` and
``LayerNorm(e~ + W_e h)``. Entity states live at the positions of their aligned tokens (``[B, T, d_e]``,
``entity_mask`` marks them); an entity attends only to the other aligned entities of its sequence, and positions
without one carry zeros.
"""

from __future__ import annotations

from torch import Tensor, nn

from plm_lightning.nn.attention import MultiHeadAttention
from plm_lightning.nn.feedforward import ACTIVATIONS
from plm_lightning.nn.layer_attention import LayerAttention
from plm_lightning.nn.legacy_keys import drop_on_load


class KnowledgeFusionLayer(nn.Module):
    """One aggregator: token and entity self-attention, then the information fusion layer."""

    def __init__(self, hidden_size: int, entity_size: int, num_heads: int, entity_heads: int, intermediate_size: int,
                 dropout: float = 0.1, attention_dropout: float = 0.1, norm_eps: float = 1e-12,
                 backend: str = "auto", entity_output: bool = True) -> None:
        """``entity_output=False`` (the K-Encoder's last layer): no W_e, no entity output; the entity states
        pass through unchanged (no loss reads them, and a parameter no loss reaches would stop DDP)."""
        super().__init__()
        self.token_attn = MultiHeadAttention(hidden_size, num_heads, attention_dropout, backend=backend)
        self.token_attn_norm = nn.LayerNorm(hidden_size, eps=norm_eps)
        self.entity_attn = MultiHeadAttention(entity_size, entity_heads, attention_dropout, backend=backend)
        self.entity_attn_norm = nn.LayerNorm(entity_size, eps=norm_eps)
        self.fuse_token = nn.Linear(hidden_size, intermediate_size)  # W~_t, b~
        self.fuse_entity = nn.Linear(entity_size, intermediate_size, bias=False)  # W~_e
        self.token_out = nn.Linear(intermediate_size, hidden_size)  # W_t, b_t
        self.token_norm = nn.LayerNorm(hidden_size, eps=norm_eps)
        self.entity_out = nn.Linear(intermediate_size, entity_size) if entity_output else None  # W_e, b_e
        self.entity_norm = nn.LayerNorm(entity_size, eps=norm_eps) if entity_output else None
        if not entity_output:
            drop_on_load(self, "entity_out", "entity_norm")
        self.act = ACTIVATIONS["gelu"]
        self.dropout = nn.Dropout(dropout)

    def tensor_parallel_plan(self) -> dict[str, str]:
        """How Megatron-style tensor parallelism splits this layer (``objectives.scale.apply_tensor_parallel``): both
        attentions by heads, the fusion layer's W~_t and W~_e by columns (each rank sums its share of h), W_t and W_e
        by rows."""
        plan = {"token_attn": "attention", "entity_attn": "attention", "fuse_token": "colwise",
                "fuse_entity": "colwise", "token_out": "rowwise"}
        return plan if self.entity_out is None else {**plan, "entity_out": "rowwise"}

    def forward(self, tokens: Tensor, entities: Tensor, attention_mask: Tensor | None, entity_mask: Tensor
                ) -> tuple[Tensor, Tensor]:
        """``tokens`` ``[B, T, H]``, ``entities`` ``[B, T, d_e]`` (read only where ``entity_mask`` ``[B, T]`` is
        True), ``attention_mask`` ``[B, T]`` (1 = a real token) -> (tokens, entities) of the same shapes."""
        keys = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        w = self.token_attn_norm(tokens + self.dropout(self.token_attn(tokens, LayerAttention(mask=keys))))
        aligned = entity_mask.bool()
        # a row with no entity lets its (unused) entity queries see every position rather than none (no NaN)
        entity_keys = (aligned | ~aligned.any(1, keepdim=True))[:, None, None, :]
        e = entities * aligned[..., None]
        e = self.entity_attn_norm(e + self.dropout(self.entity_attn(e, LayerAttention(mask=entity_keys))))
        e = e * aligned[..., None]
        fused = self.act(self.fuse_token(w) + self.fuse_entity(e))  # e is zero where no entity: eq. 4
        tokens_out = self.token_norm(w + self.dropout(self.token_out(fused)))
        if self.entity_out is None:
            return tokens_out, entities
        entities_out = self.entity_norm(e + self.dropout(self.entity_out(fused))) * aligned[..., None]
        return tokens_out, entities_out


class KnowledgeableEncoder(nn.Module):
    """The K-Encoder: ``layers`` aggregators over the T-Encoder's token states and the aligned entity embeddings;
    the last one outputs tokens only (what the pretraining losses and fine-tuning read)."""

    def __init__(self, layers: int, hidden_size: int, entity_size: int, num_heads: int, entity_heads: int,
                 intermediate_size: int, dropout: float = 0.1, attention_dropout: float = 0.1,
                 norm_eps: float = 1e-12, backend: str = "auto") -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            KnowledgeFusionLayer(hidden_size, entity_size, num_heads, entity_heads, intermediate_size, dropout,
                                 attention_dropout, norm_eps, backend, entity_output=i < layers - 1)
            for i in range(layers))

    def forward(self, tokens: Tensor, entities: Tensor, attention_mask: Tensor | None, entity_mask: Tensor
                ) -> tuple[Tensor, Tensor]:
        for layer in self.layers:
            tokens, entities = layer(tokens, entities, attention_mask, entity_mask)
        return tokens, entities


def entity_inputs(table: nn.Embedding, entity_ids: Tensor) -> tuple[Tensor, Tensor]:
    """(``[B, T, d_e]`` embeddings, ``[B, T]`` mask) of per-token entity ids (-1 = no entity)."""
    aligned = entity_ids >= 0
    return table(entity_ids.clamp_min(0)) * aligned[..., None], aligned

