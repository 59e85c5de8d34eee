"""Loggers: W&B that falls back to offline mode when there is no key or no network."""

from __future__ import annotations

import os
import socket
from typing import Any

from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger


def wandb_reachable(host: str = "api.wandb.ai", timeout: float = 1.5) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


class WandbLogger(_LightningWandbLogger):
    """Lightning's WandbLogger, offline unless a key is configured and the W&B server is reachable
    (or ``WANDB_MODE`` says otherwise)."""

    def __init__(self, *args: Any, offline: bool | None = None, **kwargs: Any) -> None:
        if offline is None:
            mode = os.environ.get("WANDB_MODE")
            has_key = bool(os.environ.get("WANDB_API_KEY")) or os.path.exists(os.path.expanduser("~/.netrc"))
            offline = mode in ("offline", "dryrun", "disabled") if mode else not (has_key and wandb_reachable())
        super().__init__(*args, offline=offline, **kwargs)
