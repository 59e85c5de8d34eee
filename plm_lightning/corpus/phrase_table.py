"""ERNIE's phrase table for a corpus streamed from disk (``pack_partitions``): the word2phrase collocations
(:func:`~plm_lightning.corpus.knowledge_units.fit_phrases`, Mikolov et al. 2013, sec. 4) fitted once, before packing, on a
bounded sample spread over the whole corpus, as the tokenizer is trained (``partitions.sample_documents``), then
written to the cache so every packing worker marks its partition's phrases with the same table.

The sample's words are spilled to a temporary file as they are segmented (sentence splitting is the slow part), and
each of word2phrase's passes reads that file: the fit holds only the unigram and bigram counts, never the sample. A
corpus under the budget is read whole, so its table is the one the in-memory packer fits.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from plm_lightning.corpus.knowledge_units import KnowledgeSpec, Phrase, fit_phrases
from plm_lightning.corpus.partitions import Partition, sample_documents, text_batches
from plm_lightning.corpus.sentences import split_sentences
from plm_lightning.corpus.tokenizer import TextTokenizer
from plm_lightning.files import atomic_write

BATCH_BYTES = 1 << 20


def sample_words(documents: Iterator[str], tokenizer: TextTokenizer, by_sentence: bool, segmenter: str,
                 splitter: str = "pysbd") -> Iterator[list[str]]:
    """The words of every sentence (or whole document, without ``by_sentence``) of ``documents``, as the packer
    segments them (``TextTokenizer.encode_batch_with_words``), ``BATCH_BYTES`` of text at a time."""
    for batch in text_batches(documents, BATCH_BYTES):
        texts = [s for d in batch for s in split_sentences(d, splitter)] if by_sentence else batch
        for _, _, words in tokenizer.encode_batch_with_words(texts, segmenter):
            yield words


def phrase_table_file(knowledge: KnowledgeSpec, partitions: list[Partition], fingerprint: str, text_field: str,
                      tokenizer: TextTokenizer, by_sentence: bool, segmenter: str, budget_bytes: int,
                      cache_dir: Path, splitter: str = "pysbd") -> Path | None:
    """The cached phrase table of a streamed corpus (a JSON list of word lists), fitted now if it is not yet; None
    when ``data.phrase_lexicon`` gives the table (every worker reads that file itself)."""
    if knowledge.phrase_lexicon is not None:
        return None
    key_fields = {"v": 1, "source": fingerprint, "budget": budget_bytes, "text_field": text_field,
                  "tokenizer": hashlib.sha256(tokenizer.tokenizer.to_str().encode()).hexdigest(),
                  "by_sentence": by_sentence, "segmenter": segmenter, "knowledge": knowledge.cache_key()}
    if by_sentence and splitter != "pysbd":  # pysbd's tables keep the keys they had before the choice
        key_fields["splitter"] = splitter
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:20]
    path = cache_dir / "phrases" / f"{key}.json"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w+", encoding="utf-8", dir=path.parent, suffix=".words") as spill:
        documents = sample_documents(partitions, text_field, budget_bytes)
        for words in sample_words(documents, tokenizer, by_sentence, segmenter, splitter):
            spill.write(json.dumps(words, ensure_ascii=False) + "\n")
        spill.flush()

        def sentences() -> Iterator[list[str]]:
            spill.seek(0)
            for line in spill:
                yield json.loads(line)

        phrases = fit_phrases(sentences, knowledge.phrases)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(sorted(phrases), ensure_ascii=False)))
    return path


def load_phrase_table(path: str | Path) -> set[Phrase]:
    """A table written by :func:`phrase_table_file`."""
    return {tuple(words) for words in json.loads(Path(path).read_text(encoding="utf-8"))}
