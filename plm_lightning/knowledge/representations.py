"""Reading frozen representations: classifier probes with their online (MDL) code length, and the feed-forward layers
as key-value memories.

* Classifier probe: a linear softmax classifier on one layer's hidden state at one position, trained on a split of
  the examples and scored on the rest (accuracy per layer).
* MDL probe, online code (Voita & Titov 2020, "Information-Theoretic Probing with Minimum Description Length", sec.
  3.2): the examples are sent in blocks at the fractions 0.1, 0.2, 0.4, ..., 50, 100 %; the first block with the
  uniform code (``t_1 log2 K`` bits), every next block with a probe trained on all blocks before it
  (``-sum log2 p(y | x)``), early-stopped on the last fifth of them. Any learner that sees only the data already
  sent gives a valid code; without early stopping a probe fitted to a few examples is so overconfident that it codes
  the next block in more bits than the uniform code (compression 0.3 on a 4-layer model's layers).
  Compression = uniform code length / online code length; a representation that makes the property easy to learn
  from little data codes it in fewer bits, which accuracy alone does not show.
* FFN key-value memories (Geva et al. 2021, "Transformer Feed-Forward Layers Are Key-Value Memories"): the i-th row
  of the first matrix is a key, the i-th column of the second a value. A key's top-triggering prefixes are the corpus
  prefixes where its coefficient (the intermediate activation) is largest; a value's induced distribution is
  ``softmax(E v_i)`` over the vocabulary, and its agreement is the share of the key's top prefixes whose next token is
  the value's top token (sec. 4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.lm import LanguageModel, Query

MDL_FRACTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)


@torch.no_grad()
def layer_features(lm: LanguageModel, queries: Sequence[Query], positions: Sequence[int], batch_size: int = 64
                   ) -> Tensor:
    """``[layers + 1, N, H]``: every layer's hidden state of each query at its given position."""
    out = []
    for start in range(0, len(queries), batch_size):
        chunk = list(queries[start: start + batch_size])
        ids, mask, _ = lm.batch(chunk)
        hidden = torch.stack(lm.hidden_states(ids, mask))
        at = torch.tensor(positions[start: start + batch_size], device=ids.device)
        out.append(hidden[:, torch.arange(len(chunk), device=ids.device), at])
    return torch.cat(out, 1).float().cpu()


