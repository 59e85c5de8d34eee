"""What an arena is: the recipes, budgets, size, data shape, downstream tasks and seeds (``ArenaConfig``), a recipe's
variants (``name[key=value;...]``), the options of a run's seed, and what one run leaves behind (``RunResult``). The
runs themselves are ``runner``'s; the report is ``report``'s."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plm_lightning.arena.applicability import Reader, reader_of, why_not
from plm_lightning.corpus.world import is_world_spec
from plm_lightning.errors import ConfigError

DEFAULT_RECIPES = ("bert", "roberta", "spanbert", "electra", "deberta-v3", "t5", "bart", "gpt2", "xlnet")
DOWNSTREAM = {"code-or-prose": "val/f1", "cloze-spans": "val/f1", "next-sentence": "val/accuracy",
              "markup-spans": "val/f1", "world-facts": "val/accuracy",
              "world-objects": "val/accuracy", "world-spans": "val/exact_match"}
"""The offline fine-tuning tasks (``configs/finetune/<task>.yaml``) and the validation metric each is scored by:
code-or-prose by macro-F1, as about 90% of its paragraphs are prose (accuracy would credit the majority class,
macro-F1 gives it about 0.47); next-sentence's 4 choices and world-facts' true and false facts are balanced;
world-spans by exact match (its answers are one word: token F1 is the same number)."""
WORLD_TASKS = ("lama", "world-facts", "world-objects", "world-spans", "prompt-world-objects")
"""Tasks on the synthetic world's facts: the recipes must be pretrained on that world (``--data world``)."""
PROBES = {"lama": "p@1"}
"""Downstream scores read without fine-tuning: ``lama`` is the LAMA probe (``probe --world``) of the synthetic
world's training facts through each objective's own head, macro P@1 at the last layer, every fact asked (an object
its recipe's tokenizer splits ranked by its first token: the recipes' tokenizers differ, and LAMA's one-token
restriction would ask each a different subset); it needs ``data`` to be that world, so the facts were in the
pretraining text."""
PROMPTS = {"prompt-code-or-prose": "code_or_prose", "prompt-continuation": "continuation",
           "prompt-next-sentence": "next_sentence", "prompt-world-objects": "world_objects"}
"""Downstream scores by zero/few-shot prompting (``plm_lightning prompt``, ``prompt_shots`` demonstrations): the
offline task's accuracy when each candidate is scored by its log-likelihood given the prompt (causal and
encoder-decoder recipes; the others are reported as not scored). Next to fine-tuning, the two sides of the
bidirectionality finding (Artetxe et al. 2022): fine-tuning favours bidirectional context, prompting unidirectional."""


