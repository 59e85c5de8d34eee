"""Sources, tokenizers, packing modes and the data modules."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plm_lightning.corpus import TextTokenizer, load_documents, split_sentences
from plm_lightning.corpus.blocks import (
    TokenizedDocument,
    pack_contiguous,
    pack_documents,
    pack_sentence_pairs,
    pack_sentences,
    split_documents,
)
from plm_lightning.corpus.sentences import SENTENCE_SPLITTERS, split_corpus
from plm_lightning.corpus.sources import embedded_corpus
from plm_lightning.data import CausalLMDataModule, MaskedLMDataModule
from plm_lightning.errors import ConfigError

CLS, SEP, PAD, EOS = 2, 3, 0, 9


def _docs(rng, n_docs=12):
    return [TokenizedDocument.from_sentences([list(rng.integers(10, 100, rng.integers(1, 30)))
                                              for _ in range(rng.integers(1, 8))])
            for _ in range(n_docs)]


def test_embedded_corpus_is_deterministic_and_nonempty():
    docs = embedded_corpus()
    assert len(docs) > 100 and sum(map(len, docs)) > 500_000
    assert load_documents(None)[1] == load_documents("embedded")[1]


def test_sentence_splitter_is_rule_based():
    s = split_sentences("Dr. Smith went to Washington. He arrived at 3 p.m. on Monday. It rained.")
    assert s == ["Dr. Smith went to Washington.", "He arrived at 3 p.m. on Monday.", "It rained."]


_WORDS = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_WORDS, st.sampled_from([" ", ". ", "! ", "? ", "\n", "\n\n", '." ', " e.g. "])),
                max_size=30), st.sampled_from(SENTENCE_SPLITTERS))
def test_every_sentence_splitter_keeps_every_character_and_every_paragraph_break(parts, splitter):
    """Whatever the text, the sentences hold its characters in order (whitespace aside), none is empty or padded,
    and no sentence crosses a blank line."""
    document = "".join(word + sep for word, sep in parts)
    sentences = split_sentences(document, splitter)
    assert "".join("".join(sentences).split()) == "".join(document.split())
    assert all(s and s == s.strip() for s in sentences)
    paragraphs = [" ".join(p.split()) for p in document.split("\n\n") if p.split()]
    assert [s for p in paragraphs for s in split_sentences(p, splitter)] == sentences


def test_blingfire_splits_the_rule_based_cases_and_is_cached_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("PLM_LIGHTNING_CACHE", str(tmp_path))
    text = "Dr. Smith went to Washington. He arrived at 3 p.m. on Monday. It rained."
    assert split_sentences(text, "blingfire") == ["Dr. Smith went to Washington.", "He arrived at 3 p.m. on Monday.",
                                                  "It rained."]
    docs = ['attributeref ::= primary "." identifier', '(An asymmetry between "a()" and "b()".) It is done for speed.']
    by = {splitter: split_corpus(docs, splitter) for splitter in SENTENCE_SPLITTERS}
    assert by["pysbd"] != by["blingfire"]  # they differ on these, so a shared cache entry would be wrong
    assert len(list((tmp_path / "sentences").glob("*.json"))) == 2
    assert {s: split_corpus(docs, s) for s in SENTENCE_SPLITTERS} == by
    with pytest.raises(ConfigError, match=r"data.sentence_splitter='nltk' is not one of pysbd, blingfire"):
        split_sentences(text, "nltk")


def test_blingfire_with_a_kept_buffer_returns_what_the_library_function_returns():
    """Our call of blingfire's C function reuses its output buffer and decodes a document's paragraphs at once: the
    sentences are those of the library's ``text_to_sentences`` on each paragraph, stripped, on every document of the
    embedded corpus, in an order where a long paragraph leaves its text in the buffer before a short one and an
    empty one (nothing written: nothing read back), and in documents of several paragraphs."""
    import blingfire

    from plm_lightning.corpus.sources import embedded_corpus

    def library(document):
        paragraphs = [p for p in (" ".join(p.split()) for p in document.split("\n\n")) if p]
        return [t for p in paragraphs for s in blingfire.text_to_sentences(p).split("\n") if (t := s.strip())]

    documents = [*embedded_corpus(), "It is. " * 20000, "A b.", "", " \n\n ", "é. É.", "Short.",
                 "It is. " * 3000 + "\n\nA b.\n\n\n\nDr. Who ran.\n \nThen é. É.\n\n"]
    assert [split_sentences(d, "blingfire") for d in documents] == [library(d) for d in documents]


def test_corpus_splits_and_the_embedded_corpus_are_cached_on_disk(tmp_path, monkeypatch):
    """A second process reads the split (and the embedded corpus) from the cache instead of recomputing it; a
    damaged cache entry is recomputed."""
    monkeypatch.setenv("PLM_LIGHTNING_CACHE", str(tmp_path))
    docs = ["One. Two went home.", "Dr. Who ran.\n\nThen it rained. Twice."]
    expected = [split_sentences(d) for d in docs]
    assert split_corpus(docs) == expected
    (entry,) = (tmp_path / "sentences").glob("*.json")
    entry.write_text(json.dumps([["cached"], ["split"]]))
    assert split_corpus(docs) == [["cached"], ["split"]]  # read back, not recomputed
    assert split_corpus(docs[:1]) == expected[:1]  # other documents, other entry
    entry.write_text("{not json")
    assert split_corpus(docs) == expected
    embedded_corpus.cache_clear()
    first = embedded_corpus()
    (cached,) = (tmp_path / "embedded").glob("*.json")
    assert tuple(json.loads(cached.read_text())) == first
    embedded_corpus.cache_clear()
    assert embedded_corpus() == first


def test_contiguous_blocks_keep_every_token_and_record_documents():
    rng = np.random.default_rng(0)
    docs = _docs(rng)
    blocks = pack_contiguous(docs, 16, EOS)
    stream = [t for d in docs for t in [*[x for s in d.sentences for x in s], EOS]]
    n = len(stream) // 16
    assert blocks.input_ids.tolist() == np.array(stream[: n * 16]).reshape(n, 16).tolist()
    # a new document id starts right after every end-of-text token
    for ids, doc in zip(blocks.input_ids, blocks.document_ids):
        for i in range(1, 16):
            assert doc[i] == doc[i - 1] + (ids[i - 1] == EOS)


def test_document_rows_start_every_document_after_eos():
    rng = np.random.default_rng(1)
    docs = _docs(rng)
    blocks = pack_documents(docs, 16, EOS, PAD)
    rebuilt: list[list[int]] = []
    for ids, doc in zip(blocks.input_ids.tolist(), blocks.document_ids.tolist()):
        real = [t for t, d in zip(ids, doc) if d >= 0]
        assert len(real) >= 2 and all(d == -1 for d in doc[len(real):]) and all(t == PAD for t in ids[len(real):])
        if real[0] == EOS:  # a document starts on this row; a long one continues on the next rows
            rebuilt.append([])
        rebuilt[-1].extend(t for t in real if t != EOS)
    assert rebuilt == [[t for s in d.sentences for t in s] for d in docs]  # every document, in order, complete


@pytest.mark.parametrize("cross", [True, False])
def test_sentence_packing(cross):
    rng = np.random.default_rng(1)
    docs = _docs(rng)
    blocks = pack_sentences(docs, 32, CLS, SEP, PAD, cross_documents=cross)
    total = sum(len(s) for d in docs for s in d.sentences)
    content = 0
    for ids, doc in zip(blocks.input_ids, blocks.document_ids):
        real = doc >= 0
        assert ids[0] == CLS and ids[real.sum() - 1] == SEP and (ids[~real] == PAD).all()
        content += int(((ids != CLS) & (ids != SEP) & real).sum())
        if not cross:
            assert doc[real].max() == 0  # DOC-SENTENCES never crosses a document
    assert content == total  # nothing lost, nothing duplicated


def test_sentence_pairs_follow_bert():
    rng = np.random.default_rng(2)
    docs = _docs(rng, 40)
    blocks = pack_sentence_pairs(docs, 64, CLS, SEP, PAD, np.random.default_rng(0))
    assert len(blocks) > 20
    labels = blocks.sentence_label
    assert 0.25 < labels.mean() < 0.75  # about half the B segments are random
    for ids, b, doc in zip(blocks.input_ids, blocks.segment_b_start, blocks.document_ids):
        n = int((doc >= 0).sum())
        assert ids[0] == CLS and ids[b - 1] == SEP and ids[n - 1] == SEP and n <= 64 and b >= 3


def test_split_by_document_is_deterministic():
    a = split_documents(100, 0.1, 5)
    assert np.array_equal(a[0], split_documents(100, 0.1, 5)[0]) and len(a[1]) == 10
    assert not set(a[0]) & set(a[1])


def test_local_sources(tmp_path):
    (tmp_path / "a.txt").write_text("First doc. Two sentences.\n\nSecond doc here.\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"body": "Third doc."}) + "\n")
    assert load_documents(str(tmp_path / "a.txt"))[0] == ["First doc. Two sentences.", "Second doc here."]
    assert load_documents(str(tmp_path / "b.jsonl"), text_field="body")[0] == ["Third doc."]
    assert len(load_documents(str(tmp_path / "*.txt"))[0]) == 2
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["x y z", "u v"]}), tmp_path / "c.parquet")
    assert load_documents(str(tmp_path / "c.parquet"))[0] == ["x y z", "u v"]


@pytest.mark.parametrize("make,match", [
    (lambda p: p / "missing.txt", "no such file"),
    (lambda p: (p / "empty.txt").write_text("") and p / "empty.txt" or p / "empty.txt", "empty"),
    (lambda p: (p / "bin.txt").write_bytes(b"\x00\x01\x02binary") and p / "bin.txt", "binary"),
])
def test_bad_sources(tmp_path, make, match):
    path = make(tmp_path)
    with pytest.raises(ConfigError, match=match):
        load_documents(str(path))


def test_tokenizer_missing_special_token(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "hello": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = TextTokenizer.load(tmp_path)
    with pytest.raises(ConfigError, match="no cls/sep/mask token"):
        loaded.require(("pad", "cls", "sep", "mask"), "MaskedLM")


def test_masked_lm_datamodule_batches():
    dm = MaskedLMDataModule(seq_len=64, batch_size=4, packing="sentence_pairs", max_documents=120)
    dm.prepare_data()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) >= {"input_ids", "labels", "attention_mask", "token_type_ids", "sentence_label"}
    assert batch["input_ids"].shape == (4, 64)
    # labels only where corruption happened or was chosen, and never on [CLS]/[SEP]/[PAD]
    special = set(dm.tokenizer.ids.values())
    chosen = batch["labels"] != -100
    assert chosen.any() and not any(int(t) in special for t in batch["labels"][chosen])
    # same seed, same epoch, same batch
    again = next(iter(dm.train_dataloader()))
    assert (again["input_ids"] == batch["input_ids"]).all()


def test_causal_lm_datamodule_batches():
    dm = CausalLMDataModule(seq_len=32, batch_size=2, max_documents=60, document_mask=True)
    dm.prepare_data()
    dm.setup("fit")
    b = next(iter(dm.train_dataloader()))
    assert (b["labels"][:, :-1] == b["input_ids"][:, 1:]).all() and (b["labels"][:, -1] == -100).all()
    assert "document_ids" in b


def test_saved_hf_dataset_source(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"body": ["One doc. It has two sentences.", "", "Another doc."]})
    ds.save_to_disk(str(tmp_path / "single"))
    docs, fingerprint = load_documents(str(tmp_path / "single"), text_field="body")
    assert docs == ["One doc. It has two sentences.", "Another doc."] and fingerprint.startswith("hf-")
    datasets.DatasetDict({"train": ds, "validation": ds.select([2])}).save_to_disk(str(tmp_path / "dict"))
    assert load_documents(str(tmp_path / "dict"), text_field="body", split="validation")[0] == ["Another doc."]
    with pytest.raises(ConfigError, match="no split 'test'"):
        load_documents(str(tmp_path / "dict"), text_field="body", split="test")
    with pytest.raises(ConfigError, match="no column 'text'"):
        load_documents(str(tmp_path / "single"))


def test_datamodule_trains_on_saved_hf_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": list(embedded_corpus()[:80])}).save_to_disk(str(tmp_path / "ds"))
    dm = MaskedLMDataModule(source=str(tmp_path / "ds"), seq_len=64, batch_size=4, tokenizer_vocab_size=2000,
                            cache_dir=str(tmp_path / "cache"))
    dm.prepare_data()
    dm.setup("fit")
    assert dm.tokenizer.vocab_size == 2000 and len(dm.blocks["train"]) > 10
    assert next(iter(dm.train_dataloader()))["input_ids"].shape == (4, 64)


def test_sentence_order_pairs_are_consecutive_and_swapped_when_labelled():
    # sentence k of document d is the token 10 + 100 d + k, repeated: segments reveal where they came from
    rng = np.random.default_rng(3)
    docs = [TokenizedDocument.from_sentences([[10 + 100 * d + k] * int(rng.integers(2, 6))
                                              for k in range(int(rng.integers(2, 12)))])
            for d in range(40)]
    blocks = pack_sentence_pairs(docs, 24, CLS, SEP, PAD, np.random.default_rng(0), negatives="swap")
    assert len(blocks) > 40
    labels = blocks.sentence_label
    assert 0.2 < labels.mean() < 0.8
    for ids, b, doc, label in zip(blocks.input_ids, blocks.segment_b_start, blocks.document_ids, labels):
        n = int((doc >= 0).sum())
        a_ids, b_ids = set(ids[1:b - 1].tolist()), set(ids[b:n - 1].tolist())
        assert len({t // 100 for t in a_ids | b_ids}) == 1  # one document, never a random one
        if label == 0:
            assert max(a_ids) < min(b_ids)  # in order
        else:
            assert min(a_ids) > max(b_ids)  # swapped


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 90), st.integers(0, 90), st.integers(1, 125), st.integers(0, 2**32 - 1))
def test_pair_truncation_is_berts_loop(len_a, len_b, max_tokens, seed):
    """``_truncate_pair`` computes BERT's truncate_seq_pair loop (drop from the front or back of the longer segment,
    B on a tie, one draw per token) from counts: the same segments, and the generator left in the same state."""
    from plm_lightning.corpus.blocks import _truncate_pair

    def loop(a, b, rng):
        while len(a) + len(b) > max_tokens:
            longer = a if len(a) > len(b) else b
            if rng.random() < 0.5:
                del longer[0]
            else:
                longer.pop()

    pairs = [(list(range(len_a)), list(range(100, 100 + len_b))) for _ in range(2)]
    rngs = [np.random.default_rng(seed) for _ in range(2)]
    loop(*pairs[0], rngs[0])
    _truncate_pair(*pairs[1], max_tokens, rngs[1])
    assert pairs[0] == pairs[1] and rngs[0].random() == rngs[1].random()
    assert len(pairs[1][0]) + len(pairs[1][1]) == min(len_a + len_b, max_tokens)


def test_word_start_flags_from_the_vocabulary_equal_those_from_the_word_ids():
    """The flagging of a batch of encodings (numpy over the whole batch) equals the token-by-token definition (a
    token continues a word when it has the word id of the token before in its sentence); for BERT's WordPiece the
    vocabulary's ``##`` table gives the same flags without reading the word ids back, on every sentence of the
    embedded corpus and on texts with ``#``, special tokens written out, and other scripts."""
    import itertools

    from plm_lightning.corpus.tokenized import SENTENCE_START, WORD_CONT, _flag_word_starts
    from plm_lightning.corpus.tokenizer import train_tokenizer

    texts = [s for d in embedded_corpus() for s in split_sentences(d, "blingfire")]
    texts += ["##abc #hash [MASK] x[MASK]y ## ### a##b", "[CLS][SEP]", "", "ünïcödé 中文 テスト", "[UNK] [PAD]pad"]
    sample = list(itertools.islice(embedded_corpus(), 150))

    def runs(flagged, starts, ends):
        return [flagged[a:b].tolist() for a, b in zip(starts, ends)]

    for kind in ("wordpiece", "bpe", "unigram"):
        tok = train_tokenizer(kind, sample, 800)
        encodings = tok.tokenizer.encode_batch(texts, add_special_tokens=False)
        expected = [[t | (WORD_CONT if i and w is not None and w == e.word_ids[i - 1] else 0)
                     | (SENTENCE_START if i == 0 else 0) for i, (t, w) in enumerate(zip(e.ids, e.word_ids))]
                    for e in encodings]
        assert runs(*_flag_word_starts(encodings)) == expected
        table = tok.word_continuations()
        assert (table is not None) is (kind == "wordpiece")
        if table is not None:
            assert table.sum() > 100 and runs(*_flag_word_starts(encodings, table)) == expected
    assert runs(*_flag_word_starts([])) == []


