"""MASS (Song et al. 2019): one contiguous fragment masked for the encoder and predicted by the decoder."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.data import MASSCollator, MASSDataModule
from plm_lightning.data.corruption.mass import fragment_length, fragment_start, mass_corrupt
from plm_lightning.objectives import Seq2SeqLM

RANDOM_IDS = np.arange(10, 1000)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.floats(0.01, 1.0), st.integers(0, 2**32))
def test_one_contiguous_fragment_masked_and_predicted(length, ratio, seed):
    tokens = np.random.default_rng(seed).integers(10, 1000, length)
    enc, dec, target, start = mass_corrupt(tokens, ratio, np.random.default_rng(seed), mask_id=4,
                                           random_ids=RANDOM_IDS, start_id=0)
    k = fragment_length(length, ratio)
    assert len(target) == k == len(dec) and target.tolist() == tokens[start:start + k].tolist()
    assert dec[0] == (tokens[start - 1] if start else 0)  # the token before the fragment (microsoft/MASS)
    assert dec[1:].tolist() == target[:-1].tolist()  # teacher forcing over the fragment only
    outside = np.ones(length, dtype=bool)
    outside[start:start + k] = False
    assert (enc[outside] == tokens[outside]).all() and len(enc) == length


def test_replacement_split_and_the_two_extremes():
    rng = np.random.default_rng(0)
    counts = np.zeros(3)
    for _ in range(300):
        tokens = rng.integers(10, 1000, 100)
        enc, _, target, start = mass_corrupt(tokens, 0.5, rng, 4, RANDOM_IDS)
        frag = enc[start:start + len(target)]
        counts += [(frag == 4).sum(), ((frag != 4) & (frag != target)).sum(), (frag == target).sum()]
    shares = counts / counts.sum()
    assert abs(shares[0] - 0.8) < 0.02 and abs(shares[1] - 0.1) < 0.02  # BERT's 80/10/10 on the encoder side
    tokens = np.arange(10, 60)
    enc, dec, target, start = mass_corrupt(tokens, 0.001, np.random.default_rng(1), 4, RANDOM_IDS)
    assert len(target) == 1 and dec.tolist() in ([0], [tokens[start - 1]])  # k = 1: one masked token (BERT)
    enc, dec, target, _ = mass_corrupt(tokens, 1.0, np.random.default_rng(1), 4, RANDOM_IDS)
    assert target.tolist() == tokens.tolist() and dec[1:].tolist() == tokens[:-1].tolist()  # k = m: a language model


def test_fragment_starts_follow_the_reference():
    """microsoft/MASS ``mask_start``: 20% of fragments open the row, 20% close it, 60% start uniformly."""
    rng = np.random.default_rng(0)
    starts = np.array([fragment_start(100, 50, rng) for _ in range(20000)])
    assert abs((starts == 0).mean() - 0.2 - 0.6 / 51) < 0.015
    assert abs((starts == 50).mean() - 0.2 - 0.6 / 51) < 0.015
    inner = starts[(starts > 0) & (starts < 50)]
    assert abs(len(inner) / len(starts) - 0.6 * 49 / 51) < 0.015 and inner.min() == 1 and inner.max() == 49
    assert fragment_start(10, 10, rng) == 0  # a fragment the length of the row has one place


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 80), st.floats(0.01, 1.0), st.integers(0, 2**32))
def test_the_decoder_never_sees_encoder_masks(length, ratio, seed):
    """The cross-attention mask hides exactly the encoder's mask tokens (microsoft/MASS ``enc_mask``), but for a row
    masked whole, which keeps its positions (else the decoder would attend to nothing)."""
    collate = MASSCollator(mask_id=4, pad_id=0, eos_id=1, random_ids=RANDOM_IDS, fragment_ratio=ratio, seed=seed)
    rng = np.random.default_rng(seed)
    samples = [{"index": i, "epoch": 0, "input_ids": rng.integers(10, 1000, n), "document_ids": np.zeros(n)}
               for i, n in enumerate((length, max(1, length // 2)))]
    batch = collate(samples)
    real, seen = batch["attention_mask"], batch["cross_attention_mask"]
    for r in range(2):
        hidden = real[r] & (batch["input_ids"][r] == 4)
        if hidden.sum() == real[r].sum():
            assert torch.equal(seen[r], real[r])
        else:
            assert torch.equal(seen[r], real[r] & ~hidden)
    assert "cross_attention_mask" not in MASSCollator(4, 0, 1, RANDOM_IDS, hide_masks_from_decoder=False)(samples)


def test_hidden_masks_change_the_decoder_and_only_through_cross_attention():
    """The model reads ``cross_attention_mask``: the loss moves when the decoder may not see the mask tokens, and
    equals the plain run when the mask is the attention mask."""
    torch.manual_seed(0)
    collate = MASSCollator(mask_id=4, pad_id=0, eos_id=1, random_ids=RANDOM_IDS, seed=3)
    batch = collate([{"index": i, "epoch": 0, "input_ids": np.arange(10, 74), "document_ids": np.zeros(64)}
                     for i in range(2)])
    model = Seq2SeqLM(backbone="tiny-t5", vocab_size=1000).eval()
    plain = {k: v for k, v in batch.items() if k != "cross_attention_mask"}
    with torch.no_grad():
        hidden, full = model(**batch)["loss"], model(**plain)["loss"]
        same = model(**plain, cross_attention_mask=batch["attention_mask"])["loss"]
    assert torch.equal(full, same) and abs(hidden - full) > 1e-4


def test_collator_and_model():
    collate = MASSCollator(mask_id=4, pad_id=0, eos_id=1, random_ids=RANDOM_IDS, seed=3)
    samples = [{"index": i, "epoch": 0, "input_ids": np.arange(10, 74), "document_ids": np.zeros(64)}
               for i in range(4)]
    batch = collate(samples)
    assert batch["input_ids"].shape == (4, 64) and batch["labels"].shape == (4, 32)
    assert torch.equal(collate(samples)["input_ids"], batch["input_ids"])
    model = Seq2SeqLM(backbone="tiny-t5", vocab_size=1000)
    out = model(**batch)
    assert out["lm_targets"].numel() == 4 * 32
    out["loss"].backward()


@pytest.mark.parametrize("kwargs,needle", [({"fragment_ratio": 0.0}, "data.fragment_ratio=0.0"),
                                           ({"fragment_ratio": 1.5}, "data.fragment_ratio=1.5"),
                                           ({"mask_replace_prob": 0.95, "random_replace_prob": 0.1}, "summing")])
def test_mass_config_errors(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        MASSDataModule(**kwargs)
