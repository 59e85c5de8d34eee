"""``inspect``: what a recipe's DataModule does to real text, shown to a person or measured as JSON statistics."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.inspection_notes import summarize
from plm_lightning.errors import ConfigError
from plm_lightning.inspection.batches import sample_batches
from plm_lightning.inspection.denoising import blank_infilling_statistics, render_seq2seq, seq2seq_statistics
from plm_lightning.inspection.permutation import permutation_statistics, render_permutation
from plm_lightning.inspection.picture import self_attention
from plm_lightning.recipe_cli import build_recipe as build_datamodule  # noqa: F401 - the tools' name for it


def _views() -> dict[str, tuple[Callable[[Any, Any, int], dict[str, Any]], Callable[..., None]]]:
    """``inspect``'s views by the name a data module declares (``inspection_view``): its ``--json`` statistics
    ``(datamodule, model, batches)`` and its text view ``(datamodule, model, out, width=, progress=)``."""
    from plm_lightning.inspection import retrieval, static, translation

    return {
        "token": (token_statistics, render),  # a corrupted or causal row and its loss positions
        "seq2seq": (seq2seq_statistics, render),  # T5, UL2, BART, MASS (UL2's decoder-only rows render as tokens)
        "blank_infilling": (blank_infilling_statistics, render),  # GLM
        "permutation": (permutation_statistics, render),  # XLNet
        "retrieval": (retrieval.realm_statistics, _plain(retrieval.render_realm)),  # REALM's queries and blocks
        "translation": (translation.translation_statistics, _plain(translation.render_translation)),  # CoVe
        "sequences": (static.sequence_statistics, _plain(static.render_sequences)),  # ELMo
        "static": (static.static_statistics, _plain(static.render_static)),  # word2vec, fastText, GloVe
    }


def _plain(view: Callable[[Any, Any, TextIO], None]) -> Callable[..., None]:
    """A text view that shows no attention grid: ``width`` and ``progress`` do not apply."""
    return lambda datamodule, model, out, width=24, progress=0.0: view(datamodule, model, out)


def recipe_views(datamodule: Any, width: int = 24, progress: float = 0.0
                 ) -> tuple[Callable[[Any, Any, int], dict[str, Any]], Callable[[Any, Any, TextIO], None]]:
    """A recipe's ``inspect --json`` statistics ``(datamodule, model, batches)`` and its text view
    ``(datamodule, model, out)``: the view its data module declares (``inspection_view``)."""
    name = getattr(datamodule, "inspection_view", "token")
    views = _views()
    if name not in views:
        raise ConfigError(f"inspect: {type(datamodule).__name__}.inspection_view={name!r} is not one of "
                          f"{', '.join(views)}")
    statistics, text = views[name]
    return statistics, functools.partial(text, width=width, progress=progress)


def _span_words(batch: dict[str, Any], samples: list[dict[str, Any]]) -> list[int]:
    """Words per span for corruptions that define spans (SpanBERT): the unit the papers report."""
    from plm_lightning.data.corruption import word_ids

    span_ids = batch["span_ids"].numpy()
    starts = np.stack([s["word_starts"] for s in samples])
    _, word_begins = word_ids(span_ids >= 0, starts)
    counts: list[int] = []
    for row in range(span_ids.shape[0]):
        ids = span_ids[row][span_ids[row] >= 0]
        if ids.size:
            counts.extend(np.bincount(ids, weights=word_begins[row][span_ids[row] >= 0]).astype(int)[np.unique(ids)])
    return counts


def _runs(mask: np.ndarray) -> list[int]:
    """Lengths of the contiguous True runs of each row."""
    lengths: list[int] = []
    for row in mask:
        padded = np.concatenate([[False], row, [False]]).astype(np.int8)
        edges = np.flatnonzero(np.diff(padded))
        lengths.extend((edges[1::2] - edges[::2]).tolist())
    return lengths


def corruption_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """The statistics the design fixes for every objective (null where a field does not apply), from the view the
    data module declares."""
    return recipe_views(datamodule)[0](datamodule, model, batches)


def token_statistics(datamodule: TextDataModule, model: Any, batches: int) -> dict[str, Any]:
    """The ``token`` view: masking fractions, spans, lengths and loss positions of corrupted (or causal) rows, and
    what the data module's ``inspection_notes`` add."""
    collate = datamodule.collator()
    notes = datamodule.inspection_notes()
    corrupting = getattr(collate, "corrupts_input", True)
    mask_id = datamodule.tokenizer.ids.get("mask")
    tokens = loss_tokens = n_mask = n_random = n_same = 0
    spans: list[int] = []
    lengths: list[int] = []
    for samples, batch in sample_batches(datamodule, batches):
        for note in notes:
            note.add(samples, batch)
        original = np.stack([s["input_ids"] for s in samples]).astype(np.int64)
        real = batch["attention_mask"].numpy().astype(bool)
        loss = batch["labels"].numpy() != IGNORE_INDEX  # the corrupted positions
        tokens += int(real.sum())
        loss_tokens += int(model.loss_positions(batch).numpy().sum())  # ELECTRA: every real token
        lengths.extend(real.sum(1).tolist())
        if corrupting:
            c, o = batch["input_ids"].numpy()[loss], original[loss]
            n_mask += int((c == mask_id).sum())
            n_same += int((c == o).sum())
            n_random += int(((c != o) & (c != mask_id)).sum())
            spans.extend(_span_words(batch, samples) if "span_ids" in batch else _runs(loss))
    chosen = n_mask + n_random + n_same

    def frac(x: int) -> float | None:
        return x / chosen if corrupting and chosen else None

    return {
        "objective": type(model).__name__,
        "corruption": getattr(collate, "objective", None),
        "batches": batches,
        "tokens": tokens,
        "loss_tokens": loss_tokens,
        "loss_fraction": loss_tokens / tokens if tokens else None,
        "mask_token_fraction": frac(n_mask),
        "random_token_fraction": frac(n_random),
        "unchanged_fraction": frac(n_same),
        "mean_span_length": float(np.mean(spans)) if corrupting and spans else None,
        "input_length_mean": float(np.mean(lengths)) if lengths else None,
        "target_length_mean": None,
        **summarize(notes),
    }


