"""Writing a file so that readers (other processes sharing a cache, a resumed run) see it whole or not at all,
whether the writer of a leftover temporary file still runs, where the shared cache lives, and the checks on the
files a user names (text to read, a place to write) that turn a wrong path into one line."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from plm_lightning.errors import ConfigError


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


def read_user_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of the file a user gave for ``what`` (an option, e.g. ``--requests``), or a ConfigError naming
    it: missing, a directory, or not UTF-8."""
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"{what}: '{path}' is a directory; give a UTF-8 text file")
    if not file.is_file():
        raise ConfigError(f"{what}: no such file '{path}'")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what}: '{path}' is not UTF-8 text (byte {err.start}); save it as UTF-8") from err


def writable_path(path: str | os.PathLike, what: str) -> Path:
    """``path``, checked before any work is done: no existing directory above it is in fact a file (``what``: the
    option, e.g. ``--png``); else a ConfigError."""
    out = Path(path)
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what}: '{path}' lies under '{parent}', which is a file, not a directory")
            break
    return out


def os_error_line(err: OSError) -> str | None:
    """The one line for an OSError a user's path causes (a file where a directory must be, a directory where a file
    must be, no permission), or None for the others."""
    where = f"'{err.filename}'" if err.filename else "a path"
    if isinstance(err, NotADirectoryError):
        return f"{where}: a part of this path is a file, not a directory"
    if isinstance(err, FileExistsError):
        return f"{where} already exists and is not a directory"
    if isinstance(err, IsADirectoryError):
        return f"{where} is a directory; a file is needed there"
    if isinstance(err, PermissionError):
        return f"{where}: permission denied"
    return None
