"""Pack tokenized documents (:mod:`plm_lightning.corpus.tokenized`) into fixed-length blocks (memory-mapped ``.npy`` files,
cached by ``block_cache``).

Packing modes:

* ``contiguous`` - GPT-2: documents joined with the end-of-text token and cut into blocks (Radford et al. 2019).
* ``full_sentences`` - RoBERTa FULL-SENTENCES (Liu et al. 2019, sec. 4.2): whole sentences packed contiguously,
  crossing document boundaries with an extra separator token.
* ``doc_sentences`` - RoBERTa DOC-SENTENCES: the same, but a block never crosses a document boundary.
* ``sentence_pairs`` - BERT NSP pairs (Devlin et al. 2019, sec. 3.1 "Task #2" and create_pretraining_data):
  segment B is the real continuation half the time, else a segment from another document.
* ``sentence_order`` - ALBERT SOP pairs (Lan et al. 2020, sec. 3.1 "Inter-sentence coherence loss"): two
  consecutive segments of one document, in order half the time and swapped otherwise.
* ``continuation_pairs`` - ``[CLS] A [SEP] B [SEP]`` with B always the text that follows A (UniLM's source and
  target segments, Dong et al. 2019 sec. 2.3).
* ``sentence_distance`` - ERNIE 2.0 pairs (Sun et al. 2020, sec. 4.2.2): B follows A, comes from elsewhere in A's
  document, or from another document (three classes).

and, from a parallel corpus, :func:`pack_translation_pairs` for XLM's translation language modelling.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from plm_lightning.corpus.tokenized import (  # noqa: F401 - TokenizedDocument, tokenize_documents: re-exported
    ID_BITS,
    TokenizedDocument,
    flagged_pairs,
    flagged_sentences,
    split_flags,
    tokenize_documents,
)
from plm_lightning.corpus.tokenizer import TextTokenizer
from plm_lightning.errors import ConfigError

PackingMode = Literal["contiguous", "concatenated", "documents", "full_sentences", "doc_sentences", "sentence_pairs",
                      "sentence_order", "sentence_distance", "continuation_pairs"]
PACKING_MODES = ("contiguous", "concatenated", "documents", "full_sentences", "doc_sentences", "sentence_pairs",
                 "sentence_order", "sentence_distance", "continuation_pairs")
TOKEN_STREAM_MODES = ("contiguous", "concatenated")
"""The modes that cut a stream of tokens into rows, with no sentence boundaries to keep."""


def reads_sentences(mode: str) -> bool:
    """Whether packing ``mode`` needs each document's sentences (every mode but the token-stream ones)."""
    return mode not in TOKEN_STREAM_MODES
FORMAT_VERSION = 7
KNOWLEDGE_FIELDS = ("phrase_starts", "entity_starts", "in_phrase", "in_entity", "capitalised", "lexical", "elsewhere")


