"""How a model is distributed, kept apart from what it computes (torchtitan's parallelize.py split).

Applied by `PretrainingModule.configure_model` in this order: activation checkpointing, torch.compile, FSDP2.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


def apply_activation_checkpointing(stack: nn.Module) -> None:
    """Wrap every block so its activations are recomputed in the backward pass (Chen et al. 2016)."""
    layers = stack.layers
    for i, block in enumerate(layers):
        layers[i] = checkpoint_wrapper(block, preserve_rng_state=True)


def apply_compile(stack: nn.Module) -> None:
    """Compile each block separately: identical blocks share one compiled graph, compile time stays flat in depth."""
    layers = stack.layers
    for i, block in enumerate(layers):
        layers[i] = torch.compile(block)


def apply_fully_shard(module: nn.Module, mesh) -> None:  # noqa: ANN001
    """FSDP2: shard each Transformer block, then the root (embeddings, heads) over the data-parallel mesh.

    Blocks that share a sub-layer (ALBERT ``layer_sharing`` attention/ffn) cannot be separate FSDP units, since a
    parameter may belong to one unit only: they stay in the root unit.
    """
    from torch.distributed.fsdp import fully_shard

    dp_mesh = mesh["data_parallel"] if mesh.mesh_dim_names and "data_parallel" in mesh.mesh_dim_names else mesh
    for stack in (m for m in module.modules() if hasattr(m, "layers") and isinstance(m.layers, nn.ModuleList)):
        if getattr(getattr(stack, "cfg", None), "layer_sharing", "none") in ("attention", "ffn"):
            continue
        for block in stack.layers:
            fully_shard(block, mesh=dp_mesh)
    fully_shard(module, mesh=dp_mesh)


def gradient_scaler(trainer) -> object | None:  # noqa: ANN001
    """The fp16 loss scaler of the trainer's precision plugin (``16-mixed``), None for bf16 and full precision."""
    return getattr(trainer.precision_plugin, "scaler", None)


def bf16_mixed(trainer) -> bool:  # noqa: ANN001
    """Lightning's autocast plugin without a loss scaler: the one whose refusal to clip for a fused optimizer is moot."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    return isinstance(trainer.precision_plugin, MixedPrecision) and gradient_scaler(trainer) is None


def fused_optimizer_fits(trainer) -> bool:  # noqa: ANN001
    """A fused AdamW unscales fp16 gradients inside its step, so they cannot be clipped before it: under
    ``16-mixed`` with ``gradient_clip_val`` the optimizer must be the unfused one."""
    return not (gradient_scaler(trainer) is not None and trainer.gradient_clip_val)


def clip_gradients(optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str | None) -> None:
    """Clip the gradients of ``optimizer``'s parameters by global norm (default) or by value. Under bf16 there is no
    scaler, so the gradients are true ones; Lightning's mixed-precision plugin still refuses to clip for a fused
    optimizer (it assumes fp16 unscaling inside the step), hence this direct path."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(params, clip_val)
    else:
        torch.nn.utils.clip_grad_norm_(params, clip_val)
