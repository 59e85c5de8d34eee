"""LAMA-style factual probing (Petroni et al. 2019, "Language Models as Knowledge Bases?"), read at every layer.

Each probe is a cloze ``template`` with ``[X]`` (the subject) and ``[Y]`` (the object). The object's first token is
ranked among the whole vocabulary at the answer position; precision at k is the share of probes ranked within k and
MRR the mean reciprocal rank (ranks are 1-based), each averaged over the probes of a relation and then over relations
(macro average, as LAMA reports). Probes whose object is more than one token are set aside and counted, as LAMA does.

Per layer, two readers (Dufter et al. 2021, "Static Embeddings as Efficient Knowledge Bases?"; Wallat et al. 2020,
"BERTnesia: Investigating the capture and forgetting of knowledge in BERT"):

* ``lens``: the model's own head on the layer's hidden state (the logit lens; a pre-norm stack's final norm first);
* ``trained``: a fresh copy of the LM head per layer trained on the frozen layer with the pretraining objective
  (:func:`train_layer_heads`), BERTnesia's probe.

The report also gives the share of probes answered at an intermediate layer but not at the last one (BERTnesia's
"forgotten" knowledge).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.lm import LanguageModel, Query

PROBE_KEYS = ("relation", "template", "sub_label", "obj_label")


def precision_at(ranks: Sequence[int], k: int) -> float:
    """Share of 1-based ``ranks`` that are <= k."""
    return float(np.mean(np.asarray(ranks) <= k)) if len(ranks) else float("nan")


def mean_reciprocal_rank(ranks: Sequence[int]) -> float:
    return float(np.mean(1.0 / np.asarray(ranks, dtype=float))) if len(ranks) else float("nan")


def macro_scores(ranks: Sequence[int], relations: Sequence[str]) -> dict[str, float]:
    """P@1, P@10 and MRR per relation, then averaged over relations."""
    groups: dict[str, list[int]] = defaultdict(list)
    for rank, rel in zip(ranks, relations):
        groups[rel].append(rank)
    per = [(precision_at(r, 1), precision_at(r, 10), mean_reciprocal_rank(r)) for r in groups.values()]
    if not per:
        return {"p@1": float("nan"), "p@10": float("nan"), "mrr": float("nan")}
    p1, p10, mrr = (float(np.mean(col)) for col in zip(*per))
    return {"p@1": p1, "p@10": p10, "mrr": mrr}


def check_probes(rows: Sequence[dict]) -> None:
    if not rows:
        raise ConfigError("probe: no probes to ask (the probe file or world split is empty)")
    for i, row in enumerate(rows):
        missing = [k for k in PROBE_KEYS if k not in row]
        if missing:
            raise ConfigError(f"probe {i}: missing key(s) {', '.join(missing)}; each probe needs {', '.join(PROBE_KEYS)}")
        if row["template"].count("[Y]") != 1 or "[X]" not in row["template"]:
            raise ConfigError(f"probe {i}: template {row['template']!r} needs one [Y] (object) and an [X] (subject)")


def probe_queries(lm: LanguageModel, rows: Sequence[dict], first_token: bool = False) -> tuple[list[Query], list[int]]:
    """Queries for the probes whose object is one token (LAMA's restriction), or with ``first_token`` every probe,
    a multi-token object ranked by its first token (for a causal LM: templates ending in ``[Y]``, maybe with final
    punctuation); the indices of the rows kept."""
    check_probes(rows)
    queries, kept = [], []
    for i, row in enumerate(rows):
        before, after = row["template"].split("[Y]")
        if lm.causal and after.strip(" .!?"):
            continue
        prefix = before.replace("[X]", row["sub_label"])
        suffix = after.replace("[X]", row["sub_label"])
        query = lm.query(prefix, row["obj_label"], suffix)
        if len(query.answer) == 1 or (first_token and query.answer):
            queries.append(query)
            kept.append(i)
    return queries, kept


@dataclass
class ProbeReport:
    """Ranks ``[layers + 1, probes]`` (row 0 the embeddings) and the macro scores per layer."""

    reader: str
    ranks: np.ndarray
    relations: list[str]
    rows: list[dict]
    skipped: int
    objects: str = "one-token"
    """``one-token``: probes with a one-token object only (LAMA); ``first-token``: every probe, by its first token."""
    layers: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        final = len(self.ranks) == 1  # a reader of the answer logits only: its one row is the final layer
        self.layers = [{"layer": "final" if final else i, **macro_scores(r, self.relations)}
                       for i, r in enumerate(self.ranks)]

    @property
    def last(self) -> dict:
        return self.layers[-1]

    def forgotten(self) -> float:
        """Share of probes ranked first at some intermediate layer (1..L-1) but not at the last layer."""
        if self.ranks.shape[0] < 3:
            return 0.0
        inner = (self.ranks[1:-1] == 1).any(0)
        return float(np.mean(inner & (self.ranks[-1] != 1)))

    def by(self, key: str) -> dict[str, dict]:
        """Last-layer scores grouped by a probe field (``relation``, ``mentions``)."""
        groups: dict[str, list[int]] = defaultdict(list)
        for i, row in enumerate(self.rows):
            groups[str(row.get(key))].append(i)
        return {g: {"probes": len(ix), **macro_scores(self.ranks[-1][ix], [self.relations[i] for i in ix])}
                for g, ix in sorted(groups.items())}

    def summary(self) -> dict:
        return {"reader": self.reader, "objects": self.objects, "probes": len(self.rows),
                "skipped_multi_token": self.skipped,
                "layers": self.layers, "forgotten": self.forgotten(), "by_relation": self.by("relation"),
                "by_mentions": self.by("mentions") if any("mentions" in r for r in self.rows) else None}


def _rank(logits: Tensor, answers: Tensor) -> Tensor:
    gold = logits.gather(1, answers[:, None])
    return (logits > gold).sum(1) + 1


@torch.no_grad()
def probe(lm: LanguageModel, rows: Sequence[dict], heads: nn.ModuleList | None = None, batch_size: int = 64,
          first_token: bool = False) -> ProbeReport:
    """Rank each probe's object at every layer, with the model's own head (``heads=None``) or trained per-layer
    heads (:func:`train_layer_heads`); ``first_token`` keeps multi-token objects, ranked by their first token."""
    queries, kept = probe_queries(lm, rows, first_token)
    if not queries:
        raise ConfigError(f"probe: none of the {len(rows)} probes has a one-token object under this tokenizer "
                          "(and, for a causal LM, a template ending in [Y]); --objects first-token ranks the first "
                          "token of longer ones")
    layerwise = getattr(lm, "layerwise", True)
    if heads is not None and not layerwise:
        raise ConfigError(f"probe: per-layer heads (--reader trained) read one stack's layers; '{lm.name}' is an "
                          "encoder-decoder or XLNet model: use --reader lens (its own head at the answer slot)")
    ranks = []
    for start in range(0, len(queries), batch_size):
        chunk = queries[start: start + batch_size]
        if not layerwise:  # the answer logits of the last layer only (plm_lightning.knowledge.cloze)
            answers = torch.tensor([q.answer[0] for q in chunk], device=lm.device)
            ranks.append(_rank(lm.answer_logits_of(chunk).float(), answers)[None])
            continue
        ids, mask, positions = lm.batch(chunk)
        hidden = lm.hidden_states(ids, mask)
        rows_ = torch.arange(len(chunk), device=ids.device)
        answers = torch.tensor([q.answer[0] for q in chunk], device=ids.device)
        per_layer = []
        for layer, h in enumerate(hidden):
            at = h[rows_, positions]
            logits = heads[layer](at) if heads is not None else lm.logits(at, layer)
            per_layer.append(_rank(logits.float(), answers))
        ranks.append(torch.stack(per_layer))
    kept_rows = [dict(rows[i]) for i in kept]
    return ProbeReport("trained" if heads is not None else "lens", torch.cat(ranks, 1).cpu().numpy(),
                       [r["relation"] for r in kept_rows], kept_rows, len(rows) - len(kept),
                       "first-token" if first_token else "one-token")


def _layer_head(lm: LanguageModel) -> nn.Module:
    """A trainable copy of the model's LM head (untied), the final norm in front for a pre-norm stack."""
    head = copy.deepcopy(lm.module.lm_head)
    head.weight = nn.Parameter(lm.module.lm_head.weight.detach().clone())
    norm = lm.backbone.final_norm
    return nn.Sequential(copy.deepcopy(norm), head) if norm is not None else head


def train_layer_heads(lm: LanguageModel, texts: Sequence[str], steps: int = 300, batch_size: int = 32,
                      learning_rate: float = 1e-3, mask_prob: float = 0.15, seed: int = 0,
                      progress: Callable[[int], None] | None = None) -> nn.ModuleList:
    """BERTnesia's probe: one LM head per layer (embeddings included), trained on the frozen model's hidden states
    with the pretraining objective (next token for a causal LM; for a masked LM, ``mask_prob`` of the tokens
    replaced by the mask token and predicted). Heads start from the model's own head."""
    if steps < 1:
        raise ConfigError(f"probe: --head-steps={steps} must be >= 1")
    encoded = [ids for ids in lm.tokenizer.encode_batch(list(texts)) if len(ids) > 1]
    if not encoded:
        raise ConfigError("probe: no text to train the layer heads on")
    gen = torch.Generator().manual_seed(seed)
    heads = nn.ModuleList(_layer_head(lm) for _ in range(lm.num_layers + 1)).to(lm.device)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=learning_rate, weight_decay=0.0)
    special = torch.tensor(sorted(lm.tokenizer.ids.values()))
    for step in range(steps):
        pick = torch.randint(len(encoded), (batch_size,), generator=gen).tolist()
        queries = [Query(tuple(_wrap(lm, encoded[i][:126])), 0, ()) for i in pick]
        ids, mask, _ = lm.batch(queries)
        if lm.causal:
            inputs, labels = ids[:, :-1], ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            mask = mask[:, :-1]
        else:
            chosen = (torch.rand(ids.shape, generator=gen) < mask_prob).to(ids.device) & (mask == 1)
            chosen &= ~torch.isin(ids, special.to(ids.device))
            inputs, labels = ids.masked_fill(chosen, lm.tokenizer.ids["mask"]), ids.masked_fill(~chosen, -100)
        with torch.no_grad():
            hidden = [h.detach() for h in lm.hidden_states(inputs, mask)]
        keep = labels != -100
        loss = sum(nn.functional.cross_entropy(head(h[keep]).float(), labels[keep]) for head, h in zip(heads, hidden))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if progress is not None:
            progress(step)
    return heads.eval()


def _wrap(lm: LanguageModel, ids: list[int]) -> list[int]:
    ids_ = lm.tokenizer.ids
    return [ids_["eos"], *ids] if lm.causal else [ids_["cls"], *ids, ids_["sep"]]
