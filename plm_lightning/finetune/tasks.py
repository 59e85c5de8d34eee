"""Offline downstream tasks built from the embedded corpus (the Python documentation), so the fine-tuning loop runs
anywhere. Every label comes from the text's own structure, never from a random draw, and every task has fixed
train/validation/test splits (80/10/10 by a content hash of the paragraph or sentence pair):

* ``code_or_prose`` (sequence classification): is a paragraph code (every line indented, ``>>>`` or ``...``) or prose;
* ``continuation`` (sentence pair): does the second prose sentence follow the first in its document (half are a
  sentence of another document);
* ``markup_spans`` (token tagging, BIO): the documentation marks code with double quotes (``"NameError"``) and terms
  with asterisks (``*private name*``); the markup is removed and the model tags the ``CODE`` and ``TERM`` spans;
* ``cloze_spans`` (extractive QA): a sentence of a paragraph with one marked span blanked out is the question, the
  paragraph the context, the span the answer (cloze questions as in Lewis et al. 2019, "Unsupervised Question
  Answering by Cloze Translation");
* ``next_sentence`` (multiple choice, as SWAG, Zellers et al. 2018): which of four sentences follows the context
  sentence (the others are sentences of other documents).

One task is built from the synthetic knowledge world instead (``data.source: world``, :mod:`plm_lightning.corpus.world`):

* ``world_facts`` (sequence classification; ``offline:world_facts`` for the default world,
  ``offline:world_facts=world:subjects=200,...`` for another): is a sentence of the world a true fact, stated with one
  of the training templates, or the same sentence with the object replaced by another object of its type (half each)?
  Split by subject, so no fact of a validation subject is seen in fine-tuning: only a model that read the world's
  documents in pretraining can tell (random weights score about 0.5), which is what the fact checking of
  knowledge-intensive benchmarks asks (FEVER's closed-book setting, Thorne et al. 2018; Petroni et al. 2021, KILT).
* ``world_objects`` (sequence classification, one label per object of the world: 5 relations x ``objects``): closed-book
  question answering as classification, the fact's prompt ("Senhal Zelzelul is a citizen of") labelled with its
  object, split by subject as ``world_facts``: the relation's words tell the object's type (random weights learn that
  much: about 1 / ``objects``), only pretraining on the world tells which one (LAMA's question asked through a
  fine-tuned head, as closed-book QA fine-tunes, Roberts et al. 2020).
* ``world_spans`` (extractive QA): the same closed-book question as a span to select, the way span-selection
  benchmarks ask it: the question is the fact's canonical sentence with its object blanked out (a cloze question, as
  ``cloze_spans``), the context every object of the relation's type in an order drawn per fact, the answer the
  object's span (a name of two or three syllables: several subword tokens, so the span's boundaries must be found
  too, which span masking pretrains, Joshi et al. 2020). Split by subject as ``world_facts``: the context tells
  every candidate, only the world's documents tell which one (random weights: about 1 / ``objects`` exact match).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np

from plm_lightning.corpus.sources import embedded_corpus
from plm_lightning.errors import ConfigError

Splits = dict[str, list[dict[str, Any]]]
_MARKUP = re.compile(r'"(?P<code>[^"\s][^"]*?)"|(?<![\w*])\*(?P<term>[^*\s][^*]*?)\*(?![\w*])')
_WORD = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=["*(]?[A-Z])')
BLANK = "_____"
"""What stands for the answer in a cloze question."""


def split_of(text: str) -> str:
    """A fixed split by content hash: 80% train, 10% validation, 10% test."""
    h = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 10
    return "train" if h < 8 else "validation" if h == 8 else "test"


def _paragraphs() -> Iterator[tuple[int, str, bool]]:
    """(document index, paragraph on one line, is code) for every paragraph of four or more words."""
    for i, doc in enumerate(embedded_corpus()):
        for paragraph in doc.split("\n\n"):
            lines = [ln for ln in paragraph.splitlines() if ln.strip()]
            if len(" ".join(lines).split()) < 4:
                continue
            code = all(ln.startswith(("   ", ">>>", "...")) for ln in lines)
            yield i, " ".join(ln.strip() for ln in lines), code


def strip_markup(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """The text without its code quotes and term asterisks (and ``**`` bold), and the (start, end, kind) character
    spans of what was marked, in the stripped text."""
    text = text.replace("**", "")
    plain, spans, last = [], [], 0
    length = 0
    for m in _MARKUP.finditer(text):
        plain.append(text[last:m.start()])
        length += m.start() - last
        kind = "CODE" if m.group("code") is not None else "TERM"
        inner = m.group(kind.lower())
        spans.append((length, length + len(inner), kind))
        plain.append(inner)
        length += len(inner)
        last = m.end()
    plain.append(text[last:])
    return "".join(plain), spans


def bio_words(text: str, spans: list[tuple[int, int, str]]) -> tuple[list[str], list[str]]:
    """Words (``\\w+`` runs and single punctuation marks, CoNLL-style) and their BIO tags from character spans."""
    words, tags, previous = [], [], None
    for m in _WORD.finditer(text):
        span = next((n for n, (s, e, _) in enumerate(spans) if s <= m.start() < e), None)
        words.append(m.group())
        tags.append("O" if span is None else ("I-" if span == previous else "B-") + spans[span][2])
        previous = span
    return words, tags


def _code_or_prose() -> Splits:
    splits: Splits = {"train": [], "validation": [], "test": []}
    for _, text, code in _paragraphs():
        splits[split_of(text)].append({"text_a": text, "label": int(code)})
    return splits


def _sentence_pool() -> tuple[dict[int, list[str]], list[tuple[int, str]]]:
    """Each document's prose sentences, and all of them as (document, sentence) to draw distractors from."""
    documents = _prose_sentences()
    return documents, [(i, s) for i, doc in documents.items() for s in doc]


