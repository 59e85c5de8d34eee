"""One interface for every knowledge editor, and the pieces ROME, MEMIT and the others share.

``editor.apply(lm, requests)`` edits ``lm`` in place and returns an :class:`Edit` holding the original values of
every parameter it touched; ``edit.restore()`` puts them back bit for bit. Requests follow CounterFact (Meng et al.
2022, sec. 3.1): ``prompt`` with ``{}`` for the subject, ``subject``, ``target_new`` (and ``target_true``).

Shared pieces (ROME, sec. 3.1; MEMIT, Meng et al. 2023, sec. 4.3):

* context prefixes ``x_j``: short texts sampled from the model itself, so a key or target holds "in any context";
* the key ``k*``: the input of a layer's MLP output matrix at the subject's last token, averaged over the prefixes;
* the target: a shift ``delta`` of a module's output at the subject's last token that makes ``target_new`` likely
  in every prefixed prompt, with ROME's KL term keeping "{subject} is a" unchanged and its norm clamp.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.lm import LanguageModel, Query
from plm_lightning.nn.stack_inputs import StackInputs


@dataclass(frozen=True)
class EditRequest:
    prompt: str
    subject: str
    target_new: str
    target_true: str | None = None

    def __post_init__(self) -> None:
        if "{}" not in self.prompt:
            raise ConfigError(f"edit request: prompt {self.prompt!r} needs a {{}} where the subject {self.subject!r} goes")
        if not self.subject.strip() or not self.target_new.strip():
            raise ConfigError(f"edit request {self.prompt!r}: subject and target_new must be non-empty")

    @classmethod
    def from_dict(cls, row: dict) -> EditRequest:
        """A CounterFact row (flat, or with ``requested_rewrite`` and ``{"str": ...}`` targets as in the dataset)."""
        row = row.get("requested_rewrite", row)
        missing = [k for k in ("prompt", "subject", "target_new") if k not in row]
        if missing:
            raise ConfigError(f"edit request: missing {', '.join(missing)} (needs prompt, subject, target_new)")
        text = lambda v: v["str"] if isinstance(v, dict) else v  # noqa: E731
        prompt, subject = row["prompt"], row["subject"]
        if "{}" not in prompt:
            if subject not in prompt:
                raise ConfigError(f"edit request: subject {subject!r} is not in the prompt {prompt!r} (and the prompt "
                                  "has no {} for it)")
            prompt = prompt.replace(subject, "{}", 1)
        true = row.get("target_true")
        return cls(prompt, subject, text(row["target_new"]), text(true) if true is not None else None)

    @property
    def text(self) -> str:
        return self.prompt.format(self.subject)


def check_batch(requests: Sequence[EditRequest]) -> list[EditRequest]:
    if not requests:
        raise ConfigError("edit: the batch of edit requests is empty")
    return list(requests)


@dataclass
class Edit:
    """The edited model and the original values of the parameters the editor changed."""

    lm: LanguageModel
    original: dict[str, Tensor]
    info: dict = field(default_factory=dict)

    def restore(self) -> None:
        params = dict(self.lm.module.named_parameters())
        with torch.no_grad():
            for name, value in self.original.items():
                params[name].copy_(value)

    def delta(self) -> dict[str, Tensor]:
        params = dict(self.lm.module.named_parameters())
        return {name: params[name].detach() - value for name, value in self.original.items()}


class Editor:
    """Base of the editors: ``apply`` snapshots ``touched(lm)`` and calls ``edit``."""

    def touched(self, lm: LanguageModel) -> list[str]:  # pragma: no cover - every editor overrides it
        raise NotImplementedError

    def edit(self, lm: LanguageModel, requests: list[EditRequest]) -> dict:  # pragma: no cover
        raise NotImplementedError

    def apply(self, lm: LanguageModel, requests: Sequence[EditRequest] | EditRequest) -> Edit:
        if not lm.causal:
            raise ConfigError(f"{type(self).__name__} edits autoregressive LMs (as in its paper): give a CausalLM "
                              "checkpoint")
        batch = check_batch([requests] if isinstance(requests, EditRequest) else requests)
        params = dict(lm.module.named_parameters())
        original = {name: params[name].detach().clone() for name in self.touched(lm)}
        info = self.edit(lm, batch)
        return Edit(lm, original, info or {})


def parameter_name(lm: LanguageModel, parameter: nn.Parameter) -> str:
    for name, p in lm.module.named_parameters():
        if p is parameter:
            return name
    raise KeyError("parameter not in the model")


# -- context prefixes, keys and targets ---------------------------------------------------------------------------
@torch.no_grad()
def sample_continuations(lm: LanguageModel, prompts: Sequence[str], length: int, seed: int = 0, top_k: int = 5
                         ) -> list[str]:
    """Each prompt continued by ``length`` tokens of top-k sampling (the prompt included in the returned text)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for prompt in prompts:
        ids = torch.tensor([lm.query(prompt).ids if prompt else [lm.tokenizer.ids["eos"]]], device=lm.device)
        for _ in range(length):
            logits = lm.logits(lm.backbone(ids).last_hidden_state[:, -1]).float()
            top = logits.topk(top_k, -1)
            pick = torch.multinomial(top.values.softmax(-1).cpu(), 1, generator=gen).to(lm.device)
            ids = torch.cat([ids, top.indices.gather(1, pick)], 1)
        out.append(lm.tokenizer.decode(ids[0, 1:].tolist(), skip_special_tokens=True).strip())
    return out


