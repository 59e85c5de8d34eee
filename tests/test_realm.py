"""REALM: salient span masking (property tests), the knowledge corpus and its queries, the marginal likelihood
against a brute-force sum over documents, retrieval (own block excluded, FAISS = exact), gradients reaching the
retriever, and the recipe end to end."""

import csv
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.corruption.salient_span import mask_salient_span, replace_span, salient_spans
from plm_lightning.errors import ConfigError
from plm_lightning.nn.stack_inputs import StackInputs
from tests.conftest import ROOT, run_cli


def test_salient_spans_are_entities_and_dates() -> None:
    words = "Arvo Kessel was born in Tamberg on 4 July 1969 , and The band played".split()
    assert salient_spans(words) == [(0, 2), (5, 6), (7, 10), (12, 13)]
    assert salient_spans("The cat sat on the mat .".split()) == []  # sentence case is not an entity
    assert salient_spans("It may rain in May 2020 .".split()) == [(4, 6)]  # "may" alone is not a date


@st.composite
def sentences(draw):  # noqa: ANN001, ANN201
    n_words = draw(st.integers(1, 12))
    token_words = np.repeat(np.arange(n_words), draw(st.lists(st.integers(1, 3), min_size=n_words, max_size=n_words)))
    ids = np.asarray(draw(st.lists(st.integers(5, 99), min_size=len(token_words), max_size=len(token_words))))
    starts = sorted(set(draw(st.lists(st.integers(0, n_words), min_size=2, max_size=6))))
    spans = [(a, b) for a, b in zip(starts, starts[1:])]
    return ids, token_words, spans


@settings(max_examples=200, deadline=None)
@given(sentences(), st.integers(0, 2**63 - 1))
def test_salient_span_masking_masks_exactly_one_whole_span(sample, key: int) -> None:
    ids, token_words, spans = sample
    if not spans:
        with pytest.raises(ValueError):
            mask_salient_span(ids, token_words, spans, np.uint64(key), 1)
        return
    masked, labels, (start, end) = mask_salient_span(ids, token_words, spans, np.uint64(key), mask_id=1)
    assert (start, end) in spans
    inside = (token_words >= start) & (token_words < end)
    assert (masked[inside] == 1).all() and (masked[~inside] == ids[~inside]).all()
    assert (labels[inside] == ids[inside]).all() and (labels[~inside] == -100).all()
    again = mask_salient_span(ids, token_words, spans, np.uint64(key), mask_id=1)  # a pure function of the key
    assert (again[0] == masked).all() and again[2] == (start, end)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), min_size=1, max_size=3),
       st.integers(100, 200))
def test_replace_span_swaps_every_occurrence_and_nothing_else(tokens: list[int], span: list[int], first: int) -> None:
    tokens, span = np.asarray(tokens, dtype=np.int64), np.asarray(span, dtype=np.int64)
    substitute = np.arange(first, first + len(span))  # no token in common with the text
    out, count = replace_span(tokens, span, substitute)
    assert len(out) == len(tokens)
    occurrences = [i for i in range(len(out) - len(span) + 1) if (out[i: i + len(span)] == substitute).all()]
    assert len(occurrences) == count
    assert not any((out[i: i + len(span)] == span).all() for i in range(len(out) - len(span) + 1))
    changed = np.zeros(len(out), dtype=bool)
    for i in occurrences:
        changed[i: i + len(span)] = True
    assert (out[~changed] == tokens[~changed]).all() and (tokens[changed] == np.tile(span, count)).all()
    back, again = replace_span(out, substitute, span)
    assert again == count and (back == tokens).all()
    with pytest.raises(ValueError, match="same"):
        replace_span(tokens, span, substitute[:-1] if len(span) > 1 else np.zeros(0, dtype=np.int64))


