"""Text sources: the embedded corpus, the synthetic knowledge world (``world[:key=value,...]``), local files (txt,
jsonl, parquet; files, directories, globs), HF datasets.

Every source yields documents (strings; paragraphs separated by blank lines) and a fingerprint that changes
whenever the text may have changed, used as a cache key downstream.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from plm_lightning.corpus.partitions import (
    COMPRESSIONS,
    file_kind,
    is_saved_dataset,
    open_dataset,
    plan_partitions,
    read_partition,
)
from plm_lightning.corpus.sentences import split_corpus
from plm_lightning.corpus.world import is_world_spec, world_fingerprint, world_from_spec
from plm_lightning.errors import ConfigError
from plm_lightning.files import atomic_write, default_cache_dir

EMBEDDED = "embedded"
FAKE_PREFIX = "fake:"
TEXT_SUFFIXES = (".txt", ".jsonl", ".parquet")
CORPUS_SUFFIXES = (*TEXT_SUFFIXES, *(f"{inner}{c}" for inner in (".txt", ".jsonl", ".json") for c in COMPRESSIONS))
"""What a directory source is searched for: text, JSON lines and Parquet files, and compressed text and JSON lines."""
_EMBEDDED_SKIP = {"test", "tests", "idlelib", "site-packages", "dist-packages", "lib2to3", "turtledemo", "ensurepip",
                  "__pycache__", "__phello__"}


def _module_docstrings(path: Path) -> str:
    """All docstrings of one module, read with ``ast`` (the module is never imported or executed)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return ""
    parts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc and len(doc) > 40:
                parts.append(doc)
    return "\n\n".join(parts)


@cache
def embedded_corpus() -> tuple[str, ...]:
    """The default corpus: Python's documentation topics (``pydoc_data.topics``) and the docstrings of the standard
    library, one document per topic or module. Deterministic for a Python version; nothing is downloaded. Parsing
    the standard library takes seconds, so the documents are cached on disk (``$PLM_LIGHTNING_CACHE/embedded``)
    under the corpus fingerprint."""
    key = hashlib.sha256(_embedded_fingerprint().encode()).hexdigest()[:24]
    file = default_cache_dir() / "embedded" / f"{key}.json"
    if file.is_file():
        try:
            cached = json.loads(file.read_text(encoding="utf-8"))
            if isinstance(cached, list) and cached and all(isinstance(doc, str) for doc in cached):
                return tuple(cached)
        except (OSError, ValueError):
            pass  # a damaged entry is rebuilt and replaced
    documents = _read_embedded_corpus()
    atomic_write(file, lambda tmp: tmp.write_text(json.dumps(documents), encoding="utf-8"))
    return tuple(documents)


def _read_embedded_corpus() -> list[str]:
    documents: list[str] = []
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip pydoc_data
        topics = {}
    documents.extend(topics[name].strip() for name in sorted(topics) if topics[name].strip())
    root = Path(sysconfig.get_paths()["stdlib"])
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _EMBEDDED_SKIP and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                text = _module_docstrings(Path(dirpath) / name)
                if text:
                    documents.append(text)
    return documents


def _embedded_fingerprint() -> str:
    return f"embedded-v1-{sys.version}-{sysconfig.get_paths()['stdlib']}"


