"""GPT-2 (``GPT2LMHeadModel``): its ``Conv1D`` weights are our linear weights transposed, its head tied to ``wte``."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FamilyAdapter, activation_from_hf
from plm_lightning.interop.layouts import ARCHITECTURES, gpt2_pairs, is_conv1d
from plm_lightning.nn.config import BackboneConfig

GPT2_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}
"""Our activation -> GPT-2's ``activation_function``."""


class GPT2Adapter(FamilyAdapter):
    families = model_types = ("gpt2",)

    def to_hf(self, state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for ours, hf in gpt2_pairs(cfg):
            t = state[ours]
            out[hf] = t.t().contiguous() if is_conv1d(hf) else t.clone()
        return out

    def from_hf(self, hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for ours, key in gpt2_pairs(cfg):
            if key == "lm_head.weight" and key not in hf:
                key = "transformer.wte.weight"  # tied, often not saved
            t = hf[key]
            out[ours] = t.t().contiguous() if is_conv1d(key) else t.clone()
        return out

    def hf_config(self, cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
        arch = ARCHITECTURES[family]
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

    def from_config(self, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
        return "gpt2", gpt2_from_config(config), "CausalLM"


def gpt2_from_config(config: dict[str, Any]) -> BackboneConfig:
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
