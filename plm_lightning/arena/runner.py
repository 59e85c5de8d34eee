"""The objective arena's runs: every recipe at one backbone size and one training-FLOPs budget, on the same data,
then fine-tuned on the same downstream tasks.

FLOPs are counted per objective, by the same analytic count the throughput/MFU callback reports
(:func:`plm_lightning.nn.flops.training_flops` through each objective's ``_set_flops``): ELECTRA's generator and
discriminator, both stacks of an encoder-decoder (the decoder over its own target length), XLNet's two streams,
the LM head only at the positions that carry loss. A recipe's steps are ``ceil(budget / FLOPs per step)``, the
FLOPs per step measured on the recipe's own batches at the arena's size. Each pretraining and fine-tuning run is a
subprocess of the CLI (``fit --config ...``), so a run is exactly what a user would get; the scoring commands that
train nothing (``probe``, ``prompt``) run the same CLI entry point in this process, their output in their log, which
saves an interpreter start (~10 s) per score. Results are written one JSON per (recipe, budget, seed), atomically,
and a re-run skips the finished ones.

Each run is one job of an executor (:mod:`plm_lightning.arena.executor`: submitit's local processes, SLURM jobs, or
this process), so runs go out in parallel on one machine or a cluster; a run's lock file keeps a second job of the
same run (an orphan of a killed arena still running, a resubmission) from training it twice.
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
from typing import TextIO

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
from plm_lightning.arena.executor import Call, ExecutorSettings, run_calls
from plm_lightning.arena.measure import measure_recipe
from plm_lightning.callbacks.metrics_file import METRICS_FILE_ENV, read_metrics
from plm_lightning.errors import ConfigError, last_line


class Arena:
    """Runs the arena in ``directory`` (``results/<recipe>@<budget>.json``, ``runs/``, ``finetune/``, ``jobs/``)."""

    def __init__(self, config: ArenaConfig, directory: str | Path, log: Callable[[str], None] = print,
                 check: bool = True) -> None:
        """``check``: compare ``config`` with the arena saved in ``directory`` and save it (a job, which runs inside
        an arena its driver checked, skips that)."""
        self.config, self.dir, self.log = config, Path(directory), log
        (self.dir / "results").mkdir(parents=True, exist_ok=True)
        if not check:
            return
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
        tmp = saved.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(shape, indent=1), encoding="utf-8")
        tmp.replace(saved)

    def result_path(self, recipe: str, budget: float, seed: int = 0) -> Path:
        return self.dir / "results" / f"{run_name(recipe, budget, seed)}.json"

    def keys(self) -> list[tuple[str, float, int]]:
        """Every (recipe, budget, seed), seed by seed and budget by budget: an interrupted arena has whole seeds."""
        return [(recipe, budget, seed) for seed in range(self.config.seeds) for budget in self.config.budgets
                for recipe in self.config.recipes]

    def load(self, recipe: str, budget: float, seed: int) -> RunResult | None:
        path = self.result_path(recipe, budget, seed)
        return RunResult(**json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None

    def finished(self, result: RunResult | None) -> bool:
        """Whether a saved run has every score it owes (tasks added since, random-init scores, count against it)."""
        return result is not None and not self.missing_tasks(result) and not self.random_init_missing(result)

    def missing_tasks(self, result: RunResult) -> list[str]:
        return [t for t in self.config.tasks_for(result.recipe) if t not in result.downstream]

    def saved(self) -> list[RunResult]:
        """The results saved so far, in run order (nothing is trained)."""
        return [r for r in (self.load(*key) for key in self.keys()) if r is not None]

    def run(self, settings: ExecutorSettings | None = None) -> list[RunResult]:
        """Every run not finished yet, sent to ``settings``' executor (default: one local job at a time); a finished
        run is skipped, so a killed arena run again trains only what is missing. ``results.csv`` is rewritten as
        each run ends."""
        from plm_lightning.arena.report import write_results_csv
        from plm_lightning.progress import progress_bar

        settings = settings or ExecutorSettings()
        todo = []
        for key in self.keys():
            if self.finished(self.load(*key)):
                self.log(f"{run_name(*key)}: done earlier ({self.result_path(*key)})")
            else:
                todo.append(Call(run_name(*key), run_job, (self.config, str(self.dir), *key, settings.threads(),
                                                           settings.kind)))
        advance, ended = progress_bar(len(todo), "arena runs"), []

        def done(call: Call, result: RunResult | None, error: BaseException | None) -> None:
            if error is not None:
                self.log(f"{call.name}: the job failed: {last_line(str(error)) or type(error).__name__}")
            elif result is not None and "pretraining" in result.errors:
                self.log(f"{call.name}: pretraining failed: {result.errors['pretraining']}")
            else:
                self.log(f"{call.name}: finished in {result.seconds:.0f} s")
            ended.append(call.name)
            self.log(f"{len(ended)} of {len(todo)} runs ended")
            advance()
            write_results_csv(self.saved(), self.config, self.dir / "results.csv")

        if todo:
            run_calls(todo, settings, self.dir / "jobs", done, self.log)
        return self.saved()

    def run_or_load(self, recipe: str, budget: float, seed: int, job: str = "") -> RunResult:
        """The run's saved result, completed with what it still owes, or the run itself; saved atomically. One run
        at a time holds its lock: a second job of the same run (an orphan of a killed arena, a resubmission) waits
        and then finds it done."""
        import filelock

        path = self.result_path(recipe, budget, seed)
        with filelock.FileLock(str(path.with_suffix(".lock"))):
            result = self.load(recipe, budget, seed)
            if self.finished(result):
                self.log(f"{run_name(recipe, budget, seed)}: done earlier ({path})")
                return result
            start, earlier = time.time(), 0.0
            if result is None:
                result = self.run_one(recipe, budget, seed)
                result.job = job
                if "pretraining" in result.errors:  # not kept: the next run tries again
                    return result
            else:  # tasks added since this run: scored from its checkpoint, its pretraining kept
                earlier, result.started = result.seconds, result.started or start
                missing = self.missing_tasks(result)
                if missing:
                    self.log(f"{run_name(recipe, budget, seed)}: done earlier; scoring the added {', '.join(missing)}")
                    self.score(result, missing)
            self.random_init_scores(result)
            result.finished = time.time()
            result.seconds = earlier + result.finished - start
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
            tmp.replace(path)
            return result

    def random_init_missing(self, result: RunResult) -> list[str]:
        """The tasks ``result`` still needs a random-initialisation score for: none unless its recipe is one of
        ``--random-init`` and it is a run of the smallest budget (random weights are the same at every budget, so
        one run per seed measures them)."""
        if result.recipe not in self.config.random_init or result.budget != min(self.config.budgets):
            return []
        return [t for t in self.config.tasks_for(result.recipe) if t not in result.random_init]

    def random_init_scores(self, result: RunResult) -> None:
        """Each task not scored yet from random weights of ``result``'s architecture and tokenizer (its checkpoint
        gives them): fine-tuned from them, or probed and prompted with a checkpoint of freshly initialised weights
        (seeded by the run's seed)."""
        missing = self.random_init_missing(result)
        checkpoint = self.checkpoint(result)
        for task in missing:
            if checkpoint is None:
                result.random_init[task] = None
            elif task in DOWNSTREAM:
                result.random_init[task] = self.finetune(result, task, checkpoint, random_init=True)
            else:
                scratch = random_weights_checkpoint(checkpoint, checkpoint.parent / "random-init.ckpt", result.seed)
                score = self.probe if task in PROBES else self.prompt
                result.random_init[task] = score(result, task, scratch, label=f"random-init-{task}")

    def checkpoint(self, result: RunResult) -> Path | None:
        where = self.dir / "runs" / run_name(result.recipe, result.budget, result.seed)
        found = sorted(where.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

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
                           statistics=measured["statistics"], seconds_per_step=measured["seconds_per_step"],
                           started=start)
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
        self.score(result, config.tasks_for(recipe))
        result.seconds = time.time() - start
        return result

    def score(self, result: RunResult, tasks: Sequence[str]) -> None:
        """Fine-tune, probe or prompt ``result``'s last checkpoint on each of ``tasks`` (None where it fails, the
        reason in ``result.errors``)."""
        checkpoint = self.checkpoint(result)
        for task in tasks:
            if checkpoint is None:
                result.downstream[task] = None
                result.errors[task] = "no last.ckpt was written"
                continue
            score = self.finetune if task in DOWNSTREAM else self.probe if task in PROBES else self.prompt
            result.downstream[task] = score(result, task, checkpoint)

    def _report(self, result: RunResult, label: str, kind: str, arguments: list[str]) -> dict | None:
        """Run ``plm_lightning KIND ... --out FILE`` for ``result``'s checkpoint (its log beside the file) and
        return the JSON it wrote (None, with the error recorded under ``label``, on failure)."""
        where = self.dir / kind / run_name(result.recipe, result.budget, result.seed)
        where.mkdir(parents=True, exist_ok=True)
        out = where / f"{label}.json"
        log_file = where / f"{label}.log"
        with open(log_file, "w", encoding="utf-8") as log:
            code = _run_in_process([kind, *arguments, "--out", str(out)], log)
        if code != 0 or not out.is_file():
            result.errors[label] = last_line(log_file.read_text(encoding="utf-8"))
            self.log(f"{result.recipe}: {label} not scored: {result.errors[label]}")
            return None
        return json.loads(out.read_text(encoding="utf-8"))

    def probe(self, result: RunResult, task: str, checkpoint: Path, label: str | None = None) -> float | None:
        """The LAMA probe of the world's training facts (canonical templates) on ``checkpoint``: macro P@1 at the
        last layer (None on failure)."""
        report = self._report(result, label or task, "probe", [
            str(checkpoint), "--world", str(self.config.data), "--split", "train", "--templates", "canonical",
            "--reader", "lens", "--objects", "first-token"])
        if report is None:
            return None
        (reader,) = report["readers"]
        score = reader["layers"][-1][PROBES[task]]
        self.log(f"{run_name(result.recipe, result.budget, result.seed)}: {label or task} P@1 = {score:.4f} over "
                 f"{reader['probes']} facts")
        return score

    def prompt(self, result: RunResult, task: str, checkpoint: Path, label: str | None = None) -> float | None:
        """The accuracy of ``checkpoint`` prompted on ``task``'s validation split (None on failure)."""
        report = self._report(result, label or task, "prompt", [
            str(checkpoint), "--task", self.config.prompt_task(task), "--shots", str(self.config.prompt_shots),
            "--normalize", self.config.prompt_normalize,
            *(["--limit", str(self.config.prompt_limit)] if self.config.prompt_limit else [])])
        if report is None:
            return None
        self.log(f"{run_name(result.recipe, result.budget, result.seed)}: {label or task} accuracy = "
                 f"{report['accuracy']:.4f} ({self.config.prompt_shots}-shot)")
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
             *self.config.finetune_args(task), *seed_args(result.seed, data=False), *self.config.device_args(),
             f"--trainer.max_steps={steps}", "--trainer.max_epochs=-1",
             f"--trainer.val_check_interval={steps}", "--trainer.check_val_every_n_epoch=null"], where)
        metric = DOWNSTREAM[task]
        scores = [row[metric] for row in rows if metric in row]
        if code != 0 or not scores:
            result.errors[label] = line if code != 0 else f"{metric} was never logged"
            self.log(f"{result.recipe}: {label} not scored: {result.errors[label]}")
            return None
        self.log(f"{run_name(result.recipe, result.budget, result.seed)}: {label} {metric} = {scores[-1]:.4f}")
        return scores[-1]