@pytest.fixture(scope="module")
def world_data(tmp_path_factory):
    from plm_lightning.data.realm import REALMDataModule

    dm = REALMDataModule(source="world:seed=0,subjects=12", tokenizer="wordpiece", tokenizer_vocab_size=512,
                         seq_len=32, block_len=48, batch_size=6, val_fraction=0.1,
                         cache_dir=str(tmp_path_factory.mktemp("cache")))
    dm.setup("fit")
    return dm


def test_queries_know_their_block_and_the_blocks_that_state_their_fact(world_data) -> None:
    corpus = world_data.corpus
    assert corpus.queries["train"] and corpus.queries["val"]
    for q in corpus.queries["train"][:50]:
        block = corpus.blocks[q.block]
        assert (block[q.offsets[0]: q.offsets[1]][: len(q.ids)] == q.ids).all()  # the sentence sits in its block
        assert q.block not in q.relevant
    with_relevant = [q for q in corpus.queries["train"] if q.relevant]
    assert len(with_relevant) > 0.9 * len(corpus.queries["train"])  # every fact is stated in >= 2 documents
    batch = next(iter(world_data.train_dataloader()))
    masked = batch["labels"] != -100
    assert masked.any(1).all()  # one salient span per query
    assert (batch["input_ids"][masked] == world_data.tokenizer.ids["mask"]).all()
    # ICT: the context is the block without the sentence (kept in 10% of pairs)
    assert batch["ict_context_mask"].sum(1).le(torch.tensor([len(corpus.blocks[int(b)]) + 2 for b in batch["block_ids"]])).all()


def test_holding_out_facts_leaves_them_to_the_knowledge_corpus_alone(world_data, tmp_path) -> None:
    from plm_lightning.data.realm import REALMDataModule

    dm = REALMDataModule(source="world:seed=0,subjects=12", tokenizer="wordpiece", tokenizer_vocab_size=512,
                         seq_len=32, block_len=48, batch_size=6, val_fraction=0.2, holdout="facts",
                         cache_dir=str(tmp_path))
    dm.setup("fit")
    train, val = dm.corpus.queries["train"], dm.corpus.queries["val"]
    held_out = {q.fact for q in val}
    assert None not in held_out and not held_out & {q.fact for q in train}  # no training query states a held-out fact
    every = {q.fact for q in train + val if q.fact is not None}
    assert len(held_out) == round(0.2 * len({f for facts in dm_facts(dm) for f in facts}))
    assert held_out < every and all(q.relevant for q in val)  # ... but other blocks state each of them
    assert len(dm.corpus.blocks) == len(world_data.corpus.blocks)  # the knowledge corpus is the same
    # holdout: documents splits sentences by document, so a held-out sentence's fact is still trained on
    assert {q.fact for q in world_data.corpus.queries["val"]} & {q.fact for q in world_data.corpus.queries["train"]}
    with pytest.raises(ConfigError, match="holdout"):
        REALMDataModule(source="world", holdout="sentences")
    text = REALMDataModule(source="", tokenizer="wordpiece", tokenizer_vocab_size=512, seq_len=32, block_len=48,
                           holdout="facts", cache_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="holdout=facts needs"):
        text.setup("fit")


def dm_facts(dm) -> list[list[int]]:  # noqa: ANN001
    from plm_lightning.data.realm import world_sentence_facts

    return [f for f in world_sentence_facts(dm.source, len(dm.documents()[0])) if f is not None]


@pytest.fixture(scope="module")
def model(world_data):
    from plm_lightning.objectives import REALM

    torch.manual_seed(0)
    m = REALM(backbone="tiny", backbone_overrides={"hidden_size": 32, "num_layers": 2, "num_heads": 2,
                                                    "intermediate_size": 64, "dropout": 0.0, "attention_dropout": 0.0},
              vocab_size=world_data.tokenizer.vocab_size, top_k=4, retriever_dim=16)
    m.tokenizer = world_data.tokenizer
    m.set_corpus(world_data.knowledge_blocks)
    return m