@dataclass(frozen=True)
class ArenaConfig:
    """One arena: the recipes, the FLOPs budgets each is trained to, the common size and data shape, and the
    downstream tasks every result is fine-tuned and scored on.

    Attributes:
        recipes: Recipe names of ``configs_dir`` (Transformer objectives; the word-level ones have no backbone),
            each optionally a variant with its own settings, ``name[key=value;key=value]`` (e.g.
            ``continuum[data.bidirectional_fraction=0.25;data.prediction=masked]``): points of one recipe compared
            as recipes.
        budgets: Training FLOPs per run; several budgets give the score-vs-FLOPs curves.
        hidden_size: The common backbone width (and ``num_heads``, ``num_layers``, ``intermediate_size``; an
            encoder-decoder has ``num_layers`` in each stack, which its FLOPs pay for).
        seq_len: Tokens per row for every recipe (T5's raw rows are sized so its input has this length).
        batch_size: Rows per step for every recipe.
        downstream: Tasks of :data:`DOWNSTREAM`, fine-tuned for ``finetune_steps`` steps each, probes of
            :data:`PROBES` and prompted tasks of :data:`PROMPTS`.
        evaluations: Validations per pretraining run (the points of the loss-vs-FLOPs curves).
        data: The pretraining text of every recipe (``--data.source``); None keeps each recipe's own (the
            embedded corpus). ``world[:key=value,...]``, the synthetic knowledge world, makes ``lama`` measurable.
        prompt_shots: Demonstrations before each query of the :data:`PROMPTS` tasks (0: zero-shot).
        prompt_limit: Prompt only the first N validation examples of each :data:`PROMPTS` task (None: all; a quick
            arena's prompting otherwise dominates its time: 1783 next-sentence examples x 4 candidates per recipe).
        prompt_normalize: How a :data:`PROMPTS` candidate's log-likelihood is normalised before the choice:
            ``none`` (the sum), ``token`` (per token) or ``char`` (per character, lm-evaluation-harness' acc_norm): a
            sum favours the shortest candidate, which decides next-sentence's four sentences of unequal length.
        seeds: Runs per (recipe, budget), each with its own pretraining and fine-tuning seeds (:func:`seed_args`),
            so that every score has a mean and a standard deviation and a claim a standard error.
        random_init: Recipes whose fine-tuning is repeated from random weights of the same architecture and
            tokenizer (``--model.random_init``): the control arm of "pretraining helps downstream".
        accelerator: ``cpu`` (the recipes' own fp32 settings) or ``gpu`` (every pretraining and fine-tuning run on
            one CUDA device in bf16-mixed).
        finetune_lr: The peak learning rate of every fine-tuning run (None: each task YAML's, set for base-size
            models; models a few hidden units wide need about ten times more to leave their head's start in the
            arena's few hundred steps, as the small BERTs of Turc et al. 2019 do).
    """

    recipes: tuple[str, ...] = DEFAULT_RECIPES
    budgets: tuple[float, ...] = (1e13,)
    hidden_size: int = 128
    num_heads: int = 4
    num_layers: int = 4
    intermediate_size: int = 512
    seq_len: int = 128
    batch_size: int = 32
    downstream: tuple[str, ...] = ("code-or-prose", "cloze-spans")
    finetune_steps: int = 200
    evaluations: int = 4
    val_batches: int = 10
    configs_dir: str = "configs"
    data: str | None = None
    prompt_shots: int = 0
    prompt_limit: int | None = None
    prompt_normalize: str = "none"
    seeds: int = 1
    random_init: tuple[str, ...] = ()
    accelerator: str = "cpu"
    finetune_lr: float | None = None

    def __post_init__(self) -> None:
        if not self.recipes:
            raise ConfigError("arena: --recipes names no recipe")
        if not self.budgets or min(self.budgets) <= 0:
            raise ConfigError(f"arena: --budget-flops {list(self.budgets)} must be positive FLOP counts (e.g. 1e13)")
        unknown = [t for t in self.downstream if t not in DOWNSTREAM and t not in PROBES and t not in PROMPTS]
        if unknown:
            raise ConfigError(f"arena: unknown --downstream task(s) {', '.join(unknown)}; valid: "
                              f"{', '.join([*DOWNSTREAM, *PROBES, *PROMPTS])}")
        if self.prompt_shots < 0:
            raise ConfigError(f"arena: --prompt-shots={self.prompt_shots} must be >= 0")
        if self.prompt_normalize not in ("none", "token", "char"):
            raise ConfigError(f"arena: --prompt-normalize={self.prompt_normalize!r} is not one of none, token, char")
        if self.prompt_limit is not None and self.prompt_limit < 1:
            raise ConfigError(f"arena: --prompt-limit={self.prompt_limit} must be >= 1 (or left out: every example)")
        world = [t for t in self.downstream if t in WORLD_TASKS]
        if world and not is_world_spec(self.data or ""):
            raise ConfigError(f"arena: --downstream {', '.join(world)} asks the synthetic world's facts, so the recipes "
                              f"must be pretrained on it: add --data world (or world:subjects=N,...), not {self.data!r}")
        if self.finetune_lr is not None and self.finetune_lr <= 0:
            raise ConfigError(f"arena: --finetune-lr={self.finetune_lr} must be a positive learning rate")
        if self.accelerator not in ("cpu", "gpu"):
            raise ConfigError(f"arena: --accelerator {self.accelerator!r} is not cpu or gpu")
        unknown = [r for r in self.random_init if r not in self.recipes]
        if unknown:
            raise ConfigError(f"arena: --random-init {', '.join(unknown)} is not in --recipes")
        for name in ("hidden_size", "num_heads", "num_layers", "intermediate_size", "seq_len", "batch_size",
                     "finetune_steps", "evaluations", "val_batches", "seeds"):
            if getattr(self, name) < 1:
                raise ConfigError(f"arena: --{name.replace('_', '-')}={getattr(self, name)} must be >= 1")
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"arena: --hidden-size {self.hidden_size} must be a multiple of --num-heads "
                              f"{self.num_heads}")
        for recipe in self.recipes:
            recipe_variant(recipe)  # a malformed variant is a one-line error
        missing = [r for r in self.recipes if not self.recipe_file(r).is_file()]
        if missing:
            found = sorted(p.stem for p in Path(self.configs_dir).glob("*.yaml"))
            raise ConfigError(f"arena: no recipe {', '.join(missing)} in {self.configs_dir}/ (valid: "
                              f"{', '.join(found) or 'none: run from the repository root or pass --configs-dir'})")
        for task in self.downstream:
            if len(self.skipped(task)) == len(self.recipes):
                reasons = "; ".join(sorted(set(self.skipped(task).values())))
                raise ConfigError(f"arena: --downstream {task} fits none of --recipes {', '.join(self.recipes)} "
                                  f"({reasons})")

    def reader(self, recipe: str) -> Reader:
        """How ``recipe``'s model reads a downstream input (from its YAML and variant; nothing trains)."""
        return reader_of(self.recipe_file(recipe), recipe_variant(recipe)[1])

    def skipped(self, task: str) -> dict[str, str]:
        """The recipes ``task`` does not apply to, and why."""
        reasons = {recipe: why_not(task, self.reader(recipe)) for recipe in self.recipes}
        return {recipe: reason for recipe, reason in reasons.items() if reason is not None}

    def tasks_for(self, recipe: str) -> tuple[str, ...]:
        """The downstream tasks ``recipe`` is scored on (those that apply to it)."""
        reader = self.reader(recipe)
        return tuple(t for t in self.downstream if why_not(t, reader) is None)

    def finetune_args(self, task: str) -> list[str]:
        """The options of a fine-tuning run on ``task`` beyond its YAML: the arena's learning rate, and the world the
        recipes were pretrained on for a world task."""
        args = [f"--model.learning_rate={self.finetune_lr}"] if self.finetune_lr is not None else []
        if task in ("world-facts", "world-objects", "world-spans"):
            args.append(f"--data.task=offline:{task.replace('-', '_')}={self.data}")
        if task == "world-objects":
            from plm_lightning.finetune.tasks import world_labels

            args.append(f"--model.num_labels={world_labels(str(self.data))}")
        return args

    def prompt_task(self, task: str) -> str:
        """The ``prompt --task`` of a :data:`PROMPTS` task (a world task names the arena's world)."""
        return f"offline:{PROMPTS[task]}" + (f"={self.data}" if task in WORLD_TASKS else "")

    def device_args(self) -> list[str]:
        """The trainer options of every run on the arena's accelerator (none on CPU: the recipes' own)."""
        if self.accelerator == "cpu":
            return []
        return ["--trainer.accelerator=gpu", "--trainer.devices=1", "--trainer.precision=bf16-mixed"]

    def recipe_file(self, recipe: str) -> Path:
        return Path(self.configs_dir) / f"{recipe_variant(recipe)[0]}.yaml"

    def recipe_args(self, recipe: str) -> list[str]:
        """``--config`` of the recipe's YAML, the arena's shape, then the variant's own settings."""
        return ["--config", str(self.recipe_file(recipe)), *self.overrides(),
                *(f"--{k}={v}" for k, v in recipe_variant(recipe)[1].items())]

    def overrides(self) -> list[str]:
        """The command-line options that put a recipe at the arena's size and data shape."""
        size = {"hidden_size": self.hidden_size, "num_heads": self.num_heads, "num_layers": self.num_layers,
                "intermediate_size": self.intermediate_size}
        return [f"--model.backbone_overrides={json.dumps(size)}", f"--data.seq_len={self.seq_len}",
                f"--data.batch_size={self.batch_size}", *([f"--data.source={self.data}"] if self.data else [])]