def test_sentences_joined_into_one_encoding_equal_each_sentence_encoded_alone(monkeypatch):
    """``encode_sentences`` (a document's sentences joined by an added break token, one fast encoding per document)
    gives every sentence the ids of encoding it alone: on the embedded corpus's sentences and on generated ones
    (accents, other scripts, ``#``, special tokens written out, control characters, the break's two characters,
    empty sentences and documents);
    the flagged documents of ``tokenize_documents`` are those of the sentence-by-sentence path. It declines (None)
    where it could not be exact: a tokenizer without the ``##`` table, truncation set, a sentence holding the
    break."""
    import itertools

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from plm_lightning.corpus.tokenized import tokenize_documents
    from plm_lightning.corpus.tokenizer import SENTENCE_BREAK, TextTokenizer, train_tokenizer

    sample = list(itertools.islice(embedded_corpus(), 150))
    tok = train_tokenizer("wordpiece", sample, 800)

    def alone(units: list[list[str]]) -> list[list[int]]:
        return [e.ids for e in tok.tokenizer.encode_batch([s for u in units for s in u], add_special_tokens=False)]

    def joined(units: list[list[str]]) -> list[list[int]]:
        encoded = tok.encode_sentences(units)
        if encoded is None:  # refused, only where a sentence holds the break itself
            assert any(SENTENCE_BREAK in s for u in units for s in u)
            return alone(units)
        ids, starts, ends = encoded
        return [ids[a:b].tolist() for a, b in zip(starts, ends)]

    corpus = [split_sentences(d, "blingfire") for d in embedded_corpus()]
    assert sum(map(len, corpus)) > 1000 and joined(corpus) == alone(corpus)

    atoms = [*"ab Z.#\t\n\x00\u0301éΣ中テ!", "[MASK]", "[SEP]", "##", *SENTENCE_BREAK]  # and the break's halves
    sentence = st.lists(st.sampled_from(atoms), max_size=30).map("".join)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.lists(sentence, max_size=5), max_size=6))
    def check(units: list[list[str]]) -> None:
        assert joined(units) == alone(units)

    check()
    documents = sample[:40]
    fast = [d.sentences for d in tokenize_documents(documents, tok, True, cache=False, splitter="blingfire")]
    monkeypatch.setattr(TextTokenizer, "encode_sentences", lambda self, units: None)
    assert fast == [d.sentences for d in tokenize_documents(documents, tok, True, cache=False, splitter="blingfire")]
    monkeypatch.undo()
    assert tok.encode_sentences([["one", f"two{SENTENCE_BREAK}three"]]) is None
    assert train_tokenizer("bpe", sample, 800).encode_sentences([["one", "two"]]) is None
    tok.tokenizer.enable_truncation(8)
    assert tok.encode_sentences([["one", "two"]]) is None
