"""Analytic training FLOPs of a stack, for throughput and MFU (Kaplan et al. 2020, sec. 2.1; PaLM appendix B).

Per token, forward + backward = 3x forward; forward of a dense matmul is 2 FLOPs per weight. Attention scores
and the weighted sum add ``2 * 2 * L * seq * H`` forward FLOPs per token (halved for causal masks is *not* applied:
kernels compute the full square unless they skip masked blocks, and MFU is conventionally reported that way).
"""

from __future__ import annotations

from plm_lightning.nn.config import BackboneConfig


def block_matmul_params(cfg: BackboneConfig) -> int:
    """Weights that take part in matmuls inside one block (attention projections + feed-forward)."""
    h, f = cfg.hidden_size, cfg.intermediate_size
    ffn = (3 if cfg.activation in ("glu", "reglu", "geglu", "swiglu") else 2) * h * f
    return 4 * h * h + ffn


def training_flops(cfg: BackboneConfig, batch_size: int, seq_len: int, loss_tokens: int,
                   head_transform: bool = True, backward: bool = True) -> int:
    """FLOPs of one training step (forward + backward; forward only with ``backward=False``) on
    ``batch_size x seq_len`` tokens with a sparse LM head evaluated at ``loss_tokens`` positions."""
    tokens = batch_size * seq_len
    dense = 2 * cfg.num_layers * block_matmul_params(cfg) * tokens
    attention = 2 * 2 * cfg.num_layers * seq_len * cfg.hidden_size * tokens
    emb = cfg.embedding_size or cfg.hidden_size
    factorized = 2 * emb * cfg.hidden_size * tokens if cfg.embedding_size else 0
    head = 2 * loss_tokens * ((cfg.hidden_size * emb if head_transform else 0) + emb * cfg.vocab_size)
    return (3 if backward else 1) * (dense + attention + factorized + head)


def seq2seq_training_flops(cfg: BackboneConfig, batch_size: int, input_len: int, target_len: int, loss_tokens: int,
                           backward: bool = True) -> int:
    """FLOPs of one encoder-decoder step: the encoder over ``input_len`` tokens, the decoder over ``target_len``
    with cross-attention (4 H^2 more weights per block, and scores against ``input_len`` keys), an untransformed
    LM head at ``loss_tokens`` positions."""
    h = cfg.hidden_size
    enc_tokens, dec_tokens = batch_size * input_len, batch_size * target_len
    encoder = 2 * cfg.num_layers * block_matmul_params(cfg) * enc_tokens + 4 * cfg.num_layers * input_len * h * enc_tokens
    decoder = (2 * cfg.num_layers * (block_matmul_params(cfg) + 4 * h * h) * dec_tokens
               + 4 * cfg.num_layers * (target_len + input_len) * h * dec_tokens)
    head = 2 * loss_tokens * h * cfg.vocab_size
    return (3 if backward else 1) * (encoder + decoder + head)


def fusion_flops(layers: int, hidden_size: int, entity_size: int, intermediate_size: int, batch_size: int,
                 seq_len: int, backward: bool = True) -> int:
    """FLOPs of ERNIE's aggregator layers (:mod:`plm_lightning.nn.fusion`) on ``batch_size x seq_len`` tokens:
    token and entity self-attention (projections and scores, every position), and the fusion matmuls."""
    tokens = batch_size * seq_len
    h, d, i = hidden_size, entity_size, intermediate_size
    per_token = 2 * (4 * h * h + 4 * d * d + 2 * h * i + 2 * d * i) + 4 * seq_len * (h + d)
    return (3 if backward else 1) * layers * per_token * tokens
