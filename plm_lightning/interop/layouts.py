"""Tensor-name maps between our state dicts and the transformers families: per-layer names, where each family keeps
its embeddings, layers and heads (``EncoderLayout``), and the GPT-2 and ModernBERT maps. Used by ``interop.hf``."""

from __future__ import annotations

from dataclasses import dataclass

from plm_lightning.nn.config import BackboneConfig

_QKV = ("query", "key", "value")  # the rows of our fused qkv_proj, in order
_BERT_LAYER = {  # ours -> HF, relative to one layer
    "self_attn.o_proj": "attention.output.dense",
    "self_attn_norm": "attention.output.LayerNorm",
    "ffn.fc_in": "intermediate.dense",
    "ffn.fc_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
_ALBERT_LAYER = {"self_attn.o_proj": "attention.dense", "self_attn_norm": "attention.LayerNorm", "ffn.fc_in": "ffn",
                 "ffn.fc_out": "ffn_output", "ffn_norm": "full_layer_layer_norm"}
_GPT2_LAYER = {"self_attn_norm": "ln_1", "self_attn.qkv_proj": "attn.c_attn", "self_attn.o_proj": "attn.c_proj",
               "ffn_norm": "ln_2", "ffn.fc_in": "mlp.c_fc", "ffn.fc_out": "mlp.c_proj"}


@dataclass(frozen=True)
class EncoderLayout:
    """Where a transformers encoder family keeps each of our tensors."""

    architecture: str
    model_type: str
    base: str
    """Prefix of the bare model's weights (``bert``, ``roberta``, ``electra``, ``albert``)."""
    layer: str
    """One layer's prefix, ``{i}`` for its index (ALBERT's single shared layer has none)."""
    layer_names: dict[str, str]
    qkv: str
    """Prefix of query/key/value inside a layer."""
    project: str | None
    """The E -> H projection of factorized embeddings."""
    heads: tuple[tuple[str, str], ...]
    """(ours, HF) pairs of the output heads, ``weight``/``bias`` suffixes included."""
    qkv_names: tuple[str, str, str] = ("query", "key", "value")
    absolute_positions: bool = True


def _wb(ours: str, hf: str) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{hf}.weight"), (f"{ours}.bias", f"{hf}.bias")]


_MLM_HEAD = (*_wb("lm_head.dense", "cls.predictions.transform.dense"),
             *_wb("lm_head.norm", "cls.predictions.transform.LayerNorm"),
             ("lm_head.bias", "cls.predictions.bias"), ("lm_head.bias", "cls.predictions.decoder.bias"),
             ("lm_head.weight", "cls.predictions.decoder.weight"))
_ALBERT_MLM_HEAD = (*_wb("lm_head.dense", "predictions.dense"), *_wb("lm_head.norm", "predictions.LayerNorm"),
                    ("lm_head.bias", "predictions.bias"), ("lm_head.bias", "predictions.decoder.bias"),
                    ("lm_head.weight", "predictions.decoder.weight"))
_BERT_LIKE = dict(layer="{base}.encoder.layer.{i}", layer_names=_BERT_LAYER, qkv="attention.self")
LAYOUTS: dict[str, EncoderLayout] = {
    "bert": EncoderLayout("BertForMaskedLM", "bert", "bert", project=None, heads=_MLM_HEAD, **_BERT_LIKE),
    "bert-nsp": EncoderLayout("BertForPreTraining", "bert", "bert", project=None, **_BERT_LIKE, heads=(
        *_MLM_HEAD, *_wb("sentence_head.pooler.dense", "bert.pooler.dense"),
        *_wb("sentence_head.classifier", "cls.seq_relationship"))),
    "roberta": EncoderLayout("RobertaForMaskedLM", "roberta", "roberta", project=None, **_BERT_LIKE, heads=(
        *_wb("lm_head.dense", "lm_head.dense"), *_wb("lm_head.norm", "lm_head.layer_norm"),
        ("lm_head.bias", "lm_head.bias"), ("lm_head.bias", "lm_head.decoder.bias"),
        ("lm_head.weight", "lm_head.decoder.weight"))),
    # ELECTRA (Clark et al. 2020): the discriminator with its token head; the generator is a factorized MLM
    "electra": EncoderLayout("ElectraForPreTraining", "electra", "electra", project="electra.embeddings_project",
                             **_BERT_LIKE, heads=(*_wb("rtd_head.dense", "discriminator_predictions.dense"),
                                                  *_wb("rtd_head.prediction", "discriminator_predictions.dense_prediction"))),
    "electra-generator": EncoderLayout(
        "ElectraForMaskedLM", "electra", "electra", project="electra.embeddings_project", **_BERT_LIKE, heads=(
            *_wb("lm_head.dense", "generator_predictions.dense"), *_wb("lm_head.norm", "generator_predictions.LayerNorm"),
            ("lm_head.bias", "generator_lm_head.bias"), ("lm_head.weight", "generator_lm_head.weight"))),
    # DeBERTa-v2/v3 (He et al. 2021; 2023): disentangled attention, no absolute positions at the input
    "deberta-v2": EncoderLayout("DebertaV2ForMaskedLM", "deberta-v2", "deberta", project=None, heads=_MLM_HEAD,
                                qkv_names=("query_proj", "key_proj", "value_proj"), absolute_positions=False,
                                **_BERT_LIKE),
    # the same with the non-legacy head of the released v3 checkpoints (decoder = the word embeddings, no own weight)
    "deberta-v2-lm": EncoderLayout("DebertaV2ForMaskedLM", "deberta-v2", "deberta", project=None,
                                   qkv_names=("query_proj", "key_proj", "value_proj"), absolute_positions=False,
                                   **_BERT_LIKE, heads=(*_wb("lm_head.dense", "lm_predictions.lm_head.dense"),
                                                        *_wb("lm_head.norm", "lm_predictions.lm_head.LayerNorm"),
                                                        ("lm_head.bias", "lm_predictions.lm_head.bias"))),
    # DeBERTaV3's discriminator: the encoder alone (what the released v3 checkpoints hold for downstream use)
    "deberta-v2-encoder": EncoderLayout("DebertaV2Model", "deberta-v2", "deberta", project=None, heads=(),
                                        qkv_names=("query_proj", "key_proj", "value_proj"), absolute_positions=False,
                                        **_BERT_LIKE),
    # ALBERT (Lan et al. 2020): one shared layer (num_hidden_groups = inner_group_num = 1)
    "albert": EncoderLayout("AlbertForMaskedLM", "albert", "albert", "albert.encoder.albert_layer_groups.0.albert_layers.0",
                            _ALBERT_LAYER, "attention", "albert.encoder.embedding_hidden_mapping_in", _ALBERT_MLM_HEAD),
    "albert-sop": EncoderLayout("AlbertForPreTraining", "albert", "albert",
                                "albert.encoder.albert_layer_groups.0.albert_layers.0", _ALBERT_LAYER, "attention",
                                "albert.encoder.embedding_hidden_mapping_in", (
                                    *_ALBERT_MLM_HEAD, *_wb("sentence_head.pooler.dense", "albert.pooler"),
                                    *_wb("sentence_head.classifier", "sop_classifier.classifier"))),
}
ARCHITECTURES = {**{k: v.architecture for k, v in LAYOUTS.items()}, "gpt2": "GPT2LMHeadModel",
                 "modernbert": "ModernBertForMaskedLM"}
BY_ARCHITECTURE = {v.architecture: k for k, v in LAYOUTS.items() if k != "deberta-v2-lm"}


def layer_prefixes(cfg: BackboneConfig, layout: EncoderLayout) -> list[str]:
    """HF prefix of each of our stored blocks (ALBERT stores one)."""
    n = 1 if cfg.layer_sharing == "all" else cfg.num_layers
    return [layout.layer.format(base=layout.base, i=i) for i in range(n)]


def encoder_pairs(cfg: BackboneConfig, layout: EncoderLayout) -> list[tuple[str, str]]:
    """(ours, HF) name pairs of an encoder family, except the fused q/k/v and the positions (reshaped, not renamed)."""
    emb = f"{layout.base}.embeddings"
    pairs = [("backbone.embeddings.token.weight", f"{emb}.word_embeddings.weight"),
             ("backbone.embeddings.segment.weight", f"{emb}.token_type_embeddings.weight"),
             *_wb("backbone.embeddings.norm", f"{emb}.LayerNorm")]
    if layout.project is not None and cfg.embedding_size not in (None, cfg.hidden_size):
        pairs += _wb("backbone.embeddings.project", layout.project)
    for i, prefix in enumerate(layer_prefixes(cfg, layout)):
        for ours, hf in layout.layer_names.items():
            pairs += _wb(f"backbone.layers.{i}.{ours}", f"{prefix}.{hf}")
        if layout.model_type == "deberta-v2" and not cfg.share_attention_key:
            for proj in ("pos_key_proj", "pos_query_proj"):
                pairs += _wb(f"backbone.layers.{i}.self_attn.{proj}", f"{prefix}.attention.self.{proj}")
    if layout.model_type == "deberta-v2":
        pairs.append(("backbone.relative_embeddings.weight", "deberta.encoder.rel_embeddings.weight"))
        if cfg.relative_embedding_norm:
            pairs += _wb("backbone.relative_norm", "deberta.encoder.LayerNorm")
        if cfg.conv_kernel_size > 0:
            pairs += [*_wb("backbone.conv.conv", "deberta.encoder.conv.conv"),
                      *_wb("backbone.conv.norm", "deberta.encoder.conv.LayerNorm")]
    return pairs + list(layout.heads)


def gpt2_pairs(cfg: BackboneConfig) -> list[tuple[str, str]]:
    pairs = [("backbone.embeddings.token.weight", "transformer.wte.weight"),
             ("backbone.embeddings.position.weight", "transformer.wpe.weight"),
             *_wb("backbone.final_norm", "transformer.ln_f"), ("lm_head.weight", "lm_head.weight")]
    for i in range(cfg.num_layers):
        for ours, hf in _GPT2_LAYER.items():
            pairs += _wb(f"backbone.layers.{i}.{ours}", f"transformer.h.{i}.{hf}")
    return pairs


def modernbert_pairs(cfg: BackboneConfig) -> list[tuple[str, str]]:
    """ModernBERT (``ModernBertForMaskedLM``), except each layer's fused GeGLU input ``mlp.Wi`` (split, not renamed)."""

    def lin(ours: str, hf: str, part: str) -> list[tuple[str, str]]:
        return _wb(ours, hf) if cfg.has_bias(part) else [(f"{ours}.weight", f"{hf}.weight")]

    pairs = [("backbone.embeddings.token.weight", "model.embeddings.tok_embeddings.weight"),
             *lin("backbone.embeddings.norm", "model.embeddings.norm", "norm"),
             *lin("backbone.final_norm", "model.final_norm", "norm"), *lin("lm_head.dense", "head.dense", "head"),
             *lin("lm_head.norm", "head.norm", "norm"), ("lm_head.bias", "decoder.bias"),
             ("lm_head.weight", "decoder.weight")]
    for i in range(cfg.num_layers):
        ours, hf = f"backbone.layers.{i}", f"model.layers.{i}"
        if i > 0 or cfg.first_attention_norm:
            pairs += lin(f"{ours}.self_attn_norm", f"{hf}.attn_norm", "norm")
        pairs += [*lin(f"{ours}.self_attn.qkv_proj", f"{hf}.attn.Wqkv", "attention"),
                  *lin(f"{ours}.self_attn.o_proj", f"{hf}.attn.Wo", "attention"),
                  *lin(f"{ours}.ffn_norm", f"{hf}.mlp_norm", "norm"), *lin(f"{ours}.ffn.fc_out", f"{hf}.mlp.Wo", "ffn")]
    return pairs


def is_conv1d(hf_key: str) -> bool:
    return hf_key.endswith(".weight") and any(s in hf_key for s in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))
