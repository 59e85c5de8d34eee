"""Which downstream task a recipe can take, known before anything trains: a recipe's reader (its objective class and
the data settings that change how it reads: the continuum's bidirectional prefix and its kind of prediction) read
from its YAML and its variant's settings, and each task's rule of which readers it scores. A task that fits no
recipe of an arena is a one-line error; one that fits some is skipped for the others, with one line in the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from plm_lightning.errors import ConfigError

FAMILIES = ("encoder", "decoder", "encoder-decoder")
"""The architecture families the sanity gate keeps apart: one random-initialisation baseline serves every recipe
of its family (same backbone size, same scoring) where a recipe has none of its own."""


@dataclass(frozen=True)
class Reader:
    """How a recipe's pretrained model reads a downstream input."""

    objective: str
    """The objective class of the recipe (``MaskedLM``, ``ELECTRA``, ``CausalLM``, ``Seq2SeqLM`` ...)."""
    bidirectional: bool
    """It attends over its whole input (an encoder, or a continuum decoder with a bidirectional prefix)."""
    next_token: bool
    """It scores a continuation token by token (a causal LM predicting the next token, or an encoder-decoder)."""

    @property
    def family(self) -> str:
        return family_of(self.objective)


def family_of(objective: str) -> str:
    """``decoder`` (one causal stack: GPT, the continuum), ``encoder-decoder`` (T5, BART, MASS) or ``encoder``."""
    return {"CausalLM": "decoder", "Seq2SeqLM": "encoder-decoder"}.get(objective, "encoder")


def reader_of(recipe_file: Path, settings: dict[str, str]) -> Reader:
    """The reader of the recipe in ``recipe_file`` with a variant's ``settings`` (``data.x=...``) applied; the YAML
    is read as data (the class path's last name is all that is used, nothing is imported)."""
    try:
        recipe = yaml.safe_load(recipe_file.read_text(encoding="utf-8")) or {}
        objective = str(recipe["model"]["class_path"]).rsplit(".", 1)[-1]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise ConfigError(f"arena: cannot read the model class of {recipe_file} ({err})") from err
    data = dict((recipe.get("data") or {}).get("init_args") or {})
    data.update({k.removeprefix("data."): v for k, v in settings.items() if k.startswith("data.")})
    if objective != "CausalLM":
        return Reader(objective, bidirectional=objective != "Seq2SeqLM", next_token=objective == "Seq2SeqLM")
    fraction = float(data.get("bidirectional_fraction") or 0.0)
    return Reader(objective, bidirectional=fraction > 0, next_token=str(data.get("prediction", "next_token")) != "masked")


def _any_reader(reader: Reader) -> str | None:
    """Sequence classification pools any stack, an encoder-decoder's included: every reader takes it."""
    return None


def _chooses(reader: Reader) -> str | None:
    return "multiple choice reads one stack; an encoder-decoder is not taken" if reader.objective == "Seq2SeqLM" \
        else None


def _extracts(reader: Reader) -> str | None:
    return None if reader.bidirectional else \
        "extractive QA reads the whole context at every position: a bidirectional reader (an encoder)"


def _prompts(reader: Reader) -> str | None:
    return None if reader.next_token else "prompting scores continuations: a causal or encoder-decoder LM"


def _probes(reader: Reader) -> str | None:
    readable = ("MaskedLM", "ELECTRA", "DistilBERT", "CausalLM", "Seq2SeqLM", "PermutationLM")
    return None if reader.objective in readable else \
        f"the LAMA probe reads a vocabulary head at the answer slot, which {reader.objective} has not"


RULES = {"code-or-prose": _any_reader, "world-facts": _any_reader, "world-objects": _any_reader,
         "prompt-world-objects": _prompts, "next-sentence": _chooses, "cloze-spans": _extracts, "markup-spans": _extracts,
         "world-spans": _extracts,
         "lama": _probes, "prompt-code-or-prose": _prompts, "prompt-continuation": _prompts,
         "prompt-next-sentence": _prompts}
"""Per task: why a reader cannot take it (None: it can)."""


def why_not(task: str, reader: Reader) -> str | None:
    """Why ``reader`` cannot take ``task`` (None when it can)."""
    return RULES[task](reader)
