"""Constrained fine-tuning (Zhu et al. 2020, "Modifying Memories in Transformer Models", sec. 3): minimise the loss of
the new facts on a chosen set of layers, projecting the parameters after every step back into the l-infinity ball
``|theta - theta_0|_inf <= delta`` around the original weights (projected gradient descent). ROME's "FT-L" baseline
is this editor on one layer's MLP.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.editing import Editor, EditRequest, answer_log_probs, edit_examples
from plm_lightning.knowledge.lm import LanguageModel
from plm_lightning.knowledge.rome import default_layer

PARTS = ("ffn", "block")


class ConstrainedFinetune(Editor):
    """Adam on ``-log P(target_new | prompt)`` over the parameters of ``layers`` (their MLP, or whole blocks)."""

    def __init__(self, layers: Sequence[int] | None = None, delta: float = 5e-3, steps: int = 50,
                 learning_rate: float = 1e-3, part: str = "ffn", stop_loss: float = 0.05) -> None:
        if delta <= 0 or steps < 1 or learning_rate <= 0:
            raise ConfigError(f"constrained fine-tuning: delta={delta}, steps={steps} and learning_rate={learning_rate} "
                              "must be positive")
        if part not in PARTS:
            raise ConfigError(f"constrained fine-tuning: part={part!r} is not one of {', '.join(PARTS)}")
        self.layers, self.delta, self.steps, self.learning_rate = layers, delta, steps, learning_rate
        self.part, self.stop_loss = part, stop_loss

    def _layers(self, lm: LanguageModel) -> list[int]:
        layers = [default_layer(lm)] if self.layers is None else sorted(set(self.layers))
        for layer in layers:
            lm.block(layer)
        return layers

    def _parameters(self, lm: LanguageModel) -> dict[str, torch.nn.Parameter]:
        modules = [lm.ffn(i) if self.part == "ffn" else lm.block(i) for i in self._layers(lm)]
        wanted = {id(p) for m in modules for p in m.parameters()}
        return {name: p for name, p in lm.module.named_parameters() if id(p) in wanted}

    def touched(self, lm: LanguageModel) -> list[str]:
        return list(self._parameters(lm))

    def edit(self, lm: LanguageModel, requests: list[EditRequest]) -> dict:
        params = self._parameters(lm)
        origin = {name: p.detach().clone() for name, p in params.items()}
        frozen = [p for p in lm.module.parameters() if p.requires_grad and id(p) not in {id(q) for q in params.values()}]
        for p in frozen:
            p.requires_grad_(False)
        examples = edit_examples(lm, requests)
        optimizer = torch.optim.Adam(params.values(), lr=self.learning_rate)
        loss_value = float("nan")
        try:
            for _ in range(self.steps):
                loss = -torch.stack([answer_log_probs(lm, [q], answer)[0] for q, answer in examples]).mean()
                loss_value = loss.item()
                if loss_value < self.stop_loss:
                    break
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                with torch.no_grad():  # projection onto the l-infinity ball
                    for name, p in params.items():
                        p.copy_(torch.maximum(torch.minimum(p, origin[name] + self.delta), origin[name] - self.delta))
        finally:
            for p in frozen:
                p.requires_grad_(True)
            optimizer.zero_grad(set_to_none=True)
        return {"editor": "constrained-ft", "layers": self._layers(lm), "delta": self.delta, "final_loss": loss_value}