def _prose_sentences() -> dict[int, list[str]]:
    """Each document's prose sentences (4 to 60 words) in order, code paragraphs left out."""
    documents: dict[int, list[str]] = {}
    for i, text, code in _paragraphs():
        if not code:
            documents.setdefault(i, []).extend(s for s in _SENTENCE_END.split(text) if 4 <= len(s.split()) <= 60)
    return documents


def _continuation() -> Splits:
    splits: Splits = {"train": [], "validation": [], "test": []}
    rng = np.random.default_rng(0)
    documents, pool = _sentence_pool()
    for i, doc in documents.items():
        for a, b in zip(doc, doc[1:]):
            if rng.random() < 0.5:
                j, b = pool[int(rng.integers(len(pool)))]
                if j == i:
                    continue
                label = 0
            else:
                label = 1
            splits[split_of(a)].append({"text_a": a, "text_b": b, "label": label})
    return splits


def _marked_sentences() -> Iterator[tuple[str, str, list[tuple[int, int, str]]]]:
    """(paragraph, sentence, its markup spans) for the prose sentences of paragraphs with markup."""
    for _, text, code in _paragraphs():
        if code or not _MARKUP.search(text):
            continue
        for sentence in _SENTENCE_END.split(text):
            plain, spans = strip_markup(sentence)
            if 4 <= len(plain.split()) <= 60:
                yield text, plain, spans


def _markup_spans() -> Splits:
    """The tagged sentences, and as ``unlabeled`` the other prose sentences of the corpus (markup removed, untagged:
    what semi-supervised training such as CVT reads)."""
    splits: Splits = {"train": [], "validation": [], "test": [], "unlabeled": []}
    tagged = set()
    for _, plain, spans in _marked_sentences():
        words, tags = bio_words(plain, spans)
        splits[split_of(plain)].append({"words": words, "tags": tags})
        tagged.add(plain)
    for sentences in _prose_sentences().values():
        for sentence in sentences:
            plain, _ = strip_markup(sentence)
            if plain not in tagged and split_of(plain) == "train":
                splits["unlabeled"].append({"words": _WORD.findall(plain)})
    return splits


def _cloze_spans() -> Splits:
    splits: Splits = {"train": [], "validation": [], "test": []}
    seen = set()
    for text, sentence, spans in _marked_sentences():
        context, _ = strip_markup(text)
        where = context.find(sentence)
        if where < 0 or len(context) > 1500:
            continue
        for start, end, _ in spans:
            answer = sentence[start:end]
            question = sentence[:start] + BLANK + sentence[end:]
            key = (context, question)
            if key in seen or len(answer.split()) > 8:
                continue
            seen.add(key)
            splits[split_of(context)].append({
                "id": hashlib.sha1(f"{context}|{question}".encode()).hexdigest()[:12], "question": question,
                "context": context, "answers": [{"text": answer, "start": where + start}], "impossible": False})
    return splits


def _next_sentence() -> Splits:
    splits: Splits = {"train": [], "validation": [], "test": []}
    rng = np.random.default_rng(0)
    documents, pool = _sentence_pool()
    for i, doc in documents.items():
        for a, b in zip(doc, doc[1:]):
            others = [pool[int(j)] for j in rng.choice(len(pool), 6, replace=False)]
            wrong = [s for j, s in others if j != i and s != b][:3]
            if len(wrong) < 3:
                continue
            label = int(rng.integers(4))
            choices = wrong[:label] + [b] + wrong[label:]
            splits[split_of(a + b)].append({"context": a, "choices": choices, "label": label})
    return splits


