"""SpanBERT: property tests of span masking and span boundaries, and the Span Boundary Objective head."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data.corruption import IGNORE_INDEX, MaskingConfig, masking_budgets, row_keys, word_ids
from plm_lightning.data.corruption.span_mask import SpanConfig, mask_spans, span_boundaries
from plm_lightning.nn import SpanBoundaryHead, get_preset
from tests.test_whole_word import MASK_ID, RANDOM_IDS, SPECIAL, batches


@given(batch=batches(), seed=st.integers(0, 2**63 - 1), p=st.floats(0.05, 0.6), max_len=st.integers(1, 10))
@settings(max_examples=200, deadline=None)
def test_spans_are_whole_words_within_budget(batch, seed, p, max_len):
    ids, starts = batch
    maskable = ~np.isin(ids, SPECIAL)
    keys = row_keys(seed, 0, np.arange(len(ids)))
    spans = SpanConfig(max_span_length=max_len)
    corrupted, labels, span_ids = mask_spans(ids, maskable, starts, keys, MaskingConfig(p), spans, MASK_ID,
                                             RANDOM_IDS)
    chosen = labels != IGNORE_INDEX
    assert np.array_equal(chosen, span_ids >= 0)
    assert (chosen.sum(1) <= masking_budgets(maskable.sum(1), p)).all()
    assert np.array_equal(labels[chosen], ids[chosen]) and not chosen[~maskable].any()
    assert np.array_equal(corrupted[~chosen], ids[~chosen])
    words, word_begins = word_ids(maskable, starts)
    for r in range(len(ids)):
        for w in range(int(words[r].max()) + 1):  # a word lies in exactly one span or in none
            assert len(set(span_ids[r][words[r] == w].tolist())) == 1
        for s in np.unique(span_ids[r][span_ids[r] >= 0]):
            where = np.flatnonzero(span_ids[r] == s)
            assert np.array_equal(where, np.arange(where[0], where[-1] + 1))  # contiguous
            assert word_begins[r][where].sum() <= max_len  # at most max_span_length words
            masked = corrupted[r][where] == MASK_ID
            assert masked.all() or not masked.any()  # 80/10/10 decided once per span
    again = mask_spans(ids, maskable, starts, keys, MaskingConfig(p), spans, MASK_ID, RANDOM_IDS)
    assert all(np.array_equal(a, b) for a, b in zip(again, (corrupted, labels, span_ids)))


@given(span_ids=st.lists(st.integers(-1, 3), min_size=3, max_size=40))
@settings(max_examples=200, deadline=None)
def test_span_boundaries(span_ids):
    s = np.array([[-1, *span_ids, -1]])  # position 0 is never inside a span ([CLS])
    left, right, offset = span_boundaries(s)
    for i in np.flatnonzero(s[0] >= 0):
        start, end = i, i
        while s[0, start - 1] == s[0, i]:
            start -= 1
        while s[0, end + 1] == s[0, i]:
            end += 1
        assert (left[0, i], right[0, i], offset[0, i]) == (start - 1, end + 1, i - start)
    assert (left[s < 0] == -1).all() and (offset[s < 0] == -1).all()


def test_length_distribution_mean_is_the_papers():
    probs = SpanConfig().length_distribution()
    assert abs((np.arange(1, 11) * probs).sum() - 3.8) < 0.01 and abs(probs.sum() - 1) < 1e-12


def test_span_boundary_head_reads_only_the_boundaries():
    """SBO predicts a span token from x_{s-1}, x_{e+1} and its offset: the span's own states get no gradient."""
    torch.manual_seed(0)  # unseeded, a dead ReLU unit could zero a boundary's gradient by chance (seen once in the suite)
    cfg = get_preset("tiny")
    head = SpanBoundaryHead(cfg)
    hidden = torch.randn(1, 10, cfg.hidden_size, requires_grad=True)
    span = torch.tensor([[-1, -1, -1, 0, 0, 0, -1, -1, -1, -1]])
    left, right, offset = (torch.from_numpy(a) for a in span_boundaries(span.numpy()))
    positions = span >= 0
    y = head(hidden, positions, left, right, offset)
    assert y.shape == (3, cfg.hidden_size)
    y.sum().backward()
    touched = hidden.grad[0].abs().sum(-1) > 0
    assert touched.tolist() == [False, False, True, False, False, False, True, False, False, False]
    assert not torch.allclose(y[0], y[1])  # the position embedding tells span tokens apart


def test_ngram_distribution_is_albert_s():
    from plm_lightning.data.corruption.span_mask import ngram_distribution

    assert np.allclose(ngram_distribution(3), np.array([6, 3, 2]) / 11)  # (1/n) / (1 + 1/2 + 1/3)


@given(batch=batches(), seed=st.integers(0, 2**63 - 1), p=st.floats(0.05, 0.6), max_ngram=st.integers(1, 4))
@settings(max_examples=150, deadline=None)
def test_ngrams_are_whole_words_within_budget(batch, seed, p, max_ngram):
    from plm_lightning.data.corruption.span_mask import mask_ngrams, ngram_distribution, sample_spans

    ids, starts = batch
    maskable = ~np.isin(ids, SPECIAL)
    keys = row_keys(seed, 0, np.arange(len(ids)))
    corrupted, labels = mask_ngrams(ids, maskable, starts, keys, MaskingConfig(p), max_ngram, MASK_ID, RANDOM_IDS)
    grams = sample_spans(maskable, starts, keys, p, ngram_distribution(max_ngram))
    chosen = labels != IGNORE_INDEX
    assert np.array_equal(chosen, grams >= 0)  # the n-grams are exactly the loss positions
    assert (chosen.sum(1) <= masking_budgets(maskable.sum(1), p)).all()
    assert np.array_equal(corrupted[~chosen], ids[~chosen]) and not chosen[~maskable].any()
    words, word_begins = word_ids(maskable, starts)
    for r in range(len(ids)):
        for w in range(int(words[r].max()) + 1):
            assert len(set(grams[r][words[r] == w].tolist())) == 1
        for g in np.unique(grams[r][grams[r] >= 0]):
            where = np.flatnonzero(grams[r] == g)
            assert np.array_equal(where, np.arange(where[0], where[-1] + 1))
            assert 1 <= word_begins[r][where].sum() <= max_ngram
