"""``inspect --png``: an objective as a picture. The attention-mask matrix of one training row (row = query,
column = key; filled = may attend) with the rows whose output carries loss in red, next to the original and the
corrupted text. ``inspect --all-recipes --png`` draws every recipe's matrix in one grid: the literature's
"objectives as attention masks" figure (UniLM, Dong et al. 2019, Fig. 1; T5, Raffel et al. 2020, Fig. 3), measured
from our collators instead of drawn by hand.

An objective here is a corruption of the input + an attention-mask shape + the positions that carry loss; the
picture shows all three. Encoder-decoders are drawn as one matrix over [encoder input; decoder input], as in T5's
figure: the encoder block is bidirectional, decoder rows see every encoder token and the decoder tokens before them.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import torch

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.errors import ConfigError
from plm_lightning.inspection.batches import sample_batches
from plm_lightning.inspection.picture_parts import ObjectivePicture, encoder_decoder_picture
from plm_lightning.nn.masks import ATTENTION_KINDS, attention_shape, causal_mask, combine, document_mask, padding_mask
from plm_lightning.plotting import pyplot

_ATTEND, _LOSS, _EMPTY = (0.22, 0.36, 0.62), (0.80, 0.22, 0.18), (1.0, 1.0, 1.0)


def self_attention(model: Any, batch: dict[str, Any], n: int) -> tuple[torch.Tensor, str, int | None]:
    """The first row's ``[n, n]`` self-attention mask of a single-stack recipe, its name, and the prefix length of
    a prefix LM (UniLM's batch mixture, GLM, decoder-only UL2), from the same mask builders the backbone uses."""
    shape = causal_mask(n) if getattr(model, "causal", False) else None
    kind, prefix = ("causal" if shape is not None else "bidirectional"), None
    if "attention_kind" in batch or "prefix_lengths" in batch:
        kind = ATTENTION_KINDS[int(batch["attention_kind"])] if "attention_kind" in batch else "prefix"
        lengths = batch["prefix_lengths"][:1] if "prefix_lengths" in batch else None
        shape = attention_shape(kind, n, lengths)
        prefix = int(lengths[0]) if kind == "prefix" and lengths is not None else None
    mask = combine(padding_mask(batch["attention_mask"][:1, :n]),
                   document_mask(batch["document_ids"][:1, :n]) if "document_ids" in batch else None, shape)
    if mask is None:
        mask = torch.ones(1, 1, n, n, dtype=torch.bool)
    return mask.expand(1, 1, n, n)[0, 0], kind, prefix


def objective_picture(datamodule: TextDataModule, model: Any, width: int = 32, progress: float = 0.0,
                      name: str | None = None) -> ObjectivePicture:
    """The first ``width`` tokens of the first row of the training batch at ``progress`` (epochs), as a picture.
    Encoder-decoders show up to ``width`` encoder and ``width // 2`` decoder tokens."""
    from plm_lightning.data.parallel import ParallelDataModule
    from plm_lightning.data.static import WordEmbeddingDataModule

    if isinstance(datamodule, (WordEmbeddingDataModule, ParallelDataModule)):  # no attention: their context shape
        from plm_lightning.inspection.word_pictures import word_level_picture

        return word_level_picture(datamodule, model, width, name or type(model).__name__)
    tok = datamodule.tokenizer
    samples, batch = next(sample_batches(datamodule, 1, progress))
    show = lambda seq: " ".join(tok.id_to_token(int(t)) for t in seq)  # noqa: E731
    corruption = getattr(datamodule.collator(), "objective", "?")
    title = f"{name or type(model).__name__} ({corruption})"
    sample = samples[0]
    real = int(batch["attention_mask"][0].sum())
    labels = batch["labels"][0]
    if "decoder_input_ids" in batch:  # encoder-decoder: one matrix over [encoder; decoder], T5 Fig. 3
        raw = np.asarray(sample["input_ids"])[np.asarray(sample["document_ids"]) >= 0]
        enc = min(real, width)
        dec = min(int((labels != IGNORE_INDEX).sum()), max(1, width // 2))
        cross = batch.get("cross_attention_mask")
        if cross is None:
            return encoder_decoder_picture(title, _tokens(tok, batch["input_ids"][0, :enc]),
                                           _tokens(tok, batch["decoder_input_ids"][0, :dec]),
                                           (labels[:dec] != IGNORE_INDEX).numpy(), show(raw),
                                           show(batch["input_ids"][0, :real]))
        return encoder_decoder_picture(title, _tokens(tok, batch["input_ids"][0, :enc]),
                                       _tokens(tok, batch["decoder_input_ids"][0, :dec]),
                                       (labels[:dec] != IGNORE_INDEX).numpy(), show(raw),
                                       show(batch["input_ids"][0, :real]),
                                       "encoder bidirectional; decoder causal, cross-attending to the encoder tokens "
                                       "but its masks", cross[0, :enc].numpy())
    n = min(real, width)
    if "input_ids" in sample:
        original = show(np.asarray(sample["input_ids"])[:real])
    else:  # REALM's queries: the row with its masked span's labels put back
        original = show(torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"][0])[:real])
    if "perm_mask" in batch:  # XLNet: content stream for the context rows, query stream (no self) for the targets
        hidden = batch["perm_mask"][0, :n, :n].numpy().astype(bool)
        loss = (labels[:n] != IGNORE_INDEX).numpy()
        mask = ~hidden | (np.eye(n, dtype=bool) & ~loss[:, None])
        return ObjectivePicture(title, _tokens(tok, batch["input_ids"][0, :n]), mask, loss, [], original,
                                show(batch["input_ids"][0, :real]), "two-stream permutation: predicted rows use the "
                                "query stream (no self), the others the content stream")
    grid, kind, prefix = self_attention(model, batch, real)
    # a prefix LM's window straddles the prefix/target boundary, where the mask changes shape
    start = 0 if prefix is None else max(0, min(prefix - n // 2, real - n))
    window = slice(start, start + n)
    loss = model.loss_positions(batch)[0, window].numpy().astype(bool)
    split = None if prefix is None else min(max(prefix - start, 0), n)
    blocks = [("prefix", split), ("target", n - split)] if split is not None else []
    attention = f"{kind}" + (f" (prefix of {prefix} tokens; tokens {start}-{start + n - 1} shown)"
                             if prefix is not None else "")
    if "document_ids" in batch and len(set(batch["document_ids"][0, :n].tolist())) > 1:
        attention += ", within each packed document"
    return ObjectivePicture(title, _tokens(tok, batch["input_ids"][0, window]), grid[window, window].numpy().astype(bool),
                            loss, blocks, original, show(batch["input_ids"][0, :real]), attention)


def _tokens(tok: Any, ids: torch.Tensor) -> list[str]:
    return [tok.id_to_token(int(t)) for t in ids]


def _image(picture: ObjectivePicture) -> np.ndarray:
    """RGB image of the mask: blue = may attend, red = may attend in a row that carries loss, white = masked."""
    image = np.empty((*picture.mask.shape, 3))
    image[:] = _EMPTY
    image[picture.mask] = _ATTEND
    image[picture.mask & picture.loss[:, None]] = _LOSS
    return image


def _separators(ax: Any, picture: ObjectivePicture) -> None:
    for blocks, line in ((picture.blocks, ax.axvline), (picture.row_blocks or picture.blocks, ax.axhline)):
        edge = 0
        for _, size in blocks[:-1]:
            edge += size
            line(edge - 0.5, color="black", linewidth=0.8)


def draw_picture(picture: ObjectivePicture, path: Path) -> None:
    """One recipe: the mask with token labels (loss rows' labels in red) beside the original and corrupted text."""
    plt = pyplot()
    n = len(picture.tokens)
    rows = picture.row_tokens or picture.tokens
    fig, (ax, text) = plt.subplots(1, 2, figsize=(15, 7.5), gridspec_kw={"width_ratios": [1, 1.1]})
    ax.imshow(_image(picture), interpolation="nearest")
    ax.set_xticks(range(n), picture.tokens, rotation=90, fontsize=6)
    ax.set_yticks(range(len(rows)), rows, fontsize=6)
    for label, carried in zip(ax.get_yticklabels(), picture.loss):
        label.set_color(_LOSS if carried else "black")
    _separators(ax, picture)
    edge = 0
    for name, size in picture.row_blocks or picture.blocks:  # x in axes coordinates, y in data: left of the labels
        ax.text(-0.2, edge + (size - 1) / 2, name, rotation=90, ha="center", va="center", fontsize=8, style="italic",
                transform=ax.get_yaxis_transform())
        edge += size
    ax.set_xlabel("key")
    ax.set_ylabel("query", labelpad=22 if picture.row_blocks or picture.blocks else 4)
    ax.set_title(f"{picture.title}\n{picture.attention}", fontsize=9)
    text.axis("off")
    wrap = lambda s: textwrap.fill(s[:900] + (" ..." if len(s) > 900 else ""), 95)  # noqa: E731
    body = (f"original\n{wrap(picture.original)}\n\ncorrupted input\n{wrap(picture.corrupted)}\n\n"
            f"red rows: {int(picture.loss.sum())} of {len(rows)} shown rows carry loss; blue: may attend; white: masked")
    text.text(0, 1, body, va="top", ha="left", fontsize=7.5, family="monospace", transform=text.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


RECIPES_KEY = "plm_lightning recipes"
"""The PNG text chunk where the grid records which recipes it drew, by the SHA-256 of their YAML (so a test can tell
that ``docs/objectives.png`` is stale without drawing it again)."""


def recipe_digests(configs: dict[str, Path]) -> dict[str, str]:
    """``{recipe: sha256 of its YAML}``: what a grid was drawn from."""
    return {name: hashlib.sha256(config.read_bytes()).hexdigest() for name, config in configs.items()}


def drawn_recipes(path: Path) -> dict[str, str]:
    """The recipes a grid PNG says it was drawn from (``{}`` for a PNG without the record)."""
    from PIL import Image

    with Image.open(path) as image:
        text = image.info.get(RECIPES_KEY)
    return json.loads(text) if text else {}


def draw_grid(pictures: list[ObjectivePicture], path: Path, skipped: dict[str, str], columns: int = 6,
              drawn_from: dict[str, str] | None = None) -> None:
    """Every recipe's mask in one figure (the recipes that have none are listed under it); ``drawn_from`` (recipe
    digests) is written into the PNG's text chunk ``RECIPES_KEY``."""
    plt = pyplot()
    rows = max(1, -(-len(pictures) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.9 * rows + 0.6), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, picture in zip(axes.flat, pictures):
        ax.imshow(_image(picture), interpolation="nearest")
        _separators(ax, picture)
        ax.set_title(picture.title, fontsize=8)
    note = ["blue: may attend; red: may attend, and the row carries loss; white: masked; lines: encoder | decoder, "
            "prefix | target"]
    if skipped:
        note.append("not drawn: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()))
    fig.text(0.5, 0.005, "\n".join(textwrap.fill(line, 200) for line in note), ha="center", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    metadata = {RECIPES_KEY: json.dumps(drawn_from, sort_keys=True)} if drawn_from is not None else None
    fig.savefig(path, dpi=110, metadata=metadata)
    plt.close(fig)


def recipe_configs(directory: Path, names: list[str] | None = None) -> dict[str, Path]:
    """The recipes of ``directory`` (its top-level YAML files) by name, or the chosen ``names`` of them."""
    if not directory.is_dir():
        raise ConfigError(f"inspect --all-recipes: no recipe directory {directory} (run from the repository root or "
                          "pass --configs-dir DIR)")
    found = {p.stem: p for p in sorted(directory.glob("*.yaml"))}
    unknown = [n for n in names or [] if n not in found]
    if unknown:
        raise ConfigError(f"inspect --recipes: unknown recipe(s) {', '.join(unknown)}; valid: {', '.join(found)}")
    return {n: found[n] for n in names} if names else found


def limit_args(config: Path, max_documents: int | None) -> list[str]:
    """The override that reads only the first ``max_documents`` documents of a recipe's text (CoVe's parallel
    corpus: 25 sentence pairs per document); none when ``max_documents`` is None."""
    if max_documents is None:
        return []
    import yaml

    data = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data") or {}
    if str(data.get("class_path", "")).endswith("ParallelDataModule"):
        return [f"--data.max_pairs={25 * max_documents}"]
    return [f"--data.max_documents={max_documents}"]


def draw_all_recipes(configs: dict[str, Path], path: Path, overrides: list[str], width: int = 32,
                     log: Any = print, max_documents: int | None = None) -> tuple[list[ObjectivePicture], dict[str, str]]:
    """Build every recipe's DataModule as ``fit`` would and draw the grid; a recipe that cannot be built from its
    YAML alone (DistilBERT needs its teacher) is listed under the grid with the reason. ``max_documents`` builds
    each from the first documents of its text only (a quicker grid: tokenizers and packing on less text)."""
    from plm_lightning.progress import progress_bar
    from plm_lightning.recipe_cli import build_recipe as build_datamodule

    pictures: list[ObjectivePicture] = []
    skipped: dict[str, str] = {}
    advance = progress_bar(len(configs), "drawing recipes")
    for name, config in configs.items():
        try:
            datamodule, model = build_datamodule([str(config)], [*limit_args(config, max_documents), *overrides])
            pictures.append(objective_picture(datamodule, model, width, name=name))
        except (ConfigError, ValueError) as err:  # the grid lists the reason instead of stopping
            cause = err.__cause__ if isinstance(err.__cause__, ConfigError) else err  # jsonargparse wraps ours
            reason = str(cause).splitlines()[0]
            skipped[name] = reason
            log(f"{name}: skipped ({reason})")
        advance()
    draw_grid(pictures, path, skipped, drawn_from=recipe_digests(configs))
    return pictures, skipped
