"""REALM's data (Guu et al. 2020, sec. 3-4): a knowledge corpus of text blocks to retrieve from, and pretraining
queries - sentences of the same corpus with one salient span masked - each knowing the block it came from (REALM
never retrieves a sentence's own block: "prohibiting trivial retrieval", sec. 3.4).

* Blocks: each document's sentences packed greedily into blocks of at most ``block_len`` tokens (REALM: 288
  wordpieces of Wikipedia), ``[CLS] block [SEP]`` for the document encoder.
* Queries: ``[CLS] sentence [SEP]`` with one salient span (entity or date) masked
  (:mod:`plm_lightning.data.corruption.salient_span`); sentences without one are skipped, as in REALM.
* Inverse Cloze Task pairs for the retriever's warm start (Lee et al. 2019, ORQA sec. 3.3, REALM sec. 3.4): the
  unmasked sentence and its block with the sentence removed (kept in 10% of pairs).
* On the synthetic knowledge world (``data.source: world...``), each query also lists the *other* blocks that state
  the same fact, so retrieval recall can be measured (``relevant``).
* Held-out queries: ``holdout: documents`` keeps a share of the documents' sentences out of training, but their facts
  are still stated by the training sentences of other documents, so a reader can memorise them and validation
  measures parametric knowledge and retrieval together. ``holdout: facts`` (world data) keeps a share of the *facts*
  out: no training query states one, only the knowledge corpus does, so validation measures what is reachable by
  retrieval alone (the open-book setting REALM's open-QA evaluation stands for).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch

from plm_lightning.corpus.sentences import split_corpus
from plm_lightning.data.collators import pad_rows, sample_keys
from plm_lightning.data.corruption.counter_rng import uniforms
from plm_lightning.data.corruption.salient_span import mask_salient_span, replace_span, salient_spans
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.sampling import BlockSampler, KeyedList, ResumableDataLoader
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError


@dataclass(frozen=True)
class RealmQuery:
    """One pretraining sentence: token ids, each token's word, the salient word spans, its block and where the
    sentence sits in the block's tokens, the other blocks stating its fact and the fact's id (world data only)."""

    ids: np.ndarray
    token_words: np.ndarray
    spans: tuple[tuple[int, int], ...]
    block: int
    offsets: tuple[int, int]
    relevant: tuple[int, ...] = ()
    fact: int | None = None


@dataclass
class RealmCorpus:
    blocks: list[np.ndarray]
    queries: dict[str, list[RealmQuery]]


def build_corpus(documents: list[str], tokenizer, block_len: int, query_len: int, val_fraction: float,  # noqa: ANN001
                 seed: int, sentence_facts: list[list[int] | None] | None = None,
                 holdout: Literal["documents", "facts"] = "documents", splitter: str = "pysbd") -> RealmCorpus:
    """Blocks and queries of ``documents``; ``sentence_facts`` (per document, the fact id of each sentence, or None)
    fills each query's ``relevant`` blocks. A ``val_fraction`` of the documents (``holdout: documents``) or of the
    facts (``holdout: facts``, needs ``sentence_facts``: every query stating one is a validation query) is held out,
    seeded; every block stays retrievable."""
    rng = np.random.default_rng(seed)
    val_docs = set(rng.permutation(len(documents))[: int(round(val_fraction * len(documents)))].tolist())
    val_facts: set[int] = set()
    if holdout == "facts":  # the facts' permutation is drawn after the documents' one, as in the measured runs
        if sentence_facts is None:
            raise ConfigError("data.holdout=facts needs data that knows the fact of each sentence: use data.source: "
                              "world (the synthetic knowledge world), or holdout: documents")
        every_fact = sorted({f for facts in sentence_facts if facts is not None for f in facts})
        val_facts = {every_fact[i] for i in rng.permutation(len(every_fact))[: int(round(val_fraction * len(every_fact)))]}
        val_docs = set()
    blocks: list[list[int]] = []
    pending: list[tuple[int, int, int, int, list, list, list]] = []  # doc, sentence, block, start, ids, words, spans
    for d, sentences in enumerate(split_corpus(documents, splitter)):
        if not sentences:
            continue
        encoded = tokenizer.encode_batch_with_words(sentences)
        current: list[int] = []
        for s, (ids, token_words, words) in enumerate(encoded):
            ids = ids[: block_len - 2]
            if current and len(current) + len(ids) > block_len - 2:
                blocks.append(current)
                current = []
            start = len(current)
            current.extend(ids)
            keep = min(len(ids), query_len - 2)
            tw = np.asarray(token_words[:keep], dtype=np.int64)
            spans = [sp for sp in salient_spans(words) if ((tw >= sp[0]) & (tw < sp[1])).any()]
            pending.append((d, s, len(blocks), start, ids, tw, spans))
        blocks.append(current)
    fact_blocks: dict[int, set[int]] = {}
    if sentence_facts is not None:
        for d, s, b, *_ in pending:
            facts = sentence_facts[d] if d < len(sentence_facts) else None
            if facts is not None and s < len(facts):
                fact_blocks.setdefault(facts[s], set()).add(b)
    queries: dict[str, list[RealmQuery]] = {"train": [], "val": []}
    for d, s, b, start, ids, tw, spans in pending:
        if not spans:
            continue
        relevant: tuple[int, ...] = ()
        fact = None
        if sentence_facts is not None and d < len(sentence_facts) and sentence_facts[d] is not None \
                and s < len(sentence_facts[d]):
            fact = sentence_facts[d][s]
            relevant = tuple(sorted(fact_blocks[fact] - {b}))
        query = RealmQuery(np.asarray(ids[: len(tw)], dtype=np.int64), tw, tuple(spans), b,
                           (start, start + len(ids)), relevant, fact)
        queries["val" if d in val_docs or fact in val_facts else "train"].append(query)
    return RealmCorpus([np.asarray(b, dtype=np.int64) for b in blocks], queries)


def world_sentence_facts(source: str, count: int, splitter: str = "pysbd") -> list[list[int] | None]:
    """The fact of each sentence of the world's first ``count`` documents (None for documents whose sentences do not
    match their facts one to one, such as alias definitions)."""
    from plm_lightning.corpus.world import world_from_spec

    documents = world_from_spec(source).documents[:count]
    out: list[list[int] | None] = []
    for doc, sentences in zip(documents, split_corpus([doc.text for doc in documents], splitter), strict=True):
        facts = list(doc.fact_ids)
        out.append(facts if facts and len(sentences) == len(facts) else None)
    return out


class RealmQueries(KeyedList):
    """The queries, each with the (epoch, index) its collator seeds the masking from."""

    def __getitem__(self, key: int | tuple[int, ...]) -> dict[str, Any]:
        key = key if isinstance(key, tuple) else (0, key)
        return {"epoch": key[0], "index": key[1], "query": self.items[key[1]]}


def span_substitutes(queries: list[RealmQuery], classes: dict[tuple[int, ...], int] | None = None,
                     ) -> dict[tuple[int, int], np.ndarray]:
    """Every distinct salient span's token ids among ``queries``, grouped by entity class and length: ``{(class,
    n): [spans, n]}``, the entities a counterfactual copy may put in place of an answer of class ``class`` and
    ``n`` tokens. ``classes`` maps an entity's token ids to its class (:func:`world_entity_classes`); spans it does
    not know, and every span without it, are class -1."""
    found: dict[tuple[int, int], set[tuple[int, ...]]] = {}
    for q in queries:
        for start, end in q.spans:
            tokens = tuple(q.ids[(q.token_words >= start) & (q.token_words < end)].tolist())
            if tokens:
                found.setdefault(((classes or {}).get(tokens, -1), len(tokens)), set()).add(tokens)
    return {key: np.asarray(sorted(spans), dtype=np.int64) for key, spans in found.items()}


def world_entity_classes(source: str, tokenizer) -> dict[tuple[int, ...], int]:  # noqa: ANN001
    """The synthetic world's entities by token ids: subjects and their aliases are class 0, the objects of each
    object type (city, language, ...) one class each, so a counterfactual answer is of the answer's type."""
    from plm_lightning.corpus.world import world_from_spec

    world = world_from_spec(source)
    groups = [sorted({*world.subjects, *world.aliases.values()}), *(sorted(names) for _, names in
                                                                   sorted(world.objects.items()))]
    classes: dict[tuple[int, ...], int] = {}
    for c, names in enumerate(groups):
        for ids in tokenizer.encode_batch(names):
            classes[tuple(ids)] = c
    return classes


