"""Transfer techniques any task head can switch on (options of ``FinetuneModule``):

* ULMFiT (Howard & Ruder 2018, sec. 3.2-3.3): discriminative fine-tuning, eta^{l-1} = eta^l / 2.6 per layer
  downward (``layer_lr_decay``); slanted triangular learning rates, eq. 3 (``schedule: slanted_triangular``,
  ``cut_frac`` 0.1, ``ratio`` 32); gradual unfreezing from the last layer down (``unfreeze_every`` steps per layer
  group; ULMFiT unfreezes one per epoch, the T5 paper, sec. 3.5.2, one block every 2^18/12 steps).
* Adapters (Houlsby et al. 2019, sec. 2.1): a bottleneck ``x + W_up f(W_down x)`` (near-identity at initialisation)
  after the attention output projection and after the feed-forward output of every block; the pretrained weights are
  frozen, the adapters, layer norms and task head train (``adapter_size``; the T5 paper, sec. 3.5.1, compares them
  with full fine-tuning and gradual unfreezing).

Layer groups, bottom to top: the embeddings, each Transformer block, then everything else (final norm, pooler, task
head).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from torch import Tensor, nn


@dataclass
class Transfer:
    """How to fine-tune: every option's default is plain full fine-tuning (BERT)."""

    layer_lr_decay: float = 1.0
    """Learning-rate multiplier per layer group downward (ULMFiT: 1/2.6 = 0.385)."""
    schedule: Literal["linear", "slanted_triangular"] = "linear"
    """Warm-up + linear decay (BERT), or ULMFiT's slanted triangular rates."""
    cut_frac: float = 0.1
    """Slanted triangular: share of the steps spent increasing."""
    ratio: float = 32.0
    """Slanted triangular: how much smaller the lowest rate is than the peak."""
    unfreeze_every: int = 0
    """Gradual unfreezing: steps between unfreezing successive layer groups, top first (0 = all train from the start)."""
    adapter_size: int = 0
    """Houlsby adapters with this bottleneck in every block, the pretrained weights frozen (0 = none)."""

    def __post_init__(self) -> None:
        from plm_lightning.errors import ConfigError

        if not 0 < self.layer_lr_decay <= 1:
            raise ConfigError(f"model.transfer.layer_lr_decay={self.layer_lr_decay} must be in (0, 1] (ULMFiT: 0.385)")
        if self.schedule not in ("linear", "slanted_triangular"):
            raise ConfigError(f"model.transfer.schedule={self.schedule!r} is not one of linear, slanted_triangular")
        if not 0 < self.cut_frac < 1 or self.ratio < 1:
            raise ConfigError("model.transfer: cut_frac must be in (0, 1) and ratio >= 1 (ULMFiT: 0.1 and 32)")
        if self.unfreeze_every < 0 or self.adapter_size < 0:
            raise ConfigError("model.transfer: unfreeze_every and adapter_size must be >= 0")


def layer_groups(module: nn.Module) -> list[list[tuple[str, nn.Parameter]]]:
    """The named parameters of ``module`` (a task head with a ``backbone``) by depth: embeddings, block 0 .. L-1,
    the rest."""
    stack = getattr(module, "backbone", None)
    layers = list(getattr(stack, "layers", []))  # an encoder-decoder: one group for all
    groups: list[list[tuple[str, nn.Parameter]]] = [[] for _ in range(len(layers) + 2)]
    for name, p in module.named_parameters():
        if name.startswith("backbone.embeddings."):
            groups[0].append((name, p))
        elif layers and name.startswith("backbone.layers."):
            groups[1 + int(name.split(".")[2])].append((name, p))
        else:
            groups[-1].append((name, p))
    return groups


def discriminative_param_groups(module: nn.Module, learning_rate: float, layer_lr_decay: float,
                                weight_decay: float) -> list[dict]:
    """AdamW parameter groups: the top group at ``learning_rate``, each group below at ``layer_lr_decay`` times the
    one above (ULMFiT: 1/2.6); no weight decay on biases and norms."""
    groups = layer_groups(module)
    out = []
    for depth, params in enumerate(groups):
        lr = learning_rate * layer_lr_decay ** (len(groups) - 1 - depth)
        decay = [p for _, p in params if p.ndim >= 2]
        no_decay = [p for _, p in params if p.ndim < 2]
        out += [{"params": decay, "weight_decay": weight_decay, "lr": lr, "depth": depth},
                {"params": no_decay, "weight_decay": 0.0, "lr": lr, "depth": depth}]
    return [g for g in out if g["params"]]


def slanted_triangular(total: int, cut_frac: float = 0.1, ratio: float = 32.0) -> Callable[[int], float]:
    """ULMFiT's eq. 3 as a multiplier of the peak rate: a short linear increase over ``cut_frac`` of the steps, a
    long linear decay, from and to 1/``ratio`` of the peak."""
    cut = max(1, math.floor(total * cut_frac))

    def factor(step: int) -> float:
        p = step / cut if step < cut else 1 - (step - cut) / max(1.0, cut * (1 / cut_frac - 1))
        return (1 + max(0.0, p) * (ratio - 1)) / ratio

    return factor


def unfrozen_groups(step: int, every: int, n_groups: int) -> int:
    """How many layer groups (from the top) train at ``step`` under gradual unfreezing: the top one from the start,
    one more every ``every`` steps."""
    return n_groups if every <= 0 else min(n_groups, 1 + step // every)


def set_trainable_groups(module: nn.Module, count: int) -> None:
    """Train the top ``count`` layer groups, freeze the others (adapters keep the pretrained weights frozen)."""
    groups = layer_groups(module)
    adapted = module.transfer.adapter_size > 0
    for depth, params in enumerate(groups):
        for name, p in params:
            trainable = depth >= len(groups) - count
            if adapted and name.startswith("backbone.") and ".adapter_" not in name and "norm" not in name:
                trainable = False
            p.requires_grad_(trainable)


class Adapter(nn.Module):
    """Houlsby et al.'s bottleneck: ``x + up(gelu(down(x)))``, ``up`` initialised at zero so the model starts as the
    pretrained one."""

    def __init__(self, hidden_size: int, bottleneck: int) -> None:
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck)
        self.up = nn.Linear(bottleneck, hidden_size)
        nn.init.normal_(self.down.weight, 0.0, 1e-2)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.up(nn.functional.gelu(self.down(x)))


def add_adapters(backbone: nn.Module, hidden_size: int, bottleneck: int) -> None:
    """Put an adapter after the attention output projection and the feed-forward output of every block, as
    ``adapter_attn`` / ``adapter_ffn`` of the block, called by forward hooks (the pretrained tensors keep their
    names)."""
    for block in backbone.layers:
        for name, target in (("adapter_attn", block.self_attn.o_proj), ("adapter_ffn", block.ffn.fc_out)):
            adapter = Adapter(hidden_size, bottleneck)
            block.add_module(name, adapter)
            target.register_forward_hook(lambda _m, _inp, out, a=adapter: a(out))
