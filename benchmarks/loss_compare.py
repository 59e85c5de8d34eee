"""Loss compare across a kill: N training steps straight, and the same N steps with a SIGKILL at a step chosen at
random followed by ``--ckpt_path last``; the two must agree bitwise in every step's loss, the final weights, the
optimizer state and the learning-rate schedule (torchtitan's ``loss_compare.py --assert-equal`` check, Megatron's
resume goldens).

    python -m benchmarks.loss_compare configs/bert.yaml --steps 12 --every 4 -- --data.num_workers 2

Both legs run the recipe with its own callbacks, their ``ModelCheckpoint`` every ``--every`` steps (the interval a
resume falls back to) and a :class:`plm_lightning.callbacks.SigkillAtStep` in the killed leg, at a step that is not a
checkpoint step (so the resume repeats the steps since the last checkpoint). Every step's loss is read from the
metrics file (``PLM_LIGHTNING_METRICS_FILE``: JSON floats, exact). Prints one line per recipe, or ``--json``."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CALLBACKS = ROOT / "plm_lightning" / "callbacks" / "default.yaml"
KILLER = "plm_lightning.callbacks.SigkillAtStep"

Runner = Callable[[list[str], Path, dict[str, str]], int]
"""Runs ``python -m plm_lightning ARGS`` in a directory with extra environment variables; returns the exit status
(negative: killed by that signal)."""


def subprocess_runner(args: list[str], cwd: Path, env: dict[str, str]) -> int:
    full = {**os.environ, "PYTHONWARNINGS": "ignore", **env}
    done = subprocess.run([sys.executable, "-m", "plm_lightning", *args], cwd=cwd, env=full,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode > 0:
        sys.stderr.write(done.stderr[-3000:])
    return done.returncode


def recipe_callbacks(recipe: Path) -> list[dict]:
    """The callbacks a run of ``recipe`` gets: its own ``trainer.callbacks``, else the CLI's defaults."""
    own = (yaml.safe_load(recipe.read_text()) or {}).get("trainer", {}).get("callbacks")
    if own is not None:
        return own
    return yaml.safe_load(DEFAULT_CALLBACKS.read_text())["trainer"]["callbacks"]


def leg_config(recipe: Path, every: int, kill_at: int | None, extra: Sequence[dict] = ()) -> dict:
    """The recipe's callbacks with every ModelCheckpoint saving ``last.ckpt`` each ``every`` steps, plus ``extra``
    callbacks and the killer (last)."""
    callbacks = []
    for callback in recipe_callbacks(recipe):
        callback = json.loads(json.dumps(callback))
        if callback["class_path"].endswith("ModelCheckpoint"):
            callback.setdefault("init_args", {}).update(every_n_train_steps=every, save_last=True)
        callbacks.append(callback)
    callbacks += list(extra)
    if kill_at is not None:
        callbacks.append({"class_path": KILLER, "init_args": {"step": kill_at}})
    return {"trainer": {"callbacks": callbacks}}


@dataclass
class Comparison:
    """What the two legs showed: the kill step, the checkpoint the resume started from, and the largest differences
    (0.0 everywhere: bitwise)."""

    recipe: str
    steps: int
    kill_at: int
    resumed_from: int
    losses_compared: int
    loss: float
    weights: float
    optimizer: float
    schedule: bool
    mismatched_steps: list[int] = field(default_factory=list)

    @property
    def bitwise(self) -> bool:
        return self.losses_compared == self.steps and self.loss == self.weights == self.optimizer == 0.0 \
            and self.schedule

    def within(self, tolerance: float) -> bool:
        return self.losses_compared == self.steps and max(self.loss, self.weights, self.optimizer) <= tolerance \
            and self.schedule

    def line(self) -> str:
        verdict = "bitwise" if self.bitwise else "DIFFERS"
        return (f"{self.recipe}: {verdict} - killed after step {self.kill_at}, resumed from step {self.resumed_from}, "
                f"{self.losses_compared}/{self.steps} losses compared, max |d loss| {self.loss:.3g}, "
                f"|d weight| {self.weights:.3g}, |d optimizer| {self.optimizer:.3g}, schedule "
                f"{'equal' if self.schedule else 'differs'}")


def step_losses(path: Path, name: str = "train/loss") -> dict[int, float]:
    """``{step: loss}`` from a metrics file (the first row of a step: a resumed leg appends its own rows)."""
    losses: dict[int, float] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if name in row:
                    losses.setdefault(int(row["step"]), row[name])
    return losses


