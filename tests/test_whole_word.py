"""Whole-word masking: property tests of the corruption and of the word boundaries recorded at packing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.data import MaskedLMDataModule
from plm_lightning.data.corruption import (
    IGNORE_INDEX,
    MaskingConfig,
    mask_whole_words,
    masking_budgets,
    row_keys,
    word_ids,
)

VOCAB, MASK_ID = 1000, 4
SPECIAL = np.array([0, 1, 2, 3, 4])
RANDOM_IDS = np.arange(5, VOCAB)


@st.composite
def batches(draw):
    rows, length = draw(st.integers(1, 5)), draw(st.integers(4, 96))
    ids = np.array(draw(st.lists(st.integers(5, VOCAB - 1), min_size=rows * length, max_size=rows * length)))
    ids = ids.reshape(rows, length)
    ids[:, 0] = 2
    for r in range(rows):
        pad = draw(st.integers(0, length // 3))
        if pad:
            ids[r, length - pad:] = 0
    starts = np.array(draw(st.lists(st.booleans(), min_size=rows * length, max_size=rows * length))).reshape(rows, length)
    return ids, starts


@given(batch=batches(), seed=st.integers(0, 2**63 - 1), p=st.floats(0.05, 0.9))
@settings(max_examples=200, deadline=None)
def test_whole_words_within_budget_and_intact(batch, seed, p):
    ids, starts = batch
    maskable = ~np.isin(ids, SPECIAL)
    keys = row_keys(seed, 0, np.arange(len(ids)))
    corrupted, labels = mask_whole_words(ids, maskable, starts, keys, MaskingConfig(p), MASK_ID, RANDOM_IDS)
    chosen = labels != IGNORE_INDEX
    words, _ = word_ids(maskable, starts)
    budgets = masking_budgets(maskable.sum(1), p)
    for r in range(len(ids)):
        total = int(chosen[r].sum())
        assert total <= budgets[r]
        for w in range(int(words[r].max()) + 1):
            in_word = words[r] == w
            assert chosen[r][in_word].all() or not chosen[r][in_word].any()  # a word is masked whole or not at all
            if not chosen[r][in_word].any():  # greedy skip-and-continue: no unchosen word still fits
                assert in_word.sum() > budgets[r] - total
    assert np.array_equal(labels[chosen], ids[chosen]) and not chosen[~maskable].any()
    assert np.array_equal(corrupted[~chosen], ids[~chosen])
    again = mask_whole_words(ids, maskable, starts, keys, MaskingConfig(p), MASK_ID, RANDOM_IDS)
    assert np.array_equal(again[0], corrupted) and np.array_equal(again[1], labels)


def test_word_starts_recorded_at_packing_follow_the_tokenizer():
    dm = MaskedLMDataModule(seq_len=64, batch_size=4, packing="full_sentences", max_documents=60,
                            masking_scheme="whole_word", tokenizer_vocab_size=600)  # small: words split into pieces
    dm.prepare_data()
    dm.setup("fit")
    blocks = dm.blocks["train"]
    tokens = [[dm.tokenizer.id_to_token(t) for t in row] for row in blocks.input_ids[:50]]
    continuation = np.array([[t.startswith("##") for t in row] for row in tokens])
    assert continuation.any()
    assert not (continuation & blocks.word_starts[:50]).any()  # "##" pieces never start a word
    assert (~continuation & ~blocks.word_starts[:50]).sum() == 0  # and every other WordPiece token does


def test_word_starts_for_byte_level_bpe():
    dm = MaskedLMDataModule(seq_len=64, batch_size=4, packing="full_sentences", max_documents=60, tokenizer="bpe",
                            tokenizer_vocab_size=600, masking_scheme="whole_word")
    dm.prepare_data()
    dm.setup("fit")
    blocks = dm.blocks["train"]
    tokens = [[dm.tokenizer.id_to_token(t) for t in row] for row in blocks.input_ids[:50]]
    spaced = np.array([[t.startswith("Ġ") for t in row] for row in tokens])
    starts = blocks.word_starts[:50]
    assert spaced.any() and (starts[spaced]).all()  # a token after a space always starts a word
    assert (~starts).any()  # and pieces inside words are continuations


def test_chinese_whole_word_masking_follows_jieba_words(tmp_path):
    """Chinese BERT tokenizes characters; with data.word_segmenter=jieba the word boundaries are jieba's words and
    whole-word masking masks them entirely (Cui et al. 2019)."""
    pytest.importorskip("jieba")
    from plm_lightning.data import MaskedLMDataModule

    sentences = ["我们在北京大学学习自然语言处理。", "研究人员使用深度学习模型。", "今天的天气非常好，我们去公园散步。",
                 "机器翻译是自然语言处理的重要任务。"]
    docs = ["".join(sentences[(i + j) % 4] for j in range(6)) for i in range(60)]
    (tmp_path / "zh.txt").write_text("\n\n".join(docs), encoding="utf-8")
    dm = MaskedLMDataModule(source=str(tmp_path / "zh.txt"), tokenizer="wordpiece", tokenizer_vocab_size=300,
                            seq_len=64, batch_size=16, masking_scheme="whole_word", word_segmenter="jieba",
                            mask_prob=0.3, cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    tok, loader = dm.tokenizer, dm.train_dataloader()
    word = [tok.ids.get(c) if c in tok.ids else tok.tokenizer.token_to_id(c) for c in "北京大学"]
    assert all(t is not None for t in word)
    found = whole = 0
    for keys in [list(loader.sampler)[i:i + 16] for i in range(0, 64, 16)]:
        samples = [loader.dataset[k] for k in keys]
        batch = loader.collate_fn(samples)
        for row, sample in enumerate(samples):
            ids = sample["input_ids"].tolist()
            for at in (i for i in range(len(ids) - 3) if ids[i:i + 4] == word):
                found += 1
                starts = sample["word_starts"][at:at + 4]
                assert starts[0] and not starts[1:].any()  # one jieba word, four characters
                masked = (batch["labels"][row, at:at + 4] != -100).numpy()
                assert masked.all() or not masked.any()
                whole += int(masked.all())
    assert found > 10 and whole > 0
