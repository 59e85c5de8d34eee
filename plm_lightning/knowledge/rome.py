"""Locate-then-edit: ROME (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", sec. 3) and MEMIT
(Meng et al. 2023, "Mass-Editing Memory in a Transformer", sec. 4), both on the MLP output matrix ``W`` (our
``ffn.fc_out``), seen as a linear associative memory from keys ``k`` (its inputs) to values (its outputs).

* Key statistics: ``C = E[k k^T]`` over the tokens of a corpus (ROME sec. 3.1, a Wikipedia sample; here the model's
  training text), cached on disk per model weights, layer and corpus.
* ROME: ``W' = W + Lambda (C^-1 k*)^T`` with ``Lambda = (v* - W k*) / ((C^-1 k*)^T k*)`` (eq. 2): a rank-one update
  after which ``W' k* = v*`` exactly. ``k*`` is the subject's last-token key averaged over context prefixes; ``v*`` is
  the value that makes the new object likely (:func:`~plm_lightning.knowledge.editing.optimise_shift`). The same
  averaged ``k*`` is used in ``Lambda`` and in the update, Gupta et al. 2024's r-ROME correction (ROME's code mixed
  the averaged key with the prompt's own key, the source of its "disabling edits").
  ``v*`` is optimised through the update it will be written with (``through_update``, our default): the direction
  ``C^-1 k*`` is fixed before ``v*`` is sought, so the search moves every token's value by its share of the update,
  not the subject's alone. On the 4-layer world model (layer 0 located) the tokens after the subject share that
  direction enough that ROME's shift-at-one-token optimum flips back once written (efficacy 0.50 -> 0.95 on 20
  single edits, issue 7's note).
* MEMIT: targets ``z_i`` on the residual stream after the last layer of a range ``R``; for each layer ``l`` of ``R``
  in order, the residual ``r_i = (z_i - h_i^L) / (L - l + 1)`` is spread over the remaining layers and
  ``Delta = R K^T (lambda C + K K^T)^-1`` (eq. 14) writes many memories at once. By default (``through_update``)
  the updates keep that form but their residuals are optimised jointly through them, as ROME's ``v*`` above
  (efficacy 0.45 -> 1.0 on 20 edits of the 24-subject world; the trade against unrelated facts is in issue 7's note).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.files import atomic_write, default_cache_dir
from plm_lightning.knowledge.editing import (
    DEFAULT_TARGET,
    Editor,
    EditRequest,
    TargetConfig,
    context_prefixes,
    mlp_keys,
    optimise_shift,
    optimise_shifts,
    parameter_name,
    prefixed_queries,
)
from plm_lightning.knowledge.lm import LanguageModel
from plm_lightning.nn.stack_inputs import StackInputs


def _model_digest(lm: LanguageModel) -> str:
    digest = hashlib.sha256()
    for name, p in sorted(lm.module.state_dict().items()):
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@torch.no_grad()
def key_second_moment(lm: LanguageModel, layer: int, texts: Sequence[str], max_tokens: int = 100_000,
                      cache_dir: str | Path | None = None, seq_len: int = 128) -> Tensor:
    """``E[k k^T]`` ``[I, I]`` of layer ``layer``'s MLP-output inputs over up to ``max_tokens`` corpus tokens (ROME
    uses 100,000 Wikipedia tokens), cached under ``cache_dir`` (default ``$PLM_LIGHTNING_CACHE/knowledge``)."""
    lm.block(layer)
    if not texts:
        raise ConfigError("key statistics: no corpus text to estimate E[k k^T] on")
    corpus = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    root = Path(cache_dir or default_cache_dir()) / "knowledge"
    file = root / f"mom2-{_model_digest(lm)}-l{layer}-{corpus}-{max_tokens}.pt"
    if file.is_file():
        return torch.load(file, weights_only=True, map_location=lm.device)
    captured: list[Tensor] = []
    hook = lm.ffn(layer).fc_out.register_forward_pre_hook(lambda _m, args: captured.append(args[0].detach()))
    total = None
    count = 0
    try:
        ids_list = [ids for ids in lm.tokenizer.encode_batch(list(texts)) if ids]
        flat = [t for ids in ids_list for t in ids]
        for start in range(0, min(len(flat), max_tokens), seq_len):
            chunk = flat[start: start + seq_len]
            captured.clear()
            lm.backbone(torch.tensor([chunk], device=lm.device))
            keys = captured[0][0].double()
            total = keys.T @ keys if total is None else total + keys.T @ keys
            count += keys.shape[0]
    finally:
        hook.remove()
    moment = (total / count).float()
    atomic_write(file, lambda tmp: torch.save(moment.cpu(), tmp))
    return moment


def default_layer(lm: LanguageModel) -> int:
    """ROME's layer, as a fraction of depth: 17 of GPT-2 XL's 48 layers."""
    return min(lm.num_layers - 1, round(lm.num_layers * 17 / 48))


class ROME(Editor):
    """Rank-One Model Editing of one layer's MLP output matrix, one request at a time (a batch is applied in order)."""

    def __init__(self, texts: Sequence[str], layer: int | None = None, target: TargetConfig = DEFAULT_TARGET,
                 contexts: int = 10, max_tokens: int = 100_000, seed: int = 0, consistent_keys: bool = True,
                 context_length: int = 5, through_update: bool = True) -> None:
        """``consistent_keys=False`` is ROME's original code: ``Lambda`` from the bare prompt's key and output while
        ``C^-1 k*`` uses the averaged key (exact on the bare prompt, the asymmetry r-ROME removes).
        ``through_update=False`` optimises ``v*`` as ROME does, as a shift at the subject's last token alone; the
        default optimises it through the rank-one update it will be written with (see
        :func:`~plm_lightning.knowledge.editing.optimise_shift`)."""
        self.texts, self.layer, self.target, self.contexts = list(texts), layer, target, contexts
        self.max_tokens, self.seed, self.consistent_keys = max_tokens, seed, consistent_keys
        self.context_length, self.through_update = context_length, through_update

    def _layer(self, lm: LanguageModel) -> int:
        return default_layer(lm) if self.layer is None else self.layer

    def touched(self, lm: LanguageModel) -> list[str]:
        return [parameter_name(lm, lm.ffn(self._layer(lm)).fc_out.weight)]

    @torch.no_grad()
    def rank_one(self, lm: LanguageModel, request: EditRequest, moment: Tensor | None = None,
                 contexts: list[str] | None = None) -> tuple[Tensor, Tensor]:
        """``(delta, d)`` of the update ``W + delta d^T`` that writes ``request`` into the current weights:
        ``d = C^-1 k* / (C^-1 k*)^T k*`` (so ``d . k* = 1``) and ``delta = v* - W k*``. ``moment`` and ``contexts``
        default to those of the current weights (a batch computes them once, on the unedited model)."""
        layer = self._layer(lm)
        if moment is None:
            moment = key_second_moment(lm, layer, self.texts, self.max_tokens)
        if contexts is None:
            contexts = context_prefixes(lm, self.contexts, self.context_length, seed=self.seed)
        ridge = 1e-6 * moment.diagonal().mean() * torch.eye(moment.shape[0], device=moment.device)
        keys = mlp_keys(lm, layer, prefixed_queries(lm, request, contexts))  # row 0: the bare prompt
        key = keys.mean(0)  # k*
        left = torch.linalg.solve(moment + ridge, key)  # C^-1 k*
        # r-ROME: v* - W k* = delta, the value at the averaged key k* shifts by delta; ROME's code divides by the
        # bare prompt's key instead, so that exactly that prompt's value moves by delta
        direction = left / (left @ (key if self.consistent_keys else keys[0]))
        with torch.enable_grad():
            delta, _ = optimise_shift(lm, request, contexts, lm.ffn(layer).fc_out, self.target, lm.block(layer),
                                      key_direction=direction if self.through_update else None)
        return delta, direction

    @torch.no_grad()
    def edit(self, lm: LanguageModel, requests: list[EditRequest]) -> dict:
        layer = self._layer(lm)
        moment = key_second_moment(lm, layer, self.texts, self.max_tokens)
        contexts = context_prefixes(lm, self.contexts, self.context_length, seed=self.seed)
        for request in requests:
            delta, direction = self.rank_one(lm, request, moment, contexts)
            lm.ffn(layer).fc_out.weight.add_(torch.outer(delta, direction))  # [H, I]
        return {"editor": "ROME", "layers": [layer], "contexts": len(contexts)}


