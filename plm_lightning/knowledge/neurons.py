"""Knowledge neurons (Dai et al. 2022, "Knowledge Neurons in Pretrained Transformers", sec. 3).

* Attribution (eq. 3-4): for the FFN intermediate activation ``w_i^(l)`` at the answer position, integrated gradients
  from a zero baseline, ``Attr(w_i) = w_i * integral_0^1 dP(y* | alpha w) / dw_i d alpha``, approximated by a Riemann
  sum with ``m = 20`` steps; all neurons of a layer are scaled together, one layer at a time.
* Coarse neurons: attribution above ``t`` times the prompt's largest attribution (t = 0.2).
* Refined neurons: among a fact's prompts (its templates), those kept by more than a share ``p`` of the prompts.
* Effects: suppress (activation set to 0) or amplify (doubled) the neurons at the answer position and measure the
  relative change of P(correct answer), against random sets of as many neurons in the same layers.
* Editing (sec. 5.1, "updating facts"): each neuron's value slot (its column of the FFN output matrix) loses
  ``lambda`` times the old answer's word embedding and gains ``lambda`` times the new one's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack, contextmanager

import numpy as np
import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.editing import Editor, EditRequest, parameter_name
from plm_lightning.knowledge.lm import LanguageModel, Query

Neuron = tuple[int, int]  # (layer, index in the FFN intermediate activation)


@contextmanager
def _scaled_activation(lm: LanguageModel, layer: int, positions: Tensor, factors: Tensor | None = None,
                       replace: Tensor | None = None):
    """Inside: the input of layer ``layer``'s FFN output matrix at ``positions`` (one per row) is multiplied by
    ``factors`` ``[rows, I]`` or replaced by ``replace`` ``[rows, I]``."""
    def hook(_m, args):  # noqa: ANN001, ANN202
        h = args[0].clone()
        rows = torch.arange(h.shape[0], device=h.device)
        h[rows, positions] = replace if replace is not None else h[rows, positions] * factors
        return (h,)

    handle = lm.ffn(layer).fc_out.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _activation(lm: LanguageModel, layer: int, query: Query) -> Tensor:
    captured: list[Tensor] = []
    handle = lm.ffn(layer).fc_out.register_forward_pre_hook(lambda _m, a: captured.append(a[0].detach()))
    try:
        with torch.no_grad():
            lm.backbone(torch.tensor([query.ids], device=lm.device))
    finally:
        handle.remove()
    return captured[0][0, query.position]


def attribution(lm: LanguageModel, query: Query, steps: int = 20) -> Tensor:
    """Integrated-gradients attribution ``[layers, I]`` of every FFN neuron for the query's answer (first token)."""
    if steps < 1:
        raise ConfigError(f"knowledge neurons: steps={steps} must be >= 1")
    if not query.answer:
        raise ConfigError("knowledge neurons: the query has no answer to attribute")
    scores = []
    alphas = torch.arange(1, steps + 1, device=lm.device, dtype=torch.float32) / steps
    ids = torch.tensor([query.ids] * steps, device=lm.device)
    positions = torch.full((steps,), query.position, device=lm.device)
    for layer in range(lm.num_layers):
        base = _activation(lm, layer, query)
        scaled = (alphas[:, None] * base[None]).requires_grad_(True)
        with _scaled_activation(lm, layer, positions, replace=scaled):
            hidden = lm.backbone(ids).last_hidden_state[:, query.position]
            prob = lm.logits(hidden).float().softmax(-1)[:, query.answer[0]]
            (grad,) = torch.autograd.grad(prob.sum(), scaled)
        scores.append(base * grad.sum(0) / steps)
    return torch.stack(scores).detach()


def coarse_neurons(scores: Tensor, threshold: float = 0.2) -> set[Neuron]:
    """Neurons whose attribution exceeds ``threshold`` x the largest."""
    top = scores.max()
    if top <= 0:
        return set()
    layers, index = torch.nonzero(scores > threshold * top, as_tuple=True)
    return {(int(a), int(b)) for a, b in zip(layers, index)}


def refine(coarse: Sequence[set[Neuron]], share: float = 0.7) -> set[Neuron]:
    """Neurons kept by more than ``share`` of the prompts (all of them when there is one prompt)."""
    if not coarse:
        return set()
    counts = Counter(n for neurons in coarse for n in neurons)
    return {n for n, c in counts.items() if c > share * len(coarse) or len(coarse) == 1}


