"""ERNIE knowledge masking (Sun et al. 2019): collocations by normalised PMI, capitalised-run entities, lexicons,
whole-unit selection with the stage's units first, and the stage schedule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning import ConfigError
from plm_lightning.corpus.knowledge_units import (
    PhraseConfig,
    capitalised_runs,
    fit_phrases,
    load_lexicon,
    match_lexicon,
    unit_starts,
)
from plm_lightning.data.collators import MaskedLMCollator, MaskedLMSettings
from plm_lightning.data.corruption import MaskingConfig, select_whole_words, word_ids


def test_collocations_are_found_by_npmi():
    rng = np.random.default_rng(0)
    filler = [f"w{i}" for i in range(50)]
    sentences = []
    for _ in range(400):
        s = list(rng.choice(filler, 8))
        s.insert(int(rng.integers(0, 8)), "new")
        s.insert(s.index("new") + 1, "york")
        sentences.append([*s, "."])
    phrases = fit_phrases(sentences, PhraseConfig(min_count=5, threshold=0.5))
    assert ("new", "york") in phrases
    assert not any("." in p for p in phrases)  # punctuation never joins
    assert not any(set(p) <= set(filler) for p in phrases)  # chance pairs of filler words stay apart
    assert fit_phrases(sentences[:2], PhraseConfig(min_count=5)) == set()  # too rare to count


def test_second_pass_builds_longer_phrases():
    sentences = [["the", "new", "york", "times", "said", f"x{i}", f"y{i % 7}"] for i in range(200)]
    phrases = fit_phrases(sentences, PhraseConfig(min_count=5, threshold=0.3, passes=3))
    assert any(len(p) >= 3 and "york" in p for p in phrases)


def test_capitalised_runs_and_sentence_case():
    units, inside = capitalised_runs(["The", "city", "of", "New", "York", "uses", "Python", "."])
    assert inside == [False, False, False, True, True, False, True, False]
    assert units[3] == units[4] != units[6]
    units, inside = capitalised_runs(["New", "York", "is", "big"])
    assert inside[:2] == [True, True] and units[0] == units[1]


def test_lexicon_longest_match_and_missing_file(tmp_path):
    lex = tmp_path / "phrases.txt"
    lex.write_text("# a comment\nnew york\nnew york times\n")
    entries = load_lexicon(lex, "data.phrase_lexicon")
    units, inside = match_lexicon(["The", "New", "York", "Times", "said"], entries, 4)
    assert unit_starts(units) == [True, True, False, False, True] and inside == [False, True, True, True, False]
    with pytest.raises(ConfigError, match="data.phrase_lexicon: lexicon file '.*nope.txt' does not exist"):
        load_lexicon(tmp_path / "nope.txt", "data.phrase_lexicon")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_units_are_masked_whole_and_prioritised_units_first(data):
    length = data.draw(st.integers(8, 64))
    starts = np.array(data.draw(st.lists(st.booleans(), min_size=length, max_size=length)))
    starts[0] = True
    units = np.cumsum(starts) - 1
    n_units = int(units.max()) + 1
    preferred_unit = np.array(data.draw(st.lists(st.booleans(), min_size=n_units, max_size=n_units)))
    priority = preferred_unit[units][None]
    maskable = np.ones((1, length), dtype=bool)
    seed = data.draw(st.integers(0, 2**32 - 1))
    selected = select_whole_words(maskable, starts[None], np.array([seed], dtype=np.uint64), 0.15, priority)[0]
    budget = max(1, int(round(0.15 * length)))
    assert selected.sum() <= budget
    for u in np.unique(units):  # complete units only
        assert selected[units == u].all() or not selected[units == u].any()
    # preferred units are visited first: one left out did not fit beside the preferred units already taken
    preferred_taken = int((selected & priority[0]).sum())
    for u in np.unique(units[priority[0]]):
        assert selected[units == u].all() or (units == u).sum() > budget - preferred_taken


def _sample(progress, n=24):
    ids = np.arange(5, 5 + n)
    starts = np.ones(n, dtype=bool)
    phrase_starts = starts.copy()
    phrase_starts[[3, 4, 10, 11]] = False  # phrases at 2-4 and 9-11
    in_phrase = np.zeros(n, dtype=bool)
    in_phrase[[2, 3, 4, 9, 10, 11]] = True
    return {"input_ids": ids, "document_ids": np.zeros(n, dtype=np.int64), "epoch": 0, "index": 0,
            "progress": progress, "word_starts": starts, "phrase_starts": phrase_starts, "in_phrase": in_phrase,
            "entity_starts": starts, "in_entity": np.zeros(n, dtype=bool)}


def test_stage_schedule_switches_units_by_progress():
    collate = MaskedLMCollator(MaskedLMSettings(np.array([0, 1, 2, 3, 4]), 4, 100, MaskingConfig(0.125, 1.0, 0.0),
                                                seed=1, masking_scheme="ernie", stages=("basic", "phrase"),
                                                stage_epochs=(0.5,)))
    assert [collate.stage_of(p) for p in (0.0, 0.49, 0.5, 3.0)] == [0, 0, 1, 1]
    batch = collate([_sample(0.1), _sample(0.9)])
    assert batch["knowledge_stage"].tolist() == [0, 1]
    masked = (batch["labels"] != -100).numpy()
    assert masked[1].sum() == 3 and (masked[1][[2, 3, 4]].all() or masked[1][[9, 10, 11]].all())  # a whole phrase
    again = collate([_sample(0.1), _sample(0.9)])
    assert (again["labels"] == batch["labels"]).all()  # seeded by (seed, epoch, index): reproducible
    assert word_ids(np.ones((1, 4), dtype=bool), np.ones((1, 4), dtype=bool))[0].tolist() == [[0, 1, 2, 3]]


def test_bad_stage_settings_are_config_errors():
    from plm_lightning.data import MaskedLMDataModule

    with pytest.raises(ConfigError, match="data.stage_epochs"):
        MaskedLMDataModule(masking_scheme="ernie", stage_epochs=[1.0])
    with pytest.raises(ConfigError, match="data.knowledge_stages"):
        MaskedLMDataModule(masking_scheme="ernie", knowledge_stages=["phrases"])
    with pytest.raises(ConfigError, match="data.entity_lexicon"):
        MaskedLMDataModule(masking_scheme="ernie", entity_lexicon="missing.txt")


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "gpt2"])
def test_words_carry_no_tokenizer_whitespace(kind):
    """Entity detection reads each word's first character: byte-level BPE offsets include the leading space, which
    must not hide a capital (a regression: only line-initial words could be entities)."""
    from plm_lightning.corpus.knowledge_units import capitalised_runs
    from plm_lightning.corpus.tokenizer import train_tokenizer

    tok = train_tokenizer(kind, ["the city of New York uses Python every day"] * 20, 300)
    (_, index, words), = tok.encode_batch_with_words(["the city of New York uses Python"])
    assert all(w == w.strip() and w for w in words) and max(index) == len(words) - 1
    # words are cut from the original text, so even a lower-casing WordPiece keeps the capitals visible
    assert capitalised_runs(words)[1] == [False, False, False, True, True, False, True]


def test_entity_lexicon_units_and_single_word_phrases_are_not_phrases(tmp_path):
    from plm_lightning.corpus.knowledge_units import KnowledgeSpec

    (tmp_path / "entities.txt").write_text("new york\npython\n")
    spec = KnowledgeSpec(entity_lexicon=str(tmp_path / "entities.txt"))
    phrase_units, in_phrase, entity_units, in_entity = spec.units(
        ["I", "love", "New", "York", "and", "Python", "."], {("i", "love"), ("python",)})
    assert in_phrase == [True, True, False, False, False, False, False]  # a one-word lexicon hit is not a phrase
    assert in_entity == [False, False, True, True, False, True, False] and entity_units[2] == entity_units[3]
