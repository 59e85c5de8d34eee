"""Hugging Face `transformers` layouts <-> our state dicts, kept beside the model, never inside it (torchtitan's
state_dict_adapter split). Families: BERT (`BertForPreTraining`, `BertForMaskedLM`), RoBERTa (`RobertaForMaskedLM`),
ALBERT (`AlbertForPreTraining`, `AlbertForMaskedLM`), ELECTRA (`ElectraForPreTraining` discriminator,
`ElectraForMaskedLM` generator), DeBERTa-v2/v3 (`DebertaV2ForMaskedLM`), ModernBERT
(`ModernBertForMaskedLM`), GPT-2 (`GPT2LMHeadModel`), T5 / mT5 (`T5ForConditionalGeneration`, ``interop.t5``),
BART (`BartForConditionalGeneration`, ``interop.bart``) and XLNet (`XLNetLMHeadModel`, ``interop.xlnet``).
Pure tensor mappings: `transformers` itself is not needed to convert.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.bart import bart_config, bart_from_config, bart_from_hf, bart_to_hf
from plm_lightning.interop.fields import refuse_unsupported
from plm_lightning.interop.layouts import (
    ARCHITECTURES,
    BY_ARCHITECTURE,
    LAYOUTS,
    encoder_pairs,
    gpt2_pairs,
    is_conv1d,
    layer_prefixes,
    modernbert_pairs,
)
from plm_lightning.interop.t5 import ARCHITECTURES as T5_ARCHITECTURES
from plm_lightning.interop.t5 import FEED_FORWARD, t5_config, t5_from_config, t5_from_hf, t5_to_hf
from plm_lightning.interop.xlnet import xlnet_config, xlnet_from_config, xlnet_from_hf, xlnet_to_hf
from plm_lightning.nn.config import BackboneConfig

SWITCHES = dict(scale_attention_by_head_dim=True, scale_attention_by_layer=False, upcast_attention=False,
                embedding_scale=False, positions_from_padding=False, position_biased_input=False)
"""Switches most transformers families cannot express: off (their default) unless a family allows them."""
PARTS = ("attention", "ffn", "norm", "head")
"""The per-part bias switches (``BackboneConfig.attention_bias`` ...): only ModernBERT sets them apart."""


def head_activation(cfg: BackboneConfig) -> str:
    """The activation our LM head's transform applies (see :class:`~plm_lightning.nn.heads.LMHead`)."""
    act = cfg.head_activation or cfg.activation
    return act if act in ("gelu", "gelu_new", "relu", "silu") else "gelu"


def differences(cfg: BackboneConfig, wanted: dict[str, Any], activations: tuple[str, ...] | None = None,
                allows: tuple[str, ...] = ()) -> list[str]:
    """The config fields that keep ``cfg`` out of a transformers architecture: each ``wanted`` value it lacks, each
    of :data:`SWITCHES` not in ``allows`` that is on, and ``activation`` when it is not one of ``activations``."""
    wanted = {**{k: v for k, v in SWITCHES.items() if k not in allows}, **wanted}
    bad = [k for k, v in wanted.items() if getattr(cfg, k) != v]
    if "part_biases" not in allows:  # one bias switch for the whole model
        bad += [f"{part}_bias" for part in PARTS if getattr(cfg, f"{part}_bias") not in (None, cfg.bias)]
    return bad + (["activation"] if activations is not None and cfg.activation not in activations else [])


BASE_FAMILY = {"bert-nsp": "bert", "albert-sop": "albert", "deberta-v2-encoder": "deberta-v2"}
"""A layout with a pre-training head -> the family of its bare model."""


def family_of(cfg: BackboneConfig, objective: str, sentence_prediction: str = "none", part: str = "discriminator",
              recorded: str | None = None) -> str:
    """Which transformers architecture a model of ours exports to, or a ConfigError saying why none fits.

    The answer follows from what the model computes (its config, objective and heads), never from its tokenizer.
    ``recorded``: the family its checkpoint records (imported, or decided when it was first saved); it picks
    between layouts that compute the same (a BERT-shaped ELECTRA generator, DeBERTa's two MLM heads), and a model
    that no longer fits it is refused rather than written as another family."""
    family = _family_of(cfg, objective, sentence_prediction, part, recorded)
    if recorded is not None and _base(family) != _base(recorded):
        raise ConfigError(f"export: the checkpoint records family {recorded!r}, but its model now fits {family!r} "
                          "(its backbone or heads changed since); refusing to write another family")
    return family


