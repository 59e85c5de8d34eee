"""T5 span corruption (Raffel et al. 2020) against the T5 code's semantics, the unigram tokenizer's sentinels, the
encoder-decoder objective, and parity with transformers' T5ForConditionalGeneration (T5 and T5.1.1) both ways."""

import json

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.corpus.tokenizer import train_tokenizer
from plm_lightning.data import SpanCorruptionCollator, SpanCorruptionDataModule
from plm_lightning.data.block_datasets import BlockDataset
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.t5_span import (
    noise_counts,
    random_spans_noise_mask,
    raw_length_for,
    sentinel_ids,
    span_corrupt,
)
from plm_lightning.objectives import Seq2SeqLM
from tests.conftest import decoder_logits, seq2seq_batch, spread_biases


def test_raw_length_is_t5s():
    assert raw_length_for(512, 0.15, 3.0) == (568, 114)  # t5.data.preprocessors.random_spans_helper
    assert raw_length_for(128, 0.15, 3.0) == (141, 29)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 600), st.floats(0.05, 0.6), st.floats(1.0, 10.0), st.integers(0, 2**32))
def test_noise_mask_counts_are_exact_and_spans_interleave(length, density, mean, seed):
    num_noise, num_spans = noise_counts(length, density, mean)
    assume(length - num_noise >= num_spans)  # else T5's own segmentation has empty clean runs (rows of ~3 tokens)
    mask = random_spans_noise_mask(length, density, mean, np.random.default_rng(seed))
    assert mask.sum() == num_noise
    starts = mask & ~np.concatenate([[False], mask[:-1]])
    assert starts.sum() == num_spans  # every span and every clean run non-empty
    assert not mask[0] and mask[-1]  # clean, noise, clean, noise, ... ending in noise
    again = random_spans_noise_mask(length, density, mean, np.random.default_rng(seed))
    assert (again == mask).all()


@settings(max_examples=150, deadline=None)
@given(st.integers(8, 600), st.integers(0, 2**32))
def test_corruption_is_recoverable_and_input_length_exact(inputs_length, seed):
    raw, target_length = raw_length_for(inputs_length, 0.15, 3.0)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, 700, raw)  # below every sentinel id
    noise = random_spans_noise_mask(raw, 0.15, 3.0, rng)
    sentinels = sentinel_ids(1000, 100 if inputs_length < 600 else 200)
    inputs, targets = span_corrupt(tokens, noise, sentinels, eos_id=1)
    assert len(inputs) == inputs_length and len(targets) == target_length
    assert inputs[-1] == 1 and targets[-1] == 1
    used = inputs[np.isin(inputs, sentinels)]
    assert used.tolist() == sentinels[: len(used)].tolist()  # <extra_id_0> (the highest id) first, descending
    assert targets[0] == sentinels[0]
    # interleave: input clean runs and target spans, by sentinel, give back the raw row
    restored, spans = [], {}
    current = None
    for t in targets[:-1]:
        if t in sentinels:
            current = int(t)
            spans[current] = []
        else:
            spans[current].append(int(t))
    for t in inputs[:-1]:
        restored.extend(spans[int(t)] if t in sentinels else [int(t)])
    assert restored == tokens.tolist()


def test_span_length_statistics():
    rng = np.random.default_rng(0)
    spans, noise = 0, 0
    for _ in range(300):
        mask = random_spans_noise_mask(568, 0.15, 3.0, rng)
        noise += mask.sum()
        spans += (mask & ~np.concatenate([[False], mask[:-1]])).sum()
    assert abs(noise / spans - 3.0) < 0.05 and abs(noise / (300 * 568) - 0.15) < 0.001


def test_too_many_spans_for_the_sentinels_is_a_config_error():
    noise = random_spans_noise_mask(200, 0.5, 1.0, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="sentinel tokens"):
        span_corrupt(np.arange(200), noise, sentinel_ids(1000, 10), 1)


@pytest.mark.parametrize("kwargs,needle", [({"noise_density": 0.0}, "data.noise_density=0.0"),
                                           ({"noise_density": 1.0}, "data.noise_density=1.0"),
                                           ({"mean_noise_span_length": 0.5}, "data.mean_noise_span_length"),
                                           ({"packing": "full_sentences"}, "contiguous")])