def context_prefixes(lm: LanguageModel, count: int = 10, length: int = 5, seed: int = 0) -> list[str]:
    """``["{}"]`` plus ``count`` templates ``"<sampled text>. {}"`` (ROME's context templates: short texts the model
    generates from nothing with top-k 5 sampling)."""
    texts = sample_continuations(lm, [""] * count, length, seed)
    escaped = (t.rstrip(".").replace("{", "{{").replace("}", "}}") for t in texts)
    return ["{}", *(f"{t}. {{}}" for t in escaped)]


def prefixed_queries(lm: LanguageModel, request: EditRequest, contexts: Sequence[str], answer: str = ""
                     ) -> list[Query]:
    return [lm.query(context.format(request.prompt.format(request.subject)), answer, subject=request.subject)
            for context in contexts]


def _last_subject(queries: Sequence[Query]) -> Tensor:
    return torch.tensor([q.subject_span[1] - 1 for q in queries])


def mlp_keys(lm: LanguageModel, layer: int, queries: Sequence[Query]) -> Tensor:
    """Inputs of layer ``layer``'s MLP output matrix at each query's last subject token ``[N, I]``."""
    captured: list[Tensor] = []
    hook = lm.ffn(layer).fc_out.register_forward_pre_hook(lambda _m, args: captured.append(args[0].detach()))
    try:
        with torch.no_grad():
            ids, mask, _ = lm.batch(list(queries))
            lm.backbone(ids, StackInputs(attention_mask=mask))
    finally:
        hook.remove()
    return captured[0][torch.arange(len(queries)), _last_subject(queries).to(lm.device)]


def answer_log_probs(lm: LanguageModel, queries: Sequence[Query], answer_ids: Sequence[int],
                     backbone: Callable[[Tensor, Tensor], Tensor] | None = None) -> Tensor:
    """log P(answer | query) of each query (every answer token, teacher-forced) ``[N]``; differentiable. ``backbone``
    maps (ids, mask) to the last hidden states (default: the model's own; editors pass one with edited weights)."""
    full = [Query(q.ids + tuple(answer_ids[:-1]), q.position, tuple(answer_ids), q.subject_span) for q in queries]
    ids, mask, positions = lm.batch(full)
    hidden = (backbone(ids, mask) if backbone else
              lm.backbone(ids, StackInputs(attention_mask=mask)).last_hidden_state)
    steps = torch.arange(len(answer_ids), device=ids.device)
    at = hidden[torch.arange(len(full), device=ids.device)[:, None], positions[:, None] + steps[None]]
    logp = lm.logits(at).float().log_softmax(-1)
    target = torch.tensor(list(answer_ids), device=ids.device)
    return logp.gather(2, target[None, :, None].expand(len(full), -1, 1))[..., 0].sum(1)