@dataclass
class PackedBlocks:
    """Fixed-length blocks of one split. ``document_ids`` numbers the documents inside each block (-1 = padding)."""

    input_ids: np.ndarray
    document_ids: np.ndarray
    segment_b_start: np.ndarray | None = None
    """Pair modes: index of the first token of segment B ([CLS] A [SEP] | B [SEP])."""
    sentence_label: np.ndarray | None = None
    """Pair modes, Hugging Face conventions: NSP 0 = B continues A, 1 = B is random; SOP 0 = in order, 1 = swapped;
    distance 0 = adjacent, 1 = same document, 2 = another document."""
    word_starts: np.ndarray | None = None
    """True where a token begins a word (special tokens and padding count as word starts)."""
    sentence_starts: np.ndarray | None = None
    """True where a token begins a sentence (BART's sentence permutation)."""
    phrase_starts: np.ndarray | None = None
    """ERNIE: True where a token begins a phrase unit (a phrase, or a word outside phrases)."""
    entity_starts: np.ndarray | None = None
    """ERNIE: True where a token begins an entity unit (an entity, or a word outside entities)."""
    in_phrase: np.ndarray | None = None
    in_entity: np.ndarray | None = None
    capitalised: np.ndarray | None = None
    """ERNIE 2.0 (with knowledge units): the token's word starts with an upper-case letter."""
    lexical: np.ndarray | None = None
    """ERNIE 2.0: the token's word has a letter or digit (the words capitalisation and token-document relation ask
    about)."""
    elsewhere: np.ndarray | None = None
    """ERNIE 2.0 token-document relation: the token's word occurs in another sentence of its document."""
    position_ids: np.ndarray | None = None
    """TLM: 0-based positions, restarting at the target sentence (None: 0, 1, 2, ...)."""
    language_ids: np.ndarray | None = None
    """TLM: the language of each token (None: the block's corpus decides)."""
    entity_ids: np.ndarray | None = None
    """ERNIE (Tsinghua): the knowledge-graph entity aligned with each token (-1: none)."""

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def save(self, directory: Path, split: str) -> None:
        for name in BLOCK_FIELDS:
            value = getattr(self, name)
            if value is not None:
                np.save(directory / f"{split}.{name}.npy", value)

    @classmethod
    def load(cls, directory: Path, split: str) -> PackedBlocks:
        def get(name: str) -> np.ndarray | None:
            path = directory / f"{split}.{name}.npy"
            return np.load(path, mmap_mode="r") if path.exists() else None

        return cls(**{name: get(name) for name in BLOCK_FIELDS})


BLOCK_FIELDS = ("input_ids", "document_ids", "segment_b_start", "sentence_label", "word_starts", "sentence_starts",
                *KNOWLEDGE_FIELDS,
                "position_ids", "language_ids", "entity_ids")


@dataclass
class PackedRow:
    """One block before padding: flagged tokens (a list or an array), the document of each token (numbered from 0 in
    the block; None: every token in document 0) and, in the pair modes, where segment B starts and the pair's
    label."""

    tokens: Sequence[int] | np.ndarray
    documents: Sequence[int] | None = None
    b_start: int | None = None
    label: int | None = None


def blocks_from_rows(rows: Sequence[PackedRow], length: int, pad_id: int, pairs: bool = False) -> PackedBlocks:
    """Rows padded to ``length`` and their flags decoded; ``pairs`` keeps the pair fields (even for no rows)."""
    lengths = np.fromiter((len(row.tokens) for row in rows), dtype=np.int64, count=len(rows))
    inside = np.arange(length) < lengths[:, None]
    tokens = np.full((len(rows), length), pad_id, dtype=np.int64)
    if rows:
        tokens[inside] = np.concatenate([np.asarray(row.tokens, dtype=np.int64) for row in rows])
    docs = np.where(inside, 0, -1).astype(np.int16)
    for i, row in enumerate(rows):
        if row.documents is not None:
            docs[i, : len(row.documents)] = row.documents
    ids, flags = split_flags(tokens)
    blocks = PackedBlocks(ids, docs, **flags)
    if pairs:
        blocks.segment_b_start = np.asarray([r.b_start for r in rows], dtype=np.int32)
        blocks.sentence_label = np.asarray([r.label for r in rows], dtype=np.int8)
    return blocks


def contiguous_rows(docs: Iterable[TokenizedDocument], length: int, eos_id: int | None) -> Iterator[PackedRow]:
    """Concatenate ``doc <eos> doc <eos> ...`` (GPT-2) or, with ``eos_id=None``, ``doc doc ...`` with no separator
    (T5's ``reduce_concat_tokens``, whose span corruption appends EOS after corrupting a row only), and cut into
    ``length``-token blocks (the tail is dropped)."""
    tokens: list[int] = []
    doc_index: list[int] = []
    for i, d in enumerate(docs):
        tokens.extend(d.tokens.tolist())
        if eos_id is not None:
            tokens.append(eos_id)
        doc_index.extend([i] * (len(tokens) - len(doc_index)))
        full = len(tokens) // length * length
        for start in range(0, full, length):
            first = doc_index[start]
            documents = (None if doc_index[start + length - 1] == first  # inside one document
                         else [j - first for j in doc_index[start: start + length]])
            yield PackedRow(tokens[start: start + length], documents)
        del tokens[:full], doc_index[:full]