class MEMIT(Editor):
    """Mass editing across ``layers`` (default: the ROME layer and the one before it)."""

    def __init__(self, texts: Sequence[str], layers: Sequence[int] | None = None, target: TargetConfig = DEFAULT_TARGET,
                 contexts: int = 10, mom2_weight: float = 100.0, max_tokens: int = 100_000, seed: int = 0,
                 through_update: bool = True) -> None:
        """``mom2_weight``: lambda, how strongly the existing memories (``C``) hold against the new keys (MEMIT's
        GPT-J setting is 15,000 for 16,384-dimensional keys; for the 512-dimensional keys of the tiny world models 100
        trades efficacy against unrelated facts best, see the benchmark). ``through_update=False`` is MEMIT's
        procedure (targets ``z_i`` at one token, spread in closed form); the default optimises the batch's values
        through the updates themselves, as ROME's ``through_update``."""
        if mom2_weight <= 0:
            raise ConfigError(f"MEMIT: mom2_weight={mom2_weight} must be > 0")
        self.texts, self.layers, self.target, self.contexts = list(texts), layers, target, contexts
        self.mom2_weight, self.max_tokens, self.seed = mom2_weight, max_tokens, seed
        self.through_update = through_update

    def _layers(self, lm: LanguageModel) -> list[int]:
        if self.layers is None:
            last = default_layer(lm)
            return list(range(max(0, last - 1), last + 1))
        layers = sorted(set(self.layers))
        if not layers:
            raise ConfigError("MEMIT: layers must name at least one layer")
        for layer in layers:
            lm.block(layer)
        return layers

    def touched(self, lm: LanguageModel) -> list[str]:
        return [parameter_name(lm, lm.ffn(layer).fc_out.weight) for layer in self._layers(lm)]

    @torch.no_grad()
    def edit(self, lm: LanguageModel, requests: list[EditRequest]) -> dict:
        layers = self._layers(lm)
        contexts = context_prefixes(lm, self.contexts, seed=self.seed)
        if self.through_update:
            self._edit_through_updates(lm, requests, layers, contexts)
        else:
            self._edit_closed_form(lm, requests, layers, contexts)
        return {"editor": "MEMIT", "layers": layers, "requests": len(requests)}

    def _edit_through_updates(self, lm: LanguageModel, requests: list[EditRequest], layers: list[int],
                              contexts: list[str]) -> None:
        """Every layer's update in MEMIT's form ``Delta_l = R_l K_l^T (lambda C_l + K_l K_l^T)^-1`` with the keys of
        the unedited model, and the residuals ``R_l`` of all layers and requests optimised jointly through those
        updates (:func:`~plm_lightning.knowledge.editing.optimise_shifts`); each column of ``K^T (...)^-1`` is scaled
        so that its own key maps to 1, making ``R_l``'s columns the value shifts at the subjects' tokens."""
        queries = [prefixed_queries(lm, r, contexts) for r in requests]
        directions = []
        for layer in layers:
            keys = torch.stack([mlp_keys(lm, layer, q).mean(0) for q in queries])  # [n, I]
            moment = key_second_moment(lm, layer, self.texts, self.max_tokens)
            direction = torch.linalg.solve(self.mom2_weight * moment + keys.T @ keys, keys.T)  # [I, n]
            directions.append(direction / (keys * direction.T).sum(1))
        with torch.enable_grad():
            deltas, _ = optimise_shifts(lm, requests, contexts, [lm.ffn(layer).fc_out for layer in layers],
                                        self.target, [lm.block(layer) for layer in layers], directions)
        for layer, delta, direction in zip(layers, deltas, directions):
            lm.ffn(layer).fc_out.weight += delta.T @ direction.T

    def _edit_closed_form(self, lm: LanguageModel, requests: list[EditRequest], layers: list[int],
                          contexts: list[str]) -> None:
        last = layers[-1]
        targets = []
        for request in requests:  # z_i = h_i^L + delta_i at the last layer of the range (MEMIT eq. 16)
            with torch.enable_grad():
                delta, original = optimise_shift(lm, request, contexts, lm.block(last), self.target)
            targets.append(original + delta)
        z = torch.stack(targets)  # [n, H]
        queries = [prefixed_queries(lm, r, contexts) for r in requests]
        for i, layer in enumerate(layers):
            keys = torch.stack([mlp_keys(lm, layer, q).mean(0) for q in queries])  # [n, I]
            current = torch.stack([_block_output(lm, last, q).mean(0) for q in queries])  # h_i^L now
            residual = (z - current) / (len(layers) - i)  # spread over the remaining layers
            moment = key_second_moment(lm, layer, self.texts, self.max_tokens)
            gram = self.mom2_weight * moment + keys.T @ keys  # lambda C + K K^T
            update = torch.linalg.solve(gram, keys.T).T  # K^T (lambda C + K K^T)^-1, as [n, I]
            lm.ffn(layer).fc_out.weight += residual.T @ update


def _block_output(lm: LanguageModel, layer: int, queries: list) -> Tensor:
    captured: list[Tensor] = []
    hook = lm.block(layer).register_forward_hook(lambda _m, _i, out: captured.append(out.detach()))
    try:
        ids, mask, _ = lm.batch(queries)
        lm.backbone(ids, StackInputs(attention_mask=mask))
    finally:
        hook.remove()
    last = torch.tensor([q.subject_span[1] - 1 for q in queries], device=lm.device)
    return captured[0][torch.arange(len(queries), device=lm.device), last]