def _world_facts(spec: str = "") -> Splits:
    from plm_lightning.corpus.world import world_from_spec

    world = world_from_spec(spec or "world")
    rng = np.random.default_rng(world.config.seed)
    splits: Splits = {"train": [], "validation": [], "test": []}
    for fact in world.facts:
        if fact.alias_only:  # stated only under an alias: its subject's name never met its object in pretraining
            continue
        relation = world.relations[fact.relation]
        others = [o for o in world.objects[relation.object_type] if o != fact.object]
        split = split_of(fact.subject)
        for label, obj in ((1, fact.object), (0, others[int(rng.integers(len(others)))])):
            template = relation.templates[int(rng.integers(len(relation.templates)))]
            splits[split].append({"text_a": template.format(s=fact.subject, o=obj), "label": label})
    return splits


def _world_objects(spec: str = "") -> Splits:
    from plm_lightning.corpus.world import prompt_of, world_from_spec

    world = world_from_spec(spec or "world")
    labels = {o: i for i, o in enumerate(o for kind in sorted(world.objects) for o in world.objects[kind])}
    splits: Splits = {"train": [], "validation": [], "test": []}
    for fact in world.facts:
        if not fact.alias_only:
            relation = world.relations[fact.relation]
            objects = world.objects[relation.object_type]
            splits[split_of(fact.subject)].append({  # the type's objects: the candidates of the task prompted
                "text_a": prompt_of(relation.templates[0]).format(fact.subject), "label": labels[fact.object],
                "objects": list(objects), "answer": objects.index(fact.object)})
    return splits


def _world_spans(spec: str = "") -> Splits:
    from plm_lightning.corpus.world import world_from_spec

    world = world_from_spec(spec or "world")
    rng = np.random.default_rng(world.config.seed)
    splits: Splits = {"train": [], "validation": [], "test": []}
    for fact in world.facts:
        if fact.alias_only:
            continue
        relation = world.relations[fact.relation]
        candidates = [str(o) for o in rng.permutation(world.objects[relation.object_type])]
        context = ", ".join(candidates) + "."
        at = candidates.index(fact.object)
        start = sum(len(c) + 2 for c in candidates[:at])  # each candidate before it and its ", "
        question = relation.templates[0].format(s=fact.subject, o=BLANK)
        splits[split_of(fact.subject)].append({
            "id": f"fact-{fact.id}", "question": question, "context": context,
            "answers": [{"text": fact.object, "start": start}], "impossible": False})
    return splits


def world_labels(spec: str = "") -> int:
    """How many labels ``world_objects`` of the world ``spec`` has (every object of every type)."""
    from plm_lightning.corpus.world import world_from_spec

    return sum(len(v) for v in world_from_spec(spec or "world").objects.values())


OFFLINE_TASKS: dict[str, tuple[str, Callable[..., Splits]]] = {
    "code_or_prose": ("classification", _code_or_prose), "continuation": ("classification", _continuation),
    "markup_spans": ("tagging", _markup_spans), "cloze_spans": ("qa", _cloze_spans),
    "next_sentence": ("choice", _next_sentence), "world_facts": ("classification", _world_facts),
    "world_objects": ("classification", _world_objects), "world_spans": ("qa", _world_spans),
}
"""Offline task name -> (kind of head it trains, builder)."""
WITH_ARGUMENT = ("world_facts", "world_objects", "world_spans")
"""Tasks that take an argument after ``=`` (``world_facts=<world spec>``)."""


@lru_cache(maxsize=8)
def _build(name: str) -> Splits:
    base, _, argument = name.partition("=")
    return OFFLINE_TASKS[base][1](argument) if base in WITH_ARGUMENT else OFFLINE_TASKS[base][1]()


def offline_task(name: str, kind: str | None = None) -> Splits:
    """Examples per split of an offline task (see the module docstring), ``kind`` checked when given."""
    names = [n for n, (k, _) in OFFLINE_TASKS.items() if kind in (None, k)]
    base, eq, argument = name.partition("=")
    if base not in names:
        raise ConfigError(f"data.task=offline:{name} is not one of {', '.join('offline:' + n for n in names)}")
    if eq and base not in WITH_ARGUMENT:
        raise ConfigError(f"data.task=offline:{name}: offline:{base} takes no '=...' argument (only "
                          f"{', '.join('offline:' + n for n in WITH_ARGUMENT)} do)")
    return {split: list(rows) for split, rows in _build(name).items()}