def test_span_corruption_config_errors(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        SpanCorruptionDataModule(**kwargs)


def test_unigram_tokenizer_has_t5_sentinels():
    from plm_lightning.corpus import embedded_corpus

    tok = train_tokenizer("unigram", embedded_corpus()[:200], 1000)
    assert tok.vocab_size == 1000
    assert tok.ids == {"pad": 0, "eos": 1, "unk": 2, "mode_r": 3, "mode_s": 4, "mode_x": 5}  # UL2's [R] [S] [X]
    sentinels = tok.sentinel_ids()
    assert len(sentinels) == 100 and sentinels[0] == 999 and (np.diff(sentinels) == -1).all()
    assert tok.decode(tok.encode_batch(["some  more\n words"])[0]) == "some more words"  # whitespace collapsed


def test_collator_batches_teacher_forcing():
    collate = SpanCorruptionCollator(sentinel_ids(500, 100), eos_id=1, pad_id=0, seed=3)
    samples = [{"index": i, "epoch": 0, "input_ids": np.arange(10, 151), "document_ids": np.zeros(141)}
               for i in range(3)]
    batch = collate(samples)
    assert batch["input_ids"].shape == (3, 128) and batch["labels"].shape == (3, 29)
    assert (batch["decoder_input_ids"][:, 0] == 0).all()
    assert torch.equal(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1])
    assert not torch.equal(batch["input_ids"][0], batch["input_ids"][1])  # each row its own spans
    assert torch.equal(collate(samples)["input_ids"], batch["input_ids"])  # and reproducible


def test_seq2seq_loss_backward_and_t5_init():
    torch.manual_seed(0)
    model = Seq2SeqLM(backbone="tiny-t5", vocab_size=500)
    assert model.lm_head.weight is model.backbone.encoder.embeddings.token.weight
    assert model.backbone.decoder.embeddings.token is model.backbone.encoder.embeddings.token
    layer = model.backbone.encoder.layers[0]
    q, kv = layer.self_attn.qkv_proj.weight[:64], layer.self_attn.qkv_proj.weight[64:]
    assert abs(q.std().item() - (64 * 32) ** -0.5) < 0.2 * (64 * 32) ** -0.5
    assert abs(kv.std().item() - 64 ** -0.5) < 0.1 * 64 ** -0.5
    assert abs(model.backbone.encoder.embeddings.token.weight.std().item() - 1.0) < 0.05
    collate = SpanCorruptionCollator(sentinel_ids(500, 100), eos_id=1, pad_id=0)
    batch = collate([{"index": i, "epoch": 0, "input_ids": np.arange(10, 151), "document_ids": np.zeros(141)}
                     for i in range(2)])
    out = model(**batch)
    assert out["lm_targets"].numel() == (batch["labels"] != IGNORE_INDEX).sum()
    out["loss"].backward()
    assert model.backbone.decoder.layers[0].cross_attn.kv_proj.weight.grad.abs().sum() > 0
    untied = Seq2SeqLM(backbone="tiny-t5-v1_1", vocab_size=500)
    assert untied.lm_head.weight is not untied.backbone.encoder.embeddings.token.weight


transformers = pytest.importorskip("transformers")


def _hf_t5(v1_1: bool):
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=101, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                relative_attention_num_buckets=8, relative_attention_max_distance=20,
                                feed_forward_proj="gated-gelu" if v1_1 else "relu", tie_word_embeddings=not v1_1,
                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return spread_biases(transformers.T5ForConditionalGeneration(cfg))


def _theirs(model, batch):
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("v1_1", [False, True], ids=["t5", "t5-v1_1"])
def test_t5_import_then_export_matches_transformers(v1_1, tmp_path):
    from plm_lightning.interop import export_checkpoint
    from plm_lightning.objectives.loading import import_hf

    hf = _hf_t5(v1_1)
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    ckpt = torch.load(tmp_path / "ours.ckpt", weights_only=True)
    assert ckpt[CHECKPOINT_KEY]["objective"] == "Seq2SeqLM"
    ours = Seq2SeqLM(**{k: v for k, v in ckpt["hyper_parameters"].items() if not k.startswith("_")})
    ours.load_state_dict(ckpt["state_dict"])
    ours.eval()
    batch = seq2seq_batch()
    expected = _theirs(hf, batch)
    assert (decoder_logits(ours, batch) - expected).abs().max() <= 1e-4
    export_checkpoint(tmp_path / "ours.ckpt", tmp_path / "exported")
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert config["architectures"] == ["T5ForConditionalGeneration"]
    reloaded = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "exported").eval()
    assert (_theirs(reloaded, batch) - expected).abs().max() <= 1e-4


def _save(module, path):
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                CHECKPOINT_KEY: {"objective": "Seq2SeqLM", "backbone": module.config.to_dict()}}, path)


@pytest.mark.parametrize("preset,overrides", [("tiny-t5", {}),
                                              ("tiny-t5-v1_1", {"tie_word_embeddings": True})])
