"""ModernBERT (``ModernBertForMaskedLM``): our GeGLU's gate and input halves are its ``Wi`` stacked, activated half first."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FamilyAdapter
from plm_lightning.interop.layouts import modernbert_pairs
from plm_lightning.nn.config import BackboneConfig


class ModernBERTAdapter(FamilyAdapter):
    families = model_types = ("modernbert",)

    def to_hf(self, state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        out = {hf: state[ours].clone() for ours, hf in modernbert_pairs(cfg)}
        for i in range(cfg.num_layers):  # Wi = [activated half; linear half]: act(input) * gate in transformers
            for kind in ("weight", "bias") if cfg.has_bias("ffn") else ("weight",):
                out[f"model.layers.{i}.mlp.Wi.{kind}"] = torch.cat(
                    [state[f"backbone.layers.{i}.ffn.fc_gate.{kind}"], state[f"backbone.layers.{i}.ffn.fc_in.{kind}"]])
        return out

    def from_hf(self, hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for ours, key in modernbert_pairs(cfg):
            out[ours] = hf[key if key in hf or key != "decoder.weight" else "model.embeddings.tok_embeddings.weight"].clone()
        for i in range(cfg.num_layers):
            for kind in ("weight", "bias") if cfg.has_bias("ffn") else ("weight",):
                gate, inner = hf[f"model.layers.{i}.mlp.Wi.{kind}"].chunk(2, dim=0)
                out[f"backbone.layers.{i}.ffn.fc_gate.{kind}"] = gate.clone()
                out[f"backbone.layers.{i}.ffn.fc_in.{kind}"] = inner.clone()
        return out

    def hf_config(self, cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
        return modernbert_config(cfg, special_ids)

    def from_config(self, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
        return "modernbert", modernbert_from_config(config), "MaskedLM"


def modernbert_config(cfg: BackboneConfig, special_ids: dict[str, int]) -> dict[str, Any]:
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


def modernbert_from_config(config: dict[str, Any]) -> BackboneConfig:
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
