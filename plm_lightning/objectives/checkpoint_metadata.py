"""What an objective writes into and checks in its checkpoints: the recipe, backbone, tokenizer, token counters,
transformers family and RNG state (``CHECKPOINT_KEY``), and the optimizer state renumbered by module order so that a
checkpoint resumes under any parallel layout."""

from __future__ import annotations

from typing import Any

import torch

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.errors import ConfigError
from plm_lightning.objectives import scale
from plm_lightning.resume_state import ResumeHooks, restore_rng, rng_state


class CheckpointHooks(ResumeHooks):
    """The checkpoint hooks and identity of ``PretrainingModule``."""

    @property
    def objective_name(self) -> str:
        """The recipe's class name, as checkpoints record it. FSDP2's ``fully_shard`` swaps the root module's class
        for ``FSDP<Name>``, a subclass of both ``FSDPModule`` and the recipe's class; the name is that of the first
        class in the MRO that is not an ``FSDPModule``, so a sharded run's checkpoint resumes and exports like any
        other."""
        if not torch.distributed.is_available():
            return type(self).__name__
        from torch.distributed.fsdp import FSDPModule

        return next(c for c in type(self).__mro__ if not issubclass(c, FSDPModule)).__name__

    @property
    def transformers_family(self) -> str | None:
        """The transformers family ``export`` writes this model as, decided once (from the checkpoint it continues,
        else from what the recipe computes) and recorded in every checkpoint; None when no family holds it."""
        family = getattr(self, "_transformers_family", None)
        if family is None:
            from plm_lightning.interop.hf import family_of

            try:
                family = family_of(self.config, self.objective_name, getattr(self, "sentence_prediction", "none"))
            except ConfigError:
                return None
            self._transformers_family = family
        return family

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta: dict[str, Any] = {"objective": self.objective_name, "backbone": self.config.to_dict(),
                                "tokens_seen": self.tokens_seen, "loss_tokens_seen": self.loss_tokens_seen,
                                "flops_seen": getattr(self, "flops_seen", 0), "family": self.transformers_family}
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is not None:
            meta["tokenizer"] = {"json": tokenizer.tokenizer.to_str(), "special": tokenizer.special,
                                 "kind": tokenizer.kind}
        # Lightning does not save the global RNG; dropout after a resume must match an uninterrupted run
        meta["rng"] = rng_state()
        checkpoint[CHECKPOINT_KEY] = meta
        trainer = self._trainer
        if trainer is not None and "optimizer_states" in checkpoint and not scale.numbers_by_module_order(trainer):
            checkpoint["optimizer_states"] = [scale.number_by_module_order(state, optimizer, self)
                                              for state, optimizer in zip(checkpoint["optimizer_states"],
                                                                          trainer.optimizers)]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpoint.get(CHECKPOINT_KEY)
        if meta is None:
            raise ConfigError("ckpt_path: the checkpoint was not written by plm_lightning (no 'plm_lightning' entry)")
        if meta["objective"] != self.objective_name:
            raise ConfigError(f"ckpt_path: the checkpoint is from a {meta['objective']} recipe, not "
                              f"{self.objective_name}; use the recipe it was trained with")
        if meta["backbone"] != self.config.to_dict():
            diff = sorted(k for k, v in meta["backbone"].items() if self.config.to_dict().get(k) != v)
            raise ConfigError(f"ckpt_path: the checkpoint's backbone differs from model.backbone in {diff}")
        trainer = self._trainer
        if trainer is not None and trainer.ckpt_path and scale.numbers_by_module_order(trainer):
            scale.reslice_strided_shards(self, trainer.optimizers, checkpoint, trainer.ckpt_path)
        self.tokens_seen = meta.get("tokens_seen", 0)
        self.loss_tokens_seen = meta.get("loss_tokens_seen", 0)
        self.flops_seen = meta.get("flops_seen", 0)
        restore_rng(meta.get("rng"))
