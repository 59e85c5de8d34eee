"""Documents to flagged token ids: one pass of the tokenizer over the text (sentence by sentence where the packing
mode needs sentences), each token carrying its unit flags above bit ``ID_BITS`` (continues a word / phrase /
entity, lies in a phrase / entity, ERNIE 2.0's word signals, starts a sentence), so the packers
(:mod:`plm_lightning.corpus.blocks`) only move tokens around; :func:`split_flags` decodes them when blocks are
written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from plm_lightning.corpus.knowledge_units import KnowledgeSpec, Phrase, word_signals
from plm_lightning.corpus.sentences import split_corpus, split_sentences
from plm_lightning.corpus.tokenizer import TextTokenizer, concatenated

# per-token flags carried next to the id until blocks are written (the packers only move tokens around)
ID_BITS = 40
WORD_CONT, PHRASE_CONT, ENTITY_CONT, IN_PHRASE, IN_ENTITY, CAPITALISED, LEXICAL, ELSEWHERE, SENTENCE_START = (
    1 << (ID_BITS + i) for i in range(9))

@dataclass(eq=False)  # compared by identity: the arrays have no truth value
class TokenizedDocument:
    """A document's token ids, its sentences end to end: sentence ``i`` is ``tokens[bounds[i]:bounds[i + 1]]``, and
    none is empty. Until blocks are written each token carries its unit flags above bit ``ID_BITS`` (continues a
    word / phrase / entity, lies in a phrase / entity), so the packers stay agnostic of them; :func:`split_flags`
    decodes them. One array per document (a view of its batch's) rather than a list per sentence: the packers cut
    rows out of it by position, without building a Python list of every token (issue 35)."""

    tokens: np.ndarray
    bounds: list[int]

    @classmethod
    def from_sentences(cls, sentences: Sequence[Sequence[int]]) -> TokenizedDocument:
        """The document of these sentences (empty ones dropped)."""
        ids, starts, _ = concatenated([s for s in sentences if len(s)])
        return cls(ids, [*starts.tolist(), len(ids)])

    @property
    def sentence_count(self) -> int:
        return len(self.bounds) - 1

    @property
    def sentences(self) -> list[list[int]]:
        """Each sentence's tokens as a list."""
        tokens = self.tokens.tolist()
        return [tokens[a:b] for a, b in zip(self.bounds, self.bounds[1:])]


def split_flags(tokens: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(ids, flags)`` of flagged tokens: word starts and the ERNIE unit arrays."""
    tokens = tokens.astype(np.int64)
    ids = (tokens & ((1 << ID_BITS) - 1)).astype(np.int32)
    flags = {"word_starts": (tokens & WORD_CONT) == 0, "phrase_starts": (tokens & PHRASE_CONT) == 0,
             "entity_starts": (tokens & ENTITY_CONT) == 0, "in_phrase": (tokens & IN_PHRASE) != 0,
             "in_entity": (tokens & IN_ENTITY) != 0, "capitalised": (tokens & CAPITALISED) != 0,
             "lexical": (tokens & LEXICAL) != 0, "elsewhere": (tokens & ELSEWHERE) != 0,
             "sentence_starts": (tokens & SENTENCE_START) != 0}
    return ids, flags


def _flag_sentence(ids: list[int], word_index: list[int], unit_flags: list[list],
                   signals: tuple[list[bool], ...] = ()) -> list[int]:
    """Tokens with their flags: ``unit_flags`` = (phrase units, in phrase, entity units, in entity) per word, or
    empty for word boundaries only; ``signals`` = ERNIE 2.0's (capitalised, lexical, elsewhere) per word."""
    out = []
    for i, (t, w) in enumerate(zip(ids, word_index)):
        continues_word = w >= 0 and i > 0 and word_index[i - 1] == w
        value = t | (WORD_CONT if continues_word else 0) | (SENTENCE_START if i == 0 else 0)
        if unit_flags and w >= 0:
            phrase_units, in_phrase, entity_units, in_entity = unit_flags
            value |= PHRASE_CONT if continues_word or (w > 0 and phrase_units[w] == phrase_units[w - 1]) else 0
            value |= ENTITY_CONT if continues_word or (w > 0 and entity_units[w] == entity_units[w - 1]) else 0
            value |= (IN_PHRASE if in_phrase[w] else 0) | (IN_ENTITY if in_entity[w] else 0)
        if signals and w >= 0:
            capitalised, lexical, elsewhere = signals
            value |= (CAPITALISED if capitalised[w] else 0) | (LEXICAL if lexical[w] else 0)
            value |= ELSEWHERE if elsewhere[w] else 0
        out.append(value)
    return out


def tokenize_documents(documents: list[str], tokenizer: TextTokenizer, by_sentence: bool,
                       knowledge: KnowledgeSpec | None = None, segmenter: str = "tokenizer",
                       cache: bool = True, phrases: set[Phrase] | None = None, splitter: str = "pysbd"
                       ) -> list[TokenizedDocument]:
    """One pass of the tokenizer over the corpus; sentences are kept when the packing mode needs them (split by
    ``splitter``, once, and cached on disk with ``cache``, see :func:`~plm_lightning.corpus.sentences.split_corpus`).
    With ``knowledge``, phrases are fitted on (or looked up
    for) the corpus' words, unless ``phrases`` gives the table (a streamed corpus's, fitted beforehand), and entity
    units found per sentence."""
    if by_sentence:
        units = split_corpus(documents, splitter) if cache else [split_sentences(d, splitter) for d in documents]
    else:
        units = [[d] for d in documents]
    if knowledge is None and segmenter == "tokenizer":
        continuations = tokenizer.word_continuations()
        joined = tokenizer.encode_sentences(units)
        if joined is not None:
            ids, starts, ends = joined  # ids hold the sentence breaks too ("clip": their flags are never read)
            flagged = _flag_runs(ids, np.take(continuations, ids, mode="clip"), starts, ends)
            return _documents(units, flagged, starts, ends)
        encodings = tokenizer.tokenizer.encode_batch([s for u in units for s in u], add_special_tokens=False)
        return _documents(units, *_flag_word_starts(encodings, continuations))
    flat = [s for u in units for s in u]
    encoded_words = tokenizer.encode_batch_with_words(flat, segmenter)
    if phrases is None:
        phrases = (knowledge.phrase_table([words for _, _, words in encoded_words]) if knowledge is not None
                   else set())
    signals: list[tuple] = []
    if knowledge is not None:
        pos = 0
        for u in units:
            signals.extend(word_signals([words for _, _, words in encoded_words[pos: pos + len(u)]]))
            pos += len(u)
    encoded = [_flag_sentence(ids, index, list(knowledge.units(words, phrases)) if knowledge is not None else [],
                              signals[k] if signals else ())
               for k, (ids, index, words) in enumerate(encoded_words)]
    return _documents(units, *concatenated(encoded))


def _flag_word_starts(encodings: Sequence[Any], continuations: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_flag_sentence` without knowledge units, from the tokenizer's word ids: the fast path of every recipe
    but ERNIE's (a token continues a word when it has the word id of the token before in its sentence; a token
    without a word id, None, never does), or from ``continuations`` (per id, see
    :meth:`~plm_lightning.corpus.tokenizer.TextTokenizer.word_continuations`) where the vocabulary tells the same.
    One numpy pass over the whole batch of ``tokenizers`` encodings: ``(flagged, starts, ends)``, encoding i's
    tokens at ``flagged[starts[i]:ends[i]]``."""
    flat, starts, ends = concatenated([e.ids for e in encodings])
    total = len(flat)
    if continuations is not None:
        continues = continuations[flat]
    else:
        words = [e.word_ids for e in encodings]
        try:
            word = np.fromiter(chain.from_iterable(words), dtype=np.int64, count=total)
        except TypeError:  # a token without a word (None): never continues a word, nor does the token after it
            word = np.fromiter((-1 if w is None else w for w in chain.from_iterable(words)), dtype=np.int64,
                               count=total)
        continues = np.zeros(total, dtype=bool)
        continues[1:] = (word[1:] == word[:-1]) & (word[1:] >= 0)
    return _flag_runs(flat, continues, starts, ends), starts, ends


def _flag_runs(ids: np.ndarray, continues: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``ids`` flagged, where the sentences are ``ids[starts[i]:ends[i]]``: a token continues a word where
    ``continues`` says so, except a sentence's first token, which starts the sentence."""
    first = starts[ends > starts]
    continues[first] = False
    flagged = ids | np.where(continues, WORD_CONT, 0)
    flagged[first] |= SENTENCE_START
    return flagged


def _documents(units: list[list[str]], tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray
               ) -> list[TokenizedDocument]:
    """The sentences ``tokens[starts[i]:ends[i]]`` (sentence i of ``units``' documents in order, the runs disjoint and
    ascending; tokens outside every run dropped) regrouped by document, empty sentences and documents without a
    token dropped. Each document's tokens are a view of one array gathered for the whole batch."""
    lengths = ends - starts
    kept = lengths > 0
    document_of = np.repeat(np.arange(len(units)), [len(u) for u in units])[kept]
    starts, lengths = starts[kept], lengths[kept]
    new_ends = np.cumsum(lengths)
    new_starts = new_ends - lengths
    total = int(new_ends[-1]) if len(new_ends) else 0
    if total != len(tokens):  # tokens outside the runs (the joined encoding's sentence breaks): gather
        tokens = tokens[np.arange(total) + np.repeat(starts - new_starts, lengths)]
    bounds = [*new_starts.tolist(), total]
    out, k = [], 0
    for count in np.bincount(document_of, minlength=len(units)).tolist():
        if count:
            first, last = bounds[k], bounds[k + count]
            out.append(TokenizedDocument(tokens[first:last], [b - first for b in bounds[k: k + count + 1]]))
            k += count
    return out


def flagged_sentences(texts: list[str], tokenizer: TextTokenizer, segmenter: str = "tokenizer") -> list[list[int]]:
    """Token ids of each text with their word-start flags (see :class:`TokenizedDocument`)."""
    return [_flag_sentence(ids, index, []) for ids, index, _ in tokenizer.encode_batch_with_words(texts, segmenter)]


def flagged_pairs(pairs: Sequence[tuple[str, str]], tokenizer: TextTokenizer, segmenter: str = "tokenizer"
                  ) -> list[tuple[list[int], list[int]]]:
    """:func:`flagged_sentences` of both sides of sentence pairs (one batch through the encoder), as pairs."""
    flagged = flagged_sentences([side for pair in pairs for side in pair], tokenizer, segmenter)
    return list(zip(flagged[0::2], flagged[1::2]))
