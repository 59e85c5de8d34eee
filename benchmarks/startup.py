"""Start-up of the CLI's commands as whole processes, side by side with ``python -c "import lightning"`` (the floor of
anything that trains) and ``python -c pass``, interleaved over several rounds (this machine is shared and noisy).

    python benchmarks/startup.py [--rounds 5]

Commands timed: ``--help``, a mistyped command, ``predict --help``, ``export`` of a tiny GPT-2 checkpoint and
``inspect --json`` of the GPT-2 recipe (its data cached by a first, untimed run). Prints one JSON object: the median
and the spread of each command's wall time in seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands(work: Path) -> dict[str, list[str]]:
    python, cli = sys.executable, [sys.executable, "-m", "plm_lightning"]
    return {
        "python -c pass": [python, "-c", "pass"],
        "import lightning": [python, "-c", "import lightning"],
        "--help": [*cli, "--help"],
        "typo (inpsect)": [*cli, "inpsect"],
        "predict --help": [*cli, "predict", "--help"],
        "export": [*cli, "export", str(work / "gpt2.ckpt"), str(work / "hf")],
        "inspect --json": [*cli, "inspect", "--config", str(ROOT / "configs" / "gpt2.yaml"), "--json"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.conftest import tiny_pretrained

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny_pretrained(work / "gpt2.ckpt", "gpt2")
        commands = _commands(work)
        subprocess.run(commands["inspect --json"], capture_output=True, check=True)  # builds the data cache
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, command in commands.items():
                start = time.perf_counter()
                subprocess.run(command, capture_output=True, cwd=work)
                times[name].append(time.perf_counter() - start)
    print(json.dumps({name: {"median_s": round(statistics.median(t), 2), "min_s": round(min(t), 2),
                             "max_s": round(max(t), 2)} for name, t in times.items()}, indent=1))


if __name__ == "__main__":
    main()