def test_join_is_query_then_document_without_padding_between(model, world_data) -> None:
    batch = next(iter(world_data.train_dataloader()))
    ids, mask = batch["input_ids"][:2], batch["attention_mask"][:2]
    pick = torch.tensor([[0, 1], [2, 3]])
    docs, doc_mask = model.corpus_ids[pick], model.corpus_mask[pick]
    joined, joined_mask, types = model._join(ids, mask, docs, doc_mask)
    for b in range(2):
        for z in range(2):
            query = ids[b][mask[b].bool()].tolist()
            body = docs[b, z][doc_mask[b, z].bool()].tolist()[1:]
            assert joined[b, z][joined_mask[b, z].bool()].tolist() == query + body
            assert types[b, z].sum() == len(body) and types[b, z, : len(query)].sum() == 0


def test_marginal_likelihood_is_the_sum_over_retrieved_documents(model, world_data) -> None:
    """-log sum_z p(z|x) p(y|z,x) with the reader run on each (x, z) pair separately (brute force)."""
    model.eval()
    batch = next(iter(world_data.train_dataloader()))
    with torch.no_grad():
        model.refresh_index()
        out = model.compute_loss(batch)
        q = model.embed_queries(batch["input_ids"], batch["attention_mask"])
        top = model.retrieve(q, 4, batch["block_ids"])
        assert not (top == batch["block_ids"][:, None]).any()  # never the query's own block
        empty = torch.tensor([[world_data.tokenizer.ids["cls"], world_data.tokenizer.ids["sep"]]])
        totals = []
        for b in range(len(q)):
            query = batch["input_ids"][b][batch["attention_mask"][b].bool()]
            labels = batch["labels"][b][: len(query)]
            docs = [model.corpus_ids[i][model.corpus_mask[i].bool()] for i in top[b]] + [empty[0]]
            scores = torch.stack([q[b] @ model.embed_documents(d[None], torch.ones_like(d[None]))[0] for d in docs])
            log_pz = scores.log_softmax(0)
            log_py = []
            for d in docs:
                ids = torch.cat([query, d[1:]])[None]
                types = torch.cat([torch.zeros(len(query)), torch.ones(len(d) - 1)]).long()[None]
                inputs = StackInputs(attention_mask=torch.ones_like(ids), ids={"token_type_ids": types})
                hidden = model.backbone(ids, inputs).last_hidden_state[0, : len(query)]
                logp = model.lm_head(hidden).log_softmax(-1)
                chosen = labels != -100
                log_py.append(logp[chosen].gather(1, labels[chosen][:, None]).sum())
            totals.append(torch.logsumexp(log_pz + torch.stack(log_py), 0))
    assert out["loss"].item() == pytest.approx(-torch.stack(totals).mean().item(), rel=1e-4)
    model.train()


def test_faiss_search_matches_exact_search(model, world_data) -> None:
    pytest.importorskip("faiss")
    batch = next(iter(world_data.train_dataloader()))
    with torch.no_grad():
        model.refresh_index()
        q = model.embed_queries(batch["input_ids"], batch["attention_mask"])
        exact = model.retrieve(q, 4, batch["block_ids"])
        model.hparams.search = "faiss"
        try:
            model.refresh_index()
            found = model.retrieve(q, 4, batch["block_ids"])
        finally:
            model.hparams.search = "exact"
            model.refresh_index()
    # the same k best inner products (an untrained retriever has near ties, whose order may differ)
    score = lambda ids: torch.einsum("bd,bkd->bk", q, model.index[ids])  # noqa: E731
    assert torch.allclose(score(exact), score(found), atol=1e-4)
    assert not (found == batch["block_ids"][:, None]).any()


def test_the_retriever_learns_through_p_z_given_x(model, world_data) -> None:
    batch = next(iter(world_data.train_dataloader()))
    model.zero_grad()
    model.compute_loss(batch)["loss"].backward()
    for part in (model.query_encoder, model.document_encoder, model.backbone):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())
    model.zero_grad()