def seed_args(seed: int, data: bool = True) -> list[str]:
    """The options of a run's ``seed``: none for seed 0 (the recipe's own seeds, as a single-seed arena always ran),
    else ``--seed_everything`` (initialisation, dropout, fine-tuning order) and, for pretraining (``data``),
    ``--data.seed`` (sample order, masks and the held-out split)."""
    if seed == 0:
        return []
    return [f"--seed_everything={seed}", *([f"--data.seed={1234 + seed}"] if data else [])]


def run_name(recipe: str, budget: float, seed: int = 0) -> str:
    """``recipe@budget`` (seed 0, the name a single-seed arena always used) or ``recipe@budget~sN``."""
    return f"{recipe}@{budget:.3g}" + (f"~s{seed}" if seed else "")


def recipe_variant(recipe: str) -> tuple[str, dict[str, str]]:
    """``name[key=value;...]`` -> (name, {key: value}); a plain name has no settings."""
    match = re.fullmatch(r"([\w.-]+)(?:\[(.*)\])?", recipe.strip())
    if match is None:
        raise ConfigError(f"arena: recipe {recipe!r} is not NAME or NAME[key=value;...]")
    settings: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (match.group(2) or "").split(";"))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or "." not in key:
            raise ConfigError(f"arena: {recipe!r}: {item!r} is not key=value with a dotted key (data.x=..., "
                              "model.x=...)")
        settings[key.strip()] = value.strip()
    return match.group(1), settings


def split_recipes(text: str) -> tuple[str, ...]:
    """A ``--recipes`` list: commas outside brackets separate recipes."""
    return tuple(r.strip() for r in re.split(r",(?![^\[]*\])", text) if r.strip())


@dataclass
class RunResult:
    """One recipe trained to one budget, and its scores."""

    recipe: str
    budget: float
    seed: int = 0
    objective: str = ""
    flops_per_step: float = 0.0
    steps: int = 0
    flops: float = 0.0
    parameters: int = 0
    val_curve: list[tuple[float, float]] = field(default_factory=list)
    """(training FLOPs so far, val/loss) at each validation."""
    val_loss: float | None = None
    downstream: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    statistics: dict[str, Any] = field(default_factory=dict)
    """The recipe's ``inspect --json`` statistics at the arena's shape (target lengths for the T5 claim)."""
    seconds: float = 0.0
    seconds_per_step: float = 0.0
    """The median time of a pretraining step at the arena's shape (measured on its first steps, after the first)."""
    random_init: dict[str, float | None] = field(default_factory=dict)
    """The scores of the same architecture from random weights (``ArenaConfig.random_init``): fine-tuned from them,
    or probed and prompted with them."""
    started: float = 0.0
    """When the run began and ended (seconds since the epoch): which runs ran at once."""
    finished: float = 0.0
    job: str = ""
    """The executor and job id that ran it (``local:12345``, ``slurm:678_3``)."""