def resolve_files(source: str) -> list[Path]:
    """Expand a file, directory or glob into a sorted list of readable text files, or raise a `ConfigError`."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(CORPUS_SUFFIXES))
        if not files:
            raise ConfigError(f"data.source: directory '{source}' has no {', '.join(TEXT_SUFFIXES)} files (or "
                              "compressed .txt/.jsonl/.json: .gz, .bz2, .xz, .zst)")
        return files
    if path.is_file():
        return [path]
    matches = sorted(Path(p) for p in glob.glob(os.path.expanduser(source), recursive=True) if Path(p).is_file())
    if matches:
        return matches
    raise ConfigError(
        f"data.source: no such file, directory or glob '{source}'; give .txt/.jsonl/.parquet files, a directory or "
        f"glob of them, a saved or named Hugging Face dataset, or '{EMBEDDED}'"
    )


def _check_text_file(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(8192)
    if not head.strip():
        raise ConfigError(f"data.source: file '{path}' is empty")
    if b"\x00" in head and path.suffix != ".parquet":
        raise ConfigError(f"data.source: file '{path}' is binary, not UTF-8 text; give .txt, .jsonl or .parquet files")


def _read_file(path: Path, text_field: str) -> Iterator[str]:
    """The documents of one file, read as a stream (``partitions``: the same reader the packing workers use)."""
    kind = file_kind(path)
    if kind is None or kind[1] is None:
        _check_text_file(path)
    for partition in plan_partitions([path], text_field, partition_bytes=max(1, path.stat().st_size)):
        yield from read_partition(partition, text_field)


def _file_fingerprint(files: list[Path], text_field: str) -> str:
    h = hashlib.sha256(text_field.encode())
    for p in files:
        st = p.stat()
        h.update(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _hf_dataset(source: str, text_field: str, split: str) -> tuple[list[str], str]:
    ds = open_dataset(source, text_field, split)
    return [t for t in ds[text_field] if t], f"hf-{source}-{ds._fingerprint}"


def source_fingerprint(source: str | None, text_field: str = "text", max_documents: int | None = None) -> str | None:
    """A cheap fingerprint (no text read) for the embedded corpus and local files; None for HF datasets."""
    suffix = f"-first{max_documents}" if max_documents is not None else ""
    if source is not None and source.startswith(FAKE_PREFIX):
        inner = source_fingerprint(source[len(FAKE_PREFIX):] or None, text_field, max_documents)
        return None if inner is None else f"fake-v1-{inner}"
    if source in (None, "", EMBEDDED):
        return _embedded_fingerprint() + suffix
    if is_world_spec(source):
        return world_fingerprint(source) + suffix
    if is_saved_dataset(source):
        return None
    if Path(source).expanduser().exists() or glob.glob(os.path.expanduser(source)):
        return _file_fingerprint(resolve_files(source), text_field) + suffix
    return None


# Fake-English (K et al. 2020, "Cross-Lingual Ability of Multilingual BERT", sec. 3.1): English with every letter
# moved to another script, so it shares no word piece with English (digits and punctuation stay). Letters go to
# the Armenian block, whose letters survive lower-casing, NFD and accent stripping as distinct characters.
_FAKE_LETTERS = str.maketrans({**{chr(ord("a") + i): chr(0x0561 + i) for i in range(26)},
                               **{chr(ord("A") + i): chr(0x0531 + i) for i in range(26)}})


def fake_language(text: str) -> str:
    """``text`` in Fake-English: the same words, sentences and documents in letters no other corpus here uses."""
    return text.translate(_FAKE_LETTERS)


def load_documents(source: str | None, text_field: str = "text", split: str = "train",
                   max_documents: int | None = None) -> tuple[list[str], str]:
    """Documents of ``source`` and their fingerprint. ``None`` or ``'embedded'`` is the embedded corpus;
    ``fake:<source>`` is that source in Fake-English (:func:`fake_language`), a second language with a parallel
    corpus for free when no other language is on disk."""
    if source is not None and source.startswith(FAKE_PREFIX):
        docs, fingerprint = load_documents(source[len(FAKE_PREFIX):] or None, text_field, split, max_documents)
        return [fake_language(d) for d in docs], f"fake-v1-{fingerprint}"
    if source in (None, "", EMBEDDED):
        docs, fingerprint = list(embedded_corpus()), _embedded_fingerprint()
    elif is_world_spec(source):  # the synthetic knowledge world (plm_lightning.corpus.world)
        docs, fingerprint = world_from_spec(source).texts(), world_fingerprint(source)
    else:
        if is_saved_dataset(source):
            docs, fingerprint = _hf_dataset(source, text_field, split)
        elif Path(source).expanduser().exists() or glob.glob(os.path.expanduser(source)):
            files = resolve_files(source)
            docs = [doc for f in files for doc in _read_file(f, text_field)]
            fingerprint = _file_fingerprint(files, text_field)
        elif any(ch in source for ch in "*?") or source.endswith(TEXT_SUFFIXES) or source.startswith((".", "~", "/")):
            resolve_files(source)  # raises the missing-file error
            raise AssertionError("unreachable")
        else:
            docs, fingerprint = _hf_dataset(source, text_field, split)
        if not docs:
            raise ConfigError(f"data.source: '{source}' contains no text")
    if max_documents is not None:
        docs = docs[:max_documents]
        fingerprint += f"-first{max_documents}"
    return docs, fingerprint


def _fake_pairs_fingerprint(inner: str, splitter: str) -> str:
    return f"fake-pairs-v1-{inner}" if splitter == "pysbd" else f"fake-pairs-v1-{splitter}-{inner}"


def parallel_fingerprint(source: str, max_pairs: int | None = None, splitter: str = "pysbd") -> str | None:
    """The fingerprint :func:`load_parallel` gives ``source``, without reading it; None when it must be read."""
    suffix = f"-first{max_pairs}" if max_pairs is not None else ""
    if source.startswith(FAKE_PREFIX):
        inner = source_fingerprint(source[len(FAKE_PREFIX):] or None)
        return None if inner is None else _fake_pairs_fingerprint(inner, splitter) + suffix
    path = Path(source).expanduser()
    return _file_fingerprint([path], "parallel") + suffix if path.is_file() and path.stat().st_size else None


def load_parallel(name: str, source: str, max_pairs: int | None = None, where: str | None = None,
                  splitter: str = "pysbd") -> tuple[list[tuple[str, str]], str]:
    """Sentence pairs of a parallel corpus and their fingerprint: a UTF-8 file of ``source<TAB>target`` lines, or
    ``fake:<source>`` (each sentence of that source, split by ``splitter``, paired with its Fake-English version).
    ``where`` names the config key in errors (default ``data.parallel_corpora[name]``)."""
    where = where or f"data.parallel_corpora[{name}]"
    if source.startswith(FAKE_PREFIX):
        docs, fingerprint = load_documents(source[len(FAKE_PREFIX):] or None)
        pairs = [(s, fake_language(s)) for sentences in split_corpus(docs, splitter) for s in sentences]
        fingerprint = _fake_pairs_fingerprint(fingerprint, splitter)
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise ConfigError(f"{where}: no such file '{source}'; give a UTF-8 file of source<TAB>target lines or "
                              f"'{FAKE_PREFIX}<source>'")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise ConfigError(f"{where}: '{source}' is not UTF-8 text (byte {err.start})") from err
        pairs = []
        for line_no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ConfigError(f"{where}: '{source}' line {line_no} is not 'source<TAB>target' (one tab, two "
                                  f"non-empty sides)")
            pairs.append((fields[0].strip(), fields[1].strip()))
        fingerprint = _file_fingerprint([path], "parallel")
    if max_pairs is not None:
        pairs, fingerprint = pairs[:max_pairs], f"{fingerprint}-first{max_pairs}"
    if not pairs:
        raise ConfigError(f"{where}: '{source}' holds no sentence pairs; a parallel corpus needs at least one "
                          "source<TAB>target line")
    return pairs, fingerprint