def test_without_retrieval_the_reader_reads_the_null_document_alone(model, world_data) -> None:
    """``retrieval=False`` (the no-retrieval baseline): the loss is the reader's on ``[CLS] x [SEP]`` only, and no
    gradient reaches the retriever."""
    batch = next(iter(world_data.train_dataloader()))
    model.hparams.retrieval = False
    try:
        model.zero_grad()
        out = model.compute_loss(batch)
        out["loss"].backward()
        assert "retrieval_recall" not in out and "retrieval_null_probability" not in out
        assert all(p.grad is None for m in (model.query_encoder, model.document_encoder) for p in m.parameters())
        with torch.no_grad():
            totals = []
            for b in range(len(batch["input_ids"])):
                query = batch["input_ids"][b][batch["attention_mask"][b].bool()]
                labels, chosen = batch["labels"][b][: len(query)], batch["labels"][b][: len(query)] != -100
                ids = torch.cat([query, torch.tensor([world_data.tokenizer.ids["sep"]])])[None]  # x + the null body
                types = torch.cat([torch.zeros(len(query)), torch.ones(1)]).long()[None]
                inputs = StackInputs(attention_mask=torch.ones_like(ids), ids={"token_type_ids": types})
                hidden = model.backbone(ids, inputs).last_hidden_state[0, : len(query)]
                logp = model.lm_head(hidden).log_softmax(-1)
                totals.append(logp[chosen].gather(1, labels[chosen][:, None]).sum())
        assert out["loss"].item() == pytest.approx(-torch.stack(totals).mean().item(), rel=1e-4)
    finally:
        model.hparams.retrieval = True
        model.zero_grad()


def test_during_the_warm_start_the_reader_reads_the_null_document_while_ict_trains_the_retriever(model, world_data) -> None:
    """``ict_reader: null`` (the default): while ICT warms the retriever, the reader's loss is the no-retrieval
    baseline's (its MLM stage), the warming retriever's recall is logged, and only ICT trains the retriever;
    ``ict_reader: retrieved`` reads the top-k instead."""
    batch = next(iter(world_data.train_dataloader()))
    model.train()
    model.hparams.ict_steps = 5
    try:
        model.zero_grad()
        out = model.compute_loss(batch)
        (out["loss"] - out["ict_loss"]).backward()  # the reader's part sends nothing to the retriever
        assert all(p.grad is None or not p.grad.any() for m in (model.query_encoder, model.document_encoder)
                   for p in m.parameters())
        assert "retrieval_recall" in out and "retrieval_null_probability" not in out
        model.hparams.retrieval = False
        baseline = model.compute_loss(batch)
        assert "retrieval_recall" not in baseline
        assert out["lm_loss"].item() == pytest.approx(baseline["lm_loss"].item(), rel=1e-5)
        assert out["loss"].item() == pytest.approx(baseline["loss"].item(), rel=1e-5)  # reader + ICT, both
        model.hparams.retrieval, model.hparams.ict_reader = True, "retrieved"
        read = model.compute_loss(batch)
        assert "retrieval_null_probability" in read and read["lm_loss"].item() != pytest.approx(out["lm_loss"].item())
    finally:
        model.hparams.ict_steps, model.hparams.retrieval, model.hparams.ict_reader = 0, True, "null"
        model.zero_grad()


def test_ict_weight_keeps_the_inverse_cloze_task_on_after_the_warm_start(model, world_data) -> None:
    """``ict_weight``: past the warm start the training loss is the marginal likelihood + ict_weight x ICT; 0 (REALM)
    has no ICT term, and neither has validation."""
    batch = next(iter(world_data.train_dataloader()))
    model.train()
    try:
        plain = model.compute_loss(batch)
        assert "ict_loss" not in plain
        model.hparams.ict_weight = 0.5
        out = model.compute_loss(batch)
        assert out["loss"].item() == pytest.approx(plain["loss"].item() + 0.5 * out["ict_loss"].item(), rel=1e-5)
        assert out["ict_loss"].item() == pytest.approx(model.ict_loss(batch).item(), rel=1e-5)
        model.eval()
        assert "ict_loss" not in model.compute_loss(batch)  # validation reports the marginal likelihood alone
    finally:
        model.hparams.ict_weight = 0.0
        model.train()


