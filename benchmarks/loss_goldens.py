"""Loss goldens across a refactor: record every step's training loss of some recipes (Megatron's "goldens"), then
check a later tree against the record, bitwise or within a tolerance.

    python -m benchmarks.loss_goldens record configs/bert.yaml configs/glm.yaml --out goldens.json -- --data.seq_len 64
    (change the code)
    python -m benchmarks.loss_goldens check goldens.json

``record`` runs ``fit`` for ``--steps`` steps per recipe (the CLI arguments after ``--`` go to every run and are
kept in the file, so ``check`` repeats the same runs) and writes ``{recipe: {step: loss}}``; losses are read from
the exact JSON metrics file (``PLM_LIGHTNING_METRICS_FILE``). ``check`` prints one line per recipe with its largest
difference and exits 1 when one is over ``--tolerance`` (default 0: bitwise)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.loss_compare import step_losses, subprocess_runner


def run_losses(recipe: Path, args: Sequence[str], steps: int, workdir: Path) -> dict[int, float]:
    """``{step: loss}`` of ``steps`` training steps of ``recipe``."""
    workdir.mkdir(parents=True, exist_ok=True)
    metrics = workdir / "metrics.jsonl"
    code = subprocess_runner(["fit", "--config", str(recipe), "--trainer.max_steps", str(steps),
                              "--trainer.log_every_n_steps", "1", *args], workdir, {"PLM_LIGHTNING_METRICS_FILE": str(metrics)})
    if code != 0:
        raise RuntimeError(f"{recipe.stem}: the run failed (exit {code})")
    return step_losses(metrics)


def record(recipes: Sequence[Path], args: Sequence[str], steps: int, out: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        losses = {str(r.resolve()): run_losses(r.resolve(), args, steps, Path(tmp) / r.stem) for r in recipes}
    golden = {"args": list(args), "steps": steps, "losses": losses}
    out.write_text(json.dumps(golden, indent=1))
    return golden


def check(golden: dict, tolerance: float = 0.0) -> list[tuple[str, float, int]]:
    """(recipe, largest |difference|, steps compared) per recipe of ``golden``."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe, want in golden["losses"].items():
            got = run_losses(Path(recipe), golden["args"], golden["steps"], Path(tmp) / Path(recipe).stem)
            want = {int(s): v for s, v in want.items()}
            same = sorted(set(want) & set(got))
            worst = max((abs(want[s] - got[s]) for s in same), default=float("inf")) if same == sorted(want) \
                else float("inf")
            rows.append((Path(recipe).stem, worst, len(same)))
    return rows


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("recipes", nargs="+", type=Path)
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--steps", type=int, default=8)
    chk = sub.add_parser("check")
    chk.add_argument("golden", type=Path)
    chk.add_argument("--tolerance", type=float, default=0.0)
    options = parser.parse_args(own)
    if options.command == "record":
        golden = record(options.recipes, extra, options.steps, options.out)
        for recipe, losses in golden["losses"].items():
            print(f"{Path(recipe).stem}: {len(losses)} steps, last loss {losses[max(losses)]!r}")
        return
    rows = check(json.loads(options.golden.read_text()), options.tolerance)
    failed = False
    for name, worst, count in rows:
        ok = worst <= options.tolerance
        failed |= not ok
        print(f"{name}: {count} steps, max |loss difference| {worst:.3g} {'ok' if ok else 'DIFFERS'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