def test_our_t5_exports_to_transformers(preset, overrides, tmp_path):
    """T5, and T5.1.1 with a tied, unscaled head (the form transformers >= 5 gives every T5.1.1)."""
    from plm_lightning.interop import export_checkpoint

    torch.manual_seed(2)
    module = Seq2SeqLM(backbone=preset, vocab_size=101, backbone_overrides=overrides).eval()
    _save(module, tmp_path / "m.ckpt")
    export_checkpoint(tmp_path / "m.ckpt", tmp_path / "hf")
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    batch = seq2seq_batch()
    assert (decoder_logits(module, batch) - _theirs(hf, batch)).abs().max() <= 1e-4


def test_untied_t5_v1_1_round_trips_through_the_transformers_format(tmp_path):
    """An untied T5.1.1 head is written as its own lm_head tensor with tie_word_embeddings false (the Hub format,
    which transformers 4 loads untied) and comes back unchanged."""
    from safetensors.torch import load_file

    from plm_lightning.interop import export_checkpoint
    from plm_lightning.objectives.loading import import_hf

    torch.manual_seed(4)
    module = Seq2SeqLM(backbone="tiny-t5-v1_1", vocab_size=101).eval()
    _save(module, tmp_path / "m.ckpt")
    with pytest.warns(UserWarning, match="transformers >= 5 ties"):
        export_checkpoint(tmp_path / "m.ckpt", tmp_path / "hf")
    weights = load_file(tmp_path / "hf" / "model.safetensors")
    assert not torch.equal(weights["lm_head.weight"], weights["shared.weight"])
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["tie_word_embeddings"] is False
    import_hf(tmp_path / "hf", tmp_path / "back.ckpt")
    ckpt = torch.load(tmp_path / "back.ckpt", weights_only=True)
    back = Seq2SeqLM(**{k: v for k, v in ckpt["hyper_parameters"].items() if not k.startswith("_")})
    back.load_state_dict(ckpt["state_dict"])
    batch = seq2seq_batch()
    assert torch.equal(decoder_logits(back.eval(), batch), decoder_logits(module, batch))


def test_mt5_import_matches_transformers(tmp_path):
    from plm_lightning.objectives.loading import import_hf

    torch.manual_seed(0)
    cfg = transformers.MT5Config(vocab_size=101, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                 relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0,
                                 eos_token_id=1)
    hf = transformers.MT5ForConditionalGeneration(cfg).eval()
    hf.save_pretrained(tmp_path / "hf")
    info = import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    assert info["family"] == "mt5" and info["objective"] == "Seq2SeqLM"
    ckpt = torch.load(tmp_path / "ours.ckpt", weights_only=True)
    ours = Seq2SeqLM(**{k: v for k, v in ckpt["hyper_parameters"].items() if not k.startswith("_")})
    ours.load_state_dict(ckpt["state_dict"])
    batch = seq2seq_batch()
    assert (decoder_logits(ours.eval(), batch) - _theirs(hf, batch)).abs().max() <= 1e-4
    from plm_lightning.generation import GenerationConfig, generate  # identical greedy generations

    ids, mask = batch["input_ids"], batch["attention_mask"]
    theirs = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, num_beams=1,
                         eos_token_id=None, min_new_tokens=8)
    assert [row[1:].tolist() for row in theirs] == generate(ours, ids, mask, GenerationConfig(max_new_tokens=8), None, 0)