def test_copy_steps_have_the_reader_read_its_own_block_without_training_the_retriever(model, world_data,
                                                                                      monkeypatch) -> None:
    """``copy_steps``: right after the warm start each query's own block takes the last top-k slot (before the null
    document) and the marginal likelihood sends no gradient to the retriever."""
    batch = next(iter(world_data.train_dataloader()))
    model.train()
    read = []
    original = model._read
    monkeypatch.setattr(model, "_read", lambda b, docs, *rest: read.append(docs) or original(b, docs, *rest))
    model.hparams.copy_steps = 5
    try:
        model.zero_grad()
        out = model.compute_loss(batch)
        docs = read[-1]  # [B, top_k + 1, width]: the search's top_k - 1, the own block, the null document
        assert docs.shape[1] == model.hparams.top_k + 1
        for b, block in enumerate(batch["block_ids"].tolist()):
            own = model.corpus_ids[block][model.corpus_mask[block].bool()]
            assert docs[b, -2, : len(own)].tolist() == own.tolist()
        out["loss"].backward()
        assert all(p.grad is None or not p.grad.any() for m in (model.query_encoder, model.document_encoder)
                   for p in m.parameters())
        assert "retrieval_recall" in out  # the search's own recall, not the own block's
    finally:
        model.hparams.copy_steps = 0
        model.zero_grad()


def test_copy_weight_adds_the_readers_own_loss_on_the_own_block_pair(model, world_data, monkeypatch) -> None:
    """``copy_weight``: in the copy steps the loss is the marginal plus ``copy_weight`` x ``-log p(y | x, own block)``,
    the reader's loss with that block alone."""
    batch = next(iter(world_data.train_dataloader()))
    model.train()
    read = []
    original = model._read
    monkeypatch.setattr(model, "_read", lambda b, *rest: read.append(rest) or original(b, *rest))
    model.hparams.copy_steps = 5
    try:
        torch.manual_seed(0)
        plain = model.compute_loss(batch)
        assert "copy_loss" not in plain
        model.hparams.copy_weight = 0.5
        torch.manual_seed(0)
        out = model.compute_loss(batch)
        assert out["loss"].item() == pytest.approx(plain["loss"].item() + 0.5 * out["copy_loss"].item(), rel=1e-5)
        docs, doc_mask = read[-1][:2]
        model.eval()  # no dropout: the two reads must agree
        with torch.no_grad():
            together = original(batch, docs, doc_mask, torch.zeros_like(docs[..., 0], dtype=torch.float).log_softmax(-1),
                                {}, False, docs.shape[1] - 2)
            alone = original(batch, docs[:, -2:-1], doc_mask[:, -2:-1], torch.zeros(len(docs), 1), {}, False, None)
        assert together["copy_loss"].item() == pytest.approx(alone["loss"].item(), rel=1e-4)
    finally:
        model.hparams.copy_steps, model.hparams.copy_weight = 0, 0.0
        model.train()


