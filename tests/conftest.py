import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tokenizer/packing cache for the whole session: the embedded corpus is tokenized once."""
    cache = tmp_path_factory.mktemp("plm_cache")
    os.environ["PLM_LIGHTNING_CACHE"] = str(cache)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    return cache


def run_cli(args: list[str], cwd: Path, timeout: int = 600, env: dict | None = None):
    """Run ``python -m plm_lightning ARGS`` in a subprocess, as a user would."""
    import subprocess

    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([sys.executable, "-m", "plm_lightning", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)
