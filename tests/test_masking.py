"""Property tests of BERT token masking (plm_lightning.data.corruption.token_mask)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.collators import MaskedLMCollator, MaskedLMSettings
from plm_lightning.data.corruption import (
    IGNORE_INDEX,
    MaskingConfig,
    mask_tokens,
    masking_budget,
    masking_budgets,
    row_keys,
    uniforms,
)
from plm_lightning.errors import ConfigError

VOCAB = 1000
SPECIAL = np.array([0, 1, 2, 3, 4])  # pad unk cls sep mask
MASK_ID = 4
RANDOM_IDS = np.arange(5, VOCAB)


@st.composite
def sequences(draw):
    n = draw(st.integers(4, 200))
    ids = np.array(draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n)))
    ids[0] = 2
    n_pad = draw(st.integers(0, n // 3))
    if n_pad:
        ids[n - n_pad:] = 0
    return ids


@given(ids=sequences(), seed=st.integers(0, 2**63 - 1), p=st.floats(0.01, 0.99))
@settings(max_examples=200, deadline=None)
def test_exact_budget_labels_and_specials(ids, seed, p):
    cfg = MaskingConfig(mask_prob=p)
    maskable = ~np.isin(ids, SPECIAL)
    corrupted, labels = mask_tokens(ids, maskable, seed, cfg, MASK_ID, RANDOM_IDS)
    chosen = labels != IGNORE_INDEX
    # exact budget
    assert chosen.sum() == masking_budget(int(maskable.sum()), p)
    if maskable.sum():
        assert chosen.sum() == min(maskable.sum(), max(1, round(p * maskable.sum())))
    # labels only at chosen positions, and they hold the original token
    assert np.array_equal(labels[chosen], ids[chosen])
    # special and padding tokens never chosen, never changed
    assert not chosen[~maskable].any()
    assert np.array_equal(corrupted[~maskable], ids[~maskable])
    # nothing outside the chosen positions changes
    assert np.array_equal(corrupted[~chosen], ids[~chosen])
    # random replacements never produce special tokens
    changed = chosen & (corrupted != ids) & (corrupted != MASK_ID)
    assert not np.isin(corrupted[changed], SPECIAL).any()


@given(ids=sequences(), seed=st.integers(0, 2**63 - 1))
@settings(max_examples=50, deadline=None)
def test_same_seed_same_masks(ids, seed):
    cfg = MaskingConfig()
    maskable = ~np.isin(ids, SPECIAL)
    a = mask_tokens(ids, maskable, seed, cfg, MASK_ID, RANDOM_IDS)
    b = mask_tokens(ids, maskable, seed, cfg, MASK_ID, RANDOM_IDS)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("mask_replace,random_replace", [(0.8, 0.1), (0.5, 0.5), (1.0, 0.0), (0.0, 0.0)])
def test_replacement_split_over_many_draws(mask_replace, random_replace):
    rng = np.random.default_rng(0)
    cfg = MaskingConfig(0.15, mask_replace, random_replace)
    ids = rng.integers(5, VOCAB, size=(400, 128))
    counts = np.zeros(3)
    corrupted, labels = mask_tokens(ids, np.ones_like(ids, bool), row_keys(0, 0, np.arange(len(ids))), cfg, MASK_ID,
                                    RANDOM_IDS)
    chosen = labels != IGNORE_INDEX
    is_mask = corrupted[chosen] == MASK_ID
    unchanged = corrupted[chosen] == ids[chosen]
    counts += [is_mask.sum(), (~is_mask & ~unchanged).sum(), unchanged.sum()]
    frac = counts / counts.sum()
    # a random replacement can draw the original token (1/995): tolerance covers it and sampling noise
    expected = np.array([mask_replace, random_replace, 1 - mask_replace - random_replace])
    assert np.allclose(frac, expected, atol=0.015), (frac, expected)


def test_collator_is_seeded_by_seed_epoch_index():
    col = MaskedLMCollator(MaskedLMSettings(SPECIAL, MASK_ID, VOCAB, MaskingConfig(), seed=7))
    ids = np.random.default_rng(1).integers(5, VOCAB, 64).astype(np.int32)

    def sample(epoch, index):
        return {"input_ids": ids, "document_ids": np.zeros(64, np.int16), "epoch": epoch, "index": index}

    a = col([sample(0, 3)])["input_ids"]
    assert (a == col([sample(0, 3)])["input_ids"]).all()
    assert not (a == col([sample(1, 3)])["input_ids"]).all()  # dynamic masking: a new mask each epoch
    assert not (a == col([sample(0, 4)])["input_ids"]).all()
    static = MaskedLMCollator(MaskedLMSettings(SPECIAL, MASK_ID, VOCAB, MaskingConfig(), seed=7, static_masking=True,
                                               dupe_factor=2))
    assert (static([sample(0, 3)])["input_ids"] == static([sample(2, 3)])["input_ids"]).all()


@pytest.mark.parametrize("kwargs", [dict(mask_prob=0.0), dict(mask_prob=1.0), dict(mask_prob=1.5),
                                    dict(mask_replace_prob=0.8, random_replace_prob=0.3)])
def test_bad_masking_config(kwargs):
    with pytest.raises(ConfigError, match="data.m|data.r"):
        MaskingConfig(**kwargs)


@given(ids=st.lists(sequences(), min_size=1, max_size=6), seed=st.integers(0, 2**63 - 1), p=st.floats(0.01, 0.99))
@settings(max_examples=100, deadline=None)
def test_batch_rows_equal_single_rows(ids, seed, p):
    """A row's corruption depends only on its own key: batching (or DDP sharding) never changes it."""
    length = max(len(r) for r in ids)
    batch = np.stack([np.pad(r, (0, length - len(r))) for r in ids])
    maskable = ~np.isin(batch, SPECIAL)
    keys = row_keys(seed, 0, np.arange(len(ids)))
    corrupted, labels = mask_tokens(batch, maskable, keys, MaskingConfig(p), MASK_ID, RANDOM_IDS)
    for r in range(len(ids)):
        c1, l1 = mask_tokens(batch[r], maskable[r], keys[r], MaskingConfig(p), MASK_ID, RANDOM_IDS)
        assert np.array_equal(c1, corrupted[r]) and np.array_equal(l1, labels[r])
    assert np.array_equal((labels != IGNORE_INDEX).sum(1), masking_budgets(maskable.sum(1), p))