def test_copy_source_fact_has_the_reader_read_another_block_stating_the_fact(model, world_data, monkeypatch) -> None:
    """``copy_source="fact"``: the copy slot holds a block that states the query's fact and is not its own, drawn by
    the collator among them from the sample's key (so over epochs more than one of a fact's blocks is read, and the
    same key draws the same block); a query without one reads its own."""
    collator, queries = world_data.collator(), world_data.corpus.queries["train"][:24]
    draws = [collator([{"epoch": epoch, "index": i, "query": q} for i, q in enumerate(queries)])
             for epoch in range(8)]
    for batch in draws:
        relevant, own = batch["relevant_blocks"], batch["block_ids"]
        for b, chosen in enumerate(batch["fact_blocks"].tolist()):
            options = set(relevant[b][relevant[b] >= 0].tolist())
            assert chosen in options if options else chosen == own[b].item()
    assert max(len(q.relevant) for q in queries) >= 2  # some fact is stated by two blocks besides the query's own
    spread = torch.stack([batch["fact_blocks"] for batch in draws])  # [epochs, queries]
    assert any(len(set(spread[:, b].tolist())) > 1 for b in range(len(queries)))  # not always the first one
    again = collator([{"epoch": 3, "index": i, "query": q} for i, q in enumerate(queries)])
    assert torch.equal(again["fact_blocks"], draws[3]["fact_blocks"])
    batch = next(iter(world_data.train_dataloader()))
    model.train()
    read = []
    original = model._read
    monkeypatch.setattr(model, "_read", lambda b, docs, *rest: read.append(docs) or original(b, docs, *rest))
    model.hparams.copy_steps, model.hparams.copy_source = 5, "fact"
    try:
        model.compute_loss(batch)
        docs = read[-1]
        for b, block in enumerate(batch["fact_blocks"].tolist()):
            tokens = model.corpus_ids[block][model.corpus_mask[block].bool()]
            assert docs[b, -2, : len(tokens)].tolist() == tokens.tolist()
    finally:
        model.hparams.copy_steps, model.hparams.copy_source = 0, "own"


def test_the_counterfactual_copy_swaps_the_answer_for_another_entity_in_the_block_and_the_labels(world_data) -> None:
    """Each query's copy block is its ``fact_blocks`` block with every occurrence of the answer ``t`` replaced by
    ``t'``, an entity of the same class (on the world: subjects for a subject, a relation's objects for its
    object) and token length that is not ``t``, and the copy labels hold ``t'`` where the labels hold ``t``; the
    draw is a function of the sample's key and varies over epochs."""
    collator, queries = world_data.collator(), world_data.corpus.queries["train"][:24]
    pool = {key: {tuple(r) for r in spans.tolist()} for key, spans in collator.substitutes.items()}
    assert len({c for c, _ in pool if c >= 0}) >= 4  # subjects and several object types
    draws = [collator([{"epoch": epoch, "index": i, "query": q} for i, q in enumerate(queries)]) for epoch in range(4)]
    covered = 0
    for batch in draws:
        for b, block in enumerate(batch["fact_blocks"].tolist()):
            where = batch["labels"][b] != -100
            answer, copied = batch["labels"][b][where], batch["copy_labels"][b][where]
            assert (batch["copy_labels"][b][~where] == -100).all()
            tokens = batch["copy_ids"][b][batch["copy_mask"][b].bool()][1:-1].numpy()
            if (copied == -100).all():
                assert (tokens == world_data.corpus.blocks[block]).all()
                continue
            covered += 1
            kind = collator.classes.get(tuple(answer.tolist()), -1)
            assert not torch.equal(copied, answer) and tuple(copied.tolist()) in pool[kind, len(answer)]
            assert collator.classes.get(tuple(copied.tolist()), -1) == kind
            expected, count = replace_span(world_data.corpus.blocks[block], answer.numpy(), copied.numpy())
            assert count >= 1 and (tokens == expected).all()
    assert covered > 0.9 * len(queries) * len(draws)
    again = collator([{"epoch": 2, "index": i, "query": q} for i, q in enumerate(queries)])
    assert torch.equal(again["copy_labels"], draws[2]["copy_labels"]) and torch.equal(again["copy_ids"], draws[2]["copy_ids"])
    assert not torch.equal(draws[0]["copy_labels"], draws[1]["copy_labels"])