def max_difference(a: object, b: object) -> float:
    """Largest absolute difference between two nested checkpoint values (tensors, numbers, dicts, lists); inf where
    their structure, shapes or dtypes differ."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape \
                or a.dtype != b.dtype:
            return float("inf")
        if a.numel() == 0 or not (a.is_floating_point() or a.is_complex()):
            return 0.0 if torch.equal(a, b) else float("inf")
        return float((a.double() - b.double()).abs().max())
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return float("inf")
        return max((max_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return float("inf")
        return max((max_difference(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return abs(float(a) - float(b))
    return 0.0 if a == b else float("inf")


def final_checkpoint(leg: Path, steps: int) -> dict:
    found = sorted(leg.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"{leg}: no last.ckpt was written")
    state = torch.load(found[-1], weights_only=True, map_location="cpu")
    if state["global_step"] != steps:
        raise RuntimeError(f"{found[-1]}: ends at step {state['global_step']}, not {steps}")
    return state


def compare(recipe: Path, args: Sequence[str], workdir: Path, steps: int = 12, every: int = 4,
            kill_at: int | None = None, seed: int = 0, runner: Runner = subprocess_runner,
            check_unused: bool = True) -> Comparison:
    """Run both legs of ``recipe`` (with the extra CLI ``args``) under ``workdir`` and compare them;
    ``check_unused``: the straight leg also stops on a parameter no loss reaches (``UnusedParameters``: what
    DDP would stop on)."""
    if steps % every or steps <= every:
        raise ValueError(f"--steps {steps} must be a multiple of --every {every}, and larger")
    choices = [s for s in range(every + 1, steps) if s % every]
    kill_at = random.Random(seed).choice(choices) if kill_at is None else kill_at
    if kill_at not in choices:
        raise ValueError(f"kill step {kill_at}: choose one between checkpoints, in {choices}")
    common = ["fit", "--config", str(recipe), "--trainer.max_steps", str(steps), "--trainer.log_every_n_steps", "1",
              *args]
    legs = {}
    for name, kill in (("straight", None), ("killed", kill_at)):
        leg = workdir / name
        leg.mkdir(parents=True, exist_ok=True)
        config = leg / "loss_compare.yaml"
        unused = [{"class_path": "plm_lightning.callbacks.UnusedParameters"}] if check_unused and kill is None else []
        config.write_text(yaml.safe_dump(leg_config(recipe, every, kill, extra=unused)))
        metrics = leg / "metrics.jsonl"
        env = {"PLM_LIGHTNING_METRICS_FILE": str(metrics)}
        code = runner([*common, "--config", str(config)], leg, env)
        if kill is None and code != 0:
            raise RuntimeError(f"{recipe.stem}: the straight run failed (exit {code})")
        if kill is not None:
            if code != -9:
                raise RuntimeError(f"{recipe.stem}: the killed run ended with exit {code}, not SIGKILL")
            killed = step_losses(metrics)
            resumed_from = torch.load(max(leg.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime),
                                      weights_only=True, map_location="cpu")["global_step"]
            config.write_text(yaml.safe_dump(leg_config(recipe, every, None)))
            env = {"PLM_LIGHTNING_METRICS_FILE": str(leg / "resumed.jsonl")}
            code = runner([*common, "--config", str(config), "--ckpt_path", "last"], leg, env)
            if code != 0:
                raise RuntimeError(f"{recipe.stem}: the resumed run failed (exit {code})")
            resumed = step_losses(leg / "resumed.jsonl")
            losses = {s: v for s, v in killed.items() if s <= resumed_from} | resumed
        else:
            losses = step_losses(metrics)
        legs[name] = (losses, final_checkpoint(leg, steps))
    (straight, a), (killed, b) = legs["straight"], legs["killed"]
    common_steps = sorted(set(straight) & set(killed))
    mismatched = [s for s in common_steps if straight[s] != killed[s]]
    return Comparison(
        recipe=recipe.stem, steps=steps, kill_at=kill_at, resumed_from=resumed_from,
        losses_compared=len(common_steps),
        loss=max((abs(straight[s] - killed[s]) for s in common_steps), default=float("inf")),
        weights=max_difference(a["state_dict"], b["state_dict"]),
        optimizer=max_difference(a["optimizer_states"], b["optimizer_states"]),
        schedule=max_difference(a.get("lr_schedulers"), b.get("lr_schedulers")) == 0.0,
        mismatched_steps=mismatched)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="+", type=Path, help="recipe YAMLs (configs/<recipe>.yaml)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=4, help="checkpoint interval (steps)")
    parser.add_argument("--kill-at", type=int, default=None, help="default: a random step between checkpoints")
    parser.add_argument("--seed", type=int, default=0, help="picks the kill step")
    parser.add_argument("--workdir", type=Path, default=Path("loss_compare"))
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(own)
    failed = False
    for recipe in options.recipes:
        result = compare(recipe.resolve(), extra, options.workdir / recipe.stem, options.steps, options.every,
                         options.kill_at, options.seed)
        print(json.dumps(asdict(result)) if options.json else result.line(), flush=True)
        failed |= not result.bitwise
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