class REALMCollator:
    """Masks one salient span per query (seeded per sample) and builds the ICT pairs from the blocks; on world data
    also draws, per query, one of the other blocks that state its fact (``fact_blocks``, its own block where none
    does: what ``REALM(copy_source="fact")`` reads in its copy steps).

    With ``substitutes`` (:func:`span_substitutes`) it also builds each query's counterfactual copy
    (``REALM(copy_source="counterfactual")``): another entity ``t'`` of the answer's class (``classes``: a city for
    a city; any entity without them) and token length, drawn from the sample's key, replaces every occurrence of the
    answer ``t`` in the ``fact_blocks`` block (``copy_ids``, ``copy_mask``) and in the labels (``copy_labels``). The
    reader cannot have memorised ``t'``, so only reading the block predicts it; and ``t'`` is of the answer's class
    so that it is not given away by being out of place (a person where a city belongs). Queries whose block does not
    spell ``t`` (an alias-only statement) or whose ``t`` has no other entity of its class and length get no copy
    labels (all -100)."""

    objective = "salient_span"

    def __init__(self, blocks: list[np.ndarray], cls_id: int, sep_id: int, mask_id: int, pad_id: int, seed: int,
                 ict_keep_prob: float = 0.1, substitutes: dict[tuple[int, int], np.ndarray] | None = None,
                 classes: dict[tuple[int, ...], int] | None = None) -> None:
        self.blocks, self.cls, self.sep, self.mask, self.pad = blocks, cls_id, sep_id, mask_id, pad_id
        self.seed, self.ict_keep_prob, self.substitutes, self.classes = seed, ict_keep_prob, substitutes, classes or {}

    def _counterfactual(self, block: int, label: np.ndarray, key: np.uint64) -> tuple[np.ndarray, np.ndarray]:
        """(the copy block's tokens, its labels): ``t'`` for ``t`` in both, or the untouched block and no labels."""
        answer = label[label != -100]
        pool = self.substitutes.get((self.classes.get(tuple(answer.tolist()), -1), len(answer)))
        none = self.blocks[block], np.full_like(label, -100)
        if pool is None:
            return none
        pick = min(int(uniforms(key, 1, 14)[0, 0] * len(pool)), len(pool) - 1)
        if (pool[pick] == answer).all():  # never the true answer: the next entity of the pool
            pick = (pick + 1) % len(pool)
        substitute = pool[pick]
        tokens, count = replace_span(self.blocks[block], answer, substitute)
        if not count or (substitute == answer).all():  # t is not spelled there, or t is the pool's only entity
            return none
        copy_label = label.copy()
        copy_label[label != -100] = substitute
        return tokens, copy_label

    def _wrap(self, ids: np.ndarray) -> np.ndarray:
        return np.concatenate([[self.cls], ids, [self.sep]]).astype(np.int64)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        keys = sample_keys(self.seed, samples)
        inputs, labels, ict_queries, contexts, fact_blocks, copies, copy_labels = [], [], [], [], [], [], []
        for sample, key in zip(samples, keys):
            q: RealmQuery = sample["query"]
            pick = min(int(uniforms(np.uint64(key), 1, 13)[0, 0] * len(q.relevant)), len(q.relevant) - 1)
            fact_blocks.append(q.relevant[pick] if q.relevant else q.block)
            masked, label, _ = mask_salient_span(q.ids, q.token_words, q.spans, key, self.mask)
            inputs.append(self._wrap(masked))
            labels.append(np.concatenate([[-100], label, [-100]]))
            if self.substitutes is not None:
                copy, copy_label = self._counterfactual(fact_blocks[-1], label, np.uint64(key))
                copies.append(self._wrap(copy))
                copy_labels.append(np.concatenate([[-100], copy_label, [-100]]))
            ict_queries.append(self._wrap(q.ids))
            block = self.blocks[q.block]
            keep = uniforms(np.uint64(key), 1, 12)[0, 0] < self.ict_keep_prob
            context = block if keep else np.concatenate([block[: q.offsets[0]], block[q.offsets[1]:]])
            contexts.append(self._wrap(context))
        width = max(1, max(len(s["query"].relevant) for s in samples))
        relevant = torch.full((len(samples), width), -1, dtype=torch.long)
        for i, s in enumerate(samples):
            relevant[i, : len(s["query"].relevant)] = torch.tensor(s["query"].relevant, dtype=torch.long)
        ids = pad_rows(inputs, self.pad)
        ict_ids, ctx_ids = pad_rows(ict_queries, self.pad), pad_rows(contexts, self.pad)
        lengths = lambda rows, width: torch.arange(width)[None] < torch.tensor([len(r) for r in rows])[:, None]  # noqa: E731
        batch = {"input_ids": ids, "attention_mask": lengths(inputs, ids.shape[1]).long(),
                 "labels": pad_rows(labels, -100), "block_ids": torch.tensor([s["query"].block for s in samples]),
                 "relevant_blocks": relevant, "fact_blocks": torch.tensor(fact_blocks),
                 "ict_query_ids": ict_ids, "ict_query_mask": lengths(ict_queries, ict_ids.shape[1]).long(),
                 "ict_context_ids": ctx_ids, "ict_context_mask": lengths(contexts, ctx_ids.shape[1]).long()}
        if copies:
            copy_ids = pad_rows(copies, self.pad)
            batch.update({"copy_ids": copy_ids, "copy_mask": lengths(copies, copy_ids.shape[1]).long(),
                          "copy_labels": pad_rows(copy_labels, -100)})
        return batch