def test_copy_source_counterfactual_adds_the_readers_loss_on_the_copy_beside_the_marginal(model, world_data,
                                                                                         monkeypatch) -> None:
    """``copy_source="counterfactual"``: the marginal reads the search's own top-k (no copy block in a slot), with
    no gradient to the retriever during the copy steps; a second reader pass scores the counterfactual labels on
    the copy block, and its loss, averaged over the queries that have one, is added with ``copy_weight``."""
    batch = next(iter(world_data.train_dataloader()))
    model.train()
    read = []
    original = model._read
    monkeypatch.setattr(model, "_read", lambda b, docs, *rest: read.append((b, docs)) or original(b, docs, *rest))
    found, search = [], model.retrieve
    monkeypatch.setattr(model, "retrieve", lambda *args: found.append(search(*args)) or found[-1])
    model.hparams.copy_steps, model.hparams.copy_weight, model.hparams.copy_source = 5, 0.5, "counterfactual"
    try:
        model.zero_grad()
        out = model.compute_loss(batch)
        (copy_batch, copy_docs), (_, docs) = read[-2:]
        assert copy_docs.shape[1] == 1 and torch.equal(copy_docs[:, 0], batch["copy_ids"])
        assert torch.equal(copy_batch["labels"], batch["copy_labels"])
        assert docs.shape[1] == model.hparams.top_k + 1
        searched = found[-1]  # the reader reads what the search found, every slot
        assert torch.equal(docs[:, :-1], model.corpus_ids[searched][..., : docs.shape[-1]])
        out["loss"].backward()
        assert all(p.grad is None or not p.grad.any() for m in (model.query_encoder, model.document_encoder)
                   for p in m.parameters())
        assert any(p.grad is not None and p.grad.any() for p in model.backbone.parameters())
        model.eval()  # no dropout: the pieces must add up
        with torch.no_grad():
            marginal = model.compute_loss(batch)["loss"]
            has = (batch["copy_labels"] != -100).any(1)
            alone = [original({**{k: v[i: i + 1] for k, v in batch.items()}, "labels": batch["copy_labels"][i: i + 1]},
                              batch["copy_ids"][i: i + 1, None], batch["copy_mask"][i: i + 1, None],
                              torch.zeros(1, 1), {}, False)["loss"] for i in range(len(has)) if has[i]]
        model.train()
        assert out["copy_loss"].item() == pytest.approx(torch.stack(alone).mean().item(), rel=1e-4)
        assert marginal.item() == pytest.approx(out["loss"].item() - 0.5 * out["copy_loss"].item(), rel=1e-4)
    finally:
        model.hparams.copy_steps, model.hparams.copy_weight, model.hparams.copy_source = 0, 0.0, "own"
        model.zero_grad()
        model.train()


def test_validation_reports_the_readers_accuracy_given_a_block_stating_the_fact(model, world_data,
                                                                                   monkeypatch) -> None:
    """``fact_block_accuracy``: in evaluation only, the reader's token accuracy on the queries that have a relevant
    block, reading the collator's ``fact_blocks`` block alone."""
    batch = next(iter(world_data.train_dataloader()))
    batch["relevant_blocks"][0] = -1  # a query whose fact no other block states is left out
    reads = []
    original = model._read
    monkeypatch.setattr(model, "_read", lambda b, docs, *rest: reads.append((b, docs, original(b, docs, *rest)))
                        or reads[-1][2])
    model.eval()
    try:
        out = model.compute_loss(batch)
        rows, docs, alone = reads[0]
        assert torch.equal(rows["input_ids"], batch["input_ids"][1:]) and docs.shape[1] == 1
        width = docs.shape[-1]
        assert torch.equal(docs[:, 0], model.corpus_ids[batch["fact_blocks"][1:]][:, :width])
        assert model.corpus_mask[batch["fact_blocks"][1:]][:, width:].sum() == 0  # nothing of a block cut off
        hits = (alone["lm_predictions"] == alone["lm_targets"]).float().mean()
        assert out["fact_block_accuracy"].item() == pytest.approx(hits.item())
        assert "fact_block_accuracy" not in model.compute_loss({k: v for k, v in batch.items() if k != "fact_blocks"})
    finally:
        model.train()
    assert "fact_block_accuracy" not in model.compute_loss(batch)


