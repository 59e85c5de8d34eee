"""Elastic data order: does a recipe resumed on another number of processes continue the same global sequence of
samples (with the same corruption) from where it stopped?

    python -m benchmarks.elastic_order configs/bert.yaml configs/t5.yaml --workdir /tmp/elastic -- --data.seq_len 64

For each recipe: a reference run of ``--steps`` on one process (global batch ``--global-batch``); then a run on
``first`` processes SIGKILLed after step ``--kill-at`` (checkpoint every ``--every``), resumed from its checkpoint on
``then`` processes (DDP over gloo on CPU, two loader workers on the multi-process legs). The rows each rank trained
on are logged by :class:`plm_lightning.callbacks.BatchLog` (their values: rows padded to the longest of their batch
compare up to padding); the resumed run passes when every step holds the reference's rows, in its global order
(``ordered``) or, where a sample makes several rows (word2vec's pairs), as the same multiset (``multiset``).
Prints one line per recipe and direction, or ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml

from benchmarks.loss_compare import Runner, leg_config, subprocess_runner
from plm_lightning.callbacks.batch_log import Row, compare_steps, global_rows, same_row

ROOT = Path(__file__).resolve().parent.parent
DDP = ["--config", str(ROOT / "configs" / "strategy" / "ddp.yaml")]


def sequence(rows: dict[int, list[Row]]) -> list[Row]:
    return [r for step in sorted(rows) for r in rows[step]]


def run_leg(recipe: Path, args: Sequence[str], directory: Path, world: int, batch: int, steps: int, every: int,
            runner: Runner, kill_at: int | None = None, resume: Path | None = None) -> tuple[int, dict[int, list]]:
    """One run of ``recipe`` on ``world`` processes of ``batch`` rows each; its exit status and logged rows."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"rows-{'resumed' if resume else 'first'}.jsonl"
    config = directory / f"callbacks-{log.stem}.yaml"
    batch_log = {"class_path": "plm_lightning.callbacks.BatchLog", "init_args": {"path": str(log), "rows": "values"}}
    config.write_text(yaml.safe_dump(leg_config(recipe, every, kill_at, extra=[batch_log])))
    layout = [*DDP, "--data.num_workers", "2"] if world > 1 else ["--data.num_workers", "0"]
    full = ["fit", "--config", str(recipe), *args, "--trainer.limit_val_batches", "0", "--trainer.max_steps",
            str(steps), *layout, "--trainer.devices", str(world), "--data.batch_size", str(batch), "--config",
            str(config)]
    if resume is not None:
        full += ["--ckpt_path", str(resume)]
    code = runner(full, directory, {})
    return code, global_rows(sorted(directory.glob(f"{log.stem}*.jsonl")))


@dataclass
class ElasticResult:
    recipe: str
    first: int
    then: int
    resumed_from: int
    compared: int
    order: str
    """``ordered``, ``multiset`` or ``differs`` (:func:`~plm_lightning.callbacks.batch_log.compare_steps`)."""
    distinct: bool

    @property
    def equal(self) -> bool:
        return self.order != "differs"

    def line(self) -> str:
        verdict = {"ordered": "same sequence", "multiset": "same rows per step (order within a step differs)",
                   "differs": "DIFFERS"}[self.order]
        return (f"{self.recipe} {self.first}->{self.then} processes: {verdict} ({self.compared} rows compared, "
                f"resumed from step {self.resumed_from}{'' if self.distinct else ', rows not all distinct'})")


def reference_rows(recipe: Path, args: Sequence[str], workdir: Path, global_batch: int, steps: int, every: int,
                   runner: Runner = subprocess_runner) -> dict[int, list[Row]]:
    code, rows = run_leg(recipe, args, workdir / "reference", 1, global_batch, steps, every, runner)
    if code != 0:
        raise RuntimeError(f"{recipe.stem}: the reference run failed (exit {code})")
    return rows


def elastic(recipe: Path, args: Sequence[str], workdir: Path, first: int, then: int, reference: dict[int, list[Row]],
            global_batch: int = 16, steps: int = 8, every: int = 4, kill_at: int = 6,
            runner: Runner = subprocess_runner, then_batch: int | None = None) -> ElasticResult:
    """Kill on ``first`` processes, resume on ``then`` (``then_batch`` rows each; default: the global batch kept),
    compare with the ``reference`` sequence (one process)."""
    then_batch = global_batch // then if then_batch is None else then_batch
    directory = workdir / f"{first}-to-{then}"
    code, rows = run_leg(recipe, args, directory, first, global_batch // first, steps, every, runner,
                         kill_at=kill_at)
    if code != -9:
        raise RuntimeError(f"{recipe.stem}: the run on {first} processes ended with exit {code}, not SIGKILL")
    last = max(directory.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    resumed_from = torch.load(last, weights_only=True, map_location="cpu")["global_step"]
    code, resumed = run_leg(recipe, args, directory, then, then_batch, steps, every, runner, resume=last)
    if code != 0:
        raise RuntimeError(f"{recipe.stem}: the run resumed on {then} processes failed (exit {code})")
    joined = {**{s: r for s, r in rows.items() if s <= resumed_from}, **resumed}
    if sorted(joined) != list(range(1, steps + 1)):
        order = "differs"
    elif then * then_batch == global_batch:
        order = compare_steps(joined, reference)
    else:  # another global batch: the steps cut the sequence elsewhere, compare it whole
        flat, expected = sequence(joined), sequence(reference)
        order = "ordered" if len(flat) <= len(expected) and all(map(same_row, flat, expected)) else "differs"
    every_row = [json.dumps(r, sort_keys=True) if not isinstance(r, str) else r for r in sequence(reference)]
    return ElasticResult(recipe.stem, first, then, resumed_from, len(sequence(joined)), order,
                         len(set(every_row)) == len(every_row))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipes", nargs="+", type=Path)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--kill-at", type=int, default=6)
    parser.add_argument("--workdir", type=Path, default=Path("elastic_order"))
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(own)
    failed = False
    for recipe in options.recipes:
        recipe = recipe.resolve()
        try:
            reference = reference_rows(recipe, extra, options.workdir / recipe.stem, options.global_batch,
                                       options.steps, options.every)
            results = [elastic(recipe, extra, options.workdir / recipe.stem, a, b, reference, options.global_batch,
                               options.steps, options.every, options.kill_at) for a, b in ((2, 1), (1, 2))]
        except RuntimeError as error:
            print(f"{recipe.stem}: {error}", flush=True)
            failed = True
            continue
        for result in results:
            print(json.dumps({**asdict(result), "equal": result.equal}) if options.json else result.line(), flush=True)
            failed |= not result.equal
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
