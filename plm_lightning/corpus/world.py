"""A fictional world with known facts: the ground truth that probing, knowledge neurons, fact tracing and editing
are measured against (a model trained on it can only know what the generator wrote).

* Entities: people (the subjects, "Firstname Lastname" made of invented syllables; first names shared, so only the
  last name tells subjects apart) and, per object type, a pool of
  invented single-word names (cities, countries, languages, companies, instruments).
* Relations: Wikidata-like properties, each with several templates that end in the object (so causal LMs can be
  probed, as in LAMA's GPT setting) and held-out paraphrase templates no document uses (CounterFact's paraphrase
  prompts, Meng et al. 2022, sec. 3).
* Facts: every subject has one object per relation; each fact falls in a frequency bucket (how many documents state
  it), so effects can be read per bucket (Kandpal et al. 2023, "Large language models struggle to learn long-tail
  knowledge").
* Documents: a subject's documents state its facts with random training templates; each records the ids of the facts
  it contains (the ground truth of training-data attribution, Akyurek et al. 2022, "Towards Tracing Knowledge in
  Language Models Back to the Training Data"). A share of the facts is stated only in alias documents, where the
  subject goes by an alias ("the Silver Heron") introduced by a definition document, so the query's words are
  absent.

Exports: LAMA-style probes (Petroni et al. 2019: ``relation``, ``template``, ``sub_label``, ``obj_label``) and
CounterFact-style edit requests (``prompt`` with ``{}`` for the subject, ``subject``, ``target_new``, ``target_true``,
paraphrase, neighbourhood and attribute prompts).

``data.source: world`` (or ``world:seed=3,subjects=200,mentions=2/4/8``) trains on its documents.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path

from plm_lightning.errors import ConfigError

WORLD_PREFIX = "world"
SYLLABLES = ("ba", "dor", "ka", "lem", "vin", "tar", "sol", "mu", "ren", "qua", "zel", "fi", "gor", "hal", "ix",
             "jun", "kes", "lor", "mav", "nel", "ob", "pra", "ril", "sen", "tov", "ul", "vex", "wen", "yar", "zo")
ALIAS_ADJECTIVES = ("Silver", "Iron", "Quiet", "Red", "Golden", "Hidden", "Northern", "Patient", "Crimson", "Pale",
                    "Wandering", "Bold", "Gentle", "Lonely", "Swift", "Grey", "Laughing", "Broken", "Bright", "Old")
ALIAS_NOUNS = ("Heron", "Baron", "Fox", "Lantern", "Scholar", "Falcon", "Miller", "Captain", "Weaver", "Harbor",
               "Owl", "Sparrow", "Judge", "Pilgrim", "Tinker", "Raven", "Mason", "Archer", "Sailor", "Widow")


@dataclass(frozen=True)
class Relation:
    """A property with the templates documents use and held-out paraphrases; ``{s}`` subject, ``{o}`` object."""

    id: str
    name: str
    object_type: str
    templates: tuple[str, ...]
    paraphrases: tuple[str, ...]


RELATIONS = (
    Relation("P19", "place_of_birth", "city",
             ("{s} was born in {o}.", "The birthplace of {s} is {o}.", "{s} is a native of {o}."),
             ("{s} originally comes from {o}.", "The hometown of {s} is {o}.")),
    Relation("P27", "citizenship", "country",
             ("{s} is a citizen of {o}.", "{s} holds citizenship of {o}.", "The country of {s} is {o}."),
             ("{s} carries a passport issued by {o}.", "{s} is a national of {o}.")),
    Relation("P1412", "language", "language",
             ("{s} speaks {o}.", "The mother tongue of {s} is {o}.", "{s} writes and speaks {o}."),
             ("{s} grew up speaking {o}.", "The first language of {s} is {o}.")),
    Relation("P108", "employer", "company",
             ("{s} works for {o}.", "{s} is employed by {o}.", "The employer of {s} is {o}."),
             ("{s} draws a salary from {o}.", "{s} has a job at {o}.")),
    Relation("P1303", "instrument", "instrument",
             ("{s} plays the {o}.", "The instrument of {s} is the {o}.", "{s} performs on the {o}."),
             ("{s} practises every day on the {o}.", "{s} is a musician who plays the {o}.")),
)
ALIAS_TEMPLATE = "{s} is also known as {a}."


@dataclass(frozen=True)
class WorldConfig:
    """Size and seed of a world; ``mentions`` are the frequency buckets (documents stating a fact)."""

    seed: int = 0
    subjects: int = 100
    objects: int = 12
    mentions: tuple[int, ...] = (2, 4, 8)
    alias_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.subjects < 2 or self.objects < 2:
            raise ConfigError(f"world: subjects={self.subjects} and objects={self.objects} must both be >= 2")
        if not self.mentions or min(self.mentions) < 1:
            raise ConfigError(f"world: mentions={self.mentions} must be positive document counts, e.g. 2/4/8")
        if not 0.0 <= self.alias_fraction < 1.0:
            raise ConfigError(f"world: alias_fraction={self.alias_fraction} must lie in [0, 1)")

    @classmethod
    def parse(cls, spec: str) -> WorldConfig:
        """``world`` or ``world:seed=3,subjects=200,objects=12,mentions=2/4/8,alias_fraction=0.1``."""
        head, _, rest = spec.partition(":")
        if head != WORLD_PREFIX:
            raise ConfigError(f"'{spec}' is not a world spec (world or world:key=value,...)")
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or key not in kinds:
                raise ConfigError(f"world spec '{spec}': '{item}' is not key=value with a key among {', '.join(kinds)}")
            try:
                values[key] = (tuple(int(v) for v in value.split("/")) if key == "mentions"
                               else float(value) if key == "alias_fraction" else int(value))
            except ValueError as err:
                raise ConfigError(f"world spec '{spec}': {key}={value!r} is not a number") from err
        return cls(**values)

    @property
    def spec(self) -> str:
        return (f"world:seed={self.seed},subjects={self.subjects},objects={self.objects},"
                f"mentions={'/'.join(map(str, self.mentions))},alias_fraction={self.alias_fraction}")


@dataclass(frozen=True)
class Fact:
    id: int
    subject: str
    relation: str
    object: str
    mentions: int
    alias_only: bool


@dataclass(frozen=True)
class Document:
    id: int
    text: str
    fact_ids: tuple[int, ...]
    alias: bool = False


@dataclass
class World:
    """Entities, facts and the documents that state them; build with :func:`build_world`."""

    config: WorldConfig
    objects: dict[str, tuple[str, ...]]
    aliases: dict[str, str]
    facts: list[Fact]
    documents: list[Document] = field(default_factory=list)

    @property
    def relations(self) -> dict[str, Relation]:
        return {r.id: r for r in RELATIONS}

    @property
    def subjects(self) -> list[str]:
        return sorted({f.subject for f in self.facts}, key=lambda s: next(f.id for f in self.facts if f.subject == s))

    def texts(self) -> list[str]:
        return [d.text for d in self.documents]

    def fact_documents(self) -> dict[int, list[int]]:
        """Fact id -> ids of the documents that state it (the attribution ground truth)."""
        out: dict[int, list[int]] = {f.id: [] for f in self.facts}
        for doc in self.documents:
            for fid in doc.fact_ids:
                out[fid].append(doc.id)
        return out

    def probes(self, split: str = "train", templates: str = "canonical") -> list[dict]:
        """LAMA rows. ``split``: train (facts stated under the subject's name), alias (stated only under an alias),
        all. ``templates``: canonical (each relation's first), train (every document template) or paraphrase (the
        held-out ones)."""
        if split not in ("train", "alias", "all") or templates not in ("canonical", "train", "paraphrase"):
            raise ConfigError(f"probes: split={split!r} must be train, alias or all and templates={templates!r} "
                              "canonical, train or paraphrase")
        rows = []
        for fact in self.facts:
            if (split == "train" and fact.alias_only) or (split == "alias" and not fact.alias_only):
                continue
            rel = self.relations[fact.relation]
            chosen = {"canonical": rel.templates[:1], "train": rel.templates, "paraphrase": rel.paraphrases}[templates]
            for template in chosen:
                rows.append({"relation": rel.id, "template": template.replace("{s}", "[X]").replace("{o}", "[Y]"),
                             "sub_label": fact.subject, "obj_label": fact.object, "fact_id": fact.id,
                             "mentions": fact.mentions})
        return rows

    def edit_requests(self, count: int | None = None, seed: int = 0) -> list[dict]:
        """CounterFact-style requests for facts stated under the subject's name: a new object that other subjects hold
        for the same relation (CounterFact, Meng et al. 2022 sec. 3.1: a false but plausible object); the
        rewrite prompt is the relation's first template, paraphrase prompts its other document templates (the edit
        never sees them) and held-out paraphrase prompts the templates no document uses; neighbourhood prompts (other
        subjects whose fact has the same relation and object, which must keep it) and attribute prompts (subjects
        that hold the new object)."""
        rng = random.Random(seed)
        candidates = [f for f in self.facts if not f.alias_only]
        rng.shuffle(candidates)
        # one fact per subject first: a causal LM reads every relation of a subject from the same key at its last
        # token, so two requests on one subject in a batch conflict (MEMIT's experiments leave such pairs out)
        seen: set[str] = set()
        first = [f for f in candidates if not (f.subject in seen or seen.add(f.subject))]
        candidates = first + [f for f in candidates if f not in first]
        requests = []
        for fact in candidates[: count if count is not None else len(candidates)]:
            rel = self.relations[fact.relation]
            same = [f for f in self.facts if f.relation == fact.relation and f.subject != fact.subject
                    and not f.alias_only]
            # CounterFact's counterfactual object: one that holds for other subjects of the relation (an object the
            # model has read in this role), any other object of the type when no other subject has one
            attested = sorted({f.object for f in same} - {fact.object})
            new = rng.choice(attested or [o for o in self.objects[rel.object_type] if o != fact.object])
            neighbours = [f.subject for f in same if f.object == fact.object][:10]
            holders = [f.subject for f in same if f.object == new][:10]
            canonical = prompt_of(rel.templates[0])
            requests.append({
                "case_id": fact.id, "fact_id": fact.id, "relation": rel.id,
                "prompt": canonical, "subject": fact.subject, "target_new": new, "target_true": fact.object,
                "paraphrase_prompts": [prompt_of(t).format(fact.subject) for t in rel.templates[1:]],
                "heldout_paraphrase_prompts": [prompt_of(t).format(fact.subject) for t in rel.paraphrases],
                "neighborhood_prompts": [canonical.format(s) for s in neighbours],
                "attribute_prompts": [canonical.format(s) for s in holders],
                "generation_prompts": [f"{fact.subject} is", f"{fact.subject} and"],
            })
        return requests

    def save(self, directory: str | Path) -> dict[str, str]:
        """Write ``corpus.jsonl`` (text + fact ids), ``facts.jsonl``, ``probes.jsonl`` (LAMA, canonical templates),
        ``paraphrase_probes.jsonl``, ``counterfact.json`` and the facts as a knowledge graph (``graph.tsv``,
        ``graph_aliases.tsv``: ERNIE-THU's ``data.graph`` / ``data.graph_aliases``)."""
        from plm_lightning.corpus.graph import graph_from_world

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        files = {
            "corpus.jsonl": [asdict(d) for d in self.documents],
            "facts.jsonl": [asdict(f) for f in self.facts],
            "probes.jsonl": self.probes("all"),
            "paraphrase_probes.jsonl": self.probes("all", "paraphrase"),
        }
        for name, rows in files.items():
            (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (out / "counterfact.json").write_text(json.dumps(self.edit_requests(), indent=1), encoding="utf-8")
        (out / "world.json").write_text(json.dumps({"spec": self.config.spec}), encoding="utf-8")
        graph_from_world(self).save(out / "graph.tsv", out / "graph_aliases.tsv")
        return {name: str(out / name) for name in [*files, "counterfact.json", "world.json", "graph.tsv",
                                                   "graph_aliases.tsv"]}


def prompt_of(template: str) -> str:
    """``"{s} was born in {o}."`` -> ``"{} was born in"``: the text before the object, subject as ``{}``."""
    if not template.rstrip(".").endswith("{o}"):
        raise ConfigError(f"template {template!r} must end with its object ({{o}}) so a causal LM can be probed")
    return template[: template.index("{o}")].rstrip().replace("{s}", "{}")


def _names(rng: random.Random, count: int, syllables: tuple[int, int], taken: set[str]) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(*syllables))).capitalize()
        if name not in taken and len(name) > 3:
            taken.add(name)
            names.append(name)
    return names


