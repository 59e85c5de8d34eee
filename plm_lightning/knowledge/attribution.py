"""Fact tracing: which training documents taught the model a fact (Akyurek et al. 2022, "Towards Tracing Knowledge in
Language Models Back to the Training Data").

Three rankers of training documents for a query (a fact stated as its prompt plus the object):

* ``tracin``: TracIn (Pruthi et al. 2020, eq. 3) over saved checkpoints, with unit-normalised gradients (Akyurek et
  al.'s finding: cosine beats raw dot products, which favour documents with large gradients): the score of document
  z for query q is ``sum_t cos(grad L(z; theta_t), grad L(q; theta_t))``; the query's loss is on the object only.
* ``embedding``: cosine similarity of the mean-pooled last hidden states of query and document.
* ``bm25``: Okapi BM25 on lower-cased words (``rank_bm25``), the lexical baseline.

Metrics against the ground-truth documents (those that state the fact): MRR of the first relevant document and
recall@k (share of the relevant documents in the top k), on the whole corpus or in the reranking setup, where each
query ranks only its relevant documents mixed with ``distractors`` random others.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.editing import answer_log_probs
from plm_lightning.knowledge.lm import LanguageModel, Query
from plm_lightning.nn.stack_inputs import StackInputs

METHODS = ("tracin", "embedding", "bm25")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bm25_scores(documents: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """``[queries, documents]`` BM25 scores (Robertson & Zaragoza 2009; rank_bm25's Okapi, k1 = 1.5, b = 0.75)."""
    from rank_bm25 import BM25Okapi

    index = BM25Okapi([_words(d) for d in documents])
    return np.stack([index.get_scores(_words(q)) for q in queries])


@torch.no_grad()
def _pooled(lm: LanguageModel, texts: Sequence[str], batch_size: int = 32) -> Tensor:
    out = []
    for start in range(0, len(texts), batch_size):
        queries = [lm.query(t) for t in texts[start: start + batch_size]]
        ids, mask, _ = lm.batch(queries)
        hidden = lm.backbone(ids, StackInputs(attention_mask=mask)).last_hidden_state
        out.append((hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
    return torch.cat(out)


def embedding_scores(lm: LanguageModel, documents: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    d = torch.nn.functional.normalize(_pooled(lm, documents).float(), dim=-1)
    q = torch.nn.functional.normalize(_pooled(lm, queries).float(), dim=-1)
    return (q @ d.T).cpu().numpy()


def _flat_grad(lm: LanguageModel, loss: Tensor, params: list[torch.nn.Parameter]) -> Tensor:
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    flat = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])
    return torch.nn.functional.normalize(flat.float(), dim=0)


def _document_loss(lm: LanguageModel, text: str) -> Tensor:
    """The LM loss of a document under its own objective (next token; masked LMs: every token masked in turn is too
    costly, so each token is predicted from its unmasked context through the MLM head, a pseudo-likelihood proxy)."""
    query = lm.query(text)
    ids = torch.tensor([query.ids], device=lm.device)
    hidden = lm.backbone(ids).last_hidden_state[0]
    logits = lm.logits(hidden).float()
    if lm.causal:
        return torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
    return torch.nn.functional.cross_entropy(logits[1:-1], ids[0, 1:-1])


def tracin_scores(lms: Sequence[LanguageModel], documents: Sequence[str], facts: Sequence[tuple[str, str]]
                  ) -> np.ndarray:
    """``[facts, documents]`` TracIn-cos summed over the checkpoints ``lms``; a fact is (prompt, object)."""
    if not lms:
        raise ConfigError("TracIn needs at least one checkpoint")
    total = np.zeros((len(facts), len(documents)))
    for lm in lms:
        params = [p for p in lm.module.parameters() if p.requires_grad]
        fact_grads = []
        for prompt, obj in facts:
            query: Query = lm.query(prompt)
            answer = list(lm.query(prompt, obj).answer)
            fact_grads.append(_flat_grad(lm, -answer_log_probs(lm, [query], answer)[0], params))
        q = torch.stack(fact_grads)
        for j, doc in enumerate(documents):
            total[:, j] += (q @ _flat_grad(lm, _document_loss(lm, doc), params)).cpu().numpy()
    return total


@dataclass
class Ranking:
    """Scores ``[queries, documents]`` and the relevant document ids of each query."""

    scores: np.ndarray
    relevant: list[set[int]]

    def ranks(self, candidates: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Per query, document ids best first (within its ``candidates`` when given)."""
        out = []
        for i, row in enumerate(self.scores):
            ids = np.arange(len(row)) if candidates is None else candidates[i]
            out.append(ids[np.argsort(-row[ids], kind="stable")])
        return out

    def metrics(self, candidates: list[np.ndarray] | None = None, ks: Sequence[int] = (1, 10, 25)) -> dict:
        return retrieval_metrics(self.ranks(candidates), self.relevant, ks)


def retrieval_metrics(rankings: Sequence[Sequence[int]], relevant: Sequence[set[int]], ks: Sequence[int] = (1, 10, 25)
                      ) -> dict:
    """MRR (1 / rank of the first relevant document, 0 if none) and recall@k averaged over queries."""
    if not rankings:
        raise ConfigError("retrieval metrics: no queries")
    rr, recall = [], {k: [] for k in ks}
    for ranking, gold in zip(rankings, relevant):
        hits = [i for i, d in enumerate(ranking) if int(d) in gold]
        rr.append(1.0 / (hits[0] + 1) if hits else 0.0)
        for k in ks:
            recall[k].append(len({int(d) for d in ranking[:k]} & gold) / max(1, len(gold)))
    return {"mrr": float(np.mean(rr)), **{f"recall@{k}": float(np.mean(v)) for k, v in recall.items()}}


def rerank_candidates(relevant: Sequence[set[int]], num_documents: int, distractors: int = 100, seed: int = 0
                      ) -> list[np.ndarray]:
    """Each query's relevant documents plus ``distractors`` random other documents."""
    rng = np.random.default_rng(seed)
    out = []
    for gold in relevant:
        others = np.setdiff1d(np.arange(num_documents), np.fromiter(gold, dtype=int))
        pick = rng.choice(others, size=min(distractors, len(others)), replace=False)
        out.append(np.concatenate([np.fromiter(gold, dtype=int), pick]))
    return out


def random_metrics(relevant: Sequence[set[int]], num_documents: int, ks: Sequence[int] = (1, 10, 25), seed: int = 0,
                   candidates: list[np.ndarray] | None = None) -> dict:
    """The same metrics for a random ranking (the floor every method must beat)."""
    rng = np.random.default_rng(seed)
    scores = rng.random((len(relevant), num_documents))
    return Ranking(scores, list(relevant)).metrics(candidates, ks)


def trace_world(lms: Sequence[LanguageModel], world, methods: Sequence[str], facts: int = 50,  # noqa: ANN001
                alias_facts: int = 20, distractors: int = 100, seed: int = 0) -> list[dict]:
    """MRR and recall@{1,10,25} of each method (and a random ranking) for ``facts`` ordinary and ``alias_facts``
    alias-only facts of ``world``, on the full corpus and in the reranking setup."""
    from plm_lightning.corpus.world import prompt_of

    documents = world.texts()
    gold = world.fact_documents()
    relations = world.relations
    rng = np.random.default_rng(seed)
    groups = {"named": [f for f in world.facts if not f.alias_only], "alias": [f for f in world.facts if f.alias_only]}
    rows = []
    for name, pool in groups.items():
        count = facts if name == "named" else alias_facts
        if count <= 0 or not pool:
            continue
        chosen = [pool[i] for i in sorted(rng.choice(len(pool), size=min(count, len(pool)), replace=False))]
        prompts = [prompt_of(relations[f.relation].templates[0]).format(f.subject) for f in chosen]
        relevant = [set(gold[f.id]) for f in chosen]
        candidates = rerank_candidates(relevant, len(documents), distractors, seed)
        scores = {}
        for method in methods:
            if method == "bm25":
                scores[method] = bm25_scores(documents, [f"{p} {f.object}" for p, f in zip(prompts, chosen)])
            elif method == "embedding":
                scores[method] = embedding_scores(lms[-1], documents, [f"{p} {f.object}" for p, f in zip(prompts, chosen)])
            else:
                scores[method] = tracin_scores(lms, documents, [(p, f.object) for p, f in zip(prompts, chosen)])
        for setting, cand in (("full", None), ("rerank", candidates)):
            for method, s in scores.items():
                rows.append({"facts": name, "setting": setting, "method": method, **Ranking(s, relevant).metrics(cand)})
            rows.append({"facts": name, "setting": setting, "method": "random",
                         **random_metrics(relevant, len(documents), seed=seed, candidates=cand)})
    return rows
