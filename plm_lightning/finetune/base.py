"""What every task head shares: the pretrained backbone and tokenizer of ``init_from`` (or, for the control arm of a
transfer study, the same architecture from random weights), AdamW with BERT's warm-up and linear decay (Devlin et al.
2019, A.3), the data handshake (the model's tokenizer goes to the data, the data's label set is checked against the
head), validation loss and metrics with the data's majority baseline beside them, and checkpoints that ``export``
writes as transformers head models (``interop.task_heads``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric, MetricCollection

from plm_lightning.errors import ConfigError
from plm_lightning.finetune.transfer import (
    Transfer,
    add_adapters,
    discriminative_param_groups,
    layer_groups,
    set_trainable_groups,
    slanted_triangular,
    unfrozen_groups,
)
from plm_lightning.objectives.loading import reads_bidirectionally
from plm_lightning.objectives.schedules import lr_lambda
from plm_lightning.resume_state import ResumeHooks, restore_rng, rng_state

ENCODERS = ("MaskedLM", "ELECTRA", "ERNIE2", "CausalLM", "PermutationLM")
"""The pretraining objectives whose backbone a head can sit on (one stack, ``backbone(ids, mask, types)``)."""


class FinetuneModule(ResumeHooks, L.LightningModule):
    """Base of the task heads: subclasses build their head after :meth:`attach_pretrained` and implement
    :meth:`step` (outputs, loss) and :meth:`update_metrics`."""

    val_metrics: MetricCollection
    test_metrics: MetricCollection

    def attach_pretrained(self, init_from: str | None, random_init: bool = False, tokenizer: str | None = None,
                          transfer: Transfer | None = None, objectives: tuple[str, ...] = ENCODERS,
                          whole: bool = False) -> Any:
        """Load ``init_from`` (a plm_lightning checkpoint or a transformers directory, its objective one of
        ``objectives``); keep its backbone (or, ``whole``, the whole module as ``self.model``) and tokenizer; return
        the whole pretrained module (heads a subclass may reuse, e.g. BERT's NSP pooler).
        ``transfer`` (ULMFiT, adapters: ``finetune.transfer``) is kept in the hyperparameters as a plain dict."""
        self.transfer = transfer or Transfer()
        self.hparams["transfer"] = asdict(self.transfer)
        if not init_from:
            raise ConfigError("model.init_from is required: a plm_lightning checkpoint or a transformers directory")
        from plm_lightning.objectives.loading import load_pretrained

        pretrained, own_tokenizer = load_pretrained(init_from, objectives, "model.init_from")
        if tokenizer is not None:
            from plm_lightning.corpus.tokenizer import TextTokenizer

            own_tokenizer = TextTokenizer.load(tokenizer)
        vocab = pretrained.config.vocab_size
        if own_tokenizer.vocab_size > vocab or max(own_tokenizer.ids.values(), default=0) >= vocab:
            raise ConfigError(f"model.init_from: the tokenizer '{tokenizer or init_from}' has {own_tokenizer.vocab_size} "
                              f"tokens but the checkpoint's embedding table has {vocab} rows; use the tokenizer the "
                              "model was pretrained with")
        if random_init:  # same architecture and tokenizer, no pretraining: the control arm of a transfer study
            from plm_lightning.nn import init_weights

            init_weights(pretrained, pretrained.config)
        pretrained.train()  # load_pretrained hands it over in eval mode: fine-tuning keeps the pretrained dropout
        if whole:
            self.model = pretrained
        else:
            self.backbone = pretrained.backbone
        self.tokenizer, self.backbone_config = own_tokenizer, pretrained.config
        self.bidirectional_decoder = reads_bidirectionally(pretrained)
        """A decoder that reads its input bidirectionally here (no transformers class attends that way)."""
        if self.bidirectional_decoder:
            pretrained.causal = pretrained.backbone.causal = False
        self.causal = bool(getattr(pretrained, "causal", False))
        self.source_family: str | None = pretrained.source_family
        """The transformers family the backbone exports to (``bert``, ``roberta``, ``electra``, ``gpt2`` ...), or None."""
        self.val_loss = MeanMetric()
        if self.transfer.adapter_size:
            if whole:
                raise ConfigError(f"model.transfer.adapter_size: adapters go into one-stack backbones; "
                                  f"{type(self).__name__} fine-tunes a whole encoder-decoder (set adapter_size 0)")
            add_adapters(self.backbone, self.backbone_config.hidden_size, self.transfer.adapter_size)
        return pretrained

    def load_head(self, init_from: str | None) -> None:
        """Bring the head of a transformers ``*For<Task>`` directory of this task along (not with ``random_init``)."""
        from plm_lightning.interop.hf_files import is_hf_directory
        from plm_lightning.interop.task_heads import TASK_SUFFIX, load_hf_head

        if init_from and not self.hparams.get("random_init") and type(self).__name__ in TASK_SUFFIX \
                and is_hf_directory(init_from):
            load_hf_head(self, type(self).__name__, self.source_family, init_from)

    # -- the data handshake ------------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None)
        if data is None or not hasattr(data, "majority_baseline"):
            return
        data.tokenizer = self.tokenizer
        data.setup(stage)
        self.check_data(data)
        self.majority_baseline = data.majority_baseline()

    def check_data(self, data: Any) -> None:
        """Raise a ConfigError when the data does not fit the head (label count)."""
        expected = getattr(self.hparams, "num_labels", None)
        if expected is not None and data.num_labels != expected:
            have = "(regression)" if data.num_labels == 1 else "labels: " + ", ".join(map(str, data.labels[:10]))
            raise ConfigError(f"model.num_labels={expected} but the data has {data.num_labels} {have}; set "
                              f"model.num_labels={data.num_labels}")
        if hasattr(data, "labels"):
            self.labels = list(data.labels)

    # -- steps -----------------------------------------------------------------------------------------------------
    def step(self, batch: dict[str, Any]) -> tuple[Any, Tensor]:
        raise NotImplementedError

    def update_metrics(self, metrics: MetricCollection, batch: dict[str, Any], outputs: Any) -> None:
        raise NotImplementedError

    @staticmethod
    def batch_size_of(batch: dict[str, Any]) -> int:
        return len(batch["input_ids"])

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        _, loss = self.step(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=self.batch_size_of(batch))
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        outputs, loss = self.step(batch)
        self.val_loss.update(loss, weight=self.batch_size_of(batch))
        self.update_metrics(self.val_metrics, batch, outputs)

    def on_validation_epoch_end(self) -> None:
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        if getattr(self, "majority_baseline", None) is not None:  # beside the model's score, always
            self.log("val/majority_baseline", self.majority_baseline)
        self.log_dict(self.val_metrics.compute(), prog_bar=True)
        self.val_loss.reset()
        self.val_metrics.reset()

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        outputs, _ = self.step(batch)
        self.update_metrics(self.test_metrics, batch, outputs)

    def on_test_epoch_end(self) -> None:
        self.log_dict(self.test_metrics.compute())
        self.test_metrics.reset()

    # -- optimisation ----------------------------------------------------------------------------------------------
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Gradual unfreezing and adapters: which layer groups train at this step."""
        t = self.transfer
        if t.unfreeze_every or t.adapter_size:
            set_trainable_groups(self, unfrozen_groups(self.global_step, t.unfreeze_every, len(layer_groups(self))))

    def configure_optimizers(self) -> dict[str, Any]:
        hp, t = self.hparams, self.transfer
        groups = discriminative_param_groups(self, hp.learning_rate, t.layer_lr_decay, hp.weight_decay)
        optimizer = torch.optim.AdamW(groups, lr=hp.learning_rate)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        schedule = (slanted_triangular(total, t.cut_frac, t.ratio) if t.schedule == "slanted_triangular"
                    else lr_lambda(int(hp.warmup_ratio * total), total, "linear", 0.0))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, schedule),
                                                         "interval": "step"}}

    # -- checkpoints ---------------------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from plm_lightning.checkpoint_format import CHECKPOINT_KEY

        tok = self.tokenizer
        checkpoint[CHECKPOINT_KEY] = {
            "objective": type(self).__name__, "backbone": self.backbone_config.to_dict(), "family": self.source_family,
            "labels": list(getattr(self, "labels", [])), "num_labels": self.hparams.get("num_labels"),
            "bidirectional_decoder": getattr(self, "bidirectional_decoder", False),
            "tokenizer": {"json": tok.tokenizer.to_str(), "special": tok.special, "kind": tok.kind},
            "rng": rng_state()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from plm_lightning.checkpoint_format import CHECKPOINT_KEY

        meta = checkpoint.get(CHECKPOINT_KEY, {})
        if meta.get("objective") not in (None, type(self).__name__):
            raise ConfigError(f"ckpt_path: the checkpoint holds a {meta['objective']}, not a {type(self).__name__}")
        self.labels = meta.get("labels", [])
        restore_rng(meta.get("rng"))
