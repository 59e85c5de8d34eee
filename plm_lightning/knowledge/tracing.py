"""Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", sec. 2.1 and Fig. 1).

Three runs of the model on a factual prompt:

* clean: the prompt as is; record every layer's hidden state, MLP output and attention output; P(o) = p*.
* corrupted: noise ``e ~ N(0, nu)`` added to the embeddings of the subject tokens, ``nu = 3 x`` the standard deviation of
  subject embeddings (sec. 2.1, "3 times the empirical std"); P(o) falls to p_.
* corrupted-with-restoration: as corrupted, except that one state (token i, layer l) is set back to its clean value
  (for MLP / attention outputs, a window of ``window`` layers around l, ROME's window 10 on 48 layers).

The indirect effect of a state is ``P_restored(o) - p_``, averaged over ``samples`` noise draws (ROME draws 10).
Averaged over facts by token role (first / middle / last subject token, first subsequent token, further tokens,
last token) it shows ROME's finding: the last subject token at middle MLP layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.lm import LanguageModel, Query
from plm_lightning.plotting import pyplot

KINDS = ("hidden", "mlp", "attn")
ROLES = ("first subject token", "middle subject tokens", "last subject token", "first subsequent token",
         "further tokens", "last token")


def _module(lm: LanguageModel, kind: str, layer: int) -> nn.Module:
    block = lm.block(layer)
    return {"hidden": block, "mlp": block.ffn, "attn": block.self_attn}[kind]


@torch.no_grad()
def subject_noise_scale(lm: LanguageModel, subjects: Sequence[str], factor: float = 3.0) -> float:
    """``factor`` x the standard deviation of the embedding-layer outputs of the subjects' tokens."""
    values = []
    for subject in subjects:
        query = lm.query(subject, subject=subject.strip())
        start, end = query.subject_span
        ids = torch.tensor([query.ids], device=lm.device)
        values.append(lm.backbone.embeddings(ids)[0, start:end].flatten())
    if not values:
        raise ConfigError("causal tracing: no subjects to measure the embedding noise on")
    return factor * float(torch.cat(values).float().std())


@dataclass
class Trace:
    """Indirect effects ``[tokens, layers]`` per kind, with the clean (p*) and corrupted (p_) answer probabilities."""

    tokens: list[str]
    subject_span: tuple[int, int]
    answer: str
    clean: float
    corrupted: float
    effects: dict[str, np.ndarray]

    def roles(self) -> list[int]:
        """ROME's token role (an index into ``ROLES``) of each token."""
        start, end = self.subject_span
        out = []
        for i in range(len(self.tokens)):
            if i == len(self.tokens) - 1:
                out.append(5)
            elif i < start:
                out.append(4)
            elif i < end:
                out.append(0 if i == start else 2 if i == end - 1 else 1)
            else:
                out.append(3 if i == end else 4)
        return out


class _Patch:
    """Forward hooks for one traced batch: noise on the subject embeddings of rows 1.., clean states restored."""

    def __init__(self, lm: LanguageModel, span: tuple[int, int], noise: Tensor | None) -> None:
        self.lm, self.span, self.noise = lm, span, noise

    def corrupt(self, _module: nn.Module, _inputs: tuple, output: Tensor) -> Tensor:
        if self.noise is None:
            return output
        output = output.clone()
        start, end = self.span
        output[1:, start:end] += self.noise.to(output.dtype)
        return output

    @staticmethod
    def restore(clean: Tensor, tokens: Sequence[int]):  # noqa: ANN205
        def hook(_module: nn.Module, _inputs: tuple, output: Tensor) -> Tensor:
            output = output.clone()
            output[1:, tokens] = clean[tokens].to(output.dtype)
            return output
        return hook


def _record(lm: LanguageModel, ids: Tensor) -> dict[tuple[str, int], Tensor]:
    """Clean outputs ``[L, H]`` of every block, MLP and attention module."""
    states: dict[tuple[str, int], Tensor] = {}
    with ExitStack() as stack:
        for kind in KINDS:
            for layer in range(lm.num_layers):
                def keep(_m: nn.Module, _i: tuple, out: Tensor, key: tuple[str, int] = (kind, layer)) -> None:
                    states[key] = out[0].detach()
                stack.enter_context(_module(lm, kind, layer).register_forward_hook(keep))
        lm.backbone(ids)
    return states


@torch.no_grad()
def run_patched(lm: LanguageModel, query: Query, noise: Tensor | None,
                restore: dict[tuple[str, int], Sequence[int]] | None = None,
                clean_states: dict[tuple[str, int], Tensor] | None = None) -> Tensor:
    """P(answer) for row 0 (clean) and rows 1.. (noised subject), with ``restore`` {(kind, layer): tokens} set back to
    their clean states. ``noise`` ``[samples, span, H]`` (None: no corruption, one row)."""
    if query.subject_span is None or not query.answer:
        raise ConfigError("causal tracing needs a query with a subject span and an answer")
    rows = 1 + (0 if noise is None else noise.shape[0])
    ids = torch.tensor([query.ids] * rows, device=lm.device)
    patch = _Patch(lm, query.subject_span, noise)
    with ExitStack() as stack:
        stack.enter_context(lm.backbone.embeddings.register_forward_hook(patch.corrupt))
        for (kind, layer), tokens in (restore or {}).items():
            hook = patch.restore(clean_states[(kind, layer)], list(tokens))
            stack.enter_context(_module(lm, kind, layer).register_forward_hook(hook))
        hidden = lm.backbone(ids).last_hidden_state[:, query.position]
    return lm.logits(hidden).float().softmax(-1)[:, query.answer[0]]


