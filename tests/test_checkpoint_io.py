"""Atomic checkpoint writes: what a killed writer left is removed by the next save, the file gets the umask's
permissions (not mkstemp's 0600), and a full disk is one line naming the file with the previous checkpoint intact."""

import errno
import os
import subprocess
import sys
import time

import pytest
import torch

from plm_lightning.callbacks import checkpoint_io
from plm_lightning.callbacks.checkpoint_io import AtomicCheckpointIO, remove_stale_temporaries
from plm_lightning.errors import ConfigError


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_save_removes_what_killed_writers_left_and_nothing_else(tmp_path):
    target = tmp_path / "last.ckpt"
    host = checkpoint_io._host()
    dead = tmp_path / f".last.ckpt.{host}.{_dead_pid()}.abc123.tmp"
    live = tmp_path / f".last.ckpt.{host}.{os.getpid()}.def456.tmp"  # a writer still at work
    other_host = tmp_path / f".last.ckpt.elsewhere.{_dead_pid()}.ghi789.tmp"
    old_style, young_old_style = tmp_path / ".last.ckpt.k2j3h4.tmp", tmp_path / ".last.ckpt.z9y8x7.tmp"
    other_file = tmp_path / f".best.ckpt.{host}.{_dead_pid()}.abc123.tmp"
    for f in (dead, live, other_host, old_style, young_old_style, other_file):
        f.write_bytes(b"x" * 100)
    hours_ago = time.time() - 2 * checkpoint_io.STALE_SECONDS
    os.utime(old_style, (hours_ago, hours_ago))
    AtomicCheckpointIO().save_checkpoint({"a": torch.ones(2)}, target)
    assert not dead.exists() and not old_style.exists()
    assert live.exists() and other_host.exists() and young_old_style.exists() and other_file.exists()
    assert torch.load(target, weights_only=True)["a"].tolist() == [1.0, 1.0]
    assert remove_stale_temporaries(target) == []


def test_a_checkpoint_gets_the_permissions_of_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        AtomicCheckpointIO().save_checkpoint({"a": torch.ones(1)}, tmp_path / "a.ckpt")
        os.umask(0o027)
        AtomicCheckpointIO().save_checkpoint({"a": torch.ones(1)}, tmp_path / "b.ckpt")
    finally:
        os.umask(old)
    assert (tmp_path / "a.ckpt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.ckpt").stat().st_mode & 0o777 == 0o640


class _FullDisk:
    """A file object whose writes fail with ENOSPC after ``room`` bytes."""

    def __init__(self, f, room: int) -> None:  # noqa: ANN001
        self.f, self.room = f, room

    def write(self, data) -> int:  # noqa: ANN001
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.f.write(data)

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self.f, name)

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.f.close()


def test_a_full_disk_is_one_line_and_the_previous_checkpoint_stays(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": torch.tensor(1)}, target)
    before = target.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(checkpoint_io.os, "fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode), 512))
    with pytest.raises(ConfigError) as err:
        io.save_checkpoint({"step": torch.tensor(2), "big": torch.zeros(10_000)}, target)
    message = str(err.value)
    assert "\n" not in message and str(target) in message and "No space left on device" in message
    assert "previous checkpoint there is intact" in message and err.value.__cause__ is None
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary left behind


@pytest.mark.parametrize("instantiator", ["evil_plm.instantiate_module", "lightning.pytorch.cli.instantiate_module"])
def test_plain_lightning_loading_never_imports_what_a_checkpoint_names(instantiator, tmp_path):
    """``MaskedLM.load_from_checkpoint`` (plain Lightning, no CLI) with a checkpoint naming a module in the working
    directory as its class or instantiator: the module is never imported (Lightning blocks an instantiator off its
    allowlist and a class path that is not an already imported subclass)."""
    from plm_lightning.objectives import MaskedLM

    (tmp_path / "evil_plm.py").write_text("import pathlib\npathlib.Path('IMPORTED').write_text('yes')\n"
                                          "from plm_lightning.objectives import MaskedLM\n"
                                          "from lightning.pytorch.cli import instantiate_module\n")
    module = MaskedLM(backbone="tiny", vocab_size=50)
    ckpt = {"state_dict": module.state_dict(), "pytorch-lightning_version": "2.6.0",
            "hyper_parameters": {**dict(module.hparams), "_class_path": "evil_plm.MaskedLM",
                                 "_instantiator": instantiator}}
    module.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "evil.ckpt")
    code = ("from plm_lightning.objectives import MaskedLM\n"
            "try:\n    MaskedLM.load_from_checkpoint('evil.ckpt')\nexcept ValueError as err:\n    print('blocked', err)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "blocked" in res.stdout and not (tmp_path / "IMPORTED").exists()
