"""ELECTRA's two stacks in the reference layout: the generator's shape from the discriminator's (the reference code's
``get_generator_config``) and the part of a checkpoint that ``export`` writes (the discriminator, or the generator)."""

from __future__ import annotations

from typing import Any

import torch

from plm_lightning.errors import ConfigError
from plm_lightning.nn.config import BackboneConfig


def generator_config(disc: BackboneConfig, size_divisor: int, num_layers: int | None = None,
                     num_heads: int | None = None) -> BackboneConfig:
    """The generator's shape as in the ELECTRA reference code (``get_generator_config``): hidden size H / divisor,
    feed-forward 4x that, one head per 64 dimensions (at least one, and one that divides the width), the same depth
    unless ``num_layers`` says otherwise, and the discriminator's embedding size so the tables can be shared.
    ``num_heads`` overrides the head count (e.g. to match a released generator)."""
    if size_divisor < 1 or disc.hidden_size % size_divisor:
        raise ConfigError(f"model.generator_size_divisor={size_divisor} does not divide the hidden size "
                          f"{disc.hidden_size}; use a divisor of it (ELECTRA: 4 for small and large, 3 for base)")
    hidden = disc.hidden_size // size_divisor
    heads = num_heads or max(1, hidden // 64)
    while hidden % heads:
        heads -= 1
    return disc.replace(hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden,
                        num_layers=num_layers or disc.num_layers, embedding_size=disc.embedding_size or disc.hidden_size)


def electra_export_view(state: dict[str, torch.Tensor], hparams: dict[str, Any], cfg: BackboneConfig,
                  part: str) -> tuple[dict[str, torch.Tensor], BackboneConfig]:
    """The part of an ELECTRA checkpoint that is exported, renamed so its stack sits under ``backbone.``."""
    gen_cfg = generator_config(cfg, hparams.get("generator_size_divisor", 4), hparams.get("generator_num_layers"),
                               hparams.get("generator_num_heads"))
    if part == "generator":
        view = {f"backbone.{k[len('generator.'):]}": v for k, v in state.items() if k.startswith("generator.")}
        view.update({k: v for k, v in state.items() if k.startswith("lm_head.")})
        return view, gen_cfg
    view = {k: v for k, v in state.items() if k.startswith(("backbone.", "rtd_head."))}
    delta = view.pop("backbone.embeddings.token.delta", None)
    if delta is not None:  # gradient-disentangled sharing: E_D = E_G + E_delta
        view["backbone.embeddings.token.weight"] = state["generator.embeddings.token.weight"] + delta
    for part_name in ("token.weight", "position.weight", "segment.weight", "norm.weight", "norm.bias"):
        key = f"backbone.embeddings.{part_name}"
        if key not in view and f"generator.embeddings.{part_name}" in state:
            view[key] = state[f"generator.embeddings.{part_name}"]
    return view, cfg.replace(embedding_size=gen_cfg.embedding_size)