def _base(family: str) -> str:
    base = BASE_FAMILY.get(family, family)
    return {"electra-generator": "electra", "deberta-v2-lm": "deberta-v2", "mt5": "t5"}.get(base, base)


def _family_of(cfg: BackboneConfig, objective: str, sentence_prediction: str, part: str,
               recorded: str | None) -> str:
    if objective == "CausalLM":
        wanted = dict(norm_position="pre", norm="layernorm", position_embedding="learned",
                      type_vocab_size=0, bias=True, embedding_size=None, layer_sharing="none")
        bad = differences(cfg, wanted, tuple(GPT2_ACTIVATIONS),
                          ("scale_attention_by_head_dim", "scale_attention_by_layer", "upcast_attention"))
        if bad:
            raise ConfigError(f"export: this CausalLM differs from GPT-2 in {bad}; GPT2LMHeadModel cannot hold it")
        return "gpt2"
    if objective == "PermutationLM":
        wanted = dict(norm="layernorm", norm_position="post", relative_segments=True, type_vocab_size=0,
                      embedding_norm=False, embedding_size=None, layer_sharing="none", tie_word_embeddings=True)
        bad = differences(cfg, wanted, ("gelu", "relu", "gelu_new"))
        if bad:
            raise ConfigError(f"export: this PermutationLM differs from XLNet in {bad}; XLNetLMHeadModel cannot hold it")
        return "xlnet"
    if objective == "Seq2SeqLM" and cfg.position_embedding == "learned":
        wanted = dict(norm="layernorm", norm_position="post", bias=True, embedding_norm=True, type_vocab_size=0,
                      embedding_size=None, layer_sharing="none", position_offset=2, tie_word_embeddings=True,
                      tied_output_scaling=False, task_type_vocab_size=0)
        bad = differences(cfg, wanted, ("gelu", "relu", "gelu_new"), ("embedding_scale",))
        if bad:
            raise ConfigError(f"export: this Seq2SeqLM differs from BART in {bad}; BartForConditionalGeneration "
                              "cannot hold it")
        return "bart"
    if objective == "Seq2SeqLM":
        wanted = dict(position_embedding="t5_relative", norm="rmsnorm", norm_position="pre", bias=False,
                      embedding_norm=False, type_vocab_size=0, embedding_size=None, layer_sharing="none")
        bad = differences(cfg, wanted, tuple(FEED_FORWARD))
        if bad:
            raise ConfigError(f"export: this Seq2SeqLM differs from T5 in {bad}; T5ForConditionalGeneration cannot "
                              "hold it")
        return "mt5" if recorded == "mt5" else "t5"
    if objective not in ("MaskedLM", "ELECTRA"):
        raise ConfigError(f"export: no transformers counterpart is wired for objective {objective!r}")
    if objective == "MaskedLM" and cfg.position_embedding == "rope":
        wanted = dict(norm_position="pre", norm="layernorm", activation="geglu", type_vocab_size=0, embedding_norm=True,
                      embedding_size=None, layer_sharing="none", first_attention_norm=False)
        bad = differences(cfg, wanted, allows=("part_biases",))
        if bad or sentence_prediction != "none":
            raise ConfigError(f"export: a RoPE MaskedLM exports as ModernBertForMaskedLM, which it differs from in "
                              f"{bad or ['sentence_prediction']}")
        return "modernbert"
    if cfg.position_embedding == "disentangled":
        bad = differences(cfg, {}, ("gelu", "relu", "gelu_new", "silu"), ("position_biased_input",))
        if bad or head_activation(cfg) != cfg.activation:
            raise ConfigError(f"export: this {objective} differs from DeBERTa-v2 in {bad or ['head_activation']}")
    if cfg.position_embedding == "disentangled" and objective == "ELECTRA":  # DeBERTaV3
        return "deberta-v2-encoder" if part == "discriminator" else "deberta-v2"
    if cfg.position_embedding == "disentangled":
        if objective != "MaskedLM" or sentence_prediction != "none" or cfg.embedding_size not in (None, cfg.hidden_size) \
                or cfg.layer_sharing != "none" or cfg.norm_position != "post":
            raise ConfigError("export: a disentangled-attention model exports as DebertaV2ForMaskedLM: an MLM-only "
                              "post-norm encoder without factorized embeddings or shared layers")
        return "deberta-v2-lm" if recorded == "deberta-v2-lm" else "deberta-v2"
    bad = differences(cfg, dict(norm_position="post", norm="layernorm", position_embedding="learned", bias=True),
                      ("gelu", "relu", "gelu_new", "silu"), ("positions_from_padding",))
    if bad:
        raise ConfigError(f"export: this {objective} differs from BERT/RoBERTa/ALBERT/ELECTRA in {bad}; no "
                          "transformers class holds it")
    if objective == "ELECTRA":
        if cfg.layer_sharing != "none" or cfg.positions_from_padding:
            raise ConfigError("export: ELECTRA with shared layers or RoBERTa's positions has no transformers "
                              "counterpart")
        if part == "discriminator":
            return "electra"
    if cfg.layer_sharing == "all":
        if head_activation(cfg) != cfg.activation or cfg.positions_from_padding:
            raise ConfigError("export: ALBERT's prediction head applies hidden_act and numbers positions from the "
                              "row's start; this model does not")
        if sentence_prediction == "nsp":
            raise ConfigError("export: ALBERT layouts hold SOP or no sentence head, not NSP")
        return "albert-sop" if sentence_prediction == "sop" else "albert"
    if cfg.layer_sharing != "none":
        raise ConfigError(f"export: layer_sharing={cfg.layer_sharing} (shared attention or FFN only) has no "
                          "transformers counterpart; ALBERT shares all layers")
    if objective == "ELECTRA" or cfg.embedding_size not in (None, cfg.hidden_size) or recorded == "electra-generator":
        if sentence_prediction != "none" or head_activation(cfg) != "gelu" or cfg.positions_from_padding:
            raise ConfigError("export: a factorized MaskedLM exports as ElectraForMaskedLM, which has no sentence "
                              "head, a gelu head and positions from the start of the row")
        return "electra-generator"
    if sentence_prediction == "sop":
        raise ConfigError("export: SOP without shared layers has no transformers class (AlbertForPreTraining "
                          "shares all layers)")
    return encoder_family(cfg, sentence_prediction)


