"""Loading checkpoints written before a module lost a parameter: the old keys are dropped on load, so a strict
``load_state_dict`` of an older checkpoint still works (the parameter was never read by any output)."""

from __future__ import annotations

from typing import Any

from torch import nn


def drop_on_load(module: nn.Module, *names: str) -> None:
    """Drop ``names`` (a parameter, or a submodule: every key under ``name.``) of ``module`` from state dicts
    loaded into it."""

    def hook(state: dict[str, Any], prefix: str, *args: Any) -> None:
        for key in [k for k in state if k.startswith(prefix)]:
            local = key[len(prefix):]
            if any(local == name or local.startswith(name + ".") for name in names):
                del state[key]

    module._register_load_state_dict_pre_hook(hook)
