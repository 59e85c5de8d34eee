"""XLM / multilingual BERT data: smoothed language sampling, the stream mixture, TLM pairs, Fake-English, language
embeddings and restarted positions reaching the model, and the errors of bad multilingual input."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.corpus import fake_language, load_parallel
from plm_lightning.corpus.blocks import pack_translation_pairs
from plm_lightning.data import MixtureSampler, MultilingualDataModule
from plm_lightning.data.sampling import smoothed_probabilities
from plm_lightning.errors import ConfigError
from plm_lightning.objectives import MaskedLM

sizes_strategy = st.lists(st.integers(1, 10_000), min_size=1, max_size=6)


@given(sizes_strategy, st.floats(0.05, 1.0))
def test_smoothed_probabilities_follow_p_to_the_alpha(sizes, alpha):
    q = smoothed_probabilities(sizes, alpha)
    assert abs(q.sum() - 1) < 1e-9 and (q > 0).all()
    p = np.asarray(sizes) / sum(sizes)
    i, j = int(np.argmin(sizes)), int(np.argmax(sizes))
    assert np.isclose(q[i] / q[j], (p[i] / p[j]) ** alpha)  # Lample & Conneau 2019, eq. 1
    assert q[i] >= p[i] - 1e-12  # alpha <= 1 never starves the smallest language


def test_smoothed_probabilities_limits_and_errors():
    assert np.allclose(smoothed_probabilities([1, 3], 1.0), [0.25, 0.75])
    assert np.allclose(smoothed_probabilities([1, 10_000], 1e-6), [0.5, 0.5], atol=1e-4)
    with pytest.raises(ValueError, match="alpha"):
        smoothed_probabilities([1, 2], 0.0)
    with pytest.raises(ValueError, match="at least one sample"):
        smoothed_probabilities([0, 2], 0.5)


def test_mixture_sampler_draws_streams_with_their_weights_and_cycles_each_stream():
    sizes, weights = [50, 950], smoothed_probabilities([50, 950], 0.3)
    sampler = MixtureSampler(sizes, weights, seed=3)
    draws = np.array([index for _, index, _ in sampler])
    small = draws < 50
    assert len(draws) == 1000 and abs(small.mean() - weights[0]) < 0.04  # up-sampled from 5% to ~29%
    small_draws = draws[small]
    # every block of the small stream is used once before any is repeated (a permutation per cycle)
    assert sorted(small_draws[:50].tolist()) == list(range(50))
    assert draws.tolist() == [i for _, i, _ in MixtureSampler(sizes, weights, seed=3)]  # reproducible
    sampler.set_epoch(1)
    assert draws.tolist() != [i for _, i, _ in sampler]


def test_mixture_sampler_ranks_partition_the_epoch():
    sizes, weights = [30, 70], np.array([0.5, 0.5])
    whole = [i for _, i, _ in MixtureSampler(sizes, weights, seed=0)]
    shards = [[i for _, i, _ in MixtureSampler(sizes, weights, seed=0, num_replicas=2, rank=r)] for r in (0, 1)]
    assert sorted(shards[0] + shards[1]) == sorted(whole)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=8), st.integers(8, 48))
def test_translation_pairs_restart_positions_and_tag_languages(lengths, length):
    pairs = [(list(range(100, 100 + a)), list(range(200, 200 + b))) for a, b in lengths]
    blocks = pack_translation_pairs(pairs, length, cls_id=1, sep_id=2, pad_id=0, languages=(3, 5),
                                    rng=np.random.default_rng(0))
    assert len(blocks) == sum(1 for a, b in lengths if a and b)
    for row in range(len(blocks)):
        ids, pos, lang = blocks.input_ids[row], blocks.position_ids[row], blocks.language_ids[row]
        real = int((blocks.document_ids[row] >= 0).sum())
        seps = np.flatnonzero(ids[:real] == 2)
        assert ids[0] == 1 and len(seps) == 2 and seps[1] == real - 1  # [CLS] source [SEP] target [SEP]
        target = seps[0] + 1
        assert (ids[1:seps[0]] < 200).all() and (ids[target:real - 1] >= 200).all()  # truncation keeps the sides
        assert pos[:target].tolist() == list(range(target)) and pos[target:real].tolist() == list(range(real - target))
        assert (lang[:target] == 3).all() and (lang[target:real] == 5).all()


def test_fake_english_shares_no_letter_and_commutes_with_lowercasing():
    text = "The Quick brown fox, 42 times!"
    fake = fake_language(text)
    assert not any(c.isascii() and c.isalpha() for c in fake)
    assert fake.lower() == fake_language(text.lower())
    assert [len(w) for w in fake.split()] == [len(w) for w in text.split()]
    assert fake.endswith("42 " + fake_language("times!"))


def test_parallel_corpus_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"data.parallel_corpora\[en-de\]: no such file"):
        load_parallel("en-de", str(tmp_path / "missing.tsv"))
    (tmp_path / "empty.tsv").write_text("\n\n")
    with pytest.raises(ConfigError, match=r"data.parallel_corpora\[en-de\]: .*holds no sentence pairs"):
        load_parallel("en-de", str(tmp_path / "empty.tsv"))
    (tmp_path / "bad.tsv").write_text("a house\tein Haus\nno tab here\n")
    with pytest.raises(ConfigError, match="line 2 is not 'source<TAB>target'"):
        load_parallel("en-de", str(tmp_path / "bad.tsv"))
    (tmp_path / "ok.tsv").write_text("a house\tein Haus\n\nthe cat\tdie Katze\n")
    assert load_parallel("en-de", str(tmp_path / "ok.tsv"))[0] == [("a house", "ein Haus"), ("the cat", "die Katze")]


@pytest.mark.parametrize("kwargs,needle", [
    ({"language_alpha": 0.0}, "data.language_alpha=0.0 must be > 0"),
    ({"language_alpha": -1.0}, "data.language_alpha=-1.0 must be > 0"),
    ({"parallel_corpora": {"en-xx": "p.tsv"}}, "key 'en-xx' must be 'src-tgt'"),
    ({"packing": "sentence_pairs"}, "data.packing=sentence_pairs"),
    ({"tlm_fraction": 1.0}, "data.tlm_fraction=1.0"),
    ({"corpora": {}}, "data.corpora: give at least one language"),
])
def test_multilingual_config_errors(kwargs, needle):
    args = {"corpora": {"en": "embedded", "fake": "fake:embedded"}, **kwargs}
    with pytest.raises(ConfigError, match=needle):
        MultilingualDataModule(**args)


def _corpus(path, docs):
    path.write_text("\n\n".join(docs))
    return str(path)


def _documents(n, offset=0):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rng = np.random.default_rng(offset)
    return [". ".join(" ".join(rng.choice(words, 8)) for _ in range(6)) + "." for _ in range(n)]


@pytest.fixture
def three_languages(tmp_path):
    big, small = _documents(300, 1), _documents(30, 2)
    corpora = {"en": _corpus(tmp_path / "en.txt", big), "fake": "fake:" + _corpus(tmp_path / "en2.txt", small),
               "up": _corpus(tmp_path / "up.txt", [d.upper() for d in _documents(60, 3)])}
    (tmp_path / "en-fake.tsv").write_text("\n".join(f"{s}\t{fake_language(s)}" for d in small for s in d.split(". ")))
    dm = MultilingualDataModule(corpora=corpora, parallel_corpora={"en-fake": str(tmp_path / "en-fake.tsv")},
                                language_alpha=0.3, tlm_fraction=0.25, tokenizer="wordpiece",
                                tokenizer_vocab_size=300, seq_len=32, batch_size=64, val_fraction=0.1,
                                cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_stream_mixture_language_ids_and_tlm_positions(three_languages):
    dm = three_languages
    assert dm.stream_names == ["en", "fake", "up", "en-fake"] and dm.token_type_vocab == 3
    weights = dm.stream_weights()
    sizes = [len(b) for b in dm.stream_blocks["train"][:3]]
    assert np.allclose(weights[:3], 0.75 * smoothed_probabilities(sizes, 0.3)) and np.isclose(weights[3], 0.25)
    loader = dm.train_dataloader()
    streams, seen_tlm = [], False
    for batch in loader:
        streams.extend(batch["stream"].tolist())
        real = batch["attention_mask"].bool()
        for row in range(len(batch["stream"])):
            types = batch["token_type_ids"][row][real[row]]
            positions = batch["position_ids"][row][real[row]]
            if int(batch["stream"][row]) < 3:  # a monolingual block: one language, positions 0..n-1
                assert (types == int(batch["stream"][row])).all()
                assert positions.tolist() == list(range(int(real[row].sum())))
            else:  # TLM: English then Fake-English, positions restart where the language changes
                seen_tlm = True
                change = int(torch.nonzero(types == 1)[0])
                assert (types[:change] == 0).all() and (types[change:] == 1).all()
                assert positions[change] == 0 and positions[:change].tolist() == list(range(change))
    fractions = np.bincount(streams, minlength=4) / len(streams)
    assert seen_tlm and np.abs(fractions - weights).max() < 0.06, (fractions, weights)


def test_model_embeds_one_type_per_language_and_reads_the_positions(three_languages):
    dm = three_languages
    model = MaskedLM(backbone="tiny", vocab_size=dm.tokenizer.vocab_size)
    model.trainer = None
    trainer = type("T", (), {"datamodule": dm})()
    model._trainer = trainer
    model.built = False  # let setup resize the type table as fit would
    model.setup("fit")
    assert model.backbone.embeddings.segment.num_embeddings == 3
    batch = next(iter(dm.train_dataloader()))
    tlm = batch["stream"] == 3
    assert tlm.any()
    model.eval()
    with torch.no_grad():
        given = model.run_stack(model.backbone, batch)
        default = model.run_stack(model.backbone, {k: v for k, v in batch.items() if k != "position_ids"})
    assert torch.allclose(given[~tlm], default[~tlm], atol=1e-6)  # monolingual rows: positions 0..n-1 anyway
    assert not torch.allclose(given[tlm], default[tlm], atol=1e-3)  # TLM rows: the restarted positions are used


def test_too_small_type_table_is_refused(three_languages):
    model = MaskedLM(backbone="tiny", vocab_size=three_languages.tokenizer.vocab_size)
    model._trainer = type("T", (), {"datamodule": three_languages})()
    with pytest.raises(ConfigError, match="3 token types .* model embeds 2"):
        model.setup("fit")


def test_interleaved_validation_order_spreads_every_stream():
    from plm_lightning.data.sampling import InterleavedSampler

    order = [i for _, i, _ in InterleavedSampler([10, 100, 30], seed=0)]
    assert sorted(order) == list(range(140))
    first_tenth = np.array(order[:14])
    assert ((first_tenth < 10).sum(), ((first_tenth >= 10) & (first_tenth < 110)).sum(), (first_tenth >= 110).sum()) \
        == (1, 10, 3)
