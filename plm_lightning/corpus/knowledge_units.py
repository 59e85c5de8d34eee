"""Knowledge units for ERNIE's masking (Sun et al. 2019, "ERNIE: Enhanced Representation through kNowledge
IntEgration", sec. 3.2): phrases and named entities, each masked as one unit.

* Phrases: a collocation detector fitted on the corpus, word2phrase style (Mikolov et al. 2013, sec. 4) scored by
  normalised PMI (Bouma 2009): ``npmi(a, b) = ln(p(ab) / (p(a) p(b))) / -ln p(ab)`` in [-1, 1]; bigrams with
  ``npmi >= threshold`` and ``count >= min_count`` join, and a second pass over the joined text finds longer
  phrases. Or a user lexicon file (one phrase per line).
* Entities: a user lexicon file, or runs of capitalised words (a lone sentence-initial capital is not an entity).

Units are word-level; ``unit_starts`` turns them into the per-token flags the whole-word selector reads.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from plm_lightning.errors import ConfigError

Phrase = tuple[str, ...]


@dataclass(frozen=True)
class PhraseConfig:
    """word2phrase settings: ``passes`` passes join bigrams of (possibly already joined) units."""

    min_count: int = 5
    threshold: float = 0.5
    passes: int = 2
    max_words: int = 4


def fit_phrases(sentences: Iterable[Sequence[str]] | Callable[[], Iterable[Sequence[str]]],
                cfg: PhraseConfig = PhraseConfig()) -> set[Phrase]:
    """Collocations of the corpus (lower-cased word tuples of 2..``max_words`` words). ``sentences``: the corpus's
    sentences of words in memory, or a function giving a fresh pass over them (a corpus streamed once per pass: only
    the unigram and bigram counts are held, the joins of earlier passes applied as each sentence goes by)."""
    joins: list[set[tuple[Phrase, Phrase]]] = []
    held: list[list[Phrase]] | None = None
    if callable(sentences):
        stream = sentences

        def corpus() -> Iterable[list[Phrase]]:
            for s in stream():
                units = _units(s)
                for pairs in joins:
                    units = _join(units, pairs)
                yield units
    else:
        held = [_units(s) for s in sentences]

        def corpus() -> Iterable[list[Phrase]]:
            return held
    phrases: set[Phrase] = set()
    for _ in range(cfg.passes):
        unigrams: Counter[Phrase] = Counter()
        bigrams: Counter[tuple[Phrase, Phrase]] = Counter()
        for s in corpus():
            unigrams.update(s)
            bigrams.update(zip(s, s[1:]))
        total = sum(unigrams.values())
        if total == 0:
            break
        joined: set[tuple[Phrase, Phrase]] = set()
        for (a, b), n_ab in bigrams.items():
            if n_ab < cfg.min_count or len(a) + len(b) > cfg.max_words:
                continue
            if not all(any(c.isalnum() for c in w) for w in (*a, *b)):
                continue  # punctuation never joins a phrase
            p_ab = n_ab / total
            if p_ab >= 1.0:
                continue
            npmi = math.log(p_ab / ((unigrams[a] / total) * (unigrams[b] / total))) / -math.log(p_ab)
            if npmi >= cfg.threshold:
                joined.add((a, b))
        if not joined:
            break
        phrases |= {a + b for a, b in joined}
        if held is not None:
            held[:] = [_join(s, joined) for s in held]
        else:
            joins.append(joined)
    return phrases


def _units(sentence: Sequence[str]) -> list[Phrase]:
    return [(w.lower(),) for w in sentence if w.strip()]


def _join(sentence: list[Phrase], pairs: set[tuple[Phrase, Phrase]]) -> list[Phrase]:
    out: list[Phrase] = []
    i = 0
    while i < len(sentence):
        if i + 1 < len(sentence) and (sentence[i], sentence[i + 1]) in pairs:
            out.append(sentence[i] + sentence[i + 1])
            i += 2
        else:
            out.append(sentence[i])
            i += 1
    return out


def load_lexicon(path: str | Path, key: str) -> set[Phrase]:
    """One phrase or entity per line (words separated by spaces; ``#`` comments), lower-cased."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{key}: lexicon file '{path}' does not exist; give a text file with one entry per line")
    entries = {tuple(line.lower().split()) for line in p.read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.lstrip().startswith("#")}
    if not entries:
        raise ConfigError(f"{key}: lexicon file '{path}' has no entries")
    return entries


def match_lexicon(words: Sequence[str], lexicon: set[Phrase], max_words: int) -> tuple[list[int], list[bool]]:
    """(unit id per word, whether the word is part of a lexicon entry): greedy longest match from left to right;
    words outside every entry are units of their own."""
    lowered = [w.lower() for w in words]
    units, inside = [0] * len(words), [False] * len(words)
    unit, i = -1, 0
    while i < len(words):
        unit += 1
        for n in range(min(max_words, len(words) - i), 0, -1):
            if tuple(lowered[i:i + n]) in lexicon:
                units[i:i + n], inside[i:i + n] = [unit] * n, [True] * n
                i += n
                break
        else:
            units[i] = unit
            i += 1
    return units, inside


def capitalised_runs(words: Sequence[str]) -> tuple[list[int], list[bool]]:
    """(unit id per word, whether the word is part of an entity): a run of capitalised words ("New York City",
    "Python") is one entity; a single capitalised word at the start of the sentence is sentence case, not an
    entity, unless the run goes on ("New York is ...")."""
    caps = [w[:1].isupper() and any(c.isalpha() for c in w) for w in words]
    units, inside = [0] * len(words), list(caps)
    unit = -1
    for i, cap in enumerate(caps):
        if not (cap and i > 0 and caps[i - 1]):
            unit += 1
        units[i] = unit
    if caps and caps[0] and (len(caps) == 1 or not caps[1]):
        inside[0] = False
    return units, inside


def unit_starts(units: Sequence[int]) -> list[bool]:
    """Per word, whether it begins its unit."""
    return [i == 0 or units[i] != units[i - 1] for i in range(len(units))]


def word_signals(document: Sequence[Sequence[str]]) -> list[tuple[list[bool], list[bool], list[bool]]]:
    """ERNIE 2.0's word-aware labels (Sun et al. 2020, sec. 4.2.1) for one document given as sentences of words:
    per sentence, per word, (capitalised: its first letter is upper-case; lexical: it has a letter or digit, the
    words the two tasks are asked about; elsewhere: it (lower-cased) also occurs in another sentence of the document
    (token-document relation; a segment is a sentence here)."""
    lowered = [[w.lower() for w in words] for words in document]
    sentence_count = Counter(w for words in lowered for w in set(words))
    out = []
    for words, low in zip(document, lowered):
        lexical = [any(c.isalnum() for c in w) for w in words]
        capitalised = [lex and w[:1].isupper() for w, lex in zip(words, lexical)]
        out.append((capitalised, lexical, [sentence_count[w] > 1 for w in low]))
    return out


@dataclass(frozen=True)
class KnowledgeSpec:
    """Where phrase and entity units come from (the ``ernie`` masking scheme)."""

    phrase_lexicon: str | None = None
    entity_lexicon: str | None = None
    phrases: PhraseConfig = PhraseConfig()
    _entities: set[Phrase] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for key, path in (("data.phrase_lexicon", self.phrase_lexicon), ("data.entity_lexicon", self.entity_lexicon)):
            if path is not None:
                load_lexicon(path, key)  # fail early, with the key's name

    def cache_key(self) -> dict[str, object]:
        import hashlib

        def digest(path: str | None) -> str | None:
            return None if path is None else hashlib.sha256(Path(path).read_bytes()).hexdigest()

        return {"phrase_lexicon": digest(self.phrase_lexicon), "entity_lexicon": digest(self.entity_lexicon),
                "phrases": [self.phrases.min_count, self.phrases.threshold, self.phrases.passes, self.phrases.max_words]}

    def phrase_table(self, sentences: Iterable[Sequence[str]]) -> set[Phrase]:
        if self.phrase_lexicon is not None:
            return load_lexicon(self.phrase_lexicon, "data.phrase_lexicon")
        return fit_phrases(sentences, self.phrases)

    def entity_table(self) -> set[Phrase] | None:
        """The entity lexicon (read once), or None for capitalised-run detection."""
        if self.entity_lexicon is None:
            return None
        if self._entities is None:
            object.__setattr__(self, "_entities", load_lexicon(self.entity_lexicon, "data.entity_lexicon"))
        return self._entities

    def units(self, words: Sequence[str], phrases: set[Phrase]) -> tuple[list[int], list[bool], list[int], list[bool]]:
        """(phrase units, in a phrase, entity units, in an entity) per word; a phrase has at least two words."""
        phrase_units, in_phrase = match_lexicon(words, phrases, self.phrases.max_words)
        sizes = Counter(phrase_units)
        in_phrase = [flag and sizes[phrase_units[i]] > 1 for i, flag in enumerate(in_phrase)]
        entities = self.entity_table()
        if entities is not None:
            entity_units, in_entity = match_lexicon(words, entities, 8)
        else:
            entity_units, in_entity = capitalised_runs(words)
        return phrase_units, in_phrase, entity_units, in_entity
