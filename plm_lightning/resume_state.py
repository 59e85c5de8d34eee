"""What a resume needs beyond Lightning's own checkpoint: the global RNG (dropout, ELMo's and CoVe's LSTMs,
negative sampling in the model), and the training loader's mid-epoch position when the learning-rate schedule read
``trainer.estimated_stepping_batches`` before the checkpoint was restored. Shared by the pretraining objectives,
the static-embedding models and the fine-tuning modules, so every recipe resumes bitwise."""

from __future__ import annotations

from typing import Any

import torch


def rng_state() -> dict[str, Any]:
    """The global torch RNG (and CUDA's, where it is in use), for the checkpoint."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any] | None) -> None:
    """Set the RNG a checkpoint recorded with :func:`rng_state` (nothing for a checkpoint without one)."""
    state = state or {}
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def restore_data_position(trainer: Any) -> None:
    """Hand the checkpoint's loader state (epoch, batches consumed) to the training loader.

    Lightning gives it in ``fit_loop.setup_data``; but a schedule that reads ``trainer.estimated_stepping_batches`` in
    ``configure_optimizers`` with ``max_epochs`` set makes Lightning build the loader *before* the checkpoint is
    restored, and the later ``setup_data`` returns early: the state would never arrive and a run resumed mid-epoch
    would start its epoch over. Called from ``on_train_start`` (after the restore, before the epoch's first batch);
    a no-op when the state was already given or the run is not resuming."""
    if trainer is None:
        return
    load = getattr(trainer.fit_loop, "_load_combined_loader_states", None)
    if load is None:  # pragma: no cover - a Lightning without the hook: the resume tests say so
        raise RuntimeError("this Lightning release has no fit_loop._load_combined_loader_states; "
                           "plm_lightning cannot restore the loader position on resume")
    load()


class ResumeHooks:
    """``on_train_start``: :func:`restore_data_position` (mixed into every LightningModule of the package)."""

    def on_train_start(self) -> None:
        restore_data_position(self._trainer)
