"""Writing a file so that readers (other processes sharing a cache, a resumed run) see it whole or not at all,
whether the writer of a leftover temporary file still runs, and where the shared cache lives."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine still runs (a writer whose temporary files must be left alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def default_cache_dir() -> Path:
    """``$PLM_LIGHTNING_CACHE``, else ``~/.cache/plm_lightning``: trained tokenizers, packed blocks, sentence splits,
    co-occurrence counts and key statistics, shared by every run and process."""
    return Path(os.environ.get("PLM_LIGHTNING_CACHE", Path.home() / ".cache" / "plm_lightning"))


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` to a temporary file unique to this call in ``path``'s directory, then rename it to ``path``
    (concurrent writers each rename a complete file; the last one wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp" + "".join(path.suffixes))
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
