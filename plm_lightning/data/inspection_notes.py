"""What one objective's data adds to ``inspect``, declared beside that data (so ``inspection/`` keeps no branch per
objective): a data module's ``inspection_notes()`` returns :class:`InspectionNotes`, each accumulating statistics
over the measured batches (merged into ``inspect --json``) and describing the shown sample in the text view."""

from __future__ import annotations

from typing import Any

import numpy as np


class InspectionNotes:
    """One objective's part of ``inspect``: ``add`` sees every measured batch (the samples before collation and the
    collated batch), ``summary`` returns its ``--json`` fields, ``describe`` the text view's paragraphs about the
    first row of a batch (shown after the original text, before the corrupted input)."""

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        """Accumulate one measured batch."""

    def summary(self) -> dict[str, Any]:
        return {}

    def describe(self, sample: dict[str, Any], batch: dict[str, Any], tokenizer: Any, real: int) -> str:
        """Paragraphs (each ending in a blank line) about row 0 of ``batch``, whose pre-collation sample is
        ``sample`` and whose first ``real`` tokens are real."""
        return ""


def summarize(notes: list[InspectionNotes]) -> dict[str, Any]:
    """Every note's ``--json`` fields, in the order the data module declares them."""
    out: dict[str, Any] = {}
    for note in notes:
        out.update(note.summary())
    return out


class StreamNotes(InspectionNotes):
    """Multilingual data (XLM, mBERT, mT5): the share of measured samples per language / parallel corpus, next to
    the smoothed sampling probabilities they are drawn with (Lample & Conneau 2019, eq. 1)."""

    def __init__(self, datamodule: Any) -> None:
        self.datamodule, self.streams = datamodule, []  # its streams exist once it has packed its data

    @property
    def names(self) -> list[str]:
        return list(self.datamodule.stream_names)

    def add(self, samples: list[dict[str, Any]], batch: dict[str, Any]) -> None:
        self.streams.extend(batch["stream"].tolist())

    def summary(self) -> dict[str, Any]:
        if not self.names or not self.streams:
            return {}
        counts = np.bincount(self.streams, minlength=len(self.names)) / len(self.streams)
        return {"stream_fraction": dict(zip(self.names, counts.round(4).tolist())),
                "stream_probability": dict(zip(self.names, self.datamodule.stream_weights().round(4).tolist()))}

    def describe(self, sample: dict[str, Any], batch: dict[str, Any], tokenizer: Any, real: int) -> str:
        name = self.names[int(batch["stream"][0])]
        text = f"stream: {name}" + (" (TLM pair)" if "-" in name else "") + "\n\n"
        if "position_ids" in batch:
            text += f"position ids (restart at the target sentence):\n  {batch['position_ids'][0, :real].tolist()}\n\n"
        if "token_type_ids" in batch:
            text += f"token types (language ids):\n  {batch['token_type_ids'][0, :real].tolist()}\n\n"
        return text
