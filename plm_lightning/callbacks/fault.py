"""Fault injection for resume tests: a run that SIGKILLs itself at a chosen training step, the way torchtitan's and
Megatron's resume checks cut a run (a real kill, no clean-up: open files, worker processes and the checkpoint
being written are left as a crash leaves them)."""

from __future__ import annotations

import os
import signal

import lightning as L


class SigkillAtStep(L.Callback):
    """Sends SIGKILL to this process after training step ``step`` (``trainer.global_step == step``), before the
    checkpoint callbacks of that step run (Lightning runs them last): the newest checkpoint is the one written at an
    earlier step, so a resume repeats the steps between it and the kill."""

    def __init__(self, step: int) -> None:
        if step < 1:
            raise ValueError(f"SigkillAtStep: step={step} must be >= 1")
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)