def test_oracle_retrieval_puts_a_block_stating_the_fact_in_every_top_k(model, world_data) -> None:
    """``oracle_retrieval`` (the reader's upper bound): every query with a relevant block gets one, retrieved ones are
    kept, and data that does not know its facts is refused."""
    batch = next(iter(world_data.train_dataloader()))
    top = torch.tensor([[0, 1], [2, 3], [4, 5]])
    relevant = torch.tensor([[7, 9], [3, -1], [-1, -1]])
    assert model._with_relevant_block(top, relevant).tolist() == [[0, 7], [2, 3], [4, 5]]
    model.hparams.oracle_retrieval = True
    try:
        out = model.compute_loss(batch)
        assert out["retrieval_recall"].item() == 1.0
        with pytest.raises(ConfigError, match="data.source: world"):
            model.compute_loss({k: v for k, v in batch.items() if k != "relevant_blocks"})
    finally:
        model.hparams.oracle_retrieval = False


def test_bad_realm_settings_fail_in_one_line() -> None:
    from plm_lightning.objectives import REALM

    with pytest.raises(ConfigError, match="search"):
        REALM(search="annoy")
    with pytest.raises(ConfigError, match="null_document"):
        REALM(ict_steps=10, null_document=False)
    with pytest.raises(ConfigError, match="top_k"):
        REALM(top_k=0)
    with pytest.raises(ConfigError, match="ict_reader"):
        REALM(ict_reader="bm25")
    with pytest.raises(ConfigError, match="ict_weight"):
        REALM(ict_weight=-1.0)
    with pytest.raises(ConfigError, match="copy_steps"):
        REALM(copy_steps=-1)
    with pytest.raises(ConfigError, match="copy_weight"):
        REALM(copy_weight=-1.0)
    with pytest.raises(ConfigError, match="copy_steps > 0"):
        REALM(copy_weight=1.0)
    with pytest.raises(ConfigError, match="copy_source='gold' is not one of own, fact, counterfactual"):
        REALM(copy_source="gold")
    with pytest.raises(ConfigError, match="copy_weight > 0"):
        REALM(copy_steps=10, copy_source="counterfactual")


@pytest.mark.slow
def test_realm_recipe_trains_from_the_cli_and_resumes(tmp_path) -> None:
    args = ["fit", "--config", str(ROOT / "configs" / "realm.yaml"), "--data.source", "world:seed=0,subjects=24",
            "--model.ict_steps", "10", "--model.refresh_every", "10", "--trainer.val_check_interval", "20",
            "--trainer.limit_val_batches", "2", "--trainer.log_every_n_steps", "5", "--data.batch_size", "16"]
    res = run_cli([*args, "--trainer.max_steps", "30"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (metrics,) = (tmp_path / "runs").rglob("metrics.csv")
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    assert [r for r in rows if r.get("train/ict_loss")] and [r for r in rows if r.get("train/retrieval_recall")]
    assert [r for r in rows if r.get("val/retrieval_recall")]
    lrs = [r for r in rows if r.get("lr-AdamW/pg3")][-1]  # the retriever's groups (3, 4) have their own rate
    assert float(lrs["lr-AdamW/pg3"]) == pytest.approx(0.3 * float(lrs["lr-AdamW/pg1"]))
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    assert torch.load(ckpt, weights_only=True)["plm_lightning"]["objective"] == "REALM"
    res = run_cli([*args, "--trainer.max_steps", "40", "--ckpt_path", str(ckpt)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_cli(["inspect", "--config", str(ROOT / "configs" / "realm.yaml"), "--data.source", "world:seed=0,subjects=24",
                   "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["corruption"] == "salient_span" and stats["mean_masked_tokens"] >= 1
    assert stats["queries_with_relevant_blocks"] > 0.9
