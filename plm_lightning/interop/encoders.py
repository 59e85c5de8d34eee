"""The BERT-like encoders (``encoder_pairs`` over ``LAYOUTS``): BERT (``BertForPreTraining``, ``BertForMaskedLM``),
RoBERTa, ALBERT, ELECTRA (discriminator and generator), DeBERTa-v2/v3. One layer layout each; our fused q/k/v is
their three projections stacked."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FamilyAdapter, activation_from_hf
from plm_lightning.interop.layouts import ARCHITECTURES, BY_ARCHITECTURE, LAYOUTS, encoder_pairs, layer_prefixes
from plm_lightning.nn.config import BackboneConfig

DEFAULT_FAMILY = {"bert": "bert", "roberta": "roberta", "electra": "electra", "albert": "albert"}
"""A BERT-like ``model_type`` -> its family when ``architectures`` names none we know."""


class EncoderAdapter(FamilyAdapter):
    families = tuple(LAYOUTS)
    model_types = (*DEFAULT_FAMILY, "deberta-v2")

    def to_hf(self, state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
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

    def from_hf(self, hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
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

    def hf_config(self, cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
        arch = ARCHITECTURES[family]
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

    def from_config(self, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
        model_type = config.get("model_type")
        if model_type == "deberta-v2":
            family = "deberta-v2" if config.get("legacy", True) else "deberta-v2-lm"
            return family, deberta_from_config(config), "MaskedLM"
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


def deberta_from_config(config: dict[str, Any]) -> BackboneConfig:
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