@cache
def build_world(config: WorldConfig = WorldConfig()) -> World:
    """The world of ``config``: deterministic for its seed."""
    rng = random.Random(config.seed)
    taken: set[str] = set()
    types = sorted({r.object_type for r in RELATIONS})
    objects = {t: tuple(_names(rng, config.objects, (2, 3), taken)) for t in types}
    # first names are shared (a quarter as many as subjects), last names unique: only the subject's last token
    # identifies it, as in ROME's setting where the fact is recalled at the last subject token
    first, last = _names(rng, max(2, config.subjects // 4), (2, 2), taken), _names(rng, config.subjects, (2, 3), taken)
    subjects = [f"{rng.choice(first)} {b}" for b in last]
    pairs = [(a, n) for a in ALIAS_ADJECTIVES for n in ALIAS_NOUNS]
    rng.shuffle(pairs)
    facts: list[Fact] = []
    for subject in subjects:
        for rel in RELATIONS:
            facts.append(Fact(len(facts), subject, rel.id, rng.choice(objects[rel.object_type]),
                              rng.choice(config.mentions), rng.random() < config.alias_fraction))
    aliases: dict[str, str] = {}
    documents: list[Document] = []
    relations = {r.id: r for r in RELATIONS}

    def sentence(fact: Fact, name: str) -> str:
        text = rng.choice(relations[fact.relation].templates).format(s=name, o=fact.object)
        return text[0].upper() + text[1:]

    for subject in subjects:
        own = [f for f in facts if f.subject == subject]
        plain, hidden = [f for f in own if not f.alias_only], [f for f in own if f.alias_only]
        for k in range(max((f.mentions for f in plain), default=0)):
            stated = [f for f in plain if f.mentions > k]
            rng.shuffle(stated)
            documents.append(Document(len(documents), " ".join(sentence(f, subject) for f in stated),
                                      tuple(f.id for f in stated)))
        if hidden:
            adjective, noun = pairs[len(aliases) % len(pairs)]
            alias = aliases[subject] = f"the {adjective} {noun}"
            documents.append(Document(len(documents), ALIAS_TEMPLATE.format(s=subject, a=alias), (), alias=True))
            for k in range(max(f.mentions for f in hidden)):
                stated = [f for f in hidden if f.mentions > k]
                documents.append(Document(len(documents), " ".join(sentence(f, alias) for f in stated),
                                          tuple(f.id for f in stated), alias=True))
    order = list(range(len(documents)))
    rng.shuffle(order)  # documents of one subject are not adjacent in the corpus
    documents = [Document(i, documents[j].text, documents[j].fact_ids, documents[j].alias) for i, j in enumerate(order)]
    return World(config, objects, aliases, facts, documents)


def world_from_spec(spec: str) -> World:
    return build_world(WorldConfig.parse(spec))


def world_fingerprint(spec: str) -> str:
    """Changes with the world's text (so caches of tokenizers and packed blocks follow the generator's code)."""
    world = world_from_spec(spec)
    digest = hashlib.sha256("\x00".join(world.texts()).encode()).hexdigest()[:16]
    return f"{world.config.spec}-{digest}"


def is_world_spec(source: str | None) -> bool:
    return source is not None and (source == WORLD_PREFIX or source.startswith(WORLD_PREFIX + ":"))
