"""``inspect``: what a recipe's DataModule does to real text, shown to a person or measured as JSON statistics."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data_contract import ATTENTION_KINDS
from plm_lightning.errors import ConfigError
from plm_lightning.inspection.batches import sample_batches, stream_mix
from plm_lightning.inspection.denoising import blank_infilling_statistics, render_seq2seq, seq2seq_statistics
from plm_lightning.inspection.entities import collect_entities, entity_summary, render_entities
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
    """The ``token`` view: masking fractions, spans, lengths and loss positions of corrupted (or causal) rows."""
    collate = datamodule.collator()
    corrupting = getattr(collate, "corrupts_input", True)
    fim = [0, 0]
    mask_id = datamodule.tokenizer.ids.get("mask")
    tokens = loss_tokens = n_mask = n_random = n_same = 0
    spans: list[int] = []
    lengths: list[int] = []
    in_unit = {"in_phrase": 0, "in_entity": 0}
    stages: list[int] = []
    streams: list[int] = []
    kinds: list[int] = []
    ernie2: dict[str, list] = {"forms": [], "active": [], "reorder": [], "distance": [], "capitalization": [],
                               "relation": []}
    entities = {"rows": 0, "aligned": 0, "masked": 0, "replaced": 0}
    for samples, batch in sample_batches(datamodule, batches):
        if "entity_candidates" in batch:
            collect_entities(entities, samples, batch)
        if "task_type_ids" in batch:
            _collect_ernie2(ernie2, collate, samples, batch)
        if "stream" in batch:
            streams.extend(batch["stream"].tolist())
        if "attention_kind" in batch:
            kinds.append(int(batch["attention_kind"]))
        if "fim_documents" in batch:  # FIM: documents moved into PSM/SPM layout, of all
            fim = [fim[0] + int(batch["fim_documents"].sum()), fim[1] + int(batch["documents"].sum())]
        original = np.stack([s["input_ids"] for s in samples]).astype(np.int64)
        real = batch["attention_mask"].numpy().astype(bool)
        labels = batch["labels"].numpy()
        corrupted = batch["input_ids"].numpy()
        loss = labels != IGNORE_INDEX  # the corrupted positions
        tokens += int(real.sum())
        loss_tokens += int(model.loss_positions(batch).numpy().sum())  # ELECTRA: every real token
        lengths.extend(real.sum(1).tolist())
        if corrupting:
            c, o = corrupted[loss], original[loss]
            n_mask += int((c == mask_id).sum())
            n_same += int((c == o).sum())
            n_random += int(((c != o) & (c != mask_id)).sum())
            spans.extend(_span_words(batch, samples) if "span_ids" in batch else _runs(loss))
            for name in in_unit:
                if name in samples[0]:
                    in_unit[name] += int(np.stack([s[name] for s in samples])[loss].sum())
            if "knowledge_stage" in batch:
                stages.extend(batch["knowledge_stage"].tolist())
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
        # ERNIE: the share of masked tokens inside phrases / entities, and the stage mix of the measured batches
        "phrase_token_fraction": in_unit["in_phrase"] / chosen if stages and chosen else None,
        "entity_token_fraction": in_unit["in_entity"] / chosen if stages and chosen else None,
        "stages": {collate.stages[k]: stages.count(k) for k in sorted(set(stages))} if stages else None,
        **stream_mix(datamodule, streams),
        **_ernie2_summary(ernie2, collate),
        **entity_summary(entities),
        **({"fim_document_fraction": fim[0] / fim[1]} if fim[1] else {}),
        **({"attention_kind_fraction": {ATTENTION_KINDS[k]: kinds.count(k) / len(kinds) for k in sorted(set(kinds))}}
           if kinds else {}),
    }


def _collect_ernie2(acc: dict[str, list], collate: Any, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
    acc["forms"].extend(batch["task_type_ids"].tolist())
    acc["active"].extend(collate.active_tasks(s.get("progress", 0.0)) for s in samples)
    for key, name in (("reorder_label", "reorder"), ("distance_label", "distance")):
        acc[name].extend(v for v in batch[key].tolist() if v != IGNORE_INDEX)
    for key, name in (("capitalization_labels", "capitalization"), ("relation_labels", "relation")):
        if key in batch:
            labels = batch[key].numpy()
            acc[name].extend(labels[labels != IGNORE_INDEX].tolist())


def _ernie2_summary(acc: dict[str, list], collate: Any) -> dict[str, Any]:
    """ERNIE 2.0: how often each task is trained, the input forms, and the label balance of each task."""
    from plm_lightning.data.corruption.sentence_reorder import class_permutation

    if not acc["forms"]:
        return {}
    n = len(acc["forms"])
    orders = {c: class_permutation(c) for c in set(acc["reorder"])}

    def share(values: list[int], classes: int) -> list[float] | None:
        return (np.bincount(values, minlength=classes) / len(values)).round(4).tolist() if values else None

    return {
        "task_fraction": {t: sum(t in a for a in acc["active"]) / n for t in collate.tasks},
        "form_fraction": dict(zip(("word", "reordering", "distance"), share(acc["forms"], 3))),
        # m = 3: n ~ U{1, 2, 3} segments, so 2 on average and in order 1/3 (1 + 1/2 + 1/6) = 0.556 of the time
        "reorder_mean_segments": float(np.mean([len(orders[c]) for c in acc["reorder"]])) if acc["reorder"] else None,
        "reorder_in_order_fraction": float(np.mean([orders[c] == tuple(sorted(orders[c])) for c in acc["reorder"]]))
        if acc["reorder"] else None,
        "distance_label_fraction": share(acc["distance"], 3),
        "capitalized_fraction": float(np.mean(acc["capitalization"])) if acc["capitalization"] else None,
        "relation_positive_fraction": float(np.mean(acc["relation"])) if acc["relation"] else None,
    }


def _bracket_units(sample: dict[str, Any], kind: str, tok: Any, real: int) -> str:
    """The sample's tokens with each multi-token phrase or entity unit in brackets."""
    inside, starts = sample[f"in_{kind}"][:real], sample[f"{kind}_starts"][:real]
    pieces = []
    for i, t in enumerate(sample["input_ids"][:real].tolist()):
        opens = inside[i] and (i == 0 or starts[i] or not inside[i - 1])
        closes = inside[i] and (i + 1 == real or starts[i + 1] or not inside[i + 1])
        pieces.append(("[" if opens else "") + tok.id_to_token(t) + ("]" if closes else ""))
    return " ".join(pieces)