class REALMDataModule(TextDataModule):
    """Queries (salient-span masked sentences, ``seq_len`` tokens at most) and the knowledge corpus the model
    retrieves from (``knowledge_blocks``)."""

    document_mask_refusal = ("builds its query rows and retrieved documents itself; there is no per-document mask for "
                            "them")

    inspection_view = "retrieval"

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(self, *args: Any, block_len: int = 288, ict_keep_prob: float = 0.1,
                 holdout: Literal["documents", "facts"] = "documents", **kwargs: Any) -> None:
        """
        Args:
            block_len: Tokens per knowledge block, [CLS] and [SEP] included (REALM: 288).
            ict_keep_prob: Inverse Cloze Task: share of pairs whose context still holds the query sentence (ORQA
                and REALM: 0.1).
            holdout: What ``val_fraction`` holds out of the training queries: documents (their facts are still
                stated by other training sentences) or facts (world data: stated only in the knowledge corpus, so
                validation measures what retrieval alone brings).
        """
        kwargs.setdefault("packing", "doc_sentences")
        super().__init__(*args, **kwargs)
        if block_len < 8:
            raise ConfigError(f"data.block_len={block_len} is too short; use at least 8 tokens")
        if not 0.0 <= ict_keep_prob <= 1.0:
            raise ConfigError(f"data.ict_keep_prob={ict_keep_prob} must lie in [0, 1]")
        if holdout not in ("documents", "facts"):
            raise ConfigError(f"data.holdout={holdout!r} is not one of documents, facts")
        self.block_len, self.ict_keep_prob, self.holdout = block_len, ict_keep_prob, holdout
        self.corpus: RealmCorpus | None = None

    def _load_blocks(self) -> None:
        from plm_lightning.corpus.world import is_world_spec

        if self.corpus is not None:
            return
        documents = self.documents()[0]
        facts = (world_sentence_facts(self.source, len(documents), self.sentence_splitter)
                 if is_world_spec(self.source) else None)
        self.corpus = build_corpus(documents, self.tokenizer, self.block_len, self.seq_len, self.val_fraction,
                                   self.seed, facts, self.holdout, self.sentence_splitter)
        if not self.corpus.queries["train"]:
            raise ConfigError(f"data.source '{self.source or 'embedded'}' has no sentence with a salient span (an "
                              "entity or a date) to mask; REALM needs named entities or dates in its text")
        self.blocks = {"train": self.corpus.queries["train"]}  # marks the data as loaded for TextDataModule.setup

    def contract(self) -> DataContract:
        return replace(super().contract(), knowledge_blocks=self.knowledge_blocks)

    @property
    def knowledge_blocks(self) -> list[np.ndarray]:
        """Token ids of every retrievable block (no special tokens), in block-id order."""
        self._load_blocks()
        return self.corpus.blocks

    def collator(self) -> REALMCollator:
        from plm_lightning.corpus.world import is_world_spec

        ids = self.tokenizer.ids
        classes = world_entity_classes(self.source, self.tokenizer) if is_world_spec(self.source) else None
        return REALMCollator(self.corpus.blocks, ids["cls"], ids["sep"], ids["mask"], ids["pad"], self.seed,
                             self.ict_keep_prob, span_substitutes(self.corpus.queries["train"], classes), classes)

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        self._load_blocks()
        queries = self.corpus.queries[split]
        if not queries:
            return []
        replicas, rank = self._replicas()
        sampler = BlockSampler(len(queries), shuffle=shuffle, seed=self.seed, num_replicas=replicas, rank=rank,
                               drop_last=shuffle)
        return self._resumable(RealmQueries(queries), sampler, shuffle)
