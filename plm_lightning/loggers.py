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
    (or ``WANDB_MODE`` says otherwise).

    A run's checkpoints and saved config go to ``save_dir/<run id>/``, beside W&B's own ``save_dir/wandb/``: the
    recipes' layout (``runs/<recipe>/<run>/checkpoints``, as the CSV logger's ``version_N``), where Lightning's
    logger puts them under the project's name, away from the recipe (``runs/<project>/<run id>``).
    """

    def __init__(self, *args: Any, offline: bool | None = None, **kwargs: Any) -> None:
        if offline is None:
            mode = os.environ.get("WANDB_MODE")
            has_key = bool(os.environ.get("WANDB_API_KEY")) or os.path.exists(os.path.expanduser("~/.netrc"))
            offline = mode in ("offline", "dryrun", "disabled") if mode else not (has_key and wandb_reachable())
        super().__init__(*args, offline=offline, **kwargs)

    @property
    def name(self) -> str:
        """No name level in the run's directory: Lightning joins ``save_dir``, ``name`` and ``version`` (the run id)
        for checkpoints, and the W&B project is not a directory of the recipe's runs."""
        return ""

    @property
    def log_dir(self) -> str:
        """The run's directory, ``save_dir/<run id>``: its checkpoints, saved config and samples."""
        return os.path.join(self.save_dir or ".", str(self.version))