def encoder_family(cfg: BackboneConfig, sentence_prediction: str = "none") -> str:
    """BERT or RoBERTa for an unfactorized, unshared post-norm encoder: RoBERTa numbers positions from the first
    real token and its head applies gelu; BERT numbers them from the row's start and its head follows hidden_act."""
    if cfg.positions_from_padding:
        if sentence_prediction != "none" or head_activation(cfg) != "gelu":
            raise ConfigError("export: RobertaForMaskedLM has no sentence head and a gelu prediction head; this model "
                              f"has sentence_prediction={sentence_prediction}, head activation {head_activation(cfg)}")
        return "roberta"
    if head_activation(cfg) != cfg.activation:
        raise ConfigError(f"export: BERT's prediction head applies hidden_act ({cfg.activation}); this model's "
                          f"applies {head_activation(cfg)}")
    return "bert-nsp" if sentence_prediction == "nsp" else "bert"


def to_hf(state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
    """Our state dict (a LightningModule's, with the exported stack under ``backbone.``) to ``family``'s layout."""
    out: dict[str, Tensor] = {}
    if family in T5_ARCHITECTURES:
        return t5_to_hf(state, cfg)
    if family == "bart":
        return bart_to_hf(state, cfg)
    if family == "xlnet":
        return xlnet_to_hf(state, cfg)
    if family == "gpt2":
        for ours, hf in gpt2_pairs(cfg):
            t = state[ours]
            out[hf] = t.t().contiguous() if is_conv1d(hf) else t.clone()
        return out
    if family == "modernbert":
        out = {hf: state[ours].clone() for ours, hf in modernbert_pairs(cfg)}
        for i in range(cfg.num_layers):  # Wi = [activated half; linear half]: act(input) * gate in transformers
            for kind in ("weight", "bias") if cfg.has_bias("ffn") else ("weight",):
                out[f"model.layers.{i}.mlp.Wi.{kind}"] = torch.cat(
                    [state[f"backbone.layers.{i}.ffn.fc_gate.{kind}"], state[f"backbone.layers.{i}.ffn.fc_in.{kind}"]])
        return out
    layout = LAYOUTS[family]
    for ours, hf in encoder_pairs(cfg, layout):
        if ours in state:
            out[hf] = state[ours].clone()
    for i, prefix in enumerate(layer_prefixes(cfg, layout)):
        for kind in ("weight", "bias"):
            fused = state[f"backbone.layers.{i}.self_attn.qkv_proj.{kind}"]
            for name, part in zip(layout.qkv_names, fused.chunk(3, dim=0)):
                out[f"{prefix}.{layout.qkv}.{name}.{kind}"] = part.clone()
    base = layout.base
    if not (layout.absolute_positions or cfg.position_biased_input):
        return out
    table = state["backbone.embeddings.position.weight"]
    positions = table[cfg.position_offset:]
    if base == "roberta":  # RoBERTa counts positions from padding_idx + 1; the padding row just before
        offset = cfg.pad_token_id + 1
        positions = torch.zeros(offset + positions.shape[0], positions.shape[1], dtype=positions.dtype)
        positions[offset - 1:] = table[cfg.position_offset - 1:]
    out[f"{base}.embeddings.position_embeddings.weight"] = positions.clone()
    if f"{base}.embeddings.token_type_embeddings.weight" not in out and layout.absolute_positions:
        out[f"{base}.embeddings.token_type_embeddings.weight"] = torch.zeros(1, positions.shape[1])
    return out


def from_hf(hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
    """A transformers state dict of ``family`` to our layout (``cfg`` from :func:`config_from_hf`)."""
    out: dict[str, Tensor] = {}
    if family in T5_ARCHITECTURES:
        return t5_from_hf(hf, cfg)
    if family == "bart":
        return bart_from_hf(hf, cfg)
    if family == "xlnet":
        return xlnet_from_hf(hf, cfg)
    if family == "gpt2":
        for ours, key in gpt2_pairs(cfg):
            if key == "lm_head.weight" and key not in hf:
                key = "transformer.wte.weight"  # tied, often not saved
            t = hf[key]
            out[ours] = t.t().contiguous() if is_conv1d(key) else t.clone()
        return out
    if family == "modernbert":
        for ours, key in modernbert_pairs(cfg):
            out[ours] = hf[key if key in hf or key != "decoder.weight" else "model.embeddings.tok_embeddings.weight"].clone()
        for i in range(cfg.num_layers):
            for kind in ("weight", "bias") if cfg.has_bias("ffn") else ("weight",):
                gate, inner = hf[f"model.layers.{i}.mlp.Wi.{kind}"].chunk(2, dim=0)
                out[f"backbone.layers.{i}.ffn.fc_gate.{kind}"] = gate.clone()
                out[f"backbone.layers.{i}.ffn.fc_in.{kind}"] = inner.clone()
        return out
    layout = LAYOUTS[family]
    base = layout.base
    for ours, key in encoder_pairs(cfg, layout):
        if key in hf:
            out[ours] = hf[key].clone()
        elif ours == "lm_head.weight":  # tied, often not saved
            out[ours] = hf[f"{base}.embeddings.word_embeddings.weight"].clone()
    for i, prefix in enumerate(layer_prefixes(cfg, layout)):
        for kind in ("weight", "bias"):
            parts = [hf[f"{prefix}.{layout.qkv}.{name}.{kind}"] for name in layout.qkv_names]
            out[f"backbone.layers.{i}.self_attn.qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    if layout.absolute_positions or cfg.position_biased_input:
        out["backbone.embeddings.position.weight"] = hf[f"{base}.embeddings.position_embeddings.weight"].clone()
    return out


def hf_config(cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
    """The ``config.json`` of the exported model."""
    if family in T5_ARCHITECTURES:
        return t5_config(cfg, special_ids, family)
    if family == "bart":
        return bart_config(cfg, special_ids)
    if family == "xlnet":
        return xlnet_config(cfg, special_ids)
    arch = ARCHITECTURES[family]
    if family == "gpt2":
        eos = special_ids.get("eos", cfg.vocab_size - 1)
        return {"model_type": "gpt2", "architectures": [arch], "vocab_size": cfg.vocab_size,
                "n_positions": cfg.max_position_embeddings, "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers,
                "n_head": cfg.num_heads, "n_inner": cfg.intermediate_size,
                "activation_function": GPT2_ACTIVATIONS[cfg.activation],
                "scale_attn_weights": cfg.scale_attention_by_head_dim,
                "scale_attn_by_inverse_layer_idx": cfg.scale_attention_by_layer,
                "reorder_and_upcast_attn": cfg.upcast_attention,
                "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.attention_dropout,
                "layer_norm_epsilon": cfg.norm_eps, "initializer_range": cfg.initializer_range,
                "bos_token_id": special_ids.get("bos", eos), "eos_token_id": eos, "tie_word_embeddings": True}
    if family == "modernbert":
        return _modernbert_config(cfg, special_ids)
    layout = LAYOUTS[family]
    config = {"model_type": layout.model_type, "architectures": [arch], "vocab_size": cfg.vocab_size,
              "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
              "intermediate_size": cfg.intermediate_size, "hidden_act": cfg.activation,
              "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
              "type_vocab_size": max(1, cfg.type_vocab_size), "initializer_range": cfg.initializer_range,
              "layer_norm_eps": cfg.norm_eps, "pad_token_id": cfg.pad_token_id, "tie_word_embeddings": True,
              "max_position_embeddings": cfg.max_position_embeddings - cfg.position_offset}
    if layout.model_type in ("electra", "albert"):
        config["embedding_size"] = cfg.embedding_size or cfg.hidden_size
    if layout.model_type == "albert":
        config.update(num_hidden_groups=1, inner_group_num=1, classifier_dropout_prob=cfg.dropout,
                      bos_token_id=special_ids.get("cls", 2), eos_token_id=special_ids.get("sep", 3))
    if layout.model_type == "deberta-v2":
        config.update(relative_attention=True, position_biased_input=cfg.position_biased_input,
                      pos_att_type=["p2c", "c2p"],
                      position_buckets=cfg.relative_position_buckets if cfg.relative_position_buckets > 0 else -1,
                      max_relative_positions=cfg.max_relative_positions, share_att_key=cfg.share_attention_key,
                      norm_rel_ebd="layer_norm" if cfg.relative_embedding_norm else "none",
                      conv_kernel_size=cfg.conv_kernel_size, conv_act=cfg.conv_activation, legacy=family != "deberta-v2-lm",
                      type_vocab_size=cfg.type_vocab_size)
    if layout.model_type == "roberta":
        config.update(max_position_embeddings=config["max_position_embeddings"] + cfg.pad_token_id + 1,
                      bos_token_id=special_ids.get("cls", 0), eos_token_id=special_ids.get("sep", 2))
    return config


def _modernbert_config(cfg: BackboneConfig, special_ids: dict[str, int]) -> dict[str, Any]:
    local = cfg.local_rope_theta if cfg.local_rope_theta is not None else cfg.rope_theta
    every = cfg.global_attention_every if cfg.local_attention_window is not None else 1
    return {"model_type": "modernbert", "architectures": ["ModernBertForMaskedLM"], "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads, "hidden_activation": "gelu",
            "classifier_activation": "gelu", "max_position_embeddings": cfg.max_position_embeddings,
            "norm_eps": cfg.norm_eps, "norm_bias": cfg.has_bias("norm"),
            "attention_bias": cfg.has_bias("attention"), "mlp_bias": cfg.has_bias("ffn"),
            "classifier_bias": cfg.has_bias("head"), "decoder_bias": True, "embedding_dropout": cfg.dropout,
            "mlp_dropout": 0.0, "attention_dropout": cfg.attention_dropout, "initializer_range": cfg.initializer_range,
            "global_rope_theta": cfg.rope_theta, "local_rope_theta": local,
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": cfg.rope_theta},
                                "sliding_attention": {"rope_type": "default", "rope_theta": local}},
            "local_attention": cfg.local_attention_window or cfg.max_position_embeddings * 2,
            "global_attn_every_n_layers": every,
            "layer_types": ["full_attention" if cfg.is_global_layer(i) else "sliding_attention"
                            for i in range(cfg.num_layers)],
            "pad_token_id": cfg.pad_token_id, "cls_token_id": special_ids.get("cls", cfg.pad_token_id),
            "sep_token_id": special_ids.get("sep", cfg.pad_token_id), "bos_token_id": special_ids.get("cls"),
            "eos_token_id": special_ids.get("sep"), "tie_word_embeddings": True}


def _gpt2_from_config(config: dict[str, Any]) -> BackboneConfig:
    h = config["n_embd"]
    dropout = config.get("resid_pdrop", 0.1)
    if config.get("embd_pdrop", 0.1) != dropout:
        raise ConfigError(f"import: gpt2 config field embd_pdrop={config.get('embd_pdrop', 0.1)!r} differs from "
                          f"resid_pdrop={dropout!r}; plm_lightning uses one dropout rate for both")
    return BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=h, num_layers=config["n_layer"], num_heads=config["n_head"],
        intermediate_size=config.get("n_inner") or 4 * h, max_position_embeddings=config["n_positions"],
        type_vocab_size=0, norm_eps=config.get("layer_norm_epsilon", 1e-5), norm_position="pre", embedding_norm=False,
        activation=activation_from_hf("gpt2", "activation_function", config.get("activation_function", "gelu_new")),
        scale_residual_init=True, dropout=dropout, attention_dropout=config.get("attn_pdrop", 0.1),
        initializer_range=config.get("initializer_range", 0.02),
        scale_attention_by_head_dim=bool(config.get("scale_attn_weights", True)),
        scale_attention_by_layer=bool(config.get("scale_attn_by_inverse_layer_idx", False)),
        upcast_attention=bool(config.get("reorder_and_upcast_attn", False)),
        pad_token_id=config.get("eos_token_id") or 0)


def _modernbert_from_config(config: dict[str, Any]) -> BackboneConfig:
    rope = config.get("rope_parameters") or {}
    global_theta = rope.get("full_attention", {}).get("rope_theta", config.get("global_rope_theta", 160000.0))
    local_theta = rope.get("sliding_attention", {}).get("rope_theta", config.get("local_rope_theta", 10000.0))
    if config.get("hidden_activation", "gelu") != "gelu" or config.get("classifier_activation", "gelu") != "gelu":
        raise ConfigError("import: only ModernBERT with gelu activations (GeGLU) is supported")
    every = config.get("global_attn_every_n_layers", 3)
    layers = config["num_hidden_layers"]
    if "layer_types" in config:  # transformers >= 5 spells the pattern out; the global layers must be every n-th
        globals_ = [i for i, t in enumerate(config["layer_types"]) if t == "full_attention"]
        n = globals_[1] - globals_[0] if len(globals_) > 1 else layers
        if not globals_ or globals_ != list(range(0, layers, n)) or len(config["layer_types"]) != layers:
            raise ConfigError(f"import: modernbert config field layer_types={config['layer_types']} is not "
                              "supported; plm_lightning runs full attention in every n-th layer from layer 0")
        every = n if len(globals_) > 1 else max(layers, 1)
    return BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], intermediate_size=config["intermediate_size"],
        max_position_embeddings=config.get("max_position_embeddings", 8192), type_vocab_size=0,
        position_embedding="rope", rope_theta=global_theta, local_rope_theta=local_theta,
        local_attention_window=config.get("local_attention", 128),
        global_attention_every=every, norm_eps=config.get("norm_eps", 1e-5),
        norm_position="pre", first_attention_norm=False, activation="geglu",
        bias=bool(config.get("attention_bias", False)), attention_bias=bool(config.get("attention_bias", False)),
        ffn_bias=bool(config.get("mlp_bias", False)), norm_bias=bool(config.get("norm_bias", False)),
        head_bias=bool(config.get("classifier_bias", False)),
        dropout=config.get("embedding_dropout", 0.0), attention_dropout=config.get("attention_dropout", 0.0),
        initializer_range=config.get("initializer_range", 0.02), pad_token_id=config.get("pad_token_id") or 0, unpad=True)