def _render_ernie2(datamodule: TextDataModule, sample: dict[str, Any], batch: dict[str, Any], tok: Any, real: int,
                   out: TextIO) -> None:
    """ERNIE 2.0: the sample's active tasks, input form and the labels of each task."""
    from plm_lightning.data.corruption.sentence_reorder import class_permutation

    collate = datamodule.collator()
    form = ("word-aware block", "reordered block", "sentence pair")[int(batch["task_type_ids"][0])]
    out.write(f"tasks: {', '.join(collate.active_tasks(sample.get('progress', 0.0)))} (task id: {form})\n\n")
    if int(batch["reorder_label"][0]) != IGNORE_INDEX:
        order = class_permutation(int(batch["reorder_label"][0]))
        out.write(f"sentence reordering: class {int(batch['reorder_label'][0])} = {len(order)} segment(s) laid out "
                  f"in order {list(order)}\n\n")
    if int(batch["distance_label"][0]) != IGNORE_INDEX:
        meaning = ("B follows A", "B elsewhere in A's document", "B from another document")
        out.write(f"sentence distance: {int(batch['distance_label'][0])} ({meaning[int(batch['distance_label'][0])]})\n\n")
    ids = batch["input_ids"][0].tolist()
    for key, name, positive in (("capitalization_labels", "capitalization", "capitalised"),
                                ("relation_labels", "token-document relation", "in another sentence")):
        if key in batch and (batch[key][0] != IGNORE_INDEX).any():
            labels = batch[key][0].tolist()[:real]
            words = " ".join(tok.id_to_token(ids[i]) + ("*" if v == 1 else "") for i, v in enumerate(labels)
                             if v != IGNORE_INDEX)
            out.write(f"{name} (words asked; * = {positive}):\n  {words}\n\n")


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
    for kind in ("phrase", "entity"):  # ERNIE's knowledge units, bracketed
        if f"in_{kind}" in samples[0]:
            out.write(f"{kind} units [...]:\n  {_bracket_units(samples[0], kind, tok, real)}\n\n")
    if "stream" in batch:  # multilingual: the sample's language or parallel corpus
        name = datamodule.stream_names[int(batch["stream"][0])]
        out.write(f"stream: {name}" + (" (TLM pair)" if "-" in name else "") + "\n\n")
    if "position_ids" in batch:
        out.write(f"position ids (restart at the target sentence):\n  {batch['position_ids'][0, :real].tolist()}\n\n")
    if "token_type_ids" in batch and "stream" in batch:
        out.write(f"token types (language ids):\n  {batch['token_type_ids'][0, :real].tolist()}\n\n")
    if "knowledge_stage" in batch:
        out.write(f"stage: {datamodule.collator().stages[int(batch['knowledge_stage'][0])]}\n\n")
    if "task_type_ids" in batch:
        _render_ernie2(datamodule, samples[0], batch, tok, real, out)
    if "entity_candidates" in batch:
        render_entities(datamodule, samples[0], batch, tok, real, out)
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