@torch.no_grad()
def causal_trace(lm: LanguageModel, prompt: str, subject: str, answer: str | None = None, noise_scale: float | None = None,
                 samples: int = 10, window: int = 1, kinds: Sequence[str] = KINDS, seed: int = 0) -> Trace:
    """Trace ``prompt`` (its subject a substring of it) for ``answer`` (default: the model's own top prediction)."""
    if not lm.causal:
        raise ConfigError("causal tracing follows ROME on autoregressive models: give a CausalLM checkpoint")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or samples < 1 or window < 1:
        raise ConfigError(f"causal tracing: kinds {list(kinds)} must come from {', '.join(KINDS)}; samples={samples} "
                          f"and window={window} must be >= 1")
    query = lm.query(prompt, subject=subject)
    if answer is None:
        logits = lm.answer_logits(*lm.batch([query]))
        answer = lm.tokenizer.decode([int(logits[0].argmax())]).strip()
    query = lm.query(prompt, answer, subject=subject)
    start, end = query.subject_span
    if end <= start:
        raise ConfigError(f"subject {subject!r} has no tokens in the prompt {prompt!r}")
    scale = noise_scale if noise_scale is not None else subject_noise_scale(lm, [subject])
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn((samples, end - start, lm.backbone.cfg.hidden_size), generator=gen).to(lm.device) * scale
    ids = torch.tensor([query.ids], device=lm.device)
    clean_states = _record(lm, ids)
    base = run_patched(lm, query, noise)
    clean, corrupted = float(base[0]), float(base[1:].mean())
    effects = {}
    for kind in kinds:
        grid = np.zeros((len(query.ids), lm.num_layers))
        for layer in range(lm.num_layers):
            span = [layer] if kind == "hidden" else range(max(0, layer - window // 2),
                                                          min(lm.num_layers, layer - window // 2 + window))
            for token in range(len(query.ids)):
                restore = {(kind, j): [token] for j in span}
                grid[token, layer] = float(run_patched(lm, query, noise, restore, clean_states)[1:].mean()) - corrupted
        effects[kind] = grid
    tokens = [lm.tokenizer.decode([t]) for t in query.ids]
    return Trace(tokens, query.subject_span, answer, clean, corrupted, effects)


def average_by_role(traces: Sequence[Trace], kind: str = "hidden") -> np.ndarray:
    """ROME's Fig. 2 table: mean indirect effect ``[len(ROLES), layers]`` over traces, tokens grouped by role."""
    if not traces:
        raise ConfigError("no traces to average")
    sums = np.zeros((len(ROLES), traces[0].effects[kind].shape[1]))
    counts = np.zeros(len(ROLES))
    for trace in traces:
        grid = trace.effects[kind]
        for role in range(len(ROLES)):
            rows = [i for i, r in enumerate(trace.roles()) if r == role]
            if rows:
                sums[role] += grid[rows].mean(0)
                counts[role] += 1
    return sums / np.maximum(counts, 1)[:, None]


def plot_trace(trace: Trace, path: str) -> None:
    """ROME's heat maps: one panel per kind, rows = tokens (subject starred), columns = layers."""
    plt = pyplot()

    kinds = list(trace.effects)
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds), 0.35 * len(trace.tokens) + 1.6), squeeze=False)
    start, end = trace.subject_span
    labels = [f"{t.strip() or repr(t)}*" if start <= i < end else (t.strip() or repr(t)) for i, t in enumerate(trace.tokens)]
    titles = {"hidden": "hidden states", "mlp": "MLP outputs", "attn": "attention outputs"}
    colours = {"hidden": "Purples", "mlp": "Greens", "attn": "Reds"}
    for ax, kind in zip(axes[0], kinds):
        image = ax.imshow(trace.effects[kind], cmap=colours[kind], aspect="auto")
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel("layer")
        ax.set_title(f"restoring {titles[kind]}", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.05).set_label(f"P({trace.answer}) - p_", fontsize=7)
    fig.suptitle(f"causal trace: p* = {trace.clean:.3f}, corrupted p_ = {trace.corrupted:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_roles(summary: dict, path: str) -> None:
    """The averaged heat maps (rows = token roles) of :func:`average_by_role`, ROME's Fig. 2 layout."""
    plt = pyplot()

    kinds = list(summary["effects"])
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.6 * len(kinds), 3.4), squeeze=False)
    colours = {"hidden": "Purples", "mlp": "Greens", "attn": "Reds"}
    for ax, kind in zip(axes[0], kinds):
        image = ax.imshow(np.asarray(summary["effects"][kind]), cmap=colours[kind], aspect="auto")
        ax.set_yticks(range(len(summary["roles"])), summary["roles"], fontsize=7)
        ax.set_xlabel("layer")
        ax.set_title(f"average indirect effect: {kind}", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.05)
    fig.suptitle(f"{summary['facts']} facts: p* = {summary['clean']:.3f}, p_ = {summary['corrupted']:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def locate_layer(lm: LanguageModel, facts: Sequence[tuple[str, str, str]], samples: int = 5, noise_scale: float | None = None
                 ) -> int:
    """ROME's choice of the layer to edit: the MLP layer with the largest average indirect effect at the last subject
    token, over ``facts`` (prompt, subject, object); the last layer is excluded (its MLP output at the subject cannot
    reach a later position)."""
    if not facts:
        raise ConfigError("locating a layer needs at least one fact to trace")
    if lm.num_layers < 2:
        return 0
    scale = noise_scale if noise_scale is not None else subject_noise_scale(lm, [s for _, s, _ in facts])
    traces = [causal_trace(lm, p, s, o, scale, samples, kinds=("mlp",)) for p, s, o in facts]
    effect = average_by_role(traces, "mlp")[ROLES.index("last subject token")]
    return int(np.argmax(effect[:-1]))
