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
