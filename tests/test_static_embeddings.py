"""Static embeddings (word2vec skip-gram / CBOW with negative sampling or hierarchical softmax, fastText, GloVe): the
examples are what the papers define (property tests), training recovers planted co-occurrence groups, fastText gives
unseen words vectors, the word2vec text format round-trips, and `predict` answers neighbour and analogy queries."""

import json

import lightning as L
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.static import (
    Word2VecCollator,
    WordEmbeddingDataModule,
    WordVocabulary,
    cooccurrence,
    split_words,
    windows,
)
from plm_lightning.objectives.glove import GloVe
from plm_lightning.objectives.static_embeddings import FastText, Word2Vec, char_ngrams, fnv1a
from tests.conftest import ROOT, run_cli

GROUPS = [["alpha", "beta", "gamma", "delta", "epsilon"], ["red", "green", "blue", "yellow", "purple"],
          ["paris", "london", "berlin", "madrid", "rome"], ["apple", "pear", "plum", "cherry", "mango"]]


def planted_corpus(path, documents: int = 240, seed: int = 0):
    """Documents of one group's words each (plus shared filler), so words co-occur only inside their group."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(documents):
        group = GROUPS[d % len(GROUPS)]
        words = [group[i] if rng.random() < 0.8 else "the" for i in rng.integers(0, 5, 60)]
        docs.append(" ".join(words))
    path.write_text("\n\n".join(docs) + "\n")
    return path


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 60), st.integers(1, 6), st.integers(0, 10_000))
def test_windows_pair_each_center_with_words_within_its_reduced_window(length, window, seed):
    center, context = windows(length, window, np.random.default_rng(seed))
    distance = np.abs(center - context)
    assert (distance >= 1).all() and (distance <= window).all() and (context >= 0).all() and (context < length).all()
    for c in np.unique(center):  # each center: every position within its own b, none beyond
        reach = distance[center == c].max()
        expected = {p for p in range(max(0, c - reach), min(length, c + reach + 1)) if p != c}
        assert set(context[center == c].tolist()) == expected


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["skipgram", "cbow"]))
def test_collator_examples_are_seeded_subsampled_and_in_range(seed, mode):
    counts = np.array([1000, 300, 100, 30, 10, 5])
    vocab = WordVocabulary([f"w{i}" for i in range(6)], counts)
    collate = Word2VecCollator(vocab.keep_probability(1e-2), vocab.noise_distribution(), 3, 4, mode, seed)
    rng = np.random.default_rng(seed)
    samples = [{"index": i, "epoch": 0, "words": rng.choice(6, 50, p=counts / counts.sum())} for i in range(3)]
    a, b = collate(samples), collate(samples)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert a["negatives"].shape == (len(a["center"]), 4) and a["negatives"].max() < 6
    if mode == "cbow":
        assert a["context"].shape[1] == 6 and ((a["context"] >= 0).sum(1) >= 1).all()


def test_subsampling_and_noise_follow_word2vec():
    vocab = WordVocabulary(["a", "b", "c"], np.array([9000, 900, 100]))
    keep = vocab.keep_probability(1e-3)
    f = np.array([0.9, 0.09, 0.01])
    assert np.allclose(keep, np.minimum(1, (np.sqrt(f / 1e-3) + 1) * 1e-3 / f)) and keep[0] < keep[1] < keep[2] <= 1
    assert np.allclose(vocab.noise_distribution(), f ** 0.75 / (f ** 0.75).sum())


def test_huffman_tree_is_prefix_free_and_short_for_frequent_words():
    vocab = WordVocabulary([f"w{i}" for i in range(7)], np.array([40, 20, 10, 8, 4, 2, 1]))
    codes, points, lengths = vocab.huffman()
    paths = ["".join(map(str, codes[i, :lengths[i]])) for i in range(7)]
    assert all(not q.startswith(p) for p in paths for q in paths if p != q)  # prefix-free
    assert abs(sum(2.0 ** -lengths) - 1) < 1e-9  # a full binary tree (Kraft equality)
    assert lengths[0] == lengths.min() and lengths[-1] == lengths.max() and points.max() < 6


def test_cooccurrence_weighs_by_inverse_distance_both_ways():
    rows, cols, values = cooccurrence([np.array([0, 1, 2])], 3, 2)
    x = {(int(r), int(c)): v for r, c, v in zip(rows, cols, values)}
    assert x == {(0, 1): 1.0, (1, 0): 1.0, (1, 2): 1.0, (2, 1): 1.0, (0, 2): 0.5, (2, 0): 0.5}


def test_fasttext_ngrams_and_hash():
    assert char_ngrams("where", 3, 3) == ["<wh", "whe", "her", "ere", "re>"]
    assert fnv1a("") == 2166136261 and fnv1a("a") == 0xE40C292C  # the FNV-1a test vectors


def _train(model, tmp_path, examples="pairs", mode="skipgram", epochs=6, **data):
    source = planted_corpus(tmp_path / "planted.txt")
    dm = WordEmbeddingDataModule(str(source), examples=examples, mode=mode, min_count=2, window=3, sample=0.0,
                                 batch_size=8 if examples == "pairs" else 512, val_fraction=0.0,
                                 cache_dir=str(tmp_path / "cache"), **data)
    torch.manual_seed(0)
    L.Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False).fit(model, dm)
    return model


def _group_precision(model) -> float:
    hits = total = 0
    for group in GROUPS:
        for word in group:
            found = [w for w, _ in model.neighbours(word, 4)]
            hits += sum(w in group for w in found)
            total += 4
    return hits / total


@pytest.mark.parametrize("name,build,examples,mode", [
    ("skipgram-ns", lambda: Word2Vec(dim=24, learning_rate=0.01, optimizer="adam"), "pairs", "skipgram"),
    ("cbow-hs", lambda: Word2Vec(dim=24, learning_rate=0.01, output="hierarchical_softmax", optimizer="adam"), "pairs",
     "cbow"),
    ("fasttext", lambda: FastText(dim=24, learning_rate=0.01, buckets=5000, optimizer="adam"), "pairs", "skipgram"),
    ("glove", lambda: GloVe(dim=24, learning_rate=0.1, x_max=10), "cooccurrence", "skipgram"),
])
def test_nearest_neighbours_recover_the_planted_groups(name, build, examples, mode, tmp_path):
    model = _train(build(), tmp_path, examples, mode, negatives=0 if "hs" in name else 5)
    assert _group_precision(model) >= 0.9, [model.neighbours(g[0], 4) for g in GROUPS]


def test_fasttext_gives_an_unseen_word_a_vector_from_its_ngrams(tmp_path):
    model = _train(FastText(dim=24, learning_rate=0.01, buckets=5000, optimizer="adam"), tmp_path, epochs=3)
    assert "berlins" not in model.vocabulary.index
    vector = model.vector("berlins")
    assert vector.shape == (24,) and torch.isfinite(vector).all() and vector.norm() > 0
    assert [w for w, _ in model.nearest(vector, 1)] == ["berlin"]  # shares most of its n-grams
    with pytest.raises(KeyError):
        Word2Vec.vector(model, "berlins")  # word2vec proper has no vector for it


def test_word2vec_text_format_round_trips(tmp_path):
    model = _train(Word2Vec(dim=8), tmp_path, epochs=1)
    lines = model.word2vec_text().splitlines()
    assert lines[0] == f"{len(model.vocabulary)} 8"
    word, *values = lines[1].split(" ")
    assert word == model.vocabulary.words[0]
    assert np.allclose(np.array(values, dtype=float), model.vectors()[0].detach().numpy(), atol=1e-6)


def test_split_words_lowercases_and_splits_punctuation():
    assert split_words("Hello, World!") == ["hello", ",", "world", "!"]


@pytest.mark.slow
def test_word2vec_recipe_exports_and_answers_queries(tmp_path):
    res = run_cli(["fit", "--config", str(ROOT / "configs" / "word2vec.yaml"), "--trainer.max_steps", "60"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    out = run_cli(["export", str(ckpt), str(tmp_path / "vectors.txt")], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    header = (tmp_path / "vectors.txt").read_text().splitlines()[0].split()
    assert int(header[1]) == 100 and int(header[0]) > 100
    (tmp_path / "q.txt").write_text("function\nlist - append + insert\n")
    answer = run_cli(["predict", str(ckpt), str(tmp_path / "q.txt"), "--json"], cwd=tmp_path)
    assert answer.returncode == 0, answer.stderr[-2000:]
    rows = [json.loads(line) for line in answer.stdout.strip().splitlines()]
    assert rows[0]["query"] == "function" and len(rows[0]["neighbours"]) == 10
    assert rows[1]["analogy"] == ["list", "append", "insert"] and "list" not in [w for w, _ in rows[1]["neighbours"]]


@pytest.mark.parametrize("args,needles", [
    (["--data.min_count", "100000000"], ["data.min_count=100000000 removes every word"]),
    (["--data.mode", "bag"], ["data.mode", "bag"]),
])
def test_static_bad_input_is_one_line(args, needles, tmp_path):
    from tests.test_cli import _one_line_error

    res = run_cli(["fit", "--config", str(ROOT / "configs" / "word2vec.yaml"), "--trainer.max_steps", "1", *args],
                  cwd=tmp_path)
    _one_line_error(res, *needles)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["word2vec", "glove"])
def test_static_inspect(recipe, tmp_path):
    res = run_cli(["inspect", "--config", str(ROOT / "configs" / f"{recipe}.yaml"), "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["objective"] == ("Word2Vec" if recipe == "word2vec" else "GloVe") and stats["vocabulary"] > 1000
    if recipe == "word2vec":  # t = 1e-5 on a 0.4M-word corpus discards most of it; ~2 pairs per kept word and side
        assert 0.05 < stats["kept_fraction_expected"] < 0.5 and stats["examples_per_word"] > 0.3
    else:
        assert stats["nonzero_counts"] > 10_000 and 0 < stats["density"] < 1
    view = run_cli(["inspect", "--config", str(ROOT / "configs" / f"{recipe}.yaml")], cwd=tmp_path)
    assert ("skipgram examples" if recipe == "word2vec" else "co-occurrence counts") in view.stdout


def test_checkpoint_readers_know_the_word_vector_objectives_by_name():
    """``export`` decides from the checkpoint's objective name, before importing the objectives (and Lightning)."""
    from plm_lightning.checkpoint_format import WORD_VECTOR_OBJECTIVES
    from plm_lightning.objectives.static_queries import STATIC_OBJECTIVES

    assert tuple(STATIC_OBJECTIVES) == WORD_VECTOR_OBJECTIVES


