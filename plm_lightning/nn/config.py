"""`BackboneConfig`: every shape and choice of the shared Transformer blocks, plus named presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

PositionKind = Literal["learned", "sinusoidal", "rope", "t5_relative", "disentangled", "xl_relative", "none"]
Activation = Literal["gelu", "gelu_new", "relu", "silu", "glu", "reglu", "geglu", "swiglu", "geglu_tanh"]
AttentionBackend = Literal["auto", "eager", "sdpa", "xformers", "flex"]


@dataclass
class BackboneConfig:
    """Shape and architecture choices of a Transformer stack.

    The defaults are BERT-base (Devlin et al., 2019, Table 1 / appendix A.2); presets below give the other models.
    """

    vocab_size: int = 30522
    """Rows of the token embedding (and columns of the tied LM head)."""
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    """Width of the feed-forward inner layer (per branch for GLU variants)."""
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    """Segment (token type) embeddings; 0 disables them (GPT-2)."""
    task_type_vocab_size: int = 0
    """ERNIE 2.0's task embedding (Sun et al. 2020, fig. 2): rows added to every token by the sample's task id."""
    position_embedding: PositionKind = "learned"
    position_offset: int = 0
    """First position id; RoBERTa starts at padding_idx + 1 = 2."""
    positions_from_padding: bool = False
    """RoBERTa's position ids (fairseq's ``make_positions``, transformers' ``create_position_ids_from_input_ids``):
    count the non-padding tokens, so a left-padded row numbers its first real token as a row alone would; padding
    tokens take the padding row ``position_offset - 1``. Off: positions count from the start of the row."""
    position_biased_input: bool = False
    """DeBERTa (position_embedding: disentangled): also add learned absolute position embeddings to the input, as
    DeBERTa-v2's ``position_biased_input`` (He et al. 2021, sec. 3.3 discusses where absolute positions enter)."""
    embedding_scale: bool = False
    """Multiply the token embeddings by sqrt(hidden_size) before positions are added (Vaswani et al. 2017, sec. 3.4;
    BART's ``scale_embedding``)."""
    block_position_embedding: bool = False
    """GLM's 2D positions (Du et al. 2022, sec. 2.2.2): a second learned table, indexed by the position inside a blank
    span (0 outside), added to the absolute position embedding."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    norm_eps: float = 1e-12
    norm_position: Literal["post", "pre"] = "post"
    """'post': BERT (Vaswani et al. 2017); 'pre': GPT-2 (Radford et al. 2019, sec. 2.3) with a final norm."""
    embedding_norm: bool = True
    """LayerNorm right after the embedding sum (BERT, RoBERTa, ALBERT)."""
    activation: Activation = "gelu"
    head_activation: Activation | None = None
    """Activation of the LM head's transform (dense -> act -> norm); None follows ``activation`` (gelu when that is
    a gated unit). RoBERTa's and ELECTRA's generator heads use gelu whatever the body uses."""
    bias: bool = True
    """Biases in every linear layer and norm, unless one of the four switches below says otherwise."""
    attention_bias: bool | None = None
    """Biases of the attention projections; None follows ``bias`` (ModernBERT's ``attention_bias``)."""
    ffn_bias: bool | None = None
    """Biases of the feed-forward layers; None follows ``bias`` (ModernBERT's ``mlp_bias``)."""
    norm_bias: bool | None = None
    """Biases of the LayerNorms; None follows ``bias`` (ModernBERT's ``norm_bias``)."""
    head_bias: bool | None = None
    """Bias of the LM head's transform (dense) layer; None follows ``bias`` (ModernBERT's ``classifier_bias``)."""
    dropout: float = 0.1
    attention_dropout: float = 0.1
    embedding_size: int | None = None
    """ALBERT factorized embedding size E (Lan et al. 2020, sec. 3.1); None means E = hidden_size."""
    layer_sharing: Literal["none", "all", "attention", "ffn"] = "none"
    """ALBERT cross-layer parameter sharing (Lan et al. 2020, sec. 3.1 and Table 4): ``all`` applies one block
    num_layers times; ``attention`` / ``ffn`` share only that sub-layer across blocks."""
    tie_word_embeddings: bool = True
    tied_output_scaling: bool = False
    """T5: the decoder output is scaled by hidden_size^-0.5 before the tied LM head (Mesh TensorFlow's convention)."""
    ffn_dropout: float = 0.0
    """Dropout on the feed-forward inner activation (T5: the model dropout rate)."""
    initializer_range: float = 0.02
    initialization: Literal["normal", "t5"] = "normal"
    """normal: N(0, initializer_range) everywhere (BERT, GPT-2); t5: Mesh TensorFlow's fan-in scaled normals
    (embeddings N(0, 1), queries (d_model d_head)^-1/2, keys/values/FFN-in d_model^-1/2, FFN-out d_ff^-1/2)."""
    scale_residual_init: bool = False
    """GPT-2: residual output projections initialised with std / sqrt(2 * num_layers)."""
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    rope_theta: float = 10000.0
    local_rope_theta: float | None = None
    """RoPE base of the sliding-window layers (ModernBERT: 10k, with 160k in the global layers); None = rope_theta."""
    local_attention_window: int | None = None
    """Sliding-window self-attention, ``|i - j| <= window // 2`` (ModernBERT: 128) or, in a causal stack, the last
    ``window`` tokens (GPT-3's "locally banded sparse attention", Brown et al. 2020 sec. 2.1, with
    ``global_attention_every: 2`` for its alternation of dense and banded layers), in every layer except each
    ``global_attention_every``-th (counting from layer 0); None = global attention everywhere."""
    global_attention_every: int = 1
    relative_position_buckets: int = 256
    """DeBERTa (position_embedding: disentangled): log-bucketed relative distances, k = buckets (v2/v3: 256);
    0 = plain clipping at ``max_relative_positions`` (v1)."""
    max_relative_positions: int = 512
    share_attention_key: bool = False
    """DeBERTa-v2: project relative embeddings with the content query/key weights (no separate W_q,r, W_k,r)."""
    relative_embedding_norm: bool = False
    """DeBERTa-v2: LayerNorm on the shared relative embedding table."""
    conv_kernel_size: int = 0
    """DeBERTa-v2: a convolution (this kernel size) beside the first layer; 0 = none."""
    conv_activation: Literal["gelu", "tanh", "relu"] = "gelu"
    unpad: bool = False
    """Run the token-wise layers on the real tokens only (ModernBERT's unpadding; ``plm_lightning.nn.unpad``)."""
    first_attention_norm: bool = True
    """Pre-norm before the first layer's attention; ModernBERT drops it (its embedding output is already normed)."""
    attention_backend: AttentionBackend = "auto"
    scale_attention_by_head_dim: bool = True
    """Scores divided by sqrt(head_dim) (Vaswani et al. 2017, eq. 1); GPT-2's ``scale_attn_weights: false`` and T5
    leave them unscaled."""
    scale_attention_by_layer: bool = False
    """Scores also divided by the layer's 1-based index (GPT-2's ``scale_attn_by_inverse_layer_idx``, from the
    Mistral project's stability fixes)."""
    upcast_attention: bool = False
    """Attention computed in float32 under mixed precision, then cast back (GPT-2's ``reorder_and_upcast_attn``)."""
    pad_token_id: int = 0
    mem_len: int = 0
    """Transformer-XL segment-level recurrence (Dai et al. 2019, sec. 3.2; position_embedding: xl_relative): each layer
    keeps the last ``mem_len`` hidden states of the previous segments, without gradient, as extra keys and values."""
    clamp_len: int = -1
    """xl_relative: relative distances clamped to +-clamp_len (-1: never)."""
    relative_segments: bool = False
    """XLNet's relative segment encoding (Yang et al. 2019, sec. 2.5): a learned same/different-segment term per head
    instead of absolute segment embeddings."""
    bidirectional_data: bool = False
    """XLNet's bi_data: the second half of every batch is read right to left (its relative distances negated)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "global_attention_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.layer_sharing not in ("none", "all", "attention", "ffn"):
            raise ValueError(f"layer_sharing={self.layer_sharing!r} is not one of none, all, attention, ffn")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                "choose num_heads that divides hidden_size"
            )
        if self.local_attention_window is not None and self.local_attention_window < 2:
            raise ValueError(f"local_attention_window={self.local_attention_window} must be >= 2 (or null)")
        if self.scale_attention_by_layer and self.layer_sharing in ("all", "attention"):
            raise ValueError("scale_attention_by_layer needs a separate attention per layer; layer_sharing="
                             f"{self.layer_sharing} applies one attention to every layer")
        if self.positions_from_padding and self.position_offset < 1:
            raise ValueError("positions_from_padding needs position_offset >= 1: the row before the first position "
                             "is the padding tokens' (RoBERTa: position_offset = pad_token_id + 1)")
        if self.mem_len < 0:
            raise ValueError(f"mem_len={self.mem_len} must be >= 0 (0 = no Transformer-XL memory)")

    def has_bias(self, part: Literal["attention", "ffn", "norm", "head"]) -> bool:
        """Whether ``part``'s layers carry biases: its own switch, else ``bias``."""
        own = getattr(self, f"{part}_bias")
        return self.bias if own is None else own

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def is_global_layer(self, index: int) -> bool:
        """Whether layer ``index`` attends globally (always, without a local window)."""
        return self.local_attention_window is None or index % self.global_attention_every == 0

    @property
    def is_pre_norm(self) -> bool:
        return self.norm_position == "pre"

    def replace(self, **changes: Any) -> BackboneConfig:
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            valid = ", ".join(f.name for f in dataclasses.fields(self))
            raise ValueError(f"unknown backbone key(s) {unknown}; valid keys: {valid}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _bert(**kw: Any) -> BackboneConfig:
    return BackboneConfig(**kw)


def _gpt2(**kw: Any) -> BackboneConfig:
    base = dict(
        vocab_size=50257,
        max_position_embeddings=1024,
        type_vocab_size=0,
        norm_eps=1e-5,
        norm_position="pre",
        embedding_norm=False,
        activation="gelu_new",
        scale_residual_init=True,
    )
    base.update(kw)
    return BackboneConfig(**base)


def _t5(**kw: Any) -> BackboneConfig:
    """T5 (Raffel et al. 2020, sec. 3.1.1 / the released configs): pre-norm RMSNorm without biases, ReLU FFN,
    relative position buckets (32, max distance 128), no absolute or segment embeddings, tied embeddings with the
    decoder output scaled by d_model^-1/2, dropout 0.1, SentencePiece vocabulary of 32k + 100 sentinels."""
    base = dict(vocab_size=32128, hidden_size=512, num_layers=6, num_heads=8, intermediate_size=2048,
                type_vocab_size=0, position_embedding="t5_relative", norm="rmsnorm", norm_eps=1e-6,
                norm_position="pre", embedding_norm=False, activation="relu", bias=False, dropout=0.1,
                attention_dropout=0.1, ffn_dropout=0.1, tied_output_scaling=True, initialization="t5",
                initializer_range=1.0)
    base.update(kw)
    return BackboneConfig(**base)


# T5.1.1 (google-research/text-to-text-transfer-transformer, released_checkpoints.md): GeGLU, untied output
# embeddings, no dropout in pretraining
_T5_V1_1: dict[str, Any] = dict(activation="geglu_tanh", tie_word_embeddings=False, tied_output_scaling=False,
                                dropout=0.0, attention_dropout=0.0, ffn_dropout=0.0)


def _bart(**kw: Any) -> BackboneConfig:
    """BART (Lewis et al. 2020, sec. 2.1; fairseq's bart.base / bart.large and transformers' BartConfig): the
    original Transformer encoder-decoder, post-norm with GELU, learned positions (rows offset by 2, fairseq's padding
    convention), a LayerNorm on each stack's embeddings, biases, dropout 0.1, embeddings shared by both stacks and
    the LM head, GPT-2's byte-level BPE vocabulary."""
    base = dict(vocab_size=50265, hidden_size=768, num_layers=6, num_heads=12, intermediate_size=3072,
                max_position_embeddings=1026, position_offset=2, type_vocab_size=0, norm_eps=1e-5,
                norm_position="post", embedding_norm=True, activation="gelu", dropout=0.1, attention_dropout=0.1,
                ffn_dropout=0.1, pad_token_id=1)
    base.update(kw)
    return BackboneConfig(**base)


_DEBERTA_V3: dict[str, Any] = dict(relative_position_buckets=256, share_attention_key=True,
                                   relative_embedding_norm=True, type_vocab_size=0)


def _deberta(**kw: Any) -> BackboneConfig:
    base = dict(position_embedding="disentangled", relative_position_buckets=0, max_relative_positions=512,
                norm_eps=1e-7, type_vocab_size=0)
    base.update(kw)
    return BackboneConfig(**base)


def _modernbert(**kw: Any) -> BackboneConfig:
    base = dict(
        vocab_size=50368, hidden_size=768, num_layers=22, num_heads=12, intermediate_size=1152,
        max_position_embeddings=8192, type_vocab_size=0, position_embedding="rope", rope_theta=160000.0,
        local_rope_theta=10000.0, local_attention_window=128, global_attention_every=3, norm_eps=1e-5,
        norm_position="pre", first_attention_norm=False, activation="geglu", bias=False, dropout=0.0,
        attention_dropout=0.0, pad_token_id=50283, unpad=True,
    )
    base.update(kw)
    return BackboneConfig(**base)


def _xlnet(**kw: Any) -> BackboneConfig:
    """XLNet (Yang et al. 2019, appendix A.1 / the released xlnet_cased configs): post-norm, GELU, Transformer-XL
    relative positions and relative segments, no absolute or segment embeddings, no projection biases, dropout 0.1,
    SentencePiece 32k vocabulary."""
    base = dict(vocab_size=32000, position_embedding="xl_relative", type_vocab_size=0, embedding_norm=False,
                activation="gelu", dropout=0.1, attention_dropout=0.1, ffn_dropout=0.1, relative_segments=True,
                pad_token_id=5)
    base.update(kw)
    return BackboneConfig(**base)


def _transformer_xl(**kw: Any) -> BackboneConfig:
    """Transformer-XL (Dai et al. 2019; the reference code's defaults): post-norm ReLU decoder with relative
    positions and a memory of the previous segments; tied full softmax here (the paper's adaptive softmax is left
    out)."""
    base = dict(position_embedding="xl_relative", type_vocab_size=0, embedding_norm=False, activation="relu",
                dropout=0.1, attention_dropout=0.0, ffn_dropout=0.1, norm_eps=1e-5)
    base.update(kw)
    return BackboneConfig(**base)


PRESETS: dict[str, BackboneConfig] = {
    # a few-second model for tests and the quickstart
    "tiny": _bert(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, max_position_embeddings=256,
                  vocab_size=4096),
    "tiny-gpt": _gpt2(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, max_position_embeddings=256,
                      vocab_size=4096),
    # Du et al. 2022 (GLM): a GPT-2-style pre-norm decoder with 2D positions
    "tiny-glm": _gpt2(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, max_position_embeddings=256,
                      vocab_size=4096, block_position_embedding=True),
    "glm-base": _gpt2(vocab_size=50265, max_position_embeddings=512, block_position_embedding=True),
    "glm-large": _gpt2(vocab_size=50265, max_position_embeddings=512, block_position_embedding=True,
                       hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    # Turc et al. 2019, "Well-Read Students Learn Better" compact BERTs
    "bert-mini": _bert(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024),
    "bert-small": _bert(hidden_size=512, num_layers=4, num_heads=8, intermediate_size=2048),
    "bert-medium": _bert(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=2048),
    # Devlin et al. 2019
    "bert-base": _bert(),
    "bert-large": _bert(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    # Liu et al. 2019: BERT shapes, positions offset by padding_idx + 1, one segment
    "roberta-base": _bert(vocab_size=50265, max_position_embeddings=514, position_offset=2, type_vocab_size=1,
                          positions_from_padding=True,
                          norm_eps=1e-5, pad_token_id=1),
    "roberta-large": _bert(vocab_size=50265, max_position_embeddings=514, position_offset=2, type_vocab_size=1,
                           positions_from_padding=True,
                           norm_eps=1e-5, pad_token_id=1, hidden_size=1024, num_layers=24, num_heads=16,
                           intermediate_size=4096),
    # Lan et al. 2020, Table 1: factorized embeddings E = 128, all layers shared, no dropout (sec. 4.9), gelu_new
    "tiny-albert": _bert(hidden_size=64, num_layers=4, num_heads=2, intermediate_size=256, max_position_embeddings=256,
                         vocab_size=4096, embedding_size=32, layer_sharing="all", dropout=0.0, attention_dropout=0.0,
                         activation="gelu_new"),
    "albert-base": _bert(vocab_size=30000, embedding_size=128, layer_sharing="all", dropout=0.0, attention_dropout=0.0,
                         activation="gelu_new"),
    "albert-large": _bert(vocab_size=30000, embedding_size=128, layer_sharing="all", dropout=0.0, attention_dropout=0.0,
                          activation="gelu_new", hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    # Clark et al. 2020, Table 6 (discriminator shapes; the generator is derived from them by the ELECTRA module)
    "electra-small": _bert(hidden_size=256, num_heads=4, intermediate_size=1024, embedding_size=128),
    "electra-base": _bert(),
    "electra-large": _bert(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    # He et al. 2021 (DeBERTa: v1 clipping at 512, BPE 50k) and 2023 (DeBERTaV3: 256 log buckets, shared position /
    # content projections, normed relative table, no segments, 128k vocabulary); LayerNorm eps 1e-7
    "tiny-deberta": _deberta(hidden_size=64, num_layers=3, num_heads=2, intermediate_size=256, vocab_size=4096,
                             max_position_embeddings=256),
    "tiny-deberta-v3": _deberta(hidden_size=64, num_layers=4, num_heads=2, intermediate_size=256, vocab_size=4096,
                                max_position_embeddings=256, **_DEBERTA_V3),
    "deberta-base": _deberta(vocab_size=50265, relative_position_buckets=0, type_vocab_size=0),
    "deberta-v3-base": _deberta(vocab_size=128100, **_DEBERTA_V3),
    "deberta-v3-large": _deberta(vocab_size=128100, hidden_size=1024, num_layers=24, num_heads=16,
                                 intermediate_size=4096, **_DEBERTA_V3),
    # Warner et al. 2024 (ModernBERT), Table 1 / the released configs: pre-norm, no biases, GeGLU, RoPE 160k global /
    # 10k local, 128-token windows with global attention every third layer, no dropout
    "tiny-modernbert": _modernbert(hidden_size=64, num_layers=3, num_heads=2, intermediate_size=128,
                                   max_position_embeddings=1024, vocab_size=4096),
    "modernbert-base": _modernbert(),
    "modernbert-large": _modernbert(hidden_size=1024, num_layers=28, num_heads=16, intermediate_size=2624),
    # Raffel et al. 2020 (T5) and T5.1.1; tiny ones for CPU smoke runs
    "tiny-t5": _t5(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, vocab_size=8192),
    "tiny-t5-v1_1": _t5(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, vocab_size=8192,
                        **_T5_V1_1),
    "t5-small": _t5(),
    "t5-base": _t5(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072),
    "t5-large": _t5(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    "t5-v1_1-base": _t5(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=2048, **_T5_V1_1),
    "t5-v1_1-large": _t5(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=2816, **_T5_V1_1),
    # Lewis et al. 2020 (BART): 6+6 layers (base), 12+12 (large); 1024 positions
    "tiny-bart": _bart(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, vocab_size=8192,
                       max_position_embeddings=258),
    "bart-base": _bart(),
    "bart-large": _bart(hidden_size=1024, num_layers=12, num_heads=16, intermediate_size=4096),
    # Yang et al. 2019 (XLNet base / large) and Dai et al. 2019 (Transformer-XL: the WikiText-103 base model, 16 layers
    # of 410 with 10 heads, memory 150)
    "tiny-xlnet": _xlnet(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, vocab_size=4096),
    "xlnet-base": _xlnet(),
    "xlnet-large": _xlnet(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    "tiny-transformer-xl": _transformer_xl(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256,
                                           vocab_size=4096, mem_len=64),
    "transformer-xl-base": _transformer_xl(hidden_size=410, num_layers=16, num_heads=10, intermediate_size=2100,
                                           vocab_size=267735, mem_len=150),
    # Radford et al. 2019
    "gpt2": _gpt2(),
    "gpt2-medium": _gpt2(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    "gpt2-large": _gpt2(hidden_size=1280, num_layers=36, num_heads=20, intermediate_size=5120),
}


def get_preset(name: str) -> BackboneConfig:
    """Return a fresh copy of a named preset, or a clear error listing the valid names."""
    if name not in PRESETS:
        raise ValueError(f"unknown backbone preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name])
