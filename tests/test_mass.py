"""MASS (Song et al. 2019): one contiguous fragment masked for the encoder and predicted by the decoder."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.data import MASSCollator, MASSDataModule
from plm_lightning.data.corruption.mass import fragment_length, mass_corrupt
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
    assert dec[0] == 0 and dec[1:].tolist() == target[:-1].tolist()  # teacher forcing over the fragment only
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
    enc, dec, target, _ = mass_corrupt(tokens, 0.001, np.random.default_rng(1), 4, RANDOM_IDS)
    assert len(target) == 1 and dec.tolist() == [0]  # k = 1: predict one masked token with no decoder context (BERT)
    enc, dec, target, _ = mass_corrupt(tokens, 1.0, np.random.default_rng(1), 4, RANDOM_IDS)
    assert target.tolist() == tokens.tolist() and dec[1:].tolist() == tokens[:-1].tolist()  # k = m: a language model


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
