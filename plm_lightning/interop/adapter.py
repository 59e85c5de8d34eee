"""What one transformers family's mapping is (torchtitan's ``state_dict_adapter``): our state dict to its layout and
back, our config to its ``config.json`` and back. ``interop.hf`` keeps one adapter per family and dispatches to it;
a new family is one small class in its own module, registered there."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.nn.config import BackboneConfig

ACTIVATION_NAMES = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu",
                    "silu": "silu", "swish": "silu"}
"""transformers' ``ACT2FN`` names -> ours (``gelu_pytorch_tanh`` is ``gelu_new``'s formula in one kernel)."""


def activation_from_hf(model_type: str, field: str, value: str) -> str:
    """Our activation for a transformers activation name, or one line naming the field."""
    if value not in ACTIVATION_NAMES:
        raise ConfigError(f"import: {model_type} config field {field}={value!r} is not supported; use one of "
                          f"{', '.join(ACTIVATION_NAMES)}")
    return ACTIVATION_NAMES[value]


class FamilyAdapter:
    """One family's mapping. ``families``: the names ``family_of`` gives it (with or without a pretraining head);
    ``model_types``: the ``config.json`` ``model_type`` values it imports."""

    families: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()

    def to_hf(self, state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        """Our state dict (a LightningModule's, the exported stack under ``backbone.``) in ``family``'s layout."""
        raise NotImplementedError

    def from_hf(self, hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        """A transformers state dict of ``family`` in our layout (``cfg`` from :meth:`from_config`)."""
        raise NotImplementedError

    def hf_config(self, cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
        """The ``config.json`` of the exported model."""
        raise NotImplementedError

    def from_config(self, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
        """(family, our BackboneConfig, our objective class name) of a ``config.json`` of one of ``model_types``."""
        raise NotImplementedError


class FunctionAdapter(FamilyAdapter):
    """A family whose module defines its four mappings as functions of our config alone: ``state_to_hf(state,
    cfg)``, ``state_from_hf(hf, cfg)``, ``config_to_hf(cfg, special_ids)`` and ``config_from_hf(config)``, set on
    the subclass as static methods, with the family's one name and our ``objective`` class."""

    objective: str = "MaskedLM"

    def to_hf(self, state: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        return self.state_to_hf(state, cfg)

    def from_hf(self, hf: dict[str, Tensor], cfg: BackboneConfig, family: str) -> dict[str, Tensor]:
        return self.state_from_hf(hf, cfg)

    def hf_config(self, cfg: BackboneConfig, family: str, special_ids: dict[str, int]) -> dict[str, Any]:
        return self.config_to_hf(cfg, special_ids)

    def from_config(self, config: dict[str, Any]) -> tuple[str, BackboneConfig, str]:
        return self.families[0], self.config_from_hf(config), self.objective
