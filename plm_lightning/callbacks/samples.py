"""What the model trains on and what it produces, logged as training goes: W&B tables with a W&B logger, a text
file (and TensorBoard text) with the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from plm_lightning.data.corruption import IGNORE_INDEX

CORRUPTION_COLUMNS = ["step", "row", "input", "targets", "predictions"]
GENERATION_COLUMNS = ["step", "prompt", "output", "reference"]


class TrainingSamples(L.Callback):
    """Every ``every_n_steps`` training steps and at the end of training, for the first ``examples`` rows of the
    latest training batch:

    * ``samples/corruption``: the corrupted input the model reads, the targets at the positions that carry loss and
      the model's predictions there (the objective's own ``lm_targets`` / ``lm_predictions``: masked tokens for
      MLM, next tokens for a causal LM, the span targets of T5, the generator's masked tokens for ELECTRA);
    * ``samples/generation`` (causal LMs and encoder-decoders): a greedy continuation of ``max_new_tokens`` from the
      row's first ``prompt_tokens`` tokens (a causal LM, next to the row's actual continuation), or the decoder's
      output for the row's corrupted encoder input (T5 fills the sentinels, BART reconstructs).

    A ``WandbLogger`` receives ``wandb.Table`` s; every other logger a ``samples.txt`` in its ``log_dir`` (and
    TensorBoard a text summary). Recipes whose batches are not token rows (word2vec, GloVe) are skipped. Under a
    sharded strategy (FSDP) the forward runs on every rank and generation is skipped."""

    def __init__(self, every_n_steps: int = 500, examples: int = 2, generate: bool = True, max_new_tokens: int = 24,
                 prompt_tokens: int = 16, max_chars: int = 600) -> None:
        if every_n_steps < 1 or examples < 1 or max_new_tokens < 1 or prompt_tokens < 1:
            raise ValueError("TrainingSamples: every_n_steps, examples, max_new_tokens and prompt_tokens must be >= 1")
        self.every_n_steps, self.examples, self.generate = every_n_steps, examples, generate
        self.max_new_tokens, self.prompt_tokens, self.max_chars = max_new_tokens, prompt_tokens, max_chars
        self._batch: dict[str, Any] | None = None
        self._logged_step = -1
        self._announced: set[str] = set()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not isinstance(batch, dict) or "input_ids" not in batch or "labels" not in batch:
            return
        self._batch = batch
        if trainer.global_step % self.every_n_steps == 0:
            self._log(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._batch is not None:
            self._log(trainer, pl_module)
        self._batch = None

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = int(trainer.global_step)
        if step == self._logged_step:
            return
        self._logged_step = step
        tok = trainer.datamodule.tokenizer
        was_training = pl_module.training
        pl_module.eval()
        try:
            corruption = self._corruption_rows(pl_module, tok, step)
            sharded = type(trainer.strategy).__name__ in ("FSDPStrategy", "ModelParallelStrategy")
            generation = self._generation_rows(pl_module, tok, step) if self.generate and not sharded else []
        finally:
            pl_module.train(was_training)
        if trainer.global_rank == 0:
            self._write(trainer, "samples/corruption", CORRUPTION_COLUMNS, corruption, step)
            if generation:
                self._write(trainer, "samples/generation", GENERATION_COLUMNS, generation, step)

    def _rows(self) -> list[dict[str, Any]]:
        """The first ``examples`` rows of the latest batch, each as a batch of one (scalars kept as they are)."""
        batch = self._batch
        size = batch["input_ids"].shape[0]
        pick = lambda v, i: v[i:i + 1] if isinstance(v, Tensor) and v.ndim and v.shape[0] == size else v  # noqa: E731
        return [{k: pick(v, i) for k, v in batch.items()} for i in range(min(self.examples, size))]

    def _text(self, tok: Any, ids: Tensor | list[int]) -> str:
        text = tok.decode([int(t) for t in ids], skip_special_tokens=False)
        return text if len(text) <= self.max_chars else text[: self.max_chars] + " ..."

    def _pieces(self, tok: Any, ids: Tensor) -> str:
        """Each token as the text it decodes to (not the byte-level symbols ``Ġ``/``Ċ``), ``·`` between tokens and
        a newline as ``\\n``, so that both the words and the token boundaries show."""
        pieces = (tok.decode([int(t)], skip_special_tokens=False).replace("\n", "\\n") for t in ids)
        return "·".join(pieces)[: self.max_chars]

    @torch.no_grad()
    def _corruption_rows(self, pl_module: L.LightningModule, tok: Any, step: int) -> list[list[Any]]:
        rows = []
        for i, row in enumerate(self._rows()):
            out = pl_module(**row)
            real = row["input_ids"][0][row["attention_mask"][0].bool()]
            rows.append([step, i, self._text(tok, real), self._pieces(tok, out["lm_targets"]),
                         self._pieces(tok, out["lm_predictions"])])
        return rows

    @torch.no_grad()
    def _generation_rows(self, pl_module: L.LightningModule, tok: Any, step: int) -> list[list[Any]]:
        from plm_lightning.generation import GenerationConfig, generate
        from plm_lightning.objectives import CausalLM, Seq2SeqLM
        from plm_lightning.prediction import decoding_ids

        if not isinstance(pl_module, (CausalLM, Seq2SeqLM)):
            return []
        eos, start = decoding_ids(pl_module, tok)
        config = GenerationConfig(max_new_tokens=self.max_new_tokens)
        rows = []
        for row in self._rows():
            real = row["input_ids"][0][row["attention_mask"][0].bool()]
            if isinstance(pl_module, Seq2SeqLM):
                prompt, reference = real, [t for t in row["labels"][0].tolist() if t != IGNORE_INDEX]
            else:
                prompt = real[: self.prompt_tokens]
                reference = real[self.prompt_tokens: self.prompt_tokens + self.max_new_tokens].tolist()
            output = generate(pl_module, prompt[None], None, config, eos, start)[0]
            rows.append([step, self._text(tok, prompt), self._text(tok, output), self._text(tok, reference)])
        return rows

    def _write(self, trainer: L.Trainer, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        text = "\n\n".join(f"[{key} step {step}]\n" + "\n".join(f"  {c}: {' | '.join(str(v).splitlines())}"
                                                           for c, v in zip(columns[1:], r[1:]))
                         for r in rows)
        loggers = trainer.loggers or []
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                logger.log_table(key=key, columns=columns, data=rows, step=step)
                self._announce(f"W&B tables {key}")
                continue
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text(key, "\n\n".join("    " + line for line in text.splitlines()), step)
            self._append(Path(logger.log_dir or trainer.default_root_dir), text)
        if not loggers:
            self._append(Path(trainer.default_root_dir), text)

    def _announce(self, where: str) -> None:
        if where not in self._announced:
            self._announced.add(where)
            rank_zero_info(f"TrainingSamples: training samples go to {where}")

    def _append(self, directory: Path, text: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "samples.txt", "a", encoding="utf-8") as f:
            f.write(text + "\n\n")
        self._announce(str(directory / "samples.txt"))