def test_counter_uniforms_look_uniform_and_independent():
    u = uniforms(row_keys(1, 0, np.arange(2000)), 128, stream=0)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / u.size
    assert np.allclose(hist, 0.1, atol=0.005)
    v = uniforms(row_keys(1, 0, np.arange(2000)), 128, stream=1)
    assert abs(np.corrcoef(u.ravel(), v.ravel())[0, 1]) < 0.01  # streams are independent
    assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.01  # neighbours are independent
    assert not np.array_equal(row_keys(1, 0, [5]), row_keys(1, 1, [5]))
    raw = uniforms(np.arange(400), 128, stream=40)  # raw keys: key r at j and key r ^ 1 at j ^ 1 must not coincide
    assert len(np.unique(raw)) == raw.size and abs((raw < 0.2).mean() - 0.2) < 0.01


@pytest.mark.parametrize("scheme", ["token", "whole_word", "ngram", "span", "ernie"])
def test_static_and_dynamic_masking_for_every_scheme(scheme):
    """Static masking (BERT's dupe_factor) cycles a fixed set of masks over epochs; dynamic masking (RoBERTa) draws a
    new one every epoch - for every masking scheme."""
    ids = np.random.default_rng(1).integers(5, VOCAB, 96).astype(np.int32)
    starts = np.random.default_rng(2).random(96) < 0.6

    def sample(epoch):
        return {"input_ids": ids, "document_ids": np.zeros(96, np.int16), "epoch": epoch, "index": 3,
                "word_starts": starts, "phrase_starts": starts, "entity_starts": starts,
                "in_phrase": ~starts, "in_entity": ~starts, "progress": 0.0}

    def labels(collate, epoch):
        return collate([sample(epoch)])["labels"]

    dynamic = MaskedLMCollator(MaskedLMSettings(SPECIAL, MASK_ID, VOCAB, MaskingConfig(), seed=7, masking_scheme=scheme))
    static = MaskedLMCollator(MaskedLMSettings(SPECIAL, MASK_ID, VOCAB, MaskingConfig(), seed=7, static_masking=True,
                                               dupe_factor=2, masking_scheme=scheme))
    assert not (labels(dynamic, 0) == labels(dynamic, 2)).all()
    assert (labels(static, 0) == labels(static, 2)).all() and (labels(static, 1) == labels(static, 3)).all()
    assert not (labels(static, 0) == labels(static, 1)).all()