def _deberta_from_config(config: dict[str, Any]) -> BackboneConfig:
    types = {t.strip() for t in config.get("pos_att_type") or []} if not isinstance(config.get("pos_att_type"), str) \
        else {t.strip() for t in config["pos_att_type"].split("|")}
    if not config.get("relative_attention") or types != {"c2p", "p2c"}:
        raise ConfigError(f"import: deberta-v2 config fields relative_attention={config.get('relative_attention')!r}, "
                          f"pos_att_type={config.get('pos_att_type')!r} are not supported; plm_lightning computes "
                          "relative_attention=true with pos_att_type c2p|p2c only")
    max_rel = config.get("max_relative_positions", -1)
    return BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], intermediate_size=config["intermediate_size"],
        max_position_embeddings=config.get("max_position_embeddings", 512), type_vocab_size=config.get("type_vocab_size", 0),
        position_embedding="disentangled", position_biased_input=bool(config.get("position_biased_input", True)),
        relative_position_buckets=max(0, config.get("position_buckets", -1)),
        max_relative_positions=max_rel if max_rel > 0 else config.get("max_position_embeddings", 512),
        share_attention_key=bool(config.get("share_att_key", False)),
        relative_embedding_norm="layer_norm" in str(config.get("norm_rel_ebd", "none")),
        conv_kernel_size=config.get("conv_kernel_size", 0), conv_activation=config.get("conv_act", "tanh"),
        activation=activation_from_hf("deberta-v2", "hidden_act", config.get("hidden_act", "gelu")),
        norm_eps=config.get("layer_norm_eps", 1e-7),
        dropout=config.get("hidden_dropout_prob", 0.1), attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        initializer_range=config.get("initializer_range", 0.02), pad_token_id=config.get("pad_token_id") or 0)


