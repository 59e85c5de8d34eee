"""ERNIE 2.0 (Sun et al. 2020): sentence reordering classes, the word signals, sentence-distance pairs, the staged
(continual) task schedule in the collator and the sampler, and the model's heads and losses."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.corpus.blocks import TokenizedDocument, pack_sentence_pairs
from plm_lightning.corpus.knowledge_units import word_signals
from plm_lightning.data.collators import MaskedLMSettings
from plm_lightning.data.corruption import IGNORE_INDEX, MaskingConfig
from plm_lightning.data.corruption.sentence_reorder import (
    class_permutation,
    permutation_class,
    reorder_classes,
    reorder_segments,
)
from plm_lightning.data.ernie2 import ERNIE2Collator, ERNIE2DataModule
from plm_lightning.data.sampling import MixtureSampler
from plm_lightning.objectives import ERNIE2


def test_reorder_classes_are_a_bijection():
    assert [reorder_classes(m) for m in (1, 2, 3, 4)] == [1, 3, 9, 33]
    seen = [class_permutation(c) for c in range(reorder_classes(4))]
    assert len(set(seen)) == 33 and all(permutation_class(list(p)) == c for c, p in enumerate(seen))
    assert permutation_class([0]) == 0 and permutation_class([0, 1]) == 1 and permutation_class([2, 1, 0]) == 8


@settings(max_examples=200, deadline=None)
@given(st.integers(4, 60), st.integers(0, 10), st.integers(1, 4), st.integers(0, 2**63 - 1), st.data())
def test_reorder_moves_whole_segments_and_its_class_restores_the_order(real, pad, m, key, data):
    length = real + pad
    starts = np.array(data.draw(st.lists(st.booleans(), min_size=length, max_size=length)))
    starts[[0, 1, real - 1]] = True
    index, label = reorder_segments(starts, real, m, key)
    assert sorted(index.tolist()) == list(range(length))  # a permutation of the positions
    assert index[0] == 0 and index[real - 1] == real - 1 and (index[real:] == np.arange(real, length)).all()
    order = class_permutation(label)
    assert len(order) <= m
    # the shuffled content is len(order) contiguous runs of the original, each starting at a word start
    content = index[1:real - 1]
    breaks = [0, *(np.flatnonzero(np.diff(content) != 1) + 1).tolist(), len(content)]
    runs = [content[a:b] for a, b in zip(breaks, breaks[1:])]
    assert len(runs) <= len(order) and all(starts[r[0]] for r in runs)
    segments = sorted(runs, key=lambda r: r[0])
    if len(runs) == len(order):  # adjacent runs may merge back when the order keeps two neighbours together
        shuffled = [segments[k] for k in order]
        assert np.concatenate(shuffled).tolist() == content.tolist()
    assert reorder_segments(starts, real, m, key)[1] == label  # a function of the key


def test_reorder_distribution_matches_the_definition():
    starts = np.ones(64, dtype=bool)
    labels = [reorder_segments(starts, 64, 3, key)[1] for key in range(3000)]
    counts = np.bincount(labels, minlength=9) / 3000
    expected = [1 / 3, 1 / 6, 1 / 6, *[1 / 18] * 6]  # n ~ U{1,2,3}, then a uniform order of the n segments
    assert np.abs(counts - expected).max() < 0.03, counts


def test_word_signals():
    doc = [["The", "Python", "interpreter", "runs", "."], ["python", "is", "fast", "."], ["Run", "3", "tests"]]
    (cap0, lex0, else0), (cap1, lex1, else1), (cap2, lex2, _) = word_signals(doc)
    assert cap0 == [True, True, False, False, False] and cap2 == [True, False, False]
    assert lex0[-1] is False and lex2[1] is True  # "3" is asked about, "." is not
    assert else0 == [False, True, False, False, True] and else1 == [True, False, False, True]


def _docs(n_docs, n_sents, rng, tokens=(2, 6)):
    """Token = doc * 100000 + sentence * 100 + k, so a pair's provenance can be read back."""
    return [TokenizedDocument.from_sentences([[d * 100000 + s * 100 + k for k in range(int(rng.integers(*tokens)))]
                               for s in range(int(rng.integers(1, n_sents + 1)))]) for d in range(n_docs)]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(1, 12), st.integers(0, 1000))
