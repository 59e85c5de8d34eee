"""TransE entity embeddings (Bordes et al. 2013, "Translating Embeddings for Modeling Multi-relational Data"): a
relation is a translation, ``e_h + r ~ e_t``, learned with the margin ranking loss of sec. 2 (eq. 1)

    L = sum_{(h,r,t)} sum_{(h',r,t')} [gamma + d(e_h + r, e_t) - d(e_h' + r, e_t')]_+

over corrupted triples that replace the head or the tail (not both) by a random entity, with SGD, and every entity
embedding renormalised to unit L2 norm at each step (Algorithm 1). ERNIE (Zhang et al. 2019, sec. 4.1) feeds such
embeddings, trained on the knowledge graph and then fixed, to its knowledgeable encoder.

Evaluation is the paper's filtered link prediction (sec. 4.2): each triple's tail (and head) is ranked against every
entity, the candidates that form another known triple removed; mean rank, MRR and hits@k.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from plm_lightning.corpus.graph import KnowledgeGraph
from plm_lightning.errors import ConfigError
from plm_lightning.files import atomic_write, default_cache_dir


@dataclass(frozen=True)
class TransEConfig:
    """Defaults: Bordes et al.'s FB15k setting (margin 1, L1 distance, SGD at 0.01) at ERNIE's 100 dimensions."""

    dim: int = 100
    margin: float = 1.0
    norm: int = 1
    learning_rate: float = 0.01
    epochs: int = 1000
    batch_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dim < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ConfigError(f"TransE: dim={self.dim}, epochs={self.epochs} and batch_size={self.batch_size} must "
                              "be positive")
        if self.norm not in (1, 2):
            raise ConfigError(f"TransE: norm={self.norm} is not 1 (L1) or 2 (L2)")
        if self.margin <= 0 or self.learning_rate <= 0:
            raise ConfigError(f"TransE: margin={self.margin} and learning_rate={self.learning_rate} must be > 0")


class TransE(nn.Module):
    """Entity and relation embeddings with the dissimilarity ``d(h + r, t) = ||e_h + r - e_t||_p``."""

    def __init__(self, num_entities: int, num_relations: int, cfg: TransEConfig = TransEConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        bound = 6 / math.sqrt(cfg.dim)  # Algorithm 1's initialisation
        generator = torch.Generator().manual_seed(cfg.seed)
        self.entities = nn.Parameter(torch.empty(num_entities, cfg.dim).uniform_(-bound, bound, generator=generator))
        relations = torch.empty(num_relations, cfg.dim).uniform_(-bound, bound, generator=generator)
        self.relations = nn.Parameter(relations / relations.norm(dim=1, keepdim=True))

    def distance(self, heads: Tensor, relations: Tensor, tails: Tensor) -> Tensor:
        """``d`` for index tensors of one shape (broadcast against each other)."""
        return (self.entities[heads] + self.relations[relations] - self.entities[tails]).norm(p=self.cfg.norm, dim=-1)

    @torch.no_grad()
    def normalise_entities(self) -> None:
        self.entities.div_(self.entities.norm(dim=1, keepdim=True).clamp_min(1e-12))


def corrupt(triples: Tensor, num_entities: int, generator: torch.Generator) -> Tensor:
    """Each triple with its head or its tail (probability 1/2 each) replaced by a uniformly drawn entity."""
    replaced = torch.randint(num_entities, (len(triples),), generator=generator)
    side = torch.rand(len(triples), generator=generator) < 0.5
    out = triples.clone()
    out[side, 0] = replaced[side]
    out[~side, 2] = replaced[~side]
    return out


def train_transe(graph: KnowledgeGraph, cfg: TransEConfig = TransEConfig(),
                 progress: Callable[[int, float], None] | None = None) -> TransE:
    """TransE trained on every triple of ``graph`` (Algorithm 1); ``progress(epoch, mean loss)`` after each epoch."""
    if len(graph.triples) == 0:
        raise ConfigError("TransE: the knowledge graph has no triples to train on")
    model = TransE(graph.num_entities, len(graph.relations), cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
    triples = torch.from_numpy(graph.triples)
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    for epoch in range(cfg.epochs):
        order = torch.randperm(len(triples), generator=generator)
        total = 0.0
        for start in range(0, len(triples), cfg.batch_size):
            model.normalise_entities()
            batch = triples[order[start: start + cfg.batch_size]]
            negative = corrupt(batch, graph.num_entities, generator)
            loss = torch.relu(cfg.margin + model.distance(*batch.T) - model.distance(*negative.T)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        if progress is not None:
            progress(epoch, total / len(triples))
    model.normalise_entities()
    return model


@torch.no_grad()
def link_prediction(model: TransE, graph: KnowledgeGraph, triples: np.ndarray | None = None,
                    ks: tuple[int, ...] = (1, 10)) -> dict[str, float]:
    """Filtered ranks (1-based) of the true tail given (h, r, ?) and of the true head given (?, r, t) over
    ``triples`` (default: the graph's own): mean rank, MRR and hits@k, over both directions."""
    triples = graph.triples if triples is None else np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    known = {tuple(t) for t in graph.triples.tolist()}
    everyone = torch.arange(graph.num_entities)
    ranks = []
    for h, r, t in triples.tolist():
        for side, true in ((2, t), (0, h)):
            heads = everyone if side == 0 else torch.full_like(everyone, h)
            tails = everyone if side == 2 else torch.full_like(everyone, t)
            scores = model.distance(heads, torch.full_like(everyone, r), tails)
            others = [e for e in range(graph.num_entities) if e != true
                      and ((h, r, e) if side == 2 else (e, r, t)) in known]
            scores[others] = float("inf")  # the filtered setting
            ranks.append(1 + int((scores < scores[true]).sum()))
    ranks_array = np.asarray(ranks, dtype=np.float64)
    out = {"mean_rank": float(ranks_array.mean()), "mrr": float((1 / ranks_array).mean())}
    out.update({f"hits@{k}": float((ranks_array <= k).mean()) for k in ks})
    return out


def entity_embeddings(graph: KnowledgeGraph, cfg: TransEConfig = TransEConfig(), cache_dir: str | Path | None = None,
                      progress: Callable[[int, float], None] | None = None) -> Tensor:
    """``[entities, dim]`` TransE embeddings of ``graph``, trained once and cached on disk by the graph's
    fingerprint and ``cfg``."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:12]
    file = Path(cache_dir or default_cache_dir()) / "transe" / f"{graph.fingerprint()}-{key}.pt"
    if file.is_file():
        return torch.load(file, weights_only=True)
    table = train_transe(graph, cfg, progress).entities.detach().clone()
    atomic_write(file, lambda tmp: torch.save(table, tmp))
    return table