def knowledge_neurons(lm: LanguageModel, queries: Sequence[Query], steps: int = 20, threshold: float = 0.2,
                      share: float = 0.7) -> set[Neuron]:
    """The refined knowledge neurons of one fact asked through several ``queries`` (its templates)."""
    return refine([coarse_neurons(attribution(lm, q, steps), threshold) for q in queries], share)


@torch.no_grad()
def answer_probability_with(lm: LanguageModel, queries: Sequence[Query], neurons: set[Neuron], factor: float) -> Tensor:
    """P(answer) of each query with ``neurons``' activations at the answer position multiplied by ``factor``."""
    by_layer: dict[int, list[int]] = {}
    for layer, index in neurons:
        by_layer.setdefault(layer, []).append(index)
    out = []
    for query in queries:
        ids = torch.tensor([query.ids], device=lm.device)
        positions = torch.tensor([query.position], device=lm.device)
        with ExitStack() as stack:
            for layer, index in by_layer.items():
                factors = torch.ones(1, lm.ffn(layer).fc_out.in_features, device=lm.device)
                factors[0, index] = factor
                stack.enter_context(_scaled_activation(lm, layer, positions, factors=factors))
            hidden = lm.backbone(ids).last_hidden_state[0, query.position]
        out.append(lm.logits(hidden).float().softmax(-1)[query.answer[0]])
    return torch.stack(out)


def random_like(lm: LanguageModel, neurons: set[Neuron], rng: np.random.Generator) -> set[Neuron]:
    """As many random neurons in the same layers."""
    out: set[Neuron] = set()
    for layer, count in Counter(layer for layer, _ in neurons).items():
        width = lm.ffn(layer).fc_out.in_features
        out |= {(layer, int(i)) for i in rng.choice(width, size=count, replace=False)}
    return out


def neuron_effects(lm: LanguageModel, queries: Sequence[Query], neurons: set[Neuron], random_sets: int = 5,
                   seed: int = 0) -> dict:
    """Mean relative change of P(correct) when ``neurons`` are suppressed (x0) and amplified (x2), and the same for
    ``random_sets`` random neuron sets of the same size and layers."""
    if not neurons:
        return {"neurons": 0}
    rng = np.random.default_rng(seed)
    base = answer_probability_with(lm, queries, set(), 1.0)

    def change(chosen: set[Neuron], factor: float) -> float:
        return float(((answer_probability_with(lm, queries, chosen, factor) - base) / base.clamp_min(1e-12)).mean())

    randoms = [random_like(lm, neurons, rng) for _ in range(random_sets)]
    return {"neurons": len(neurons),
            "suppress": change(neurons, 0.0), "amplify": change(neurons, 2.0),
            "random_suppress": float(np.mean([change(r, 0.0) for r in randoms])),
            "random_amplify": float(np.mean([change(r, 2.0) for r in randoms]))}


class KnowledgeNeuronEditor(Editor):
    """Dai et al.'s fact update: find the fact's knowledge neurons (its prompt with the true answer), then move each
    value slot from the old answer's embedding towards the new one's."""

    def __init__(self, strength: float = 1.0, steps: int = 20, threshold: float = 0.2) -> None:
        self.strength, self.steps, self.threshold = strength, steps, threshold
        self._neurons: list[set[Neuron]] = []

    def touched(self, lm: LanguageModel) -> list[str]:
        return [parameter_name(lm, lm.ffn(layer).fc_out.weight) for layer in range(lm.num_layers)]

    @torch.no_grad()
    def edit(self, lm: LanguageModel, requests: list[EditRequest]) -> dict:
        embedding = lm.module.lm_head.weight
        found = []
        for request in requests:
            if request.target_true is None:
                raise ConfigError(f"knowledge-neuron editing needs target_true for {request.text!r}")
            query = lm.query(request.text, request.target_true)
            with torch.enable_grad():
                neurons = coarse_neurons(attribution(lm, query, self.steps), self.threshold)
            old, new = query.answer[0], lm.query(request.text, request.target_new).answer[0]
            for layer, index in neurons:
                weight = lm.ffn(layer).fc_out.weight  # [H, I]: column `index` is the neuron's value slot
                weight[:, index] += self.strength * (embedding[new] - embedding[old])
            found.append(len(neurons))
        return {"editor": "knowledge-neurons", "neurons": found}