def test_sentence_distance_pairs_mean_what_their_label_says(n_docs, n_sents, seed):
    rng = np.random.default_rng(seed)
    docs = _docs(n_docs, n_sents, rng)
    blocks = pack_sentence_pairs(docs, 64, 1, 2, 0, np.random.default_rng(seed), short_seq_prob=0.0,
                                 negatives="distance")
    for row, b_start, label in zip(blocks.input_ids, blocks.segment_b_start, blocks.sentence_label):
        a, b = row[1:b_start - 1], row[b_start:][: list(row[b_start:]).index(2)]
        doc_a, doc_b = a[-1] // 100000, b[0] // 100000
        sent_a_last, sent_a_first, sent_b = (a[-1] % 100000) // 100, (a[0] % 100000) // 100, (b[0] % 100000) // 100
        if label == 0:
            assert doc_a == doc_b and sent_b == sent_a_last + 1
        elif label == 1:
            assert doc_a == doc_b and (sent_b >= sent_a_last + 2 or (b[-1] % 100000) // 100 <= sent_a_first - 2)
        else:
            assert label == 2 and doc_a != doc_b


def test_sentence_distance_classes_are_balanced():
    """Classes are drawn uniformly among those a chunk allows; a chunk of one sentence cannot be "adjacent", so
    class 0 runs a little short (on the embedded corpus: 0.33 / 0.34 / 0.33, inspect --json)."""
    docs = _docs(60, 40, np.random.default_rng(0), tokens=(8, 20))
    labels = pack_sentence_pairs(docs, 64, 1, 2, 0, np.random.default_rng(0), negatives="distance").sentence_label
    shares = np.bincount(labels, minlength=3) / len(labels)
    assert shares.min() > 0.2 and shares.max() < 0.45, shares


def _sample(length, progress, index, pair=False):
    rng = np.random.default_rng(index)
    real = length - 4
    ids = np.zeros(length, dtype=np.int64)
    ids[1:real - 1] = rng.integers(10, 90, real - 2)
    ids[0], ids[real - 1] = 2, 3
    starts = np.ones(length, dtype=bool)
    starts[1:real - 1] = rng.random(real - 2) < 0.7
    starts[1] = True
    docs = np.where(np.arange(length) < real, 0, -1)
    flags = {name: rng.random(length) < 0.5 for name in ("phrase_starts", "entity_starts", "in_phrase", "in_entity",
                                                          "capitalised", "elsewhere")}
    flags["lexical"] = rng.random(length) < 0.9
    return {"index": index, "epoch": 0, "progress": progress, "input_ids": ids, "document_ids": docs,
            "segment_b_start": 10 if pair else None, "sentence_label": int(index % 3) if pair else None,
            "word_starts": starts, **flags, "stream": int(pair)}


def _collator(**kwargs):
    settings = MaskedLMSettings(np.array([0, 1, 2, 3, 4]), 4, 100, MaskingConfig(), seed=7, masking_scheme="ernie",
                                stages=("basic", "phrase", "entity"), stage_epochs=(0.3, 0.6))
    return ERNIE2Collator(settings, task_epochs=(0.2, 0.4, 0.6, 0.8), **kwargs)


def test_collator_trains_exactly_the_tasks_of_each_stage():
    collate = _collator()
    assert collate.active_tasks(0.0) == ("knowledge_masking",)
    assert collate.active_tasks(0.5) == ("knowledge_masking", "capitalization", "token_document_relation")
    assert len(collate.active_tasks(3.0)) == 5
    early = collate([_sample(40, 0.1, i) for i in range(4)])
    assert "capitalization_labels" not in early and "relation_labels" not in early
    assert (early["reorder_label"] == IGNORE_INDEX).all() and (early["task_type_ids"] == 0).all()
    late = collate([_sample(40, 0.9, i) for i in range(6)] + [_sample(40, 0.9, 10 + i, pair=True) for i in range(3)])
    assert late["task_type_ids"].tolist() == [1] * 6 + [2] * 3
    assert (late["reorder_label"][:6] >= 0).all() and (late["reorder_label"][6:] == IGNORE_INDEX).all()
    assert late["distance_label"].tolist() == [IGNORE_INDEX] * 6 + [10 % 3, 11 % 3, 12 % 3]
    assert (late["token_type_ids"][6:, 10:36] == 1).all() and (late["token_type_ids"][:6] == 0).all()
    masked = late["labels"] != IGNORE_INDEX
    for key in ("capitalization_labels", "relation_labels"):
        asked = late[key] != IGNORE_INDEX
        assert asked.any() and not (asked & masked).any()  # never asked about a word it cannot see
        assert set(late[key][asked].tolist()) <= {0, 1}


def test_reordering_moves_every_per_token_field_together():
    collate = _collator()
    sample = _sample(40, 0.9, 5)
    sample["input_ids"] = np.arange(40)  # ids name their original position
    batch = collate([sample])
    moved = collate._reorder(sample, 123)[0]
    for name in ("word_starts", "capitalised", "elsewhere", "in_phrase"):
        assert (moved[name] == sample[name][moved["input_ids"]]).all()
    assert batch["input_ids"].shape == (1, 40)


def test_sampler_brings_the_pair_stream_in_with_sentence_distance():
    weights = np.array([[1.0, 0.0]] * 4 + [[0.5, 0.5]])
    sampler = MixtureSampler([600, 400], weights, seed=0, stage_epochs=(0.2, 0.4, 0.6, 0.8))
    order = np.array([i for _, i, _ in sampler])
    progress = np.arange(1000) / 1000
    assert (order[progress < 0.8] < 600).all()
    assert abs((order[progress >= 0.8] >= 600).mean() - 0.5) < 0.1


@pytest.mark.parametrize("kwargs,needle", [
    ({"tasks": ["capitalization", "knowledge_masking"]}, "knowledge_masking first"),
    ({"tasks": ["knowledge_masking", "nsp"]}, "data.tasks"),
    ({"task_epochs": [0.5]}, "data.task_epochs"),
    ({"packing": "sentence_pairs"}, "data.packing=sentence_pairs"),
    ({"max_reorder_segments": 0}, "data.max_reorder_segments"),
])
def test_ernie2_config_errors(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        ERNIE2DataModule(**kwargs)


def test_capitalization_needs_a_lower_casing_tokenizer(tmp_path):
    (tmp_path / "c.txt").write_text("\n\n".join("The Cat sat. It was Happy. A dog came." for _ in range(30)))
    dm = ERNIE2DataModule(source=str(tmp_path / "c.txt"), tokenizer="bpe", tokenizer_vocab_size=300,
                          cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="capitalization prediction needs a lower-casing tokenizer"):
        dm.prepare_data()


def test_model_heads_losses_and_gradients():
    model = ERNIE2(backbone="tiny", vocab_size=100)
    assert model.reorder_head.classifier.out_features == 9 and model.distance_head.classifier.out_features == 3
    assert model.backbone.embeddings.task.num_embeddings == 3
    collate = _collator()
    batch = collate([_sample(40, 0.9, i) for i in range(6)] + [_sample(40, 0.9, 10 + i, pair=True) for i in range(3)])
    out = model(**batch)
    for name in ("mlm", "capitalization", "relation", "reorder", "distance"):
        assert torch.isfinite(out[f"{name}_loss"])
    expected = sum(out[f"{n}_loss"] for n in ("mlm", "capitalization", "relation", "reorder", "distance"))
    assert torch.allclose(out["loss"], expected)
    out["loss"].backward()
    for head in ("capitalization_head", "relation_head", "reorder_head", "distance_head"):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in getattr(model, head).parameters())
    # task ids 1 (reordered blocks) and 2 (pairs) are in the batch, 0 (word-aware blocks) is not
    assert model.backbone.embeddings.task.weight.grad.abs().sum(1).gt(0).tolist() == [False, True, True]
    # an early-stage batch: the later heads still take part (zero gradient), so DDP/FSDP see every parameter
    model.zero_grad()
    early = collate([_sample(40, 0.05, i) for i in range(4)])
    out = model(**early)
    assert set(k for k in out if k.endswith("_loss")) == {"mlm_loss", "lm_loss"}
    out["loss"].backward()
    assert model.distance_head.classifier.weight.grad is not None
    assert model.distance_head.classifier.weight.grad.abs().sum() == 0
    assert math.isclose(float(out["loss"]), float(out["mlm_loss"]), rel_tol=1e-6)


def test_model_and_data_must_agree_on_reorder_classes():
    model = ERNIE2(backbone="tiny", vocab_size=100, max_reorder_segments=4)
    model._trainer = type("T", (), {"datamodule": ERNIE2DataModule(max_reorder_segments=3)})()
    with pytest.raises(ConfigError, match="model.max_reorder_segments=4 differs from data.max_reorder_segments=3"):
        model.setup("fit")