def document_rows(docs: Iterable[TokenizedDocument], length: int, eos_id: int) -> Iterator[PackedRow]:
    """One document per row, ``<eos> doc <eos>`` (a longer one continues on further rows), padded: every document
    starts at position 1 after the end-of-text token, as a prompt does (short-document corpora: the knowledge world,
    where packing across documents would make every fact appear after another subject's)."""
    for d in docs:
        ids = [eos_id, *d.tokens.tolist(), eos_id]
        for start in range(0, len(ids) - 1, length):  # no row of a lone <eos>
            yield PackedRow(ids[start: start + length])


def sentence_rows(docs: Iterable[TokenizedDocument], length: int, cls_id: int, sep_id: int,
                  cross_documents: bool) -> Iterator[PackedRow]:
    """RoBERTa FULL-SENTENCES (``cross_documents``) or DOC-SENTENCES: ``[CLS] s1 s2 ... [SEP]``."""
    budget = length - 2
    cls, sep = np.array([cls_id]), np.array([sep_id])
    pieces: list[np.ndarray] = []  # the row so far, as slices of its documents' tokens and separators
    owners: list[int] = []  # per piece, its document in the row (numbered from 0)
    size = 0

    def flush() -> Iterator[PackedRow]:
        nonlocal size
        if size:
            documents = np.repeat(owners, [len(p) for p in pieces])
            yield PackedRow(np.concatenate([cls, *pieces, sep]), np.concatenate([documents[:1], documents,
                                                                               documents[-1:]]))
            pieces.clear()
            owners.clear()
            size = 0

    for d in docs:
        local_doc = (owners[-1] + 1) if owners else 0
        for first, last in zip(d.bounds, d.bounds[1:]):
            for start in range(first, last, budget):
                piece = d.tokens[start: min(start + budget, last)]
                boundary = bool(owners) and owners[-1] != local_doc
                if size + len(piece) + int(boundary) > budget:
                    yield from flush()
                    local_doc, boundary = 0, False
                if boundary:  # the extra separator between documents, counted with the previous document
                    pieces.append(sep)
                    owners.append(owners[-1])
                    size += 1
                pieces.append(piece)
                owners.append(local_doc)
                size += len(piece)
        if not cross_documents:
            yield from flush()
    yield from flush()


def pack_contiguous(docs: list[TokenizedDocument], length: int, eos_id: int) -> PackedBlocks:
    return blocks_from_rows(list(contiguous_rows(docs, length, eos_id)), length, eos_id)


def pack_documents(docs: list[TokenizedDocument], length: int, eos_id: int, pad_id: int) -> PackedBlocks:
    return blocks_from_rows(list(document_rows(docs, length, eos_id)), length, pad_id)


def pack_sentences(docs: list[TokenizedDocument], length: int, cls_id: int, sep_id: int, pad_id: int,
                   cross_documents: bool) -> PackedBlocks:
    return blocks_from_rows(list(sentence_rows(docs, length, cls_id, sep_id, cross_documents)), length, pad_id)