def edit_examples(lm: LanguageModel, requests: Sequence[EditRequest]) -> list[tuple[Query, list[int]]]:
    """Each request's prompt as a query and the token ids of its new answer (the pairs an edit loss is taken on)."""
    return [(lm.query(r.text), list(lm.query(r.text, r.target_new).answer)) for r in requests]


@dataclass(frozen=True)
class TargetConfig:
    """ROME's v* optimisation: its GPT-2 XL hyperparameters (Adam at lr 0.5, KL factor 0.0625, weight decay 0.5,
    clamp 4 x the original norm), except up to 300 steps instead of 20 (it stops once the NLL is below ``stop_loss``;
    a 4-layer model needs a shift several times its MLP output, which 20 steps do not reach)."""

    steps: int = 300
    learning_rate: float = 0.5
    kl_factor: float = 0.0625
    weight_decay: float = 0.5
    clamp_norm_factor: float = 4.0
    stop_loss: float = 0.05


DEFAULT_TARGET = TargetConfig()

def optimise_shift(lm: LanguageModel, request: EditRequest, contexts: Sequence[str], module: nn.Module,
                   config: TargetConfig | None = None, scale_from: nn.Module | None = None,
                   key_direction: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(delta, ``module``'s original output at the subject's last token averaged over the prefixed prompts): the shift
    of that output that maximises log P(target_new) over the prefixed prompts (ROME eq. 4), with
    KL(P'[x | "{subject} is a"] || P[x | same]) (P' edited) keeping the subject's other properties, and ROME's norm
    penalty (``weight_decay * ||delta|| / ||v||^2``, as its code has it) and norm clamp, relative to the norm of
    ``scale_from``'s output there (default ``module``'s own, as in ROME; our small models' MLP outputs are a small
    part of the residual stream, so the editors pass the block, whose output is the residual stream).

    ``key_direction`` (a vector ``d`` over ``module``'s inputs, a linear layer's keys): optimise the shift through the
    rank-one update ``W + delta d^T`` itself instead of at the subject's last token alone: every position ``j`` of
    every prompt moves by ``(d . k_j) delta``. ROME passes ``d = C^-1 k* / (C^-1 k*)^T k*``, so the subject's token
    moves by ``delta`` as before while the tokens after it, whose keys overlap ``C^-1 k*`` in a small model's early
    layers, move as the written update will move them (which a shift at one position ignores)."""
    deltas, originals = optimise_shifts(lm, [request], contexts, [module], config,
                                        None if scale_from is None else [scale_from],
                                        None if key_direction is None else [key_direction[:, None]])
    return deltas[0, 0], originals[0, 0]


def optimise_shifts(lm: LanguageModel, requests: Sequence[EditRequest], contexts: Sequence[str],
                    modules: Sequence[nn.Module], config: TargetConfig | None = None,
                    scale_from: Sequence[nn.Module] | None = None, key_directions: Sequence[Tensor] | None = None
                    ) -> tuple[Tensor, Tensor]:
    """:func:`optimise_shift` for a batch of requests and one or more modules at once: ``(deltas, originals)``, both
    ``[modules, requests, H]``. Without ``key_directions`` each request's shift acts at its own subject's last token
    (one module; the requests' objectives are then independent). With them (``[I, requests]`` per module, the
    update ``W_m + deltas[m]^T D_m^T`` of every module) all shifts act through the updates at every position of every
    prompt, and are optimised jointly, so that requests which share key directions are written as the batch will be;
    the summed objective adds each request's NLL, KL and norm penalty, and the search stops when every request's NLL
    is below ``stop_loss``."""
    config = config or DEFAULT_TARGET
    if key_directions is None and len(modules) != 1:
        raise ValueError("optimise_shifts: a shift at the subject's token acts on one module; give key_directions")
    rewrite, owner = [], []
    for i, request in enumerate(requests):
        answer = tuple(lm.query(request.text, request.target_new).answer)
        rewrite += [Query(q.ids + answer[:-1], q.position, answer, q.subject_span)
                    for q in prefixed_queries(lm, request, contexts)]
        owner += [i] * len(contexts)
    kl_rows = [lm.query(f"{request.subject} is a", subject=request.subject) for request in requests]
    rows, n, count = [*rewrite, *kl_rows], len(rewrite), len(requests)
    ids, mask, positions = lm.batch(rows)
    subject_last = _last_subject(rows).to(lm.device)
    index = torch.arange(len(rows), device=lm.device)
    owners = torch.tensor(owner + list(range(count)), device=lm.device)  # the request each row belongs to
    share = torch.zeros(count, n, device=lm.device)  # averages rewrite rows per request
    share[owners[:n], torch.arange(n, device=lm.device)] = 1
    share /= share.sum(1, keepdim=True)
    width = max(len(q.answer) for q in rewrite)  # answers of different lengths: padded steps carry no loss
    steps = torch.arange(width, device=lm.device)
    at_rows = (positions[:n, None] + steps[None]).clamp_max(ids.shape[1] - 1)
    target = torch.tensor([list(q.answer) + [0] * (width - len(q.answer)) for q in rewrite], device=lm.device)
    valid = torch.tensor([[1.0] * len(q.answer) + [0.0] * (width - len(q.answer)) for q in rewrite], device=lm.device)
    delta = torch.zeros(len(modules), count, lm.backbone.cfg.hidden_size, device=lm.device, requires_grad=True)
    original: dict[int, Tensor] = {}

    def shift(m: int) -> Callable:
        def hook(_m: nn.Module, inputs: tuple, out: Tensor) -> Tensor:
            if m not in original:
                original[m] = share @ out.detach()[index, subject_last][:n]
            if key_directions is not None:
                return out + (inputs[0] @ key_directions[m]) @ delta[m]
            out = out.clone()
            out[index, subject_last] += delta[m][owners]
            return out
        return hook

    norms: dict[int, Tensor] = {}

    def record(m: int) -> Callable:
        def hook(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            norms[m] = (share @ out.detach()[index, subject_last][:n]).norm(dim=-1)
        return hook

    probes = [module.register_forward_hook(record(m)) for m, module in enumerate(scale_from or modules)]
    try:
        with torch.no_grad():
            hidden = lm.backbone(ids, StackInputs(attention_mask=mask)).last_hidden_state
            reference = lm.logits(hidden[index[n:], positions[n:]]).float().log_softmax(-1)
    finally:
        for probe in probes:
            probe.remove()
    scale = torch.stack([norms[m] for m in range(len(modules))]).clamp_min(1e-6)  # [modules, requests]
    optimizer = torch.optim.Adam([delta], lr=config.learning_rate)
    hooks = [module.register_forward_hook(shift(m)) for m, module in enumerate(modules)]
    try:
        for _ in range(config.steps):
            hidden = lm.backbone(ids, StackInputs(attention_mask=mask)).last_hidden_state
            logp = lm.logits(hidden[index[:n, None], at_rows]).float().log_softmax(-1)
            row_nll = -(logp.gather(2, target[..., None])[..., 0] * valid).sum(1)
            nll = share @ row_nll  # [requests]
            kl_logp = lm.logits(hidden[index[n:], positions[n:]]).float().log_softmax(-1)
            # KL(edited || original) per request
            kl = nn.functional.kl_div(reference, kl_logp, log_target=True, reduction="none").sum(-1)
            # ROME's code: weight_decay * ||delta|| / ||v||^2 (the norm of delta, not its square, over the squared norm)
            penalty = (delta.norm(dim=-1) / scale ** 2).sum(0)
            loss = (nll + config.kl_factor * kl + config.weight_decay * penalty).sum()
            if nll.max().item() < config.stop_loss:
                break
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():  # ROME's clamp: ||delta|| <= clamp_norm_factor * ||original output||
                limit = config.clamp_norm_factor * scale
                delta.mul_((limit / delta.norm(dim=-1).clamp_min(1e-12)).clamp(max=1.0)[..., None])
    finally:
        for hook in hooks:
            hook.remove()
    return delta.detach(), torch.stack([original[m] for m in range(len(modules))])
