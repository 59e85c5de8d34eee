"""Permutation language modelling: XLNet (Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for
Language Understanding").

corruption: none (``data.PermutationLMDataModule`` samples the targets and the factorization order) | attention: the
order's ``perm_mask``, two streams (content: itself and what precedes it in the order; query: strictly what precedes
it), relative positions and segments | loss: the last 1/K of the order (partial prediction, eq. 5),
L = -sum_{t > c} log p(x_{z_t} | x_{z_<t}) read from the query stream at the target positions.
"""

from __future__ import annotations

from torch import Tensor

from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import LMHead
from plm_lightning.nn.xl_stack import XLStack
from plm_lightning.objectives.base import PretrainingModule, final_layer_positions


class PermutationLM(PretrainingModule):
    """An ``XLStack`` with XLNet's query stream and an LM head tied to the token embedding (no transform, a bias)."""

    required_special_tokens = ("pad", "sep", "cls")

    def __init__(self, *args, backbone: str = "tiny-xlnet", **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, backbone=backbone, **kwargs)
        if self.config.position_embedding != "xl_relative":
            raise ConfigError(f"model.backbone={backbone!r}: PermutationLM needs an XLNet backbone "
                              "(position_embedding: xl_relative), e.g. tiny-xlnet, xlnet-base")

    def check_data(self, data: DataContract) -> None:
        super().check_data(data)
        if data.bidirectional_data is not None and data.bidirectional_data != self.config.bidirectional_data:
            raise ConfigError(f"data.bidirectional_data={data.bidirectional_data} but model.backbone_overrides."
                              f"bidirectional_data={self.config.bidirectional_data}; set both alike")

    def build(self) -> None:
        self.backbone = XLStack(self.config)
        self.lm_head = LMHead(self.config, transform=False, bias=True)

    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        if "perm_mask" not in batch:
            raise ConfigError("PermutationLM reads perm_mask from its data: use data.class_path="
                              "plm_lightning.data.PermutationLMDataModule")
        positions, labels = final_layer_positions(batch["labels"])
        inputs = self.stack_inputs(self.backbone, batch).but(mask=~batch["perm_mask"], output_positions=positions)
        out = self.backbone(batch["input_ids"], inputs)
        loss, lm = self.lm_loss(out.query_state, labels)
        return {"loss": loss, "lm_loss": loss, **lm}
