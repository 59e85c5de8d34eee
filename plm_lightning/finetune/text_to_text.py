"""Text-to-text fine-tuning of an encoder-decoder (T5, Raffel et al. 2020, sec. 2.4 and 3.5): every task is
"task prefix + input text -> target text"; classes are words ("positive", "entailment", "code"), STS-B's scores are
strings rounded to the nearest 0.2 (sec. 2.4), the loss is the decoder's cross-entropy on the target (teacher
forcing), and predictions are decoded greedily and read back: a string that is no label of its task counts as wrong.
Several tasks are mixed by ``TextToTextDataModule``; each is scored on its own (``val/<task>/accuracy``, or
Pearson / Spearman for regression) and ``val/average`` averages them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import MeanMetric

from plm_lightning.finetune.base import FinetuneModule
from plm_lightning.finetune.transfer import Transfer
from plm_lightning.generation import GenerationConfig, generate


def parse_score(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


class TextToText(FinetuneModule):
    """A T5 (or BART) checkpoint fine-tuned on label strings."""

    def __init__(self, init_from: str | None = None, max_target_length: int = 8, learning_rate: float = 3e-4,
                 weight_decay: float = 0.0, warmup_ratio: float = 0.0, random_init: bool = False,
                 tokenizer: str | None = None, transfer: Transfer | None = None) -> None:
        """
        Args:
            init_from: The pretrained encoder-decoder: a Seq2SeqLM checkpoint of ours (T5, T5.1.1, mT5, BART) or a
                transformers T5/BART directory.
            max_target_length: Tokens decoded per prediction (labels are short).
            learning_rate: AdamW's peak rate (T5 fine-tunes with a constant 1e-3 under Adafactor; 3e-4 suits AdamW).
            weight_decay: AdamW's decoupled weight decay (T5: none).
            warmup_ratio: Linear warm-up share of the steps, then linear decay.
            random_init: Same architecture from random weights (the no-pretraining control).
            tokenizer: A tokenizer.json (or directory) to use instead of the checkpoint's; its vocabulary must fit.
            transfer: ``finetune.transfer.Transfer`` options (the schedule; layer-wise options apply to one-stack
                models only).
        """
        super().__init__()
        self.save_hyperparameters()
        self.attach_pretrained(init_from, random_init, tokenizer, transfer, objectives=("Seq2SeqLM",), whole=True)
        self.tasks: list[str] = []
        self.choices: dict[str, list[str]] = {}
        self.val_scores: dict[str, Any] = {}

    @property
    def start_id(self) -> int:
        return self.tokenizer.ids[self.model.decoder_start_token]

    def check_data(self, data: Any) -> None:
        from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

        data.start_id = self.start_id
        self.tasks, self.choices = list(data.tasks), dict(data.choices)
        scores: dict[str, Any] = {}
        for task in self.tasks:
            if self.choices.get(task):
                scores[f"{task}/accuracy"] = MeanMetric()
            else:
                scores[f"{task}/pearson"], scores[f"{task}/spearman"] = PearsonCorrCoef(), SpearmanCorrCoef()
        self.val_scores = torch.nn.ModuleDict({k.replace("/", "__"): v for k, v in scores.items()})
        self.val_scores.to(self.device)

    def step(self, batch: dict[str, Any]) -> tuple[None, Tensor]:
        out = self.model.compute_loss(batch)
        return None, out["loss"]

    def predict_strings(self, batch: dict[str, Any]) -> list[str]:
        config = GenerationConfig(strategy="greedy", max_new_tokens=self.hparams.max_target_length)
        new = generate(self.model, batch["input_ids"], batch["attention_mask"], config, self.tokenizer.ids["eos"],
                       self.start_id)
        return [self.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in new]

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        _, loss = self.step(batch)
        self.val_loss.update(loss, weight=len(batch["input_ids"]))
        self.score(batch)

    def score(self, batch: dict[str, Any]) -> None:
        for task, predicted, target in zip(batch["tasks"], self.predict_strings(batch), batch["targets"]):
            if self.choices.get(task):
                self.val_scores[f"{task}__accuracy"].update(float(predicted == target))
            else:  # regression: an unreadable prediction scores as 0
                value = torch.tensor([parse_score(predicted) or 0.0], device=self.device)
                gold = torch.tensor([float(target)], device=self.device)
                self.val_scores[f"{task}__pearson"].update(value, gold)
                self.val_scores[f"{task}__spearman"].update(value, gold)

    def on_validation_epoch_end(self) -> None:
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        self.val_loss.reset()
        self.log_scores("val")
        if getattr(self, "majority_baseline", None) is not None:
            self.log("val/majority_baseline", self.majority_baseline)

    def log_scores(self, prefix: str) -> None:
        headline = []
        for key, metric in self.val_scores.items():
            value = metric.compute()
            self.log(f"{prefix}/{key.replace('__', '/')}", value)
            if key.endswith(("__accuracy", "__pearson")):
                headline.append(value)
            metric.reset()
        if headline:
            self.log(f"{prefix}/average", torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in headline]).mean(),
                     prog_bar=True)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.score(batch)

    def on_test_epoch_end(self) -> None:
        self.log_scores("test")
