"""BART (Lewis et al. 2020): the five noising functions with fairseq's semantics (property tests), the shared Poisson
span sampler, the data module on the embedded corpus, and parity with transformers' BartForConditionalGeneration
both ways."""

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.data.corruption.bart_noise import BARTNoise, bart_noise, mask_words, permute_sentences, rotate
from plm_lightning.data.corruption.poisson_spans import poisson_span_lengths
from plm_lightning.objectives import Seq2SeqLM
from tests.conftest import decoder_logits, seq2seq_batch, spread_biases

BOS, EOS, MASK = 0, 2, 4
RANDOM_IDS = np.arange(5, 50)


def _row(length: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``<s> tokens </s>`` with distinct token ids (>= 100, so never a mask or random id), word and sentence starts."""
    rng = np.random.default_rng(seed)
    tokens = np.concatenate([[BOS], 100 + np.arange(length - 2), [EOS]])
    words = rng.random(length) < 0.7
    words[:2] = True
    sentences = rng.random(length) < 0.1
    return tokens, words, sentences


def _words_covered(noised_positions: np.ndarray, words: np.ndarray) -> int:
    flags = words.copy()
    flags[0] = flags[-1] = False
    return int((noised_positions & flags).sum())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 400), st.floats(0.5, 8.0), st.integers(0, 2**32))
def test_poisson_lengths_sum_to_the_budget_exactly(budget, lam, seed):
    lengths = poisson_span_lengths(budget, lam, np.random.default_rng(seed))
    assert lengths.sum() == budget and (lengths >= 0).all()
    assert (poisson_span_lengths(budget, lam, np.random.default_rng(seed)) == lengths).all()


def test_poisson_lengths_have_the_poisson_mean():
    rng = np.random.default_rng(0)
    draws = np.concatenate([poisson_span_lengths(300, 3.0, rng)[:-1] for _ in range(300)])
    assert abs(draws.mean() - 3.0) < 0.05
    assert abs((draws == 0).mean() - math.exp(-3.0)) < 0.01  # the zero-length spans that become insertions


def _infilling(**kw) -> BARTNoise:
    return BARTNoise(permute_sentence_ratio=0.0, **kw)


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 300), st.floats(0.05, 0.9), st.integers(0, 2**32))
def test_text_infilling_is_recoverable_and_masks_exact_whole_words(length, ratio, seed):
    tokens, words, sentences = _row(length, seed)
    noise = _infilling(mask_ratio=ratio)
    out = bart_noise(tokens, words, sentences, noise, np.random.default_rng(seed), MASK, RANDOM_IDS)
    source = out.source
    assert source[0] == BOS and source[-1] == EOS
    assert (source == MASK).sum() == out.spans + out.inserted  # one mask per span, one per zero-length span
    kept = source[source != MASK]
    noised = ~np.isin(tokens, kept)
    assert out.noised == noised.sum()
    assert (kept == tokens[~noised]).all()  # the rest in order: (input, target) give the original back
    word_count = int(words[1:-1].sum())
    assert _words_covered(noised, words) == math.ceil(word_count * ratio)  # exact: spans never overlap
    runs = np.flatnonzero(np.diff(np.concatenate([[0], noised.astype(np.int8), [0]])))
    for start, stop in zip(runs[::2], runs[1::2]):  # spans are whole words
        assert words[start] and (stop == length - 1 or words[stop])
    again = bart_noise(tokens, words, sentences, noise, np.random.default_rng(seed), MASK, RANDOM_IDS)
    assert (again.source == source).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 200), st.floats(0.05, 0.9), st.integers(0, 2**32))
def test_token_masking_and_deletion(length, ratio, seed):
    tokens, words, sentences = _row(length, seed)
    budget = math.ceil((length - 2) * ratio)
    masked = bart_noise(tokens, words, sentences, _infilling(mask_ratio=ratio, mask_length="subword", replace_length=-1),
                        np.random.default_rng(seed), MASK, RANDOM_IDS).source
    assert len(masked) == length and (masked == MASK).sum() == budget
    assert ((masked == tokens) | (masked == MASK)).all()
    deleted = bart_noise(tokens, words, sentences, _infilling(mask_ratio=ratio, mask_length="subword", replace_length=0),
                         np.random.default_rng(seed), MASK, RANDOM_IDS).source
    assert len(deleted) == length - budget and np.isin(deleted, tokens).all() and (np.diff(deleted[1:-1]) > 0).all()


def test_whole_word_token_masking_masks_every_piece_of_a_word():
    tokens, words, sentences = _row(60, 3)
    out = mask_words(tokens, words, _infilling(mask_length="word", replace_length=-1), np.random.default_rng(1), MASK,
                     RANDOM_IDS)
    word_id = np.cumsum(words)
    hit = np.unique(word_id[out.source == MASK])
    assert np.isin(word_id, hit).sum() == (out.source == MASK).sum()


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 200), st.floats(0.0, 1.0), st.integers(0, 2**32))
def test_sentence_permutation_moves_whole_sentences(length, ratio, seed):
    tokens, _, sentences = _row(length, seed)
    order = permute_sentences(sentences, ratio, np.random.default_rng(seed))
    assert order[0] == 0 and order[-1] == length - 1 and sorted(order) == list(range(length))
    starts = [1, *[i for i in np.flatnonzero(sentences[1:-1]) + 1 if i > 1]]
    pieces = np.split(order[1:-1], np.flatnonzero(np.diff(order[1:-1]) != 1) + 1)
    for piece in pieces:  # every contiguous run of the output begins at a sentence start
        assert piece[0] in starts
    if ratio == 0.0:
        assert (order == np.arange(length)).all()


def test_sentence_permutation_shuffles_every_sentence_at_ratio_one():
    sentences = np.zeros(40, dtype=bool)
    sentences[[1, 10, 20, 30]] = True
    orders = {tuple(permute_sentences(sentences, 1.0, np.random.default_rng(s))) for s in range(200)}
    assert len(orders) == 24  # all 4! orders of four sentences


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 100), st.integers(0, 2**32))
def test_rotation_is_a_rotation_of_the_body(length, seed):
    tokens, _, _ = _row(length, seed)
    out = rotate(tokens, np.random.default_rng(seed))
    body, rotated = tokens[1:-1].tolist(), out[1:-1].tolist()
    assert out[0] == BOS and out[-1] == EOS and len(rotated) == len(body)
    assert any(rotated == body[k:] + body[:k] for k in range(max(1, len(body))))


def test_insertion_noise_adds_masks_and_random_tokens():
    tokens, words, sentences = _row(100, 0)
    noise = BARTNoise(mask_ratio=0.0, permute_sentence_ratio=0.0, insert_ratio=0.2, mask_random=0.5)
    out = bart_noise(tokens, words, sentences, noise, np.random.default_rng(0), MASK, RANDOM_IDS)
    assert out.inserted == 20 and len(out.source) == 120
    assert (out.source == MASK).sum() == 10 and np.isin(out.source, RANDOM_IDS).sum() == 10
    assert (out.source[~np.isin(out.source, [MASK, *RANDOM_IDS])] == tokens).all()


def test_fairseq_placement_overlaps_and_exact_placement_does_not():
    rng = np.random.default_rng(0)
    covered = {"exact": 0, "fairseq": 0}
    total = 0
    for seed in range(300):
        tokens, words, sentences = _row(200, seed)
        total += words[1:-1].sum()
        for placement in covered:
            noise = _infilling(placement=placement)
            out = bart_noise(tokens, words, sentences, noise, rng, MASK, RANDOM_IDS)
            noised = ~np.isin(tokens, out.source)
            covered[placement] += _words_covered(noised, words)
    assert abs(covered["exact"] / total - 0.30) < 0.005
    assert 0.24 < covered["fairseq"] / total < 0.29  # overlapping spans cover about 1 - e^-0.3 of the words


@pytest.mark.parametrize("kwargs,needle", [({"mask_ratio": 1.5}, "data.mask_ratio"),
                                           ({"mask_length": "sentence"}, "data.mask_length"),
                                           ({"replace_length": 2}, "data.replace_length"),
                                           ({"poisson_lambda": 0.0}, "data.poisson_lambda"),
                                           ({"placement": "random"}, "data.placement"),
                                           ({"packing": "contiguous"}, "whole sentences")])
def test_bart_config_errors(kwargs, needle):
    from plm_lightning.data import BARTDataModule

    with pytest.raises(ConfigError, match=needle):
        BARTDataModule(**kwargs)


def test_bart_data_on_the_embedded_corpus(tmp_path):
    """Rows are <s> ... </s>, the decoder reads them shifted right from </s>, 30% of the words are noised."""
    from plm_lightning.data import BARTDataModule
    from plm_lightning.inspection import corruption_statistics

    dm = BARTDataModule(seq_len=96, batch_size=16, tokenizer_vocab_size=2048, cache_dir=str(tmp_path))
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    tok = dm.tokenizer
    labels = batch["labels"]
    assert (labels[:, 0] == tok.ids["bos"]).all() and (batch["decoder_input_ids"][:, 0] == tok.ids["eos"]).all()
    real = labels[:, 1:] >= 0  # the decoder input of a real target place is the target before it, padding is pad
    assert torch.equal(batch["decoder_input_ids"][:, 1:][real], labels[:, :-1][real])
    assert (batch["decoder_input_ids"][labels < 0] == tok.ids["pad"]).all()
    assert (batch["input_ids"] == tok.ids["mask"]).any()
    stats = corruption_statistics(dm, Seq2SeqLM(backbone="tiny-bart", decoder_start_token="eos"), 6)
    assert abs(stats["noise_fraction"] - 0.30) < 0.03 and stats["loss_fraction"] > 0.95


transformers = pytest.importorskip("transformers")


def _hf_bart():
    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=101, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                                  decoder_ffn_dim=48, max_position_embeddings=64, init_std=0.2, pad_token_id=1,
                                  bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    return spread_biases(transformers.BartForConditionalGeneration(cfg))


def test_bart_import_then_export_matches_transformers(tmp_path):
    from plm_lightning.interop import export_checkpoint
    from plm_lightning.objectives.loading import import_hf

    hf = _hf_bart()
    hf.save_pretrained(tmp_path / "hf")
    info = import_hf(tmp_path / "hf", tmp_path / "ours.ckpt")
    assert info["family"] == "bart" and info["objective"] == "Seq2SeqLM"
    ckpt = torch.load(tmp_path / "ours.ckpt", weights_only=True)
    ours = Seq2SeqLM(**{k: v for k, v in ckpt["hyper_parameters"].items() if not k.startswith("_")}).eval()
    ours.load_state_dict(ckpt["state_dict"])
    assert ours.decoder_start_token == "eos"
    batch = seq2seq_batch(pad_id=1, start_id=2)
    with torch.no_grad():
        expected = hf(**batch).logits
    assert expected.std() > 0.5  # spread-out weights: a wrong mapping cannot hide in tiny logits
    assert (decoder_logits(ours, batch) - expected).abs().max() <= 1e-4
    export_checkpoint(tmp_path / "ours.ckpt", tmp_path / "exported")
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert config["architectures"] == ["BartForConditionalGeneration"] and config["decoder_start_token_id"] == 2
    reloaded = transformers.BartForConditionalGeneration.from_pretrained(tmp_path / "exported").eval()
    with torch.no_grad():
        assert (reloaded(**batch).logits - expected).abs().max() <= 1e-4


def test_our_bart_exports_to_transformers(tmp_path):
    from plm_lightning.interop import export_checkpoint

    torch.manual_seed(2)
    module = Seq2SeqLM(backbone="tiny-bart", vocab_size=101, decoder_start_token="eos",
                       backbone_overrides={"initializer_range": 0.2}).eval()
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                CHECKPOINT_KEY: {"objective": "Seq2SeqLM", "backbone": module.config.to_dict()}}, tmp_path / "m.ckpt")
    export_checkpoint(tmp_path / "m.ckpt", tmp_path / "hf")
    hf = transformers.BartForConditionalGeneration.from_pretrained(tmp_path / "hf").eval()
    batch = seq2seq_batch(pad_id=1, start_id=2)
    with torch.no_grad():
        assert (decoder_logits(module, batch) - hf(**batch).logits).abs().max() <= 1e-4


def test_non_bart_seq2seq_export_and_nonzero_logits_bias_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    from plm_lightning.interop import export_checkpoint
    from plm_lightning.objectives.loading import import_hf

    module = Seq2SeqLM(backbone="tiny-bart", vocab_size=101, backbone_overrides={"norm_position": "pre"})
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                CHECKPOINT_KEY: {"objective": "Seq2SeqLM", "backbone": module.config.to_dict()}}, tmp_path / "m.ckpt")
    with pytest.raises(ConfigError, match="differs from BART in \\['norm_position'\\]"):
        export_checkpoint(tmp_path / "m.ckpt", tmp_path / "out")
    _hf_bart().save_pretrained(tmp_path / "hf")
    weights = load_file(tmp_path / "hf" / "model.safetensors")
    weights["final_logits_bias"] = torch.ones_like(weights["final_logits_bias"])
    save_file(weights, str(tmp_path / "hf" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ConfigError, match="final_logits_bias"):
        import_hf(tmp_path / "hf", tmp_path / "x.ckpt")


def test_predict_frames_bart_prompts_and_starts_from_eos(monkeypatch, tmp_path):
    """``predict`` gives BART ``<s> prompt </s>`` with the prompt's ``<mask>`` kept as the mask token, decodes from
    ``</s>`` and drops the reconstruction's ``<s>``."""
    from plm_lightning import prediction
    from plm_lightning.corpus import embedded_corpus
    from plm_lightning.corpus.tokenizer import train_tokenizer
    from plm_lightning.generation import GenerationConfig

    tok = train_tokenizer("bpe", embedded_corpus()[:50], 400)
    model = Seq2SeqLM(backbone="tiny-bart", vocab_size=tok.vocab_size, decoder_start_token="eos").eval()
    monkeypatch.setattr(prediction, "load_generator", lambda path: (model, tok))
    seen = {}

    def fake_generate(model, ids, mask, config, eos, start, generator=None):
        seen.update(ids=ids[0].tolist(), eos=eos, start=start)
        return [[tok.ids["bos"], 300, 301, eos]]

    monkeypatch.setattr(prediction, "generate", fake_generate)
    (tmp_path / "p.txt").write_text("Return the <mask> of the list.\n")
    (row,) = prediction.predict_file("ckpt", str(tmp_path / "p.txt"), GenerationConfig())
    ids, ids_ = tok.ids, seen["ids"]
    assert ids_[0] == ids["bos"] and ids_[-1] == ids["eos"] and ids_.count(ids["mask"]) == 1
    assert seen["start"] == seen["eos"] == ids["eos"]
    assert row["output"] == tok.decode([300, 301]).strip()
