"""XLNet (``XLNetLMHeadModel``) <-> our ``PermutationLM`` over an ``XLStack``.

transformers keeps each projection as a ``[d_model, heads, d_head]`` einsum tensor (``q``, ``k``, ``v``, ``o``, ``r``);
ours are ``nn.Linear`` weights ``[heads * d_head, d_model]`` (q, k, v fused), so q/k/v/r are transposed reshapes and
``o`` a plain reshape. The LM head ``lm_loss`` is tied to the word embedding and has a bias.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.interop.adapter import FunctionAdapter
from plm_lightning.nn.config import BackboneConfig


def _both(ours: str, hf: str) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{hf}.weight"), (f"{ours}.bias", f"{hf}.bias")]


def xlnet_pairs(cfg: BackboneConfig) -> list[tuple[str, str]]:
    """(ours, HF) names of every tensor copied as is."""
    pairs = [("backbone.embeddings.token.weight", "transformer.word_embedding.weight"), ("lm_head.bias", "lm_loss.bias")]
    for i in range(cfg.num_layers):
        ours, hf = f"backbone.layers.{i}", f"transformer.layer.{i}"
        pairs += [(f"{ours}.self_attn.content_bias", f"{hf}.rel_attn.r_w_bias"),
                  (f"{ours}.self_attn.position_bias", f"{hf}.rel_attn.r_r_bias"),
                  (f"{ours}.self_attn.segment_bias", f"{hf}.rel_attn.r_s_bias"),
                  (f"{ours}.self_attn.segment_embed", f"{hf}.rel_attn.seg_embed"),
                  *_both(f"{ours}.self_attn_norm", f"{hf}.rel_attn.layer_norm"),
                  *_both(f"{ours}.ffn.fc_in", f"{hf}.ff.layer_1"), *_both(f"{ours}.ffn.fc_out", f"{hf}.ff.layer_2"),
                  *_both(f"{ours}.ffn_norm", f"{hf}.ff.layer_norm")]
    return pairs


def _to_linear(t: Tensor) -> Tensor:
    """``[d_model, heads, d_head]`` (``x @ t``) -> ``[heads * d_head, d_model]`` (``F.linear``)."""
    return t.reshape(t.shape[0], -1).t().contiguous()


def xlnet_to_hf(state: dict[str, Tensor], cfg: BackboneConfig) -> dict[str, Tensor]:
    out = {hf: state[ours].clone() for ours, hf in xlnet_pairs(cfg)}
    h, heads = cfg.hidden_size, cfg.num_heads
    out["transformer.mask_emb"] = state["backbone.query_embedding"].reshape(1, 1, h).clone()
    out["lm_loss.weight"] = state["backbone.embeddings.token.weight"].clone()
    for i in range(cfg.num_layers):
        attn, hf = f"backbone.layers.{i}.self_attn", f"transformer.layer.{i}.rel_attn"
        for name, part in zip("qkv", state[f"{attn}.qkv_proj.weight"].chunk(3, dim=0)):
            out[f"{hf}.{name}"] = part.t().reshape(h, heads, -1).contiguous()
        out[f"{hf}.r"] = state[f"{attn}.r_proj.weight"].t().reshape(h, heads, -1).contiguous()
        out[f"{hf}.o"] = state[f"{attn}.o_proj.weight"].reshape(h, heads, -1).contiguous()
    return out


def xlnet_from_hf(hf: dict[str, Tensor], cfg: BackboneConfig) -> dict[str, Tensor]:
    missing = [key for _, key in xlnet_pairs(cfg) if key not in hf]
    if missing:
        raise ConfigError(f"import: the XLNet weights have no {missing[0]!r}")
    out = {ours: hf[key].clone() for ours, key in xlnet_pairs(cfg)}
    out["backbone.query_embedding"] = hf["transformer.mask_emb"].reshape(-1).clone()
    for i in range(cfg.num_layers):
        attn, prefix = f"backbone.layers.{i}.self_attn", f"transformer.layer.{i}.rel_attn"
        out[f"{attn}.qkv_proj.weight"] = torch.cat([_to_linear(hf[f"{prefix}.{n}"]) for n in "qkv"], dim=0)
        out[f"{attn}.r_proj.weight"] = _to_linear(hf[f"{prefix}.r"])
        out[f"{attn}.o_proj.weight"] = hf[f"{prefix}.o"].reshape(cfg.hidden_size, -1).clone()
    return out


def xlnet_config(cfg: BackboneConfig, special_ids: dict[str, int]) -> dict[str, Any]:
    return {"model_type": "xlnet", "architectures": ["XLNetLMHeadModel"], "vocab_size": cfg.vocab_size,
            "d_model": cfg.hidden_size, "n_layer": cfg.num_layers, "n_head": cfg.num_heads, "d_head": cfg.head_dim,
            "d_inner": cfg.intermediate_size, "ff_activation": cfg.activation, "untie_r": True, "attn_type": "bi",
            "initializer_range": cfg.initializer_range, "layer_norm_eps": cfg.norm_eps, "dropout": cfg.dropout,
            "mem_len": cfg.mem_len or None, "reuse_len": None, "bi_data": cfg.bidirectional_data,
            "clamp_len": cfg.clamp_len, "same_length": False, "tie_word_embeddings": True,
            "pad_token_id": special_ids.get("pad", cfg.pad_token_id), "bos_token_id": special_ids.get("bos", 1),
            "eos_token_id": special_ids.get("eos", 2)}


def xlnet_from_config(config: dict[str, Any]) -> BackboneConfig:
    if config.get("attn_type", "bi") != "bi" or config.get("same_length") or not config.get("untie_r", True):
        raise ConfigError("import: only XLNet with attn_type 'bi', same_length false and untie_r true is supported")
    activation = config.get("ff_activation", "gelu")
    if activation not in ("gelu", "relu", "gelu_new"):
        raise ConfigError(f"import: XLNet ff_activation={activation!r} is not supported (gelu, relu, gelu_new)")
    if config["d_model"] != config["n_head"] * config.get("d_head", config["d_model"] // config["n_head"]):
        raise ConfigError("import: XLNet with d_model != n_head * d_head is not supported")
    return BackboneConfig(
        vocab_size=config["vocab_size"], hidden_size=config["d_model"], num_layers=config["n_layer"],
        num_heads=config["n_head"], intermediate_size=config["d_inner"], position_embedding="xl_relative",
        type_vocab_size=0, embedding_norm=False, activation=activation, norm_eps=config.get("layer_norm_eps", 1e-12),
        dropout=config.get("dropout", 0.1), attention_dropout=config.get("dropout", 0.1),
        ffn_dropout=config.get("dropout", 0.1), relative_segments=True, mem_len=config.get("mem_len") or 0,
        clamp_len=config.get("clamp_len", -1), bidirectional_data=bool(config.get("bi_data")),
        initializer_range=config.get("initializer_range", 0.02), pad_token_id=config.get("pad_token_id") or 0)


class XLNetAdapter(FunctionAdapter):
    """XLNet (``XLNetLMHeadModel``)."""

    families = model_types = ("xlnet",)
    objective = "PermutationLM"
    state_to_hf, state_from_hf = staticmethod(xlnet_to_hf), staticmethod(xlnet_from_hf)
    config_to_hf, config_from_hf = staticmethod(xlnet_config), staticmethod(xlnet_from_config)
