"""The objective arena's runs: every recipe at one backbone size and one training-FLOPs budget, on the same data,
then fine-tuned on the same downstream tasks.

FLOPs are counted per objective, by the same analytic count the throughput/MFU callback reports
(:func:`plm_lightning.nn.flops.training_flops` through each objective's ``_set_flops``): ELECTRA's generator and
discriminator, both stacks of an encoder-decoder (the decoder over its own target length), XLNet's two streams,
the LM head only at the positions that carry loss. A recipe's steps are ``ceil(budget / FLOPs per step)``, the
FLOPs per step measured on the recipe's own batches at the arena's size. Each pretraining and fine-tuning run is a
subprocess of the CLI (``fit --config ...``), so a run is exactly what a user would get; the scoring commands that
train nothing (``probe``, ``prompt``) run the same CLI entry point in this process, their output in their log, which
saves an interpreter start (~10 s) per score. Results are written one JSON per (recipe, budget), atomically, and a
re-run skips the finished ones.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

import lightning as L

from plm_lightning.callbacks.metrics_file import METRICS_FILE_ENV, read_metrics
from plm_lightning.errors import ConfigError, last_line
from plm_lightning.knowledge.world import is_world_spec

DEFAULT_RECIPES = ("bert", "roberta", "spanbert", "electra", "deberta-v3", "t5", "bart", "gpt2", "xlnet")
DOWNSTREAM = {"code-or-prose": "val/f1", "cloze-spans": "val/f1", "next-sentence": "val/accuracy",
              "markup-spans": "val/f1"}
"""The offline fine-tuning tasks (``configs/finetune/<task>.yaml``) and the validation metric each is scored by:
code-or-prose by macro-F1, as about 90% of its paragraphs are prose (accuracy would credit the majority class,
macro-F1 gives it about 0.47); next-sentence's 4 choices are balanced."""
PROBES = {"lama": "p@1"}
"""Downstream scores read without fine-tuning: ``lama`` is the LAMA probe (``probe --world``) of the synthetic
world's training facts through each objective's own head, macro P@1 at the last layer, every fact asked (an object
its recipe's tokenizer splits ranked by its first token: the recipes' tokenizers differ, and LAMA's one-token
restriction would ask each a different subset); it needs ``data`` to be that world, so the facts were in the
pretraining text."""
PROMPTS = {"prompt-code-or-prose": "code_or_prose", "prompt-continuation": "continuation",
           "prompt-next-sentence": "next_sentence"}
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
        seeds: Runs per (recipe, budget), each with its own pretraining and fine-tuning seeds (:func:`seed_args`),
            so that every score has a mean and a standard deviation and a claim a standard error.
        random_init: Recipes whose fine-tuning is repeated from random weights of the same architecture and
            tokenizer (``--model.random_init``): the control arm of "pretraining helps downstream".
        accelerator: ``cpu`` (the recipes' own fp32 settings) or ``gpu`` (every pretraining and fine-tuning run on
            one CUDA device in bf16-mixed).
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
    seeds: int = 1
    random_init: tuple[str, ...] = ()
    accelerator: str = "cpu"

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
        if self.prompt_limit is not None and self.prompt_limit < 1:
            raise ConfigError(f"arena: --prompt-limit={self.prompt_limit} must be >= 1 (or left out: every example)")
        if "lama" in self.downstream and not is_world_spec(self.data or ""):
            raise ConfigError(f"arena: --downstream lama probes the synthetic world's facts, so the recipes must be "
                              f"pretrained on it: add --data world (or world:subjects=N,...), not {self.data!r}")
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
    """The fine-tuning scores of the same architecture from random weights (``ArenaConfig.random_init``)."""


