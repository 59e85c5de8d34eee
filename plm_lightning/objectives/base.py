"""What every pretraining objective shares: backbone construction (``init_from`` too), the check of the data against
the model, the scale hooks (tensor parallelism, activation checkpointing, compile, FSDP2), running a stack with the
batch's attention shape, and the loss at the loss positions. Optimisation (``optimization``), the steps' metrics and
FLOPs (``step_metrics``) and checkpoint metadata (``checkpoint_metadata``) are mixed in from their own modules."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data_contract import ATTENTION_KINDS, NO_CONTRACT, DataContract, read_contract
from plm_lightning.errors import ConfigError
from plm_lightning.nn import BackboneConfig, LMHead, get_preset, init_weights
from plm_lightning.nn.masks import attention_shape
from plm_lightning.nn.stack_inputs import StackInputs, batch_inputs
from plm_lightning.objectives import scale
from plm_lightning.objectives.checkpoint_metadata import CHECKPOINT_KEY, CheckpointHooks
from plm_lightning.objectives.data_fit import config_for_data
from plm_lightning.objectives.optimization import OptimizationHooks, check_optimizer_settings
from plm_lightning.objectives.step_metrics import StepHooks


class PretrainingModule(CheckpointHooks, OptimizationHooks, StepHooks, L.LightningModule):
    """Base class: subclasses set ``required_special_tokens`` and implement ``build`` and ``compute_loss``."""

    required_special_tokens: tuple[str, ...] = ("pad",)
    causal: bool = False

    def __init__(
        self,
        backbone: str = "tiny",
        backbone_overrides: dict[str, Any] | None = None,
        vocab_size: int | None = None,
        learning_rate: float = 1e-4,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.999),
        adam_eps: float = 1e-6,
        warmup_steps: int | float = 0.06,
        lr_schedule: Literal["linear", "cosine", "constant"] = "linear",
        min_lr_ratio: float = 0.0,
        activation_checkpointing: bool = False,
        compile: bool | Literal["blocks", "model"] = False,
        compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default",
        fused_optimizer: bool = True,
        sparse_final_layer: bool = True,
        init_from: str | None = None,
        fused_cross_entropy: bool = True,
        pad_vocab_multiple: int | None = None,
    ) -> None:
        """
        Args:
            backbone: Preset name (tiny, bert-base, gpt2, ...; see plm_lightning.nn.PRESETS).
            backbone_overrides: BackboneConfig fields to change on the preset, e.g. {num_layers: 6}.
            vocab_size: Rows of the embedding; null takes the tokenizer's vocabulary size.
            learning_rate: Peak learning rate of AdamW.
            weight_decay: Decoupled weight decay (Loshchilov & Hutter 2019); biases and norms are not decayed.
            betas: AdamW betas.
            adam_eps: AdamW epsilon.
            warmup_steps: Linear warmup length: steps (int >= 1) or a fraction of all steps (float < 1).
            lr_schedule: Decay after warmup: linear (BERT), cosine (GPT-3) or constant.
            min_lr_ratio: Final learning rate as a fraction of the peak.
            activation_checkpointing: Recompute each block's activations in the backward pass.
            compile: torch.compile: ``true`` or ``blocks`` compiles each block (identical blocks share one graph, so
                compile time stays flat in depth); ``model`` compiles the whole loss computation (embeddings, every
                block, the head and the loss) with graph breaks where shapes depend on the data (the loss
                positions), which lets inductor fuse across blocks and into the head.
            compile_mode: torch.compile's mode (``reduce-overhead`` adds CUDA graphs, which need static shapes:
                packed rows of one length; ``max-autotune*`` tunes the GEMMs, at a much longer compile).
            fused_optimizer: One fused AdamW kernel over all parameters (about 9x faster than the per-tensor loop
                for 110M fp32 parameters on CPU; the Hugging Face Trainer's default too).
            sparse_final_layer: Run the last layer only at the positions the loss reads (the masked tokens, and
                [CLS] for a sentence head), with keys and values from every position: the same loss and gradients,
                ~7% less work for a 12-layer MLM. Objectives whose loss reads every position ignore it.
            init_from: Continued (domain-adaptive) pretraining: a plm_lightning checkpoint, or a transformers
                model directory on disk (BERT, RoBERTa, ALBERT, ELECTRA, GPT-2), whose backbone and weights start
                this run; backbone settings come from it. Pair it with data.tokenizer=<the same directory> (or a
                directory written by `export`) so token ids mean what the weights learned.
            fused_cross_entropy: The LM loss through the fused, chunked linear cross-entropy
                (plm_lightning.nn.losses): the same loss and gradients without the [tokens, vocabulary] logits in
                memory; false computes the logits and F.cross_entropy on them.
            pad_vocab_multiple: The LM head's GEMMs run on the vocabulary padded to a multiple of this (zero rows,
                their logits -inf: the same loss, gradients and predictions; parameters, checkpoints and exports keep
                the real vocabulary). null: 128 on CUDA, where an unaligned vocabulary such as GPT-2's 50257 puts
                the head on slow kernels, and 1 (none) on CPU.
        """
        super().__init__()
        self.save_hyperparameters()
        try:
            self.config: BackboneConfig = get_preset(backbone).replace(**(backbone_overrides or {}))
            if vocab_size is not None:
                self.config = self.config.replace(vocab_size=vocab_size)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"model.backbone: {err}") from err
        if lr_schedule not in ("linear", "cosine", "constant"):
            raise ConfigError(f"model.lr_schedule={lr_schedule!r} is not one of linear, cosine, constant")
        check_optimizer_settings(learning_rate, weight_decay, betas, adam_eps, warmup_steps, min_lr_ratio)
        if compile not in (False, True, "blocks", "model"):
            raise ConfigError(f"model.compile={compile!r} is not one of false, true, blocks, model")
        if compile_mode not in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
            raise ConfigError(f"model.compile_mode={compile_mode!r} is not one of default, reduce-overhead, "
                              "max-autotune, max-autotune-no-cudagraphs")
        if pad_vocab_multiple is not None and pad_vocab_multiple < 1:
            raise ConfigError(f"model.pad_vocab_multiple={pad_vocab_multiple} must be >= 1 (1: no padding), or null "
                              "for the device's default")
        self.built = False
        self.data: DataContract = NO_CONTRACT
        """What the data said at ``setup`` (:mod:`plm_lightning.data_contract`)."""
        self.tokens_seen = 0
        self.loss_tokens_seen = 0
        self.flops_seen = 0  # training FLOPs of every step so far, all ranks (the model card's compute)
        self.flops_per_batch: int | None = None
        if init_from:
            self._init_from_checkpoint(init_from)
        elif vocab_size is not None:
            self._build_all()

    # -- construction -------------------------------------------------------------------------------------------
    def build(self) -> None:
        """Create ``self.backbone`` and heads from ``self.config``."""
        raise NotImplementedError

    def _build_all(self) -> None:
        self.build()
        init_weights(self, self.config)
        self.tie_weights()
        for head in self.modules():
            if isinstance(head, LMHead):
                head.pad_vocab_multiple = self.hparams.get("pad_vocab_multiple")
        self.train_accuracy = MulticlassAccuracy(self.config.vocab_size, average="micro", ignore_index=IGNORE_INDEX)
        self.val_accuracy = MulticlassAccuracy(self.config.vocab_size, average="micro", ignore_index=IGNORE_INDEX)
        self.val_lm_loss = MeanMetric()
        self.built = True

    def _init_from_checkpoint(self, path: str) -> None:
        """Continued pretraining: the backbone (and the LM head) must fit exactly; other heads may differ, as when a
        BERT with NSP continues with MLM only (Gururangan et al. 2020): dropped heads are left out, new heads start
        fresh, and both are named in a warning."""
        from plm_lightning.interop.hf_files import is_hf_directory, load_checkpoint
        from plm_lightning.objectives.loading import hf_to_checkpoint

        try:
            ckpt = hf_to_checkpoint(path) if is_hf_directory(path) else load_checkpoint(path)
        except ConfigError as err:
            raise ConfigError(f"model.init_from: {err} (give a plm_lightning .ckpt or a transformers model "
                              "directory)") from err
        meta = ckpt[CHECKPOINT_KEY]
        if meta["objective"] != self.objective_name:
            raise ConfigError(f"model.init_from: '{path}' holds a {meta['objective']} checkpoint; this recipe's "
                              f"objective is {self.objective_name}")
        self.config = BackboneConfig(**meta["backbone"])
        self._transformers_family = meta.get("family")  # continued pretraining keeps the family it came from
        self._build_all()
        missing, unexpected = self.load_state_dict(ckpt["state_dict"], strict=False)
        core = ("backbone.", "lm_head.", "generator.")
        bad = [k for k in [*missing, *unexpected] if k.startswith(core) and k != "lm_head.weight"]
        if bad:
            raise ConfigError(f"model.init_from: '{path}' does not fit this model: missing {missing[:4]}, "
                              f"unexpected {unexpected[:4]}")
        heads = sorted({k.split(".")[0] for k in [*missing, *unexpected] if not k.startswith(core)})
        if heads:
            warnings.warn(f"model.init_from: heads {heads} differ from '{path}': dropped ones are left out, new ones "
                          "start from random weights", stacklevel=2)

    def stacks(self) -> list[nn.Module]:
        """The Transformer stacks the scale hooks (activation checkpointing, compile) wrap."""
        return [self.backbone]

    def run_stack(self, stack: nn.Module, batch: dict[str, Tensor], input_ids: Tensor | None = None,
                  output_positions: Tensor | None = None) -> Tensor:
        """Last hidden state of ``stack`` on the batch (or on ``input_ids`` in its place, e.g. ELECTRA's replaced
        tokens) with the batch's :meth:`stack_inputs`; only at ``output_positions`` ``[B, K]`` when given."""
        ids = batch["input_ids"] if input_ids is None else input_ids
        inputs = self.stack_inputs(stack, batch)
        if output_positions is not None:
            inputs = inputs.but(output_positions=output_positions)
        return stack(ids, inputs).last_hidden_state

    def stack_inputs(self, stack: nn.Module, batch: dict[str, Tensor]) -> StackInputs:
        """What ``stack`` reads from the batch: padding, packed ``document_ids`` (a token sees only its own
        document's), 0-based ``position_ids`` (XLM's TLM restarts them per language), every id input it reads
        (``stack.input_keys()``: segments, task types, GLM's block positions, an objective's own), and the attention
        shape: the stack's own (bidirectional encoder, causal decoder) unless the batch asks for one of
        ``data_contract.ATTENTION_KINDS`` by ``attention_kind`` (an index; UniLM's per-batch mixture) and/or
        ``prefix_lengths`` ``[B]`` (prefix-LM: UL2's decoder-only mode, GLM's Part A)."""
        shape = {}
        if "attention_kind" in batch or "prefix_lengths" in batch:
            kind = ATTENTION_KINDS[int(batch["attention_kind"])] if "attention_kind" in batch else "prefix"
            length, device = batch["input_ids"].shape[1], batch["input_ids"].device
            shape = {"mask": attention_shape(kind, length, batch.get("prefix_lengths"), device), "causal": False}
        return batch_inputs(batch, stack.input_keys(), **shape)

    def run_stack_for_loss(self, stack: nn.Module, batch: dict[str, Tensor], labels: Tensor,
                           keep_first: bool = False) -> tuple[Tensor, Tensor]:
        """(hidden, labels) at the loss positions only when ``sparse_final_layer`` (``[B, K, H]`` and ``[B, K]``,
        slot 0 the first token when ``keep_first``), else at every position."""
        if not self.hparams.get("sparse_final_layer", True):
            return self.run_stack(stack, batch), labels
        index, labels = final_layer_positions(labels, keep_first)
        return self.run_stack(stack, batch, output_positions=index), labels

    def loss_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """Boolean ``[B, L]``: the positions that carry a token-level loss (``inspect`` reports their share)."""
        return batch["labels"] != IGNORE_INDEX

    def check_data(self, data: DataContract) -> None:
        """Refuse data this objective cannot train on, with one line (before the model is built)."""

    def tie_weights(self) -> None:
        head = getattr(self, "lm_head", None)
        if isinstance(head, LMHead) and self.config.tie_word_embeddings:
            head.tie(self.backbone.embeddings.token)

    def setup(self, stage: str) -> None:
        """Read the data's contract once (``self.data``), check it (:meth:`check_data`, ``data_fit``) and build the
        model if it is not built (its vocabulary size can come from the tokenizer)."""
        self.data = read_contract(getattr(self.trainer, "datamodule", None))
        self.check_data(self.data)
        self.config = config_for_data(self.config, self.data, self.built, self.hparams.vocab_size is None,
                                      self.required_special_tokens, type(self).__name__, self.hparams.backbone)
        if self.data.tokenizer is not None:
            self.tokenizer = self.data.tokenizer
        if not self.built:
            self._build_all()

    def configure_model(self) -> None:
        """Scale hooks, in the torchtitan order: tensor parallelism, activation checkpointing, compile, then FSDP2 per
        block (``objectives.scale``)."""
        if not self.built:
            self._build_all()
        if getattr(self, "_scaled", False):
            return
        mesh = self.device_mesh if self._device_mesh is not None else None
        tensor_parallel = mesh["tensor_parallel"] if mesh is not None and "tensor_parallel" in (
            mesh.mesh_dim_names or ()) and mesh["tensor_parallel"].size() > 1 else None
        if tensor_parallel is not None:
            scale.check_model_tensor_parallel(self, tensor_parallel.size(), mesh["data_parallel"].size(),
                                              getattr(self.trainer.strategy, "_save_distributed_checkpoint", False))
            scale.apply_tensor_parallel(self, tensor_parallel)
        compile, mode = self.hparams.get("compile", False), self.hparams.get("compile_mode", "default")
        for stack in self.stacks():
            if self.hparams.activation_checkpointing:
                scale.apply_activation_checkpointing(stack)
            if compile in (True, "blocks"):
                scale.apply_compile(stack, mode)
        if compile == "model":
            # the class's function, compiled once and called with self: no bound method of this instance is kept
            self._compiled_loss = torch.compile(type(self).compute_loss, mode=None if mode == "default" else mode)
        if mesh is not None:
            scale.apply_fully_shard(self, mesh)
        self._scaled = True

    # -- loss ---------------------------------------------------------------------------------------------------
    def compute_loss(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Return at least ``loss`` (the total), ``lm_loss`` (the token cross-entropy perplexity is reported from),
        and :meth:`lm_loss`'s ``lm_targets``, ``lm_predictions``, ``lm_token_losses`` (at loss positions only);
        auxiliary losses as ``<name>_loss``."""
        raise NotImplementedError

    def lm_loss(self, hidden: Tensor, labels: Tensor, keep_logits: bool = False) -> tuple[Tensor, dict[str, Tensor]]:
        """Cross-entropy at the loss positions only (``labels != -100``), with the sparse LM head; returns the loss
        and what the metrics read: ``lm_targets``, ``lm_predictions`` (argmax) and ``lm_token_losses`` at those
        positions. The head's fused linear cross-entropy (``model.fused_cross_entropy``) never materialises the
        logits; ``keep_logits`` (ELECTRA samples from them) computes and returns them as ``lm_logits``."""
        positions = labels != IGNORE_INDEX
        targets = labels[positions]
        if self.hparams.get("fused_cross_entropy", True) and not keep_logits:
            loss, predictions, token_losses = self.lm_head(hidden, positions, targets=targets)
            return loss, {"lm_targets": targets, "lm_predictions": predictions, "lm_token_losses": token_losses}
        logits = self.lm_head(hidden, positions)
        token_losses = F.cross_entropy(logits.float(), targets, reduction="none")
        extras = {"lm_targets": targets, "lm_predictions": logits.detach().argmax(-1),
                  "lm_token_losses": token_losses.detach()}
        return token_losses.mean(), {**extras, **({"lm_logits": logits} if keep_logits else {})}

    def forward(self, **batch: Tensor) -> dict[str, Tensor]:
        """The steps call the module (not ``compute_loss``) so FSDP2's root hooks run around the whole step."""
        compiled = getattr(self, "_compiled_loss", None)
        return compiled(self, batch) if compiled is not None else self.compute_loss(batch)


def final_layer_positions(labels: Tensor, keep_first: bool = False) -> tuple[Tensor, Tensor]:
    """Per row, the positions with a label (in order; and position 0 first when ``keep_first``), padded to the
    longest row with unlabelled positions: (index ``[B, K]``, labels at index ``[B, K]``)."""
    selected = labels != IGNORE_INDEX
    if keep_first:
        selected = selected.clone()
        selected[:, 0] = True
    k = max(1, int(selected.sum(1).max()))
    index = torch.argsort((~selected).to(torch.int8), dim=1, stable=True)[:, :k]
    return index, labels.gather(1, index)
