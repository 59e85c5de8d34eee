"""Readers of the standard downstream file formats, local files only (nothing is downloaded): GLUE-style TSV / JSONL
rows, CoNLL-2003 columns, SQuAD v1.1/v2.0 JSON and SWAG-style multiple-choice JSONL. Each returns plain example dicts;
a malformed file is a ConfigError naming the file, the row and what was expected."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from plm_lightning.errors import ConfigError


def _file(path: str, expected: str) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"data: no such file '{path}' ({expected})")
    return file


def read_examples(path: str, text_columns: tuple[str, ...], label_column: str) -> list[dict[str, Any]]:
    """Rows ``{"text_a", ["text_b"], "label"}`` of a TSV (header line, or columns by position when they are digits)
    or JSONL file."""
    file = _file(path, "a .tsv with a header line or a .jsonl")
    if file.suffix == ".jsonl":
        rows = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        with open(file, encoding="utf-8", newline="") as f:
            table = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        positional = all(c.isdigit() for c in (*text_columns, label_column))
        header = list(range(max(len(r) for r in table))) if positional else table[0]
        rows = [dict(zip(map(str, header), r)) for r in (table if positional else table[1:])]
    out = []
    for n, row in enumerate(rows, 1):
        missing = [c for c in (*text_columns, label_column) if c not in row]
        if missing:
            raise ConfigError(f"data: '{path}' row {n} has no column {missing[0]!r}; its columns are "
                              f"{', '.join(map(str, row))} (set data.text_columns / data.label_column)")
        example = {"text_a": row[text_columns[0]], "label": row[label_column]}
        if len(text_columns) > 1:
            example["text_b"] = row[text_columns[1]]
        out.append(example)
    return out


def read_conll(path: str, tag_column: int = -1) -> list[dict[str, Any]]:
    """Sentences ``{"words", "tags"}`` of a CoNLL-2003 file: one token per line (word first, the NER tag in
    ``tag_column``), blank lines between sentences, ``-DOCSTART-`` lines skipped. JSONL with ``tokens``/``words`` and
    ``ner_tags``/``tags`` (string tags) is read too."""
    file = _file(path, "CoNLL columns: one 'word ... tag' line per token, a blank line between sentences, or .jsonl")
    if file.suffix == ".jsonl":
        out = []
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            words, tags = row.get("tokens", row.get("words")), row.get("ner_tags", row.get("tags"))
            if words is None or tags is None or len(words) != len(tags):
                raise ConfigError(f"data: '{path}' line {n} needs 'tokens' and 'ner_tags' lists of equal length")
            out.append({"words": [str(w) for w in words], "tags": [str(t) for t in tags]})
        return out
    sentences: list[dict[str, Any]] = []
    words: list[str] = []
    tags: list[str] = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                sentences.append({"words": words, "tags": tags})
            words, tags = [], []
            continue
        if len(fields) < 2:
            raise ConfigError(f"data: '{path}' line {n} has one column; CoNLL lines are 'word ... tag'")
        words.append(fields[0])
        tags.append(fields[tag_column])
    if words:
        sentences.append({"words": words, "tags": tags})
    return sentences


def read_squad(path: str) -> list[dict[str, Any]]:
    """Questions ``{"id", "question", "context", "answers": [{"text", "start"}], "impossible"}`` of a SQuAD v1.1 or
    v2.0 JSON file. Every answer must be the context's text at its ``answer_start``."""
    file = _file(path, "SQuAD JSON: {'data': [{'paragraphs': [{'context', 'qas'}]}]}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ConfigError(f"data: '{path}' is not SQuAD JSON (a top-level 'data' list): {err}") from err
    out = []
    for article in data:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                answers = [{"text": a["text"], "start": int(a["answer_start"])} for a in qa.get("answers", [])]
                for a in answers:
                    if context[a["start"]:a["start"] + len(a["text"])] != a["text"]:
                        raise ConfigError(f"data: '{path}' question {qa['id']}: the answer {a['text']!r} is not in "
                                          f"its context at answer_start {a['start']}")
                impossible = bool(qa.get("is_impossible", False))
                if not answers and not impossible:
                    raise ConfigError(f"data: '{path}' question {qa['id']} has no answer and is not is_impossible")
                out.append({"id": str(qa["id"]), "question": qa["question"], "context": context, "answers": answers,
                            "impossible": impossible})
    return out


def read_choices(path: str) -> list[dict[str, Any]]:
    """Multiple-choice rows ``{"context", "choices", "label"}`` of a JSONL file (SWAG / HellaSwag style:
    ``context`` or ``ctx``, ``choices`` or ``endings``, and the index of the right one in ``label``)."""
    file = _file(path, "JSONL rows with context, choices (or endings) and label")
    out = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        context, choices = row.get("context", row.get("ctx")), row.get("choices", row.get("endings"))
        if context is None or not choices or "label" not in row:
            raise ConfigError(f"data: '{path}' line {n} needs 'context', 'choices' (or 'endings') and 'label'")
        label = int(row["label"])
        if not 0 <= label < len(choices):
            raise ConfigError(f"data: '{path}' line {n}: label {label} is not the index of one of its "
                              f"{len(choices)} choices")
        out.append({"context": str(context), "choices": [str(c) for c in choices], "label": label})
    return out


HF_SPLITS = {"train": ("train",), "validation": ("validation", "validation_matched", "dev"),
             "test": ("test", "test_matched")}
"""Our split -> the names a ``datasets`` DatasetDict may give it (GLUE's MNLI: validation_matched)."""


def read_hf_dataset(spec: str, text_columns: tuple[str, ...], label_column: str,
                    splits: dict[str, str] | None = None) -> tuple[dict[str, list[dict[str, Any]]], list[str] | None]:
    """Rows ``{"text_a", ["text_b"], "label"}`` per split of a ``datasets`` dataset: a directory written by
    ``DatasetDict.save_to_disk`` (a local copy), or ``name[:config]`` loaded with ``datasets.load_dataset`` (from its
    local cache when there is no network), and the label names of a ``ClassLabel`` label column (in the dataset's own
    order; its integer labels become these names), None otherwise.

    ``splits`` names the dataset's split for each of ours (``train``/``validation``/``test``; MNLI:
    ``{"validation": "validation_matched", "test": "validation_mismatched"}``): each named one must exist. Without
    it, each of ours is the first of :data:`HF_SPLITS` that exists, and only ``train`` is required."""
    try:
        import datasets
    except ImportError as err:
        raise ConfigError("data.task=hf:... needs the datasets package: pip install 'plm-lightning[datasets]'") from err
    name, _, config = spec.partition(":")
    try:
        if Path(name).expanduser().is_dir():
            loaded = datasets.load_from_disk(str(Path(name).expanduser()))
        else:
            loaded = datasets.load_dataset(name, config or None)
    except Exception as err:  # offline hub misses, unknown names: one line
        raise ConfigError(f"data.task=hf:{spec}: cannot load it ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:200]}); give a directory saved with save_to_disk") from err
    if not isinstance(loaded, datasets.DatasetDict):
        raise ConfigError(f"data.task=hf:{spec} is one split, not a DatasetDict of splits (train, validation ...): "
                          "save the DatasetDict that load_dataset returns")
    unknown = sorted(set(splits or {}) - set(HF_SPLITS))
    if unknown:
        raise ConfigError(f"data.splits: {unknown[0]!r} is not one of {', '.join(HF_SPLITS)}")
    out: dict[str, list[dict[str, Any]]] = {}
    label_names: list[str] | None = None
    for ours, names in HF_SPLITS.items():
        if splits is not None and ours in splits:
            split = splits[ours]
            if split not in loaded:
                raise ConfigError(f"data.task=hf:{spec} has no split {split!r} (for {ours}); it has "
                                  f"{', '.join(loaded)}")
        else:
            split = next((n for n in names if n in loaded), None)
        if split is None:
            continue
        table = loaded[split]
        missing = [c for c in (*text_columns, label_column) if c not in table.column_names]
        if missing:
            raise ConfigError(f"data.task=hf:{spec}: split {split} has no column {missing[0]!r}; its columns are "
                              f"{', '.join(table.column_names)} (set data.text_columns / data.label_column)")
        names_of = getattr(table.features[label_column], "names", None)
        label_names = list(names_of) if names_of is not None else label_names
        rows = []
        for record in table:
            label = record[label_column]
            if names_of is not None and isinstance(label, int) and label >= 0:
                label = names_of[label]
            row = {"text_a": record[text_columns[0]], "label": label}
            if len(text_columns) > 1:
                row["text_b"] = record[text_columns[1]]
            rows.append(row)
        out[ours] = [r for r in rows if r["label"] != -1]  # GLUE's unlabelled test rows
    if "train" not in out:
        raise ConfigError(f"data.task=hf:{spec} has no train split (it has {', '.join(loaded)})")
    return out, label_names
