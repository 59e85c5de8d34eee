"""Checkpoints written atomically: to a temporary file in the same directory, fsynced, then renamed over the
target, so a run killed while saving never leaves a half-written ``last.ckpt``. Loading uses ``weights_only=True``.

The temporary file's name carries the host and process that write it, so the next save in that directory removes
what a killed writer left behind; the checkpoint gets the permissions the user's umask gives any new file; a write
that fails (a full disk) is one line naming the file, and the previous checkpoint stays as it was."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from plm_lightning.errors import ConfigError
from plm_lightning.files import process_alive

STALE_SECONDS = 3600.0
"""A temporary file of unknown writer (an older release's name) is removed once it is this old."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _host() -> str:
    return socket.gethostname().replace(".", "-")


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Delete the temporary files that killed writers of ``target`` left (``.<name>.<host>.<pid>.*.tmp`` of a dead
    process on this host; an older release's ``.<name>.*.tmp`` after :data:`STALE_SECONDS`); returns them. Another
    host's are left alone: whether its writer lives cannot be told from here."""
    host, removed = _host(), []
    for tmp in target.parent.glob(f".{target.name}.*.tmp"):
        parts = tmp.name[len(target.name) + 2:].split(".")  # host, pid, random, "tmp"
        try:
            if len(parts) == 4 and parts[1].isdigit():
                stale = parts[0] == host and not process_alive(int(parts[1]))
            else:
                stale = len(parts) == 2 and time.time() - tmp.stat().st_mtime > STALE_SECONDS
            if stale:
                tmp.unlink()
                removed.append(tmp)
        except FileNotFoundError:
            continue
    return removed


def _os_error(err: BaseException) -> OSError | None:
    """The OSError behind ``err`` (torch wraps a failed write in a RuntimeError), if any."""
    seen = err
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{_host()}.{os.getpid()}.",
                                   suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 -> what the umask gives any new file
            os.replace(tmp, target)
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)
            cause = _os_error(err) if isinstance(err, OSError | RuntimeError) else None
            if cause is not None:
                kept = "the previous checkpoint there is intact" if target.exists() else "nothing was written"
                raise ConfigError(f"checkpoint: could not write '{target}' ({cause.strerror or cause}); {kept}") \
                    from None
            raise

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)
