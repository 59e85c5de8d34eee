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
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TextIO

import lightning as L

from plm_lightning.arena.config import (  # noqa: F401 - re-exported: the arena's names, importable here too
    DEFAULT_RECIPES,
    DOWNSTREAM,
    PROBES,
    PROMPTS,
    ArenaConfig,
    RunResult,
    recipe_variant,
    run_name,
    seed_args,
    split_recipes,
)
from plm_lightning.callbacks.metrics_file import METRICS_FILE_ENV, read_metrics
from plm_lightning.errors import ConfigError, last_line


def measure_recipe(config: ArenaConfig, recipe: str, steps: int = 3) -> dict[str, Any]:
    """FLOPs per training step (the mean over ``steps`` real training steps at the arena's shape, as the objective
    counts them for the MFU callback), the objective, its parameter count and its corruption statistics."""
    from plm_lightning.inspection import corruption_statistics
    from plm_lightning.objectives.base import PretrainingModule
    from plm_lightning.recipe_cli import build_recipe as build_datamodule

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
        free = ("recipes", "budgets", "seeds", "random_init", "downstream")  # may grow between runs of one arena
        shape = {k: v for k, v in asdict(config).items() if k not in free}
        saved = self.dir / "arena.json"
        defaults = {f.name: f.default for f in fields(ArenaConfig) if f.name not in free}
        before = {k: v for k, v in json.loads(saved.read_text(encoding="utf-8")).items() if k not in free} \
            if saved.is_file() else None  # an arena saved before a key was free kept it in the file
        if before is not None and {**json.loads(json.dumps(defaults)), **before} != json.loads(json.dumps(shape)):
            # a key added since that arena was run has its default there
            raise ConfigError(f"arena: {self.dir} holds an arena of another size, data shape or downstream setting "
                              f"(see {saved}); give another --dir (recipes, budgets, seeds and downstream tasks may "
                              "be added)")
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
        missing = [] if result is None else [t for t in self.config.downstream if t not in result.downstream]
        if result is not None and not missing and not self.random_init_missing(result):
            self.log(f"{run_name(recipe, budget, seed)}: done earlier ({path})")
            return result
        if result is None:
            result = self.run_one(recipe, budget, seed)
            if "pretraining" in result.errors:  # not kept: the next run tries again
                return result
        start = time.time()
        if missing:  # tasks added since this run: scored from its checkpoint, its pretraining kept
            self.log(f"{run_name(recipe, budget, seed)}: done earlier; scoring the added {', '.join(missing)}")
            self.score(result, missing)
        self.random_init_scores(result)
        result.seconds += time.time() - start
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
        tmp.replace(path)
        return result

    def random_init_missing(self, result: RunResult) -> list[str]:
        """The fine-tuning tasks ``result`` still needs a random-initialisation score for (none unless its recipe
        is one of ``--random-init``)."""
        if result.recipe not in self.config.random_init:
            return []
        return [t for t in self.config.downstream if t in DOWNSTREAM and t not in result.random_init]

    def random_init_scores(self, result: RunResult) -> None:
        """The fine-tuning tasks again, from random weights of ``result``'s architecture (its checkpoint gives the
        architecture and tokenizer only), for each task not scored yet."""
        where = self.dir / "runs" / run_name(result.recipe, result.budget, result.seed)
        checkpoint = sorted(where.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        for task in self.random_init_missing(result):
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
        self.score(result, config.downstream)
        result.seconds = time.time() - start
        return result

    def score(self, result: RunResult, tasks: Sequence[str]) -> None:
        """Fine-tune, probe or prompt ``result``'s last checkpoint on each of ``tasks`` (None where it fails, the
        reason in ``result.errors``)."""
        where = self.dir / "runs" / run_name(result.recipe, result.budget, result.seed)
        checkpoint = sorted(where.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        for task in tasks:
            if not checkpoint:
                result.downstream[task] = None
                result.errors[task] = "no last.ckpt was written"
                continue
            score = self.finetune if task in DOWNSTREAM else self.probe if task in PROBES else self.prompt
            result.downstream[task] = score(result, task, checkpoint[-1])

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
                                                       "--normalize", self.config.prompt_normalize,
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
    """The exit status of the scoring command ``ARGV`` (``probe`` or ``prompt``), called here as the function the CLI
    dispatches to, its output written to ``log``; a bad input is its one line, any other exception one line too."""
    from plm_lightning.evaluation.commands import run_prompt
    from plm_lightning.knowledge.commands import run_probe

    command = {"probe": run_probe, "prompt": run_prompt}[argv[0]]
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            command(argv[1:])
        except SystemExit as done:
            return done.code if isinstance(done.code, int) else int(done.code is not None)
        except ConfigError as err:
            print(f"plm_lightning: error: {err}", file=log)
            return 2
        except Exception as err:  # noqa: BLE001 - recorded as the score's error, the arena goes on
            print(f"{type(err).__name__}: {err}", file=log)
            return 1
    return 0