def measure_recipe(config: ArenaConfig, recipe: str, steps: int = 3) -> dict[str, Any]:
    """FLOPs per training step (the mean over ``steps`` real training steps at the arena's shape, as the objective
    counts them for the MFU callback), the objective, its parameter count and its corruption statistics."""
    from plm_lightning.inspection import build_datamodule, corruption_statistics
    from plm_lightning.objectives.base import PretrainingModule

    args = config.recipe_args(recipe)
    datamodule, model = build_datamodule([args[1]], args[2:])
    if not isinstance(model, PretrainingModule) or not hasattr(datamodule, "seq_len"):
        raise ConfigError(f"arena: {recipe} is not a Transformer pretraining recipe (the arena compares objectives "
                          "on one backbone size)")
    probe = _FlopsProbe()
    L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
              callbacks=[probe]).fit(model, datamodule=datamodule)
    timed = sorted(probe.seconds[1:]) or probe.seconds
    return {"objective": type(model).__name__, "flops_per_step": sum(probe.flops) / len(probe.flops),
            "parameters": sum(p.numel() for p in model.parameters()), "seconds_per_step": timed[len(timed) // 2],
            "statistics": corruption_statistics(datamodule, model, 2)}


class _FlopsProbe(L.Callback):
    """Collects the objective's FLOPs of each training batch (what ``ThroughputMFU`` reads) and its time."""

    def __init__(self) -> None:
        self.flops: list[float] = []
        self.seconds: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self.seconds.append(time.perf_counter() - self._start)
        self.flops.append(float(pl_module.flops_per_batch))


class Arena:
    """Runs the arena in ``directory`` (``results/<recipe>@<budget>.json``, ``runs/``, ``finetune/``)."""

    def __init__(self, config: ArenaConfig, directory: str | Path, log: Callable[[str], None] = print) -> None:
        self.config, self.dir, self.log = config, Path(directory), log
        (self.dir / "results").mkdir(parents=True, exist_ok=True)
        free = ("recipes", "budgets", "seeds", "random_init")  # may grow between runs of one arena
        shape = {k: v for k, v in asdict(config).items() if k not in free}
        saved = self.dir / "arena.json"
        defaults = {f.name: f.default for f in fields(ArenaConfig) if f.name not in free}
        if saved.is_file() and {**json.loads(json.dumps(defaults)), **json.loads(saved.read_text(encoding="utf-8"))} \
                != json.loads(json.dumps(shape)):  # a key added since that arena was run has its default there
            raise ConfigError(f"arena: {self.dir} holds an arena of another size, data shape or downstream setting "
                              f"(see {saved}); give another --dir (recipes and budgets may be added)")
        saved.write_text(json.dumps(shape, indent=1), encoding="utf-8")

    def result_path(self, recipe: str, budget: float, seed: int = 0) -> Path:
        return self.dir / "results" / f"{run_name(recipe, budget, seed)}.json"

    def run(self) -> list[RunResult]:
        """Every (seed, budget, recipe), seed by seed: an interrupted arena has whole seeds first."""
        results = []
        for seed in range(self.config.seeds):
            for budget in self.config.budgets:
                for recipe in self.config.recipes:
                    results.append(self._run_or_load(recipe, budget, seed))
        return results

    def saved(self) -> list[RunResult]:
        """The results saved so far, in run order (what ``--report-only`` reports; nothing is trained)."""
        paths = [self.result_path(recipe, budget, seed) for seed in range(self.config.seeds)
                 for budget in self.config.budgets for recipe in self.config.recipes]
        return [RunResult(**json.loads(p.read_text(encoding="utf-8"))) for p in paths if p.is_file()]

    def _run_or_load(self, recipe: str, budget: float, seed: int) -> RunResult:
        path = self.result_path(recipe, budget, seed)
        result = RunResult(**json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None
        if result is not None and (recipe not in self.config.random_init or result.random_init):
            self.log(f"{run_name(recipe, budget, seed)}: done earlier ({path})")
            return result
        if result is None:
            result = self.run_one(recipe, budget, seed)
            if "pretraining" in result.errors:  # not kept: the next run tries again
                return result
        if recipe in self.config.random_init and not result.random_init:
            self.random_init_scores(result)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
        tmp.replace(path)
        return result

    def random_init_scores(self, result: RunResult) -> None:
        """The fine-tuning tasks again, from random weights of ``result``'s architecture (its checkpoint gives the
        architecture and tokenizer only)."""
        where = self.dir / "runs" / run_name(result.recipe, result.budget, result.seed)
        checkpoint = sorted(where.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        for task in (t for t in self.config.downstream if t in DOWNSTREAM):
            result.random_init[task] = self.finetune(result, task, checkpoint[-1], random_init=True) \
                if checkpoint else None

    def _env(self, metrics: Path) -> dict[str, str]:
        env = dict(os.environ)
        env[METRICS_FILE_ENV] = str(metrics)
        env.setdefault("WANDB_MODE", "offline")
        return env

    def _fit(self, args: list[str], where: Path) -> tuple[int, str, list[dict[str, float]]]:
        """Run ``fit`` with ``args`` writing under ``where``: (exit code, last output line, metrics rows)."""
        where.mkdir(parents=True, exist_ok=True)
        metrics = where / "metrics.jsonl"
        metrics.unlink(missing_ok=True)
        command = [sys.executable, "-m", "plm_lightning", "fit", *args, f"--trainer.default_root_dir={where}",
                   f"--trainer.logger.init_args.save_dir={where}"]
        with open(where / "output.log", "w", encoding="utf-8") as out:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=self._env(metrics)).returncode
        return code, last_line((where / "output.log").read_text(encoding="utf-8")), read_metrics(metrics)

    def run_one(self, recipe: str, budget: float, seed: int = 0) -> RunResult:
        start = time.time()
        config = self.config
        measured = measure_recipe(config, recipe)
        steps = max(1, math.ceil(budget / measured["flops_per_step"]))
        result = RunResult(recipe, budget, seed, measured["objective"], measured["flops_per_step"], steps,
                           steps * measured["flops_per_step"], measured["parameters"],
                           statistics=measured["statistics"], seconds_per_step=measured["seconds_per_step"])
        name = run_name(recipe, budget, seed)
        self.log(f"{name}: {measured['flops_per_step']:.3g} FLOPs/step -> {steps} steps")
        where = self.dir / "runs" / name
        interval = max(1, steps // config.evaluations)
        code, line, rows = self._fit(
            [*config.recipe_args(recipe), *seed_args(seed), *config.device_args(), f"--trainer.max_steps={steps}",
             "--trainer.max_epochs=-1",
             f"--trainer.val_check_interval={interval}", "--trainer.check_val_every_n_epoch=null",
             f"--trainer.limit_val_batches={config.val_batches}"], where)
        if code != 0:
            result.errors["pretraining"] = line
            self.log(f"{recipe}: pretraining failed: {line}")
            return result
        # the metrics file repeats the latest val/loss in every later row: a validation is where the value changes
        curve: list[tuple[float, float]] = []
        for row in rows:
            if "val/loss" in row and (not curve or row["val/loss"] != curve[-1][1]):
                curve.append((row["step"] * result.flops_per_step, row["val/loss"]))
        result.val_curve = curve
        result.val_loss = result.val_curve[-1][1] if result.val_curve else None
        checkpoint = sorted(where.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        for task in config.downstream:
            if not checkpoint:
                result.errors[task] = "no last.ckpt was written"
                continue
            score = self.finetune if task in DOWNSTREAM else self.probe if task in PROBES else self.prompt
            result.downstream[task] = score(result, task, checkpoint[-1])
        result.seconds = time.time() - start
        return result

    def _report(self, result: RunResult, task: str, kind: str, arguments: list[str]) -> dict | None:
        """Run ``plm_lightning KIND ... --out FILE`` for ``result``'s checkpoint (its log beside the file) and
        return the JSON it wrote (None, with the error recorded, on failure)."""
        where = self.dir / kind / run_name(result.recipe, result.budget, result.seed)
        where.mkdir(parents=True, exist_ok=True)
        out = where / f"{task}.json"
        with open(where / "output.log", "w", encoding="utf-8") as log:
            code = _run_in_process([kind, *arguments, "--out", str(out)], log)
        if code != 0 or not out.is_file():
            result.errors[task] = last_line((where / "output.log").read_text(encoding="utf-8"))
            self.log(f"{result.recipe}: {task} not scored: {result.errors[task]}")
            return None
        return json.loads(out.read_text(encoding="utf-8"))

    def probe(self, result: RunResult, task: str, checkpoint: Path) -> float | None:
        """The LAMA probe of the world's training facts (canonical templates) on ``checkpoint``: macro P@1 at the
        last layer (None on failure)."""
        report = self._report(result, task, "probe", [
            str(checkpoint), "--world", str(self.config.data), "--split", "train", "--templates", "canonical",
            "--reader", "lens", "--objects", "first-token"])
        if report is None:
            return None
        (reader,) = report["readers"]
        score = reader["layers"][-1][PROBES[task]]
        self.log(f"{result.recipe}: {task} P@1 = {score:.4f} over {reader['probes']} facts")
        return score

    def prompt(self, result: RunResult, task: str, checkpoint: Path) -> float | None:
        """The accuracy of ``checkpoint`` prompted on ``task``'s validation split (None when the recipe cannot be
        prompted, e.g. an MLM, or on failure)."""
        report = self._report(result, task, "prompt", [str(checkpoint), "--task", f"offline:{PROMPTS[task]}",
                                                       "--shots", str(self.config.prompt_shots),
                                                       *(["--limit", str(self.config.prompt_limit)]
                                                         if self.config.prompt_limit else [])])
        if report is None:
            return None
        self.log(f"{result.recipe}: {task} accuracy = {report['accuracy']:.4f} ({self.config.prompt_shots}-shot)")
        return report["accuracy"]

    def finetune(self, result: RunResult, task: str, checkpoint: Path, random_init: bool = False) -> float | None:
        """Fine-tune ``checkpoint`` (or, with ``random_init``, its architecture from random weights) on ``task`` for
        the arena's steps with the run's seed; its validation score (None on failure)."""
        steps = self.config.finetune_steps
        label = f"random-init:{task}" if random_init else task
        where = self.dir / "finetune" / run_name(result.recipe, result.budget, result.seed) / label.replace(":", "-")
        code, line, rows = self._fit(
            ["--config", str(Path(self.config.configs_dir) / "finetune" / f"{task}.yaml"),
             f"--model.init_from={checkpoint}", *(["--model.random_init=true"] if random_init else []),
             *seed_args(result.seed, data=False), *self.config.device_args(), f"--trainer.max_steps={steps}",
             "--trainer.max_epochs=-1",
             f"--trainer.val_check_interval={steps}", "--trainer.check_val_every_n_epoch=null"], where)
        metric = DOWNSTREAM[task]
        scores = [row[metric] for row in rows if metric in row]
        if code != 0 or not scores:
            result.errors[label] = line if code != 0 else f"{metric} was never logged"
            self.log(f"{result.recipe}: {label} not scored: {result.errors[label]}")
            return None
        self.log(f"{run_name(result.recipe, result.budget, result.seed)}: {label} {metric} = {scores[-1]:.4f}")
        return scores[-1]


def _run_in_process(argv: list[str], log: TextIO) -> int:
    """``python -m plm_lightning ARGV``'s exit status, run here with its output written to ``log`` (the CLI's
    one-line errors included; any other exception is written as one line too)."""
    from plm_lightning.cli import main

    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            main(argv)
        except SystemExit as done:
            return done.code if isinstance(done.code, int) else int(done.code is not None)
        except Exception as err:  # noqa: BLE001 - recorded as the score's error, the arena goes on
            print(f"{type(err).__name__}: {err}", file=log)
            return 1
    return 0
