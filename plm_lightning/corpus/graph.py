"""A knowledge graph as triples, and entity linking of text against it: ERNIE's knowledge source (Zhang et al. 2019,
"ERNIE: Enhanced Language Representation with Informative Entities", sec. 3.1, 4.1: Wikidata triples; the entity
mentions of the text are identified and aligned to the entities of the graph).

* A graph is read from a TSV of ``head<TAB>relation<TAB>tail`` lines (``#`` comments and blank lines skipped), with an
  optional TSV of ``entity<TAB>alias`` lines naming other surface forms of an entity; the synthetic knowledge world
  gives its facts and aliases directly (:func:`graph_from_world`).
* Linking is exact string matching of entity names and aliases at word boundaries, the longest match first (ERNIE
  used TAGME; an exact/alias matcher is its offline counterpart and is exact on the world's text).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from plm_lightning.errors import ConfigError


class FactSource(Protocol):
    """What a knowledge graph is built from (``corpus.world.World`` is one): facts naming a subject, a relation id
    and an object, the relations by id, and aliases of the subjects."""

    relations: Any
    facts: Any
    aliases: dict[str, str]


@dataclass(frozen=True)
class KnowledgeGraph:
    """Entities and relations by id, ``triples`` ``[N, 3]`` (head, relation, tail ids) and the surface forms that
    name each entity (its own name included)."""

    entities: tuple[str, ...]
    relations: tuple[str, ...]
    triples: np.ndarray
    surfaces: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_triples(cls, triples: list[tuple[str, str, str]], aliases: dict[str, str] | None = None
                     ) -> KnowledgeGraph:
        """Ids in order of first appearance; ``aliases`` maps an alias to an entity named in ``triples``."""
        entities: dict[str, int] = {}
        relations: dict[str, int] = {}
        rows = [(entities.setdefault(h, len(entities)), relations.setdefault(r, len(relations)),
                 entities.setdefault(t, len(entities))) for h, r, t in triples]
        surfaces = dict(entities)
        for alias, entity in (aliases or {}).items():
            surfaces.setdefault(alias, entities[entity])
        return cls(tuple(entities), tuple(relations), np.asarray(rows, dtype=np.int64).reshape(-1, 3), surfaces)

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    def fingerprint(self) -> str:
        """Changes with the triples and the surface forms (keys the TransE and linking caches)."""
        digest = hashlib.sha256()
        for part in (self.entities, self.relations, sorted(self.surfaces.items())):
            digest.update(repr(part).encode())
        digest.update(self.triples.tobytes())
        return digest.hexdigest()[:16]

    def save(self, triples_file: str | Path, aliases_file: str | Path | None = None) -> None:
        """Write the TSV files :func:`load_graph` reads."""
        Path(triples_file).write_text("".join(f"{self.entities[h]}\t{self.relations[r]}\t{self.entities[t]}\n"
                                              for h, r, t in self.triples.tolist()), encoding="utf-8")
        if aliases_file is not None:
            Path(aliases_file).write_text("".join(f"{self.entities[e]}\t{s}\n" for s, e in self.surfaces.items()
                                                  if s != self.entities[e]), encoding="utf-8")


def _tsv_rows(path: str | Path, key: str, columns: int, layout: str) -> list[tuple[str, ...]]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{key}: '{path}' does not exist; give a TSV file of {layout} lines")
    rows = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) != columns or not all(fields):
            raise ConfigError(f"{key}: line {number} of '{path}' has {len(fields)} tab-separated field"
                              f"{'s' if len(fields) != 1 else ''}{' (one empty)' if len(fields) == columns else ''};"
                              f" each line must be {layout}")
        rows.append(tuple(fields))
    if not rows:
        raise ConfigError(f"{key}: '{path}' has no {layout} lines")
    return rows


def load_graph(triples_file: str | Path, aliases_file: str | Path | None = None, key: str = "data.graph"
               ) -> KnowledgeGraph:
    """The graph of a triples TSV (and an aliases TSV); every malformed line is a one-line error naming it."""
    triples = _tsv_rows(triples_file, key, 3, "head<TAB>relation<TAB>tail")
    aliases: dict[str, str] = {}
    if aliases_file is not None:
        named = {name for h, _, t in triples for name in (h, t)}
        for entity, alias in _tsv_rows(aliases_file, f"{key}_aliases", 2, "entity<TAB>alias"):
            if entity not in named:
                raise ConfigError(f"{key}_aliases: '{entity}' in '{aliases_file}' is not an entity of the graph "
                                  f"'{triples_file}'")
            aliases[alias] = entity
    return KnowledgeGraph.from_triples(triples, aliases)  # type: ignore[arg-type]


def graph_from_world(world: FactSource) -> KnowledgeGraph:
    """The world's facts as (subject, relation name, object) triples; each alias (``the Crimson Mason``) names its
    subject without the article, as it appears at the start of a sentence too."""
    relations = world.relations
    triples = [(f.subject, relations[f.relation].name, f.object) for f in world.facts]
    aliases = {alias.removeprefix("the "): subject for subject, alias in world.aliases.items()}
    return KnowledgeGraph.from_triples(triples, aliases)


@dataclass(frozen=True)
class Mention:
    """``text[start:end]`` names entity ``entity``."""

    start: int
    end: int
    entity: int


class EntityLinker:
    """Exact/alias matching of a graph's surface forms in text: one regular expression of every surface form (longer
    forms first, so "New York City" wins over "New York"), bounded by non-word characters."""

    def __init__(self, graph: KnowledgeGraph) -> None:
        self.graph = graph
        forms = sorted(graph.surfaces, key=lambda s: (-len(s), s))
        self.pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, forms)) + r")(?!\w)") if forms else None

    def link(self, text: str) -> list[Mention]:
        """The non-overlapping mentions of ``text``, left to right."""
        if self.pattern is None:
            return []
        return [Mention(m.start(), m.end(), self.graph.surfaces[m.group()]) for m in self.pattern.finditer(text)]

    def align(self, offsets: list[tuple[int, int]], mentions: list[Mention]) -> np.ndarray:
        """Per token (its ``(start, end)`` character offsets), the entity whose mention starts in it, else -1: ERNIE
        aligns an entity with the first token of its mention."""
        aligned = np.full(len(offsets), -1, dtype=np.int64)
        starts = np.asarray([s for s, _ in offsets], dtype=np.int64)
        ends = np.asarray([e for _, e in offsets], dtype=np.int64)
        for mention in mentions:
            inside = np.flatnonzero((ends > mention.start) & (starts < mention.end))
            if inside.size:
                aligned[inside[0]] = mention.entity
        return aligned
