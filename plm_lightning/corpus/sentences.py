"""Sentence boundaries for the sentence-level packing modes (NSP, SOP, FULL-SENTENCES, ERNIE), REALM's blocks and
XLM's Fake-English pairs: two rule-based splitters, chosen by ``data.sentence_splitter``.

* ``pysbd`` (default): the Golden Rules of Sentence Boundary Detection (Sadvilkar & Neumann 2020), pure Python,
  about 0.3 MB/s on one core: a sentence-level recipe on a corpus of gigabytes spends its preparation here.
* ``blingfire``: Microsoft's finite-state tokenizer (the splitter of AllenAI's Dolma toolkit), compiled, about
  30x faster. On the embedded corpus 89% of pysbd's sentences are among blingfire's; each errs where the other
  does not (pysbd cuts a closing parenthesis off its sentence, blingfire cuts after a quoted period).

A document is split paragraph by paragraph (blank lines are always boundaries) with whitespace collapsed, so no
sentence crosses a paragraph. Megatron's ``--split-sentences`` (NLTK Punkt) needs a model download and is not
offered.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
from collections.abc import Callable, Iterator
from functools import cache

from plm_lightning.errors import ConfigError
from plm_lightning.files import atomic_write, default_cache_dir

SENTENCE_SPLITTERS = ("pysbd", "blingfire")


def check_splitter(splitter: str, where: str = "data.sentence_splitter") -> str:
    if splitter not in SENTENCE_SPLITTERS:
        raise ConfigError(f"{where}={splitter!r} is not one of {', '.join(SENTENCE_SPLITTERS)}")
    return splitter


@cache
def _document_splitter(splitter: str) -> Callable[[str], list[str]]:
    """The function that splits a document into sentences, paragraph by paragraph (not yet stripped, maybe empty)."""
    if check_splitter(splitter) == "pysbd":
        import pysbd

        segment = pysbd.Segmenter(language="en", clean=False).segment
        return lambda document: [s for paragraph in _paragraphs(document) for s in segment(paragraph)]
    return _Blingfire()


def _paragraphs(document: str) -> Iterator[str]:
    """The paragraphs of ``document`` (blank lines are boundaries), whitespace collapsed, empty ones dropped."""
    for paragraph in document.split("\n\n"):
        if paragraph := " ".join(paragraph.split()):
            yield paragraph


class _Blingfire:
    """blingfire's ``text_to_sentences`` on each paragraph of a document: the same C function, arguments and result
    ('' for a paragraph where the library reports an error), with its output buffer kept between calls (one per
    thread; the library function allocates a zeroed buffer of twice the input per call, a third of its time on
    short paragraphs) and the outputs of a document's paragraphs decoded and split at once."""

    def __init__(self) -> None:
        import threading

        import blingfire

        self._text_to_sentences, self._local = blingfire.blingfire.TextToSentences, threading.local()

    def __call__(self, document: str) -> list[str]:
        outputs = []
        for paragraph in _paragraphs(document):
            data = paragraph.encode("utf-8")
            room = 2 * len(data)
            buffer = getattr(self._local, "buffer", None)
            if buffer is None or len(buffer) < room:
                buffer = self._local.buffer = ctypes.create_string_buffer(max(room, 1 << 16))
            written = self._text_to_sentences(data, len(data), buffer, room)
            # an error, or nothing written (the library's buffer would be empty); else what it wrote, up to its
            # terminating NUL (the library reads its zeroed buffer that way)
            outputs.append(ctypes.string_at(buffer, written).split(b"\0", 1)[0] if 0 < written <= room else b"")
        return b"\n".join(outputs).decode("utf-8").split("\n")  # one sentence a line


def split_sentences(document: str, splitter: str = "pysbd") -> list[str]:
    """The sentences of ``document``, paragraph by paragraph, by ``splitter`` (one of :data:`SENTENCE_SPLITTERS`)."""
    return [stripped for s in _document_splitter(splitter)(document) if (stripped := s.strip())]


def splitter_version(splitter: str) -> str:
    """``name-version`` of the installed splitter: part of every cache key that holds its sentences."""
    from importlib.metadata import version

    return f"{check_splitter(splitter)}-{version(splitter)}"


def split_corpus(documents: list[str], splitter: str = "pysbd") -> list[list[str]]:
    """:func:`split_sentences` of every document, cached on disk under ``$PLM_LIGHTNING_CACHE/sentences`` by the
    documents' hash and the splitter's version: pysbd costs ~3 ms a paragraph, and every run of a sentence-level
    recipe on an in-memory corpus (NSP/SOP packing, CoVe and XLM's Fake-English pairs, REALM's blocks) would
    otherwise pay it again."""
    digest = hashlib.sha256(splitter_version(splitter).encode())
    for doc in documents:
        digest.update(doc.encode())
        digest.update(b"\x00")
    file = default_cache_dir() / "sentences" / f"{digest.hexdigest()[:24]}.json"
    if file.is_file():
        try:
            cached = json.loads(file.read_text(encoding="utf-8"))
            if isinstance(cached, list) and len(cached) == len(documents):
                return cached
        except (OSError, ValueError):
            pass  # a damaged entry is recomputed and replaced
    split = [split_sentences(doc, splitter) for doc in documents]
    atomic_write(file, lambda tmp: tmp.write_text(json.dumps(split), encoding="utf-8"))
    return split