DEFAULT_FAMILY = {"bert": "bert", "roberta": "roberta", "electra": "electra", "albert": "albert"}
GPT2_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}
"""Our activation -> GPT-2's ``activation_function``."""
ACTIVATION_NAMES = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu",
                    "silu": "silu", "swish": "silu"}
"""transformers' ``ACT2FN`` names -> ours (``gelu_pytorch_tanh`` is ``gelu_new``'s formula in one kernel)."""


def activation_from_hf(model_type: str, field: str, value: str) -> str:
    """Our activation for a transformers activation name, or one line naming the field."""
    if value not in ACTIVATION_NAMES:
        raise ConfigError(f"import: {model_type} config field {field}={value!r} is not supported; use one of "
                          f"{', '.join(ACTIVATION_NAMES)}")
    return ACTIVATION_NAMES[value]


def config_from_hf(config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
    """(family, our BackboneConfig, our objective class name) of a transformers ``config.json``."""
    model_type = config.get("model_type")
    refuse_unsupported(config)
    if model_type == "gpt2":
        return "gpt2", _gpt2_from_config(config), "CausalLM"
    if model_type == "modernbert":
        return "modernbert", _modernbert_from_config(config), "MaskedLM"
    if model_type in T5_ARCHITECTURES:
        return model_type, t5_from_config(config), "Seq2SeqLM"
    if model_type == "bart":
        return "bart", bart_from_config(config), "Seq2SeqLM"
    if model_type == "xlnet":
        return "xlnet", xlnet_from_config(config), "PermutationLM"
    if model_type == "deberta-v2":
        family = "deberta-v2" if config.get("legacy", True) else "deberta-v2-lm"
        return family, _deberta_from_config(config), "MaskedLM"
    if model_type not in DEFAULT_FAMILY:
        raise ConfigError(f"import: model_type {model_type!r} is not supported; supported: "
                          f"{', '.join([*DEFAULT_FAMILY, 'modernbert', 'deberta-v2', 'gpt2', 't5', 'mt5', 'bart', 'xlnet'])}")
    archs = config.get("architectures") or []
    family = next((BY_ARCHITECTURE[a] for a in archs if a in BY_ARCHITECTURE), DEFAULT_FAMILY[model_type])
    pad = config.get("pad_token_id", 0 if model_type != "roberta" else 1) or 0
    embedding = config.get("embedding_size")
    sharing = "none"
    if model_type == "albert":
        if config.get("num_hidden_groups", 1) != 1 or config.get("inner_group_num", 1) != 1:
            raise ConfigError("import: ALBERT with num_hidden_groups or inner_group_num > 1 is not supported (every "
                              "released ALBERT shares one layer)")
        sharing = "all"
    cfg = BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], intermediate_size=config["intermediate_size"],
        max_position_embeddings=config["max_position_embeddings"], type_vocab_size=config.get("type_vocab_size", 2),
        activation=activation_from_hf(model_type, "hidden_act", config.get("hidden_act", "gelu")),
        norm_eps=config.get("layer_norm_eps", 1e-12),
        # RoBERTa's and ELECTRA's generator heads apply gelu whatever hidden_act says (RobertaLMHead,
        # ElectraGeneratorPredictions); BERT's and ALBERT's follow it
        head_activation="gelu" if model_type == "roberta" or family == "electra-generator" else None,
        positions_from_padding=model_type == "roberta",
        dropout=config.get("hidden_dropout_prob", 0.1), attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        initializer_range=config.get("initializer_range", 0.02), pad_token_id=pad,
        position_offset=pad + 1 if model_type == "roberta" else 0,
        embedding_size=embedding if embedding not in (None, config["hidden_size"]) else None, layer_sharing=sharing,
    )
    return family, cfg, "ELECTRA" if family == "electra" else "MaskedLM"