def _pair_trims(len_a: int, len_b: int, max_tokens: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """BERT's truncate_seq_pair as counts: the tokens it drops from the front and the back of A, then of B. While the
    pair is too long it drops a token from the front or the back (one uniform draw each, < 0.5: the front) of the
    longer segment (B on a tie).

    The same draws and the same result as that loop, computed from the order it trims in: the longer segment until
    the two are equal, then B and A by turns."""
    excess = len_a + len_b - max_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    front = rng.random(excess) < 0.5  # one stream of draws: the same numbers as ``excess`` scalar draws
    lead = min(abs(len_a - len_b), excess)  # the longer one's turns, then B's (even) and A's (odd)
    lead_front = int(np.count_nonzero(front[:lead]))
    b_turns, a_turns = (excess - lead + 1) // 2, (excess - lead) // 2
    b_front, a_front = int(np.count_nonzero(front[lead::2])), int(np.count_nonzero(front[lead + 1::2]))
    if len_a > len_b:
        a_turns, a_front = a_turns + lead, a_front + lead_front
    else:
        b_turns, b_front = b_turns + lead, b_front + lead_front
    return a_front, a_turns - a_front, b_front, b_turns - b_front


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """:func:`_pair_trims` applied to two lists, in place."""
    a_front, a_back, b_front, b_back = _pair_trims(len(a), len(b), max_tokens, rng)
    for segment, front, back in ((a, a_front, a_back), (b, b_front, b_back)):
        del segment[len(segment) - back:]
        del segment[:front]


def _sentence_run(doc: TokenizedDocument, first: int, stop: int, budget: int) -> tuple[TokenizedDocument, int, int]:
    """``(doc, start, end)``: the tokens of ``doc``'s sentences ``first``, ``first + 1``, ... (before sentence
    ``stop``) up to the one that brings them to ``budget`` tokens: BERT's "extend B sentence by sentence until it is
    long enough" (at least one sentence, all of them before ``stop`` if they never are)."""
    bounds = doc.bounds
    k = bisect_left(bounds, bounds[first] + budget, first + 1, stop)
    return doc, bounds[first], bounds[min(k, stop)]


def document_pools(docs: Iterable[TokenizedDocument], window: int | None
                   ) -> Iterator[tuple[int, list[TokenizedDocument]]]:
    """Each document as ``(index, pool)``: ``pool[index]`` is the document, and the rest of ``pool`` are the documents
    a pair may draw its random segment B from. ``window=None``: every document (the corpus in memory, as BERT's
    create_pretraining_data draws from all of its input files); else the documents within ``window`` tokens before
    and after it (at least one each side), so a stream holds a bounded number of tokens, and draws exactly as in
    memory while the whole corpus has at most ``window`` tokens."""
    if window is None:
        pool = list(docs)
        yield from ((i, pool) for i in range(len(pool)))
        return
    it = iter(docs)
    pool: list[TokenizedDocument] = []
    sizes: list[int] = []
    base = current = ahead = behind = 0  # pool[0] is document `base`; ahead/behind: tokens after/before `current`
    exhausted = False
    while True:
        while not exhausted and (current >= base + len(pool) or ahead < window):
            nxt = next(it, None)
            if nxt is None:
                exhausted = True
                break
            pool.append(nxt)
            sizes.append(len(nxt.tokens))
            if base + len(pool) - 1 > current:
                ahead += sizes[-1]
        if current >= base + len(pool):
            return
        yield current - base, pool
        behind += sizes[current - base]
        current += 1
        if current < base + len(pool):
            ahead -= sizes[current - base]
        drop = 0
        while drop < current - base and behind - sizes[drop] >= window:
            behind -= sizes[drop]
            drop += 1
        if drop:
            del pool[:drop], sizes[:drop]
            base += drop


def sentence_pair_rows(docs: Iterable[TokenizedDocument], length: int, cls_id: int, sep_id: int,
                       rng: np.random.Generator, short_seq_prob: float = 0.1,
                       negatives: Literal["random_document", "swap", "distance", "none"] = "random_document",
                       window: int | None = None) -> Iterator[PackedRow]:
    """BERT's create_instances_from_document for every document: ``[CLS] A [SEP] B [SEP]`` with the pair label.

    ``negatives``: ``random_document`` (NSP: B taken from another document), ``swap`` (SOP, ALBERT's
    create_pretraining_data: A and B are always consecutive, and exchanged for a negative) or ``distance`` (ERNIE
    2.0's three classes, :func:`_distance_segment`) or ``none`` (B always continues A: UniLM). Other documents come
    from :func:`document_pools` (``window``).
    """
    max_tokens = length - 3
    cls, sep = np.array([cls_id]), np.array([sep_id])
    for di, pool in document_pools(docs, window):
        doc = pool[di]
        bounds, count = doc.bounds, doc.sentence_count
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        first = i = 0  # the chunk: sentences first..i
        while i < count:
            if i == count - 1 or bounds[i + 1] - bounds[first] >= target:
                chunk = i + 1 - first
                a_end = first + (1 if chunk < 2 else int(rng.integers(1, chunk)))  # A: sentences first..a_end-1
                a_len = bounds[a_end] - bounds[first]
                b_doc, b_lo, b_hi = doc, bounds[a_end], bounds[i + 1]  # B: the rest of the chunk, unless...
                is_random = (negatives == "random_document" and len(pool) > 1
                             and (chunk == 1 or rng.random() < 0.5))
                label = int(is_random)
                if negatives == "distance":
                    segment, label = _distance_segment(pool, di, first, a_end - 1, target - a_len, rng,
                                                       adjacent=chunk > 1)
                    if label != 0:
                        b_doc, b_lo, b_hi = segment
                        i = a_end - 1  # put the unused sentences back
                elif is_random:
                    other = di
                    for _ in range(10):
                        other = int(rng.integers(0, len(pool)))
                        if other != di:
                            break
                    b_doc = pool[other]
                    b_doc, b_lo, b_hi = _sentence_run(b_doc, int(rng.integers(0, b_doc.sentence_count)),
                                                      b_doc.sentence_count, target - a_len)
                    i = a_end - 1  # put the unused sentences back
                if a_len and b_hi > b_lo:
                    a_front, a_back, b_front, b_back = _pair_trims(a_len, b_hi - b_lo, max_tokens, rng)
                    a = doc.tokens[bounds[first] + a_front: bounds[a_end] - a_back]
                    b = b_doc.tokens[b_lo + b_front: b_hi - b_back]
                    if negatives == "swap" and rng.random() < 0.5:
                        a, b, label = b, a, 1
                    yield PackedRow(np.concatenate([cls, a, sep, b, sep]), None, len(a) + 2, label)
                first = i + 1
            i += 1


def pack_sentence_pairs(docs: list[TokenizedDocument], length: int, cls_id: int, sep_id: int, pad_id: int,
                        rng: np.random.Generator, short_seq_prob: float = 0.1,
                        negatives: Literal["random_document", "swap", "distance", "none"] = "random_document"
                        ) -> PackedBlocks:
    """:func:`sentence_pair_rows` of a corpus in memory, as blocks."""
    rows = list(sentence_pair_rows(docs, length, cls_id, sep_id, rng, short_seq_prob, negatives))
    return blocks_from_rows(rows, length, pad_id, pairs=True)


def pack_translation_pairs(pairs: list[tuple[list[int], list[int]]], length: int, cls_id: int, sep_id: int,
                           pad_id: int, languages: tuple[int, int], rng: np.random.Generator) -> PackedBlocks:
    """XLM's translation language modelling input (Lample & Conneau 2019, sec. 3.3 and fig. 2): one sentence pair
    per block, ``[CLS] source [SEP] target [SEP]``, positions restarting at the target sentence and every token
    tagged with its sentence's language; a pair longer than the block loses tokens as BERT's truncate_seq_pair
    does. ``pairs`` hold flagged tokens (:func:`~plm_lightning.corpus.tokenized.flagged_pairs`), so word-level masking
    sees word starts."""
    rows, positions, language_rows = [], [], []
    for source, target in pairs:
        a, b = list(source), list(target)
        _truncate_pair(a, b, length - 3, rng)
        if not a or not b:
            continue
        rows.append(PackedRow([cls_id, *a, sep_id, *b, sep_id]))
        positions.append([*range(len(a) + 2), *range(len(b) + 1)])
        language_rows.append([languages[0]] * (len(a) + 2) + [languages[1]] * (len(b) + 1))
    blocks = blocks_from_rows(rows, length, pad_id)
    for name in KNOWLEDGE_FIELDS:
        setattr(blocks, name, None)
    blocks.position_ids = np.zeros((len(rows), length), dtype=np.int16)
    blocks.language_ids = np.zeros((len(rows), length), dtype=np.int8)
    for i, (p, lang) in enumerate(zip(positions, language_rows)):
        blocks.position_ids[i, : len(p)] = p
        blocks.language_ids[i, : len(lang)] = lang
    return blocks


def _distance_segment(docs: Sequence[TokenizedDocument], di: int, a_first: int, a_last: int, budget: int,
                      rng: np.random.Generator, adjacent: bool) -> tuple[tuple[TokenizedDocument, int, int], int]:
    """ERNIE 2.0's sentence distance (Sun et al. 2020, sec. 4.2.2), three classes drawn uniformly: 0 = B follows A,
    1 = B from the same document but not adjacent to A (at least one sentence between), 2 = B from another
    document. Returns ((document, start, end): B's tokens, label); label 0 leaves B to the caller (the rest of A's
    chunk). A class that the document cannot give (one sentence, one document) falls back to another."""
    doc = docs[di]
    count = doc.sentence_count
    far = [j for j in range(count) if j >= a_last + 2 or j <= a_first - 2]
    choices = [c for c, ok in ((0, adjacent), (1, bool(far)), (2, len(docs) > 1)) if ok]
    if not choices:
        return (doc, 0, 0), 0
    label = choices[int(rng.integers(0, len(choices)))]
    if label == 0:
        return (doc, 0, 0), 0
    if label == 1:
        j = far[int(rng.integers(0, len(far)))]
        stop = count if j > a_last else a_first - 1  # a run before A ends a sentence short of it
    else:
        other = di
        while other == di:
            other = int(rng.integers(0, len(docs)))
        doc = docs[other]
        j, stop = int(rng.integers(0, doc.sentence_count)), doc.sentence_count
    return _sentence_run(doc, j, stop, budget), label


def split_documents(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic train/validation split by document index."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = 0 if val_fraction <= 0 or n < 2 else max(1, int(round(val_fraction * n)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


PAIR_NEGATIVES = {"sentence_pairs": "random_document", "sentence_order": "swap", "sentence_distance": "distance",
                  "continuation_pairs": "none"}
"""The pair modes and how each draws its segment B (:func:`sentence_pair_rows`)."""


def pack(docs: list[TokenizedDocument], mode: str, length: int, tokenizer: TextTokenizer, seed: int,
         knowledge: bool = False) -> PackedBlocks:
    """Blocks of ``mode`` from a corpus in memory; the ERNIE unit arrays are kept only with ``knowledge``."""
    rows = packed_rows(docs, mode, length, tokenizer, np.random.default_rng(seed))
    return rows_to_blocks(list(rows), mode, length, tokenizer, knowledge)


def rows_to_blocks(rows: Sequence[PackedRow], mode: str, length: int, tokenizer: TextTokenizer,
                   knowledge: bool = False) -> PackedBlocks:
    """Rows of ``mode`` as blocks (padded with the mode's pad token); ERNIE's unit arrays only with ``knowledge``."""
    pad = tokenizer.ids["eos"] if mode == "contiguous" else tokenizer.ids.get("pad", 0)
    blocks = blocks_from_rows(rows, length, pad, pairs=mode in PAIR_NEGATIVES)
    if not knowledge:
        for name in KNOWLEDGE_FIELDS:
            setattr(blocks, name, None)
    return blocks


def packed_rows(docs: Iterable[TokenizedDocument], mode: str, length: int, tokenizer: TextTokenizer,
                rng: np.random.Generator, window: int | None = None) -> Iterator[PackedRow]:
    """The rows of packing ``mode``, one document at a time (a stream of documents gives a stream of rows);
    ``rng`` draws the pair modes' choices, ``window`` bounds their pool of other documents."""
    ids = tokenizer.ids
    if mode == "concatenated":
        return contiguous_rows(docs, length, None)
    tokenizer.require(("eos",) if mode in ("contiguous", "documents") else ("cls", "sep", "pad"),
                      f"data.packing={mode} (contiguous and documents need eos; the sentence modes cls, sep and pad)")
    if mode == "contiguous":
        return contiguous_rows(docs, length, ids["eos"])
    if mode == "documents":
        tokenizer.require(("pad",), "data.packing=documents")
        return document_rows(docs, length, ids["eos"])
    if mode in ("full_sentences", "doc_sentences"):
        return sentence_rows(docs, length, ids["cls"], ids["sep"], cross_documents=mode == "full_sentences")
    if mode in PAIR_NEGATIVES:
        return sentence_pair_rows(docs, length, ids["cls"], ids["sep"], rng, negatives=PAIR_NEGATIVES[mode],
                                  window=window)
    raise ConfigError(f"data.packing={mode!r} is not one of {', '.join(PACKING_MODES)}")
