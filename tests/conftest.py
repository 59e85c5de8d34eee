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


def masked_batch(batch: int = 3, length: int = 40, vocab: int = 101, mask_prob: float = 0.15, seed: int = 1,
                 pad_from: int | None = 30) -> dict:
    """A small MLM batch in the collators' format: the last row padded from ``pad_from``, ~``mask_prob`` of the real
    tokens (never position 0, the [CLS] slot) replaced by id 4 and labelled with the original id."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if pad_from is not None:
        mask[-1, pad_from:] = 0
        ids[-1, pad_from:] = 0
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < mask_prob) & mask.bool()
    chosen[:, 0] = False
    labels[chosen] = ids[chosen]
    return {"input_ids": ids.masked_fill(chosen, 4), "labels": labels, "attention_mask": mask}