def run_job(config: ArenaConfig, directory: str, recipe: str, budget: float, seed: int, threads: int,
            executor: str = "local") -> RunResult:
    """One arena run as a job (what the executor pickles and calls): pretraining and scoring with ``threads``
    PyTorch threads here and in its ``fit`` processes (0: the job's SLURM CPUs), its log lines on this job's
    stderr."""
    import torch

    if executor != "debug":  # the debug executor runs in the driver's process: its threads are the user's
        threads = threads or int(os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or str(os.getpid())
    arena = Arena(config, directory, log=lambda m: print(m, file=sys.stderr, flush=True), check=False)
    return arena.run_or_load(recipe, budget, seed, job=f"{executor}:{job}")


def random_weights_checkpoint(checkpoint: Path, out: Path, seed: int) -> Path:
    """``checkpoint`` with its weights drawn afresh (the objective's own initialisation, seeded by ``seed``): the
    same architecture, tokenizer and settings with no pretraining, for the scores that read a checkpoint as it is
    (probes, prompts). Written once, atomically."""
    if out.is_file():
        return out
    import torch

    from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO
    from plm_lightning.nn import init_weights
    from plm_lightning.objectives.loading import load_pretrained

    module, _ = load_pretrained(checkpoint)
    torch.manual_seed(seed)
    init_weights(module, module.config)
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    saved["state_dict"] = module.state_dict()
    AtomicCheckpointIO().save_checkpoint(saved, out)
    return out


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