def _fit(x: Tensor, y: Tensor, classes: int, epochs: int = 200, lr: float = 0.05,
         dev: tuple[Tensor, Tensor] | None = None) -> nn.Linear:
    """A linear softmax probe on standardised ``x``, from zero weights (the uniform prediction; the problem is convex).
    With ``dev`` it is early-stopped: the weights with the lowest NLL on ``dev``, checked before every epoch (so the
    untrained, uniform probe is a candidate)."""
    probe = nn.Linear(x.shape[1], classes)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr, weight_decay=1e-4)
    mean, std = x.mean(0), x.std(0, unbiased=False).clamp_min(1e-6)  # one example: std 0, not NaN
    probe.mean, probe.std = mean, std  # type: ignore[attr-defined]
    z = (x - mean) / std
    best, best_state = math.inf, None
    for epoch in range(epochs + 1):
        if dev is not None:
            nll = float(nn.functional.nll_loss(_log_probs(probe, dev[0]), dev[1]))
            if nll < best:
                best, best_state = nll, {k: v.clone() for k, v in probe.state_dict().items()}
        if epoch == epochs:
            break
        loss = nn.functional.cross_entropy(probe(z), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if best_state is not None:
        probe.load_state_dict(best_state)
    return probe


def _log_probs(probe: nn.Linear, x: Tensor) -> Tensor:
    with torch.no_grad():
        return probe((x - probe.mean) / probe.std).log_softmax(-1)  # type: ignore[attr-defined]


def classifier_probe(features: Tensor, labels: Sequence[int], train_fraction: float = 0.7, seed: int = 0) -> list[float]:
    """Held-out accuracy of a linear probe at each layer of ``features`` ``[layers, N, H]``."""
    y = torch.as_tensor(list(labels))
    if len(y) < 4:
        raise ConfigError("classifier probe: needs at least 4 labelled examples")
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    cut = max(1, int(train_fraction * len(y)))
    train, test = order[:cut], order[cut:]
    classes = int(y.max()) + 1
    out = []
    for layer in features:
        probe = _fit(layer[train], y[train], classes)
        out.append(float((_log_probs(probe, layer[test]).argmax(-1) == y[test]).float().mean()))
    return out


def online_code_length(x: Tensor, labels: Sequence[int], classes: int | None = None,
                       fractions: Sequence[float] = MDL_FRACTIONS, seed: int = 0) -> dict:
    """Voita & Titov's online code length (bits) of ``labels`` given ``x`` ``[N, H]``, the uniform code length and
    their ratio (compression)."""
    y = torch.as_tensor(list(labels))
    k = classes or int(y.max()) + 1
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    cuts = sorted({max(1, min(len(y), int(round(f * len(y))))) for f in fractions} | {len(y)})
    bits = cuts[0] * math.log2(k)
    for start, end in zip(cuts, cuts[1:]):
        held = max(1, start // 5) if start >= 2 else 0  # early stopping on a fifth of what was sent (none: uniform)
        probe = _fit(x[: start - held], y[: start - held], k, epochs=200 if held else 0,
                     dev=(x[start - held: start], y[start - held: start]) if held else None)
        logp = _log_probs(probe, x[start:end])
        bits += float(-logp[torch.arange(end - start), y[start:end]].sum()) / math.log(2)
    uniform = len(y) * math.log2(k)
    return {"online_bits": bits, "uniform_bits": uniform, "compression": uniform / bits}


@torch.no_grad()
def ffn_memories(lm: LanguageModel, layer: int, texts: Sequence[str], keys: Sequence[int], top: int = 10,
                 seq_len: int = 64) -> list[dict]:
    """For each key index: its top-``top`` triggering prefixes (text up to the token, coefficient, next token), the
    value's top tokens and the agreement of the value's top token with the prefixes' next tokens."""
    ffn = lm.ffn(layer)
    width = ffn.fc_out.in_features
    bad = [k for k in keys if not 0 <= k < width]
    if bad:
        raise ConfigError(f"ffn memories: keys {bad} are out of range: layer {layer} has keys 0..{width - 1}")
    captured: list[Tensor] = []
    hook = ffn.fc_out.register_forward_pre_hook(lambda _m, a: captured.append(a[0][0].detach()))
    best: dict[int, list[tuple[float, list[int], int]]] = {k: [] for k in keys}
    try:
        for ids in lm.tokenizer.encode_batch(list(texts)):
            for start in range(0, len(ids), seq_len):
                chunk = [lm.tokenizer.ids.get("eos", lm.tokenizer.ids.get("cls", 0)), *ids[start: start + seq_len]]
                captured.clear()
                lm.backbone(torch.tensor([chunk], device=lm.device))
                coefficients = captured[0][:, list(keys)].cpu()  # [T, K]
                for j, key in enumerate(keys):
                    for t in range(1, len(chunk) - 1):  # a prefix and its next token
                        best[key].append((float(coefficients[t, j]), chunk[1: t + 1], chunk[t + 1]))
                    best[key] = sorted(best[key], key=lambda r: -r[0])[:top]
    finally:
        hook.remove()
    embedding = lm.module.lm_head.weight  # the output embedding E
    out = []
    for key in keys:
        value = ffn.fc_out.weight[:, key]
        dist = (embedding @ value).float().softmax(-1)
        tokens = dist.topk(5)
        top_token = int(tokens.indices[0])
        prefixes = best[key]
        out.append({"layer": layer, "key": key,
                    "prefixes": [{"text": lm.tokenizer.decode(p[-12:]), "coefficient": c,
                                  "next": lm.tokenizer.decode([n])} for c, p, n in prefixes],
                    "value_top_tokens": [(lm.tokenizer.decode([int(i)]), float(p)) for p, i in zip(*tokens)],
                    "agreement": float(np.mean([n == top_token for _, _, n in prefixes])) if prefixes else 0.0})
    return out


def world_property(lm: LanguageModel, world, relation: str) -> tuple[list[Query], list[int], list[int], int]:  # noqa: ANN001
    """Examples of "which object does this subject have for ``relation``", read at the subject's last token of the
    bare subject (no relation words, so the probe reads what the subject's representation carries): queries,
    positions, labels and the number of classes."""
    if relation not in world.relations:
        raise ConfigError(f"probe: relation {relation!r} is not one of {', '.join(world.relations)}")
    rel = world.relations[relation]
    objects = list(world.objects[rel.object_type])
    facts = [f for f in world.facts if f.relation == relation and not f.alias_only]
    queries = [lm.query(f.subject, subject=f.subject) for f in facts]
    return queries, [q.subject_span[1] - 1 for q in queries], [objects.index(f.object) for f in facts], len(objects)