def test_word_vector_objectives_read_their_vocabulary_from_the_data_contract(tmp_path):
    """The model receives its words through ``contract()`` (no attribute read off the data module): the data's
    examples must be the model's, and token blocks are refused naming the data module to use."""
    from types import SimpleNamespace

    from plm_lightning.data import CausalLMDataModule, ParallelDataModule, WordEmbeddingDataModule
    from plm_lightning.errors import ConfigError
    from plm_lightning.objectives import CoVe

    words = WordEmbeddingDataModule(examples="pairs", min_count=1, max_documents=20, cache_dir=str(tmp_path))
    model = Word2Vec(dim=8)
    model._trainer = SimpleNamespace(datamodule=words)
    model.setup("fit")
    assert model.vocabulary is words.contract().word_vocabulary and len(model.vocabulary) > 100
    glove = GloVe(dim=8)
    glove._trainer = SimpleNamespace(datamodule=words)
    with pytest.raises(ConfigError, match="GloVe trains on data.examples=cooccurrence, not pairs"):
        glove.setup("fit")
    blocks = CausalLMDataModule(max_documents=20, cache_dir=str(tmp_path), tokenizer_vocab_size=300)
    model = Word2Vec(dim=8)
    model._trainer = SimpleNamespace(datamodule=blocks)
    with pytest.raises(ConfigError, match=r"not CausalLMDataModule \(use data.class_path: "
                                          r"plm_lightning.data.WordEmbeddingDataModule\)"):
        model.setup("fit")
    cove = CoVe(layers=1, hidden=8, embedding_dim=8)
    cove._trainer = SimpleNamespace(datamodule=words)
    with pytest.raises(ConfigError, match="CoVe trains on data.examples=translation, not pairs"):
        cove.setup("fit")
    pairs = ParallelDataModule(max_pairs=50)
    cove._trainer = SimpleNamespace(datamodule=pairs)
    cove.setup("fit")
    assert cove.target_vocabulary is pairs.target_vocabulary and cove.vocabulary is pairs.source_vocabulary