def test_multilingual_span_corruption_samples_languages_by_alpha(tmp_path):
    from plm_lightning.data import MultilingualSpanCorruptionDataModule
    from plm_lightning.data.sampling import smoothed_probabilities

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
    rng = np.random.default_rng(0)

    def corpus(path, n):
        path.write_text("\n\n".join(" ".join(rng.choice(words, 60)) + "." for _ in range(n)))
        return str(path)

    dm = MultilingualSpanCorruptionDataModule(
        corpora={"big": corpus(tmp_path / "big.txt", 400), "small": "fake:" + corpus(tmp_path / "small.txt", 20)},
        tokenizer_vocab_size=400, seq_len=32, batch_size=50, cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    sizes = [len(b) for b in dm.stream_blocks["train"]]
    expected = smoothed_probabilities(sizes, 0.3)
    assert sizes[0] > 10 * sizes[1] and expected[1] > 0.25  # the small language is up-sampled from < 9%
    streams, sentinels = [], set(dm.tokenizer.sentinel_ids().tolist())
    for batch in dm.train_dataloader():
        streams.extend(batch["stream"].tolist())
        assert batch["input_ids"].shape[1] == 32 and int(batch["labels"][0, 0]) in sentinels
    assert abs(np.mean(np.array(streams) == 1) - expected[1]) < 0.05


@settings(max_examples=60, deadline=None)
@given(st.integers(20, 300), st.integers(0, 6), st.integers(0, 2**32))
def test_ul2_denoisers_recoverable_with_mode_token(length, which, seed):
    from plm_lightning.data.corruption.ul2 import UL2_DENOISERS, denoise

    denoiser = UL2_DENOISERS[which]
    tokens = np.random.default_rng(seed).integers(10, 700, length)
    inputs, targets = denoise(tokens, denoiser, np.random.default_rng(seed), sentinel_ids(1000, 100), 1, mode_id=5)
    assert inputs[0] == 5 and inputs[-1] == 1 and targets[-1] == 1
    if denoiser.mode == "S":  # prefix LM: the first 75% in, the last 25% out
        assert np.concatenate([inputs[1:-1], targets[:-1]]).tolist() == tokens.tolist()
        assert len(targets) - 1 == max(1, round(length * 0.25))
    else:
        noise = (~np.isin(targets[:-1], sentinel_ids(1000, 100))).sum()
        assert noise == noise_counts(length, denoiser.rate, denoiser.mean_span)[0]


def test_ul2_mixture_weights_and_mode_token_errors(tmp_path):
    from plm_lightning.data import UL2Collator, UL2DataModule
    from plm_lightning.data.corruption.ul2 import mixture_weights

    with pytest.raises(ConfigError, match="data.denoiser_weights"):
        mixture_weights([1.0, 1.0])
    with pytest.raises(ConfigError, match="data.denoiser_weights"):
        mixture_weights([0.0] * 7)
    weights = mixture_weights([1, 1, 2, 0, 0, 0, 4])
    collate = UL2Collator(sentinel_ids(1000, 100), 1, 0, {"R": 3, "S": 4, "X": 5}, weights, seed=2)
    samples = [{"index": i, "epoch": 0, "input_ids": np.arange(10, 150), "document_ids": np.zeros(140)}
               for i in range(800)]
    batch = collate(samples)
    shares = np.bincount(batch["denoiser"].numpy(), minlength=7) / 800
    assert np.abs(shares - weights).max() < 0.05 and shares[3:6].sum() == 0
    modes = batch["input_ids"][:, 0].numpy()
    assert set(modes[batch["denoiser"].numpy() == 2].tolist()) == {4} and set(modes[batch["denoiser"].numpy() == 6]) == {5}
    (tmp_path / "c.txt").write_text("\n\n".join("some words and more words here." for _ in range(50)))
    dm = UL2DataModule(source=str(tmp_path / "c.txt"), tokenizer="wordpiece", tokenizer_vocab_size=200,
                       cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="mode_r/mode_s/mode_x"):
        dm.prepare_data()


@pytest.fixture(scope="module")
def span_corruption_data(tmp_path_factory):
    """T5's and UL2's data modules on the first 150 documents of the embedded corpus."""
    from plm_lightning.data import UL2DataModule

    cache = tmp_path_factory.mktemp("cache")
    out = {}
    for name, cls in (("t5", SpanCorruptionDataModule), ("ul2", UL2DataModule)):
        dm = cls(max_documents=150, tokenizer_vocab_size=1000, seq_len=64, val_fraction=0.0, cache_dir=str(cache))
        dm.prepare_data()
        out[name] = (dm, dm.collator(), BlockDataset(dm.blocks["train"]))
    return out


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["t5", "ul2"]), st.lists(st.integers(0, 10**6), min_size=1, max_size=4), st.integers(0, 3))
def test_eos_closes_the_input_and_the_target_only(span_corruption_data, name, indices, epoch):
    """T5's span_corruption joins documents with no separator (reduce_concat_tokens) and appends EOS after the
    corruption: no EOS anywhere in a row's input or target but at its end (UL2 the same, on every denoiser)."""
    dm, collate, dataset = span_corruption_data[name]
    eos = dm.tokenizer.ids["eos"]
    assert dm.packing == "concatenated" and not (np.asarray(dm.blocks["train"].input_ids) == eos).any()
    batch = collate([dataset[(epoch, i % len(dataset))] for i in indices])
    for row in range(len(indices)):
        for key, real in (("input_ids", batch["attention_mask"][row]), ("labels", batch["labels"][row] != IGNORE_INDEX)):
            tokens = batch[key][row][real].tolist()
            assert tokens[-1] == eos and eos not in tokens[:-1], (key, tokens)