def render(datamodule: TextDataModule, model: Any, out: TextIO, width: int = 24, progress: float = 0.0) -> None:
    """One sample (the first of the batch at training ``progress``, in epochs): original, corrupted input, targets,
    loss positions and a picture of the attention mask."""
    tok = datamodule.tokenizer
    samples, batch = next(sample_batches(datamodule, 1, progress))
    if "decoder_input_ids" in batch:
        render_seq2seq(datamodule, model, samples[0], batch, out)
        return
    if "perm_mask" in batch:
        render_permutation(datamodule, model, out, width, progress)
        return
    original = np.stack([s["input_ids"] for s in samples])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    real = int(batch["attention_mask"][0].sum())
    show = lambda seq: " ".join(tok.id_to_token(t) for t in seq[:real])  # noqa: E731
    out.write(f"objective: {type(model).__name__} ({getattr(datamodule.collator(), 'objective', '?')}), "
              f"seq_len={datamodule.seq_len}, packing={datamodule.packing}\n\n")
    out.write(f"original:\n  {show(original[0].tolist())}\n\n")
    for note in datamodule.inspection_notes():  # what this objective's data adds (its declared notes)
        out.write(note.describe(samples[0], batch, tok, real))
    out.write(f"corrupted input:\n  {show(ids)}\n\n")
    targets = " ".join(f"{i}:{tok.id_to_token(t)}" for i, t in enumerate(labels) if t != IGNORE_INDEX)
    out.write(f"targets (position:token):\n  {targets}\n\n")
    carries_loss = model.loss_positions(batch)[0].tolist()
    loss_line = "".join("^" if c else "." for c in carries_loss[:real])
    out.write(f"loss positions ({sum(carries_loss)} of {real} tokens):\n  {loss_line}\n\n")
    if "sentence_label" in batch:
        meaning = "0 = in order, 1 = swapped" if datamodule.packing == "sentence_order" else "0 = continuation, 1 = random"
        out.write(f"sentence label: {int(batch['sentence_label'][0])} ({meaning})\n\n")
    n = min(width, len(ids))
    grid, kind, prefix = self_attention(model, batch, n)
    if "attention_kind" in batch or "prefix_lengths" in batch:  # UniLM's batch LM, a prefix LM (GLM, UL2 decoder)
        out.write(f"attention: {kind}" + (f" (prefix of {prefix} tokens)" if prefix is not None else "") + "\n\n")
    out.write(f"attention mask, first {n} tokens (row = query, '#' = may attend):\n")
    for row in grid.tolist():
        out.write("  " + "".join("#" if v else "." for v in row) + "\n")
