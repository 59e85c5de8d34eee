"""Zero- and few-shot prompting evaluation of causal LMs and encoder-decoders (GPT-2: Radford et al. 2019; GPT-3:
Brown et al. 2020, sec. 2.4).

- Multiple-choice and classification tasks are scored by the log-likelihood of each candidate completion given the
  prompt, ``sum_t log p(c_t | prompt, c_<t)``; the prediction is the argmax, optionally length-normalised per token
  or per character (GPT-3 normalises per token for most tasks).
- Generation tasks append the model's greedy continuation, cut at the first newline, scored by exact match and
  ROUGE-L (``rouge-score``), with GPT-2's prompt suffixes: ``Q: ... A:`` for question answering, ``TL;DR:`` for
  summarisation.
- ``k``-shot prompts prepend ``k`` solved examples of the training split, drawn with a fixed seed (the same
  demonstrations for every query of a run), separated by blank lines.

Tasks: the offline tasks of :mod:`plm_lightning.finetune.tasks` with a prompt template each (:data:`PROMPT_TASKS`),
or local files: ``choices:FILE.jsonl`` (SWAG-style ``context``/``choices``/``label``) and ``generation:FILE.jsonl``
(``input``/``target``; ``summarize`` rows get the ``TL;DR:`` suffix).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.nn.masks import prefix_lm_mask
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.objectives.loading import reads_bidirectionally

Normalization = Literal["none", "token", "char"]


@dataclass(frozen=True)
class PromptExample:
    """One query: the prompt text and either candidate completions with the right one's index, or a target."""

    prompt: str
    candidates: tuple[str, ...] = ()
    label: int = -1
    target: str = ""

    def solved(self) -> str:
        """The example with its answer, as a demonstration."""
        return self.prompt + (self.candidates[self.label] if self.candidates else " " + self.target)


def _classification(template: str, verbalizers: tuple[str, ...]) -> Callable[[dict], PromptExample]:
    return lambda row: PromptExample(template.format(**row), verbalizers, int(row["label"]))


PROMPT_TASKS: dict[str, tuple[str, Callable[[dict], PromptExample]]] = {
    "code_or_prose": ("code_or_prose", _classification("Text: {text_a}\nIs this code or prose? Answer:",
                                                         (" prose", " code"))),
    "continuation": ("continuation", _classification("First: {text_a}\nSecond: {text_b}\nDoes the second sentence "
                                                       "follow the first? Answer:", (" no", " yes"))),
    "next_sentence": ("next_sentence", lambda row: PromptExample(row["context"], tuple(" " + c for c in row["choices"]),
                                                                 int(row["label"]))),
    "cloze_spans": ("cloze_spans", lambda row: PromptExample(f"{row['context']}\nQ: {row['question']}\nA:",
                                                             target=row["answers"][0]["text"])),
    "world_objects": ("world_objects", lambda row: PromptExample(row["text_a"], tuple(" " + o for o in row["objects"]),
                                                                 int(row["answer"]))),
}
"""Offline task -> (its :func:`~plm_lightning.finetune.tasks.offline_task` name, row -> prompt example);
``world_objects`` (``offline:world_objects=<world spec>`` for another world) is LAMA's question asked as a prompt,
the candidates every object of the fact's type."""


def load_prompt_task(spec: str) -> dict[str, list[PromptExample]]:
    """Examples per split (``train`` for demonstrations, ``validation`` and ``test`` to evaluate) of ``offline:NAME``,
    ``choices:FILE.jsonl`` or ``generation:FILE.jsonl`` (a file is its own train and evaluation split)."""
    kind, _, name = spec.partition(":")
    base, eq, argument = name.partition("=")  # offline:world_objects=<world spec>
    if kind == "offline" and base in PROMPT_TASKS:
        from plm_lightning.finetune.tasks import offline_task

        task, convert = PROMPT_TASKS[base]
        return {split: [convert(r) for r in rows] for split, rows in offline_task(task + eq + argument).items()}
    if kind == "choices" and name:
        from plm_lightning.finetune.formats import read_choices

        rows = [PromptExample(r["context"], tuple(" " + c for c in r["choices"]), r["label"]) for r in read_choices(name)]
        return {"train": rows, "validation": rows, "test": rows}
    if kind == "generation" and name:
        rows = _read_generation(name)
        return {"train": rows, "validation": rows, "test": rows}
    valid = [f"offline:{n}" for n in PROMPT_TASKS] + ["choices:FILE.jsonl", "generation:FILE.jsonl"]
    raise ConfigError(f"prompt --task {spec!r} is not one of {', '.join(valid)}")


def _read_generation(path: str) -> list[PromptExample]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"prompt: no such file '{path}' (JSONL rows with input and target)")
    rows = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not row.get("input") or "target" not in row:
            raise ConfigError(f"prompt: '{path}' line {n} needs 'input' and 'target'")
        suffix = "\nTL;DR:" if row.get("task") == "summarize" else "\nA:"
        prompt = row["input"] if row["input"].rstrip().endswith(("A:", "TL;DR:")) else row["input"].rstrip() + suffix
        rows.append(PromptExample(prompt, target=str(row["target"])))
    if not rows:
        raise ConfigError(f"prompt: '{path}' holds no example")
    return rows


def demonstrations(train: list[PromptExample], shots: int, seed: int) -> list[PromptExample]:
    """``shots`` training examples drawn without replacement with ``seed``."""
    if shots < 0:
        raise ConfigError(f"prompt: --shots={shots} must be >= 0")
    if shots > len(train):
        raise ConfigError(f"prompt: --shots={shots} is more than the {len(train)} examples of the training split")
    order = np.random.default_rng(seed).permutation(len(train))[:shots]
    return [train[int(i)] for i in order]


def build_prompt(example: PromptExample, shots: list[PromptExample]) -> str:
    """The demonstrations, solved, then the query, separated by blank lines."""
    return "\n\n".join([*(s.solved() for s in shots), example.prompt])


class PromptScorer:
    """Candidate log-likelihoods and greedy generations of a causal LM or an encoder-decoder of ours."""

    def __init__(self, model: torch.nn.Module, tokenizer) -> None:  # noqa: ANN001
        from plm_lightning.prediction import decoding_ids

        self.model, self.tokenizer = model.eval(), tokenizer
        self.encoder_decoder = hasattr(model.backbone, "encoder")
        self.prefix_lm = reads_bidirectionally(model)
        """A continuum decoder pretrained with a bidirectional prefix: the prompt is that prefix, the candidate is
        scored causally after it (Artetxe et al. 2022, sec. 3)."""
        self.eos, self.start = decoding_ids(model, tokenizer)
        # BART's learned positions start at an offset (2): its inputs fit max_position_embeddings - offset
        self.max_length = int(model.config.max_position_embeddings) - int(model.config.position_offset)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode_batch([text])[0] if text else []

    def _context(self, prompt: str, room: int) -> list[int]:
        """The prompt's ids, left-truncated so ``room`` more tokens fit (the demonstrations go first)."""
        ids = self.encode(prompt)
        if not self.encoder_decoder and self.eos is not None:
            ids = [self.eos, *ids]
        keep = self.max_length - (0 if self.encoder_decoder else room) - (1 if self.encoder_decoder else 0)
        return ids[-keep:] if keep > 0 else ids[-1:]

    @torch.no_grad()
    def continuation_logprobs(self, prompt: str, candidate: str) -> tuple[float, int]:
        """(``sum_t log p(c_t | prompt, c_<t)``, number of candidate tokens) in one forward pass."""
        full, before = self.encode(prompt + candidate), self.encode(prompt)
        cand = full[len(before):] if full[: len(before)] == before else self.encode(candidate)
        if not cand:
            raise ConfigError(f"prompt: the candidate {candidate!r} has no tokens")
        cand = cand[: self.max_length - 2]
        context = self._context(prompt, len(cand))
        if self.encoder_decoder:
            decoder = torch.tensor([[self.start, *cand[:-1]]])
            batch = {"input_ids": torch.tensor([[*context, self.eos]]), "decoder_input_ids": decoder}
            logits = self.model.lm_head(self.model.decode(batch))[0]
        else:
            ids = torch.tensor([[*context, *cand]])
            shape = {"mask": prefix_lm_mask(torch.tensor([len(context)]), ids.shape[1]), "causal": False} \
                if self.prefix_lm else {}
            hidden = self.model.backbone(ids, StackInputs(**shape)).last_hidden_state[0, len(context) - 1: -1]
            logits = self.model.lm_head(hidden)
        logprobs = logits.float().log_softmax(-1)
        return float(logprobs.gather(1, torch.tensor(cand)[:, None]).sum()), len(cand)

    def choose(self, prompt: str, candidates: tuple[str, ...], normalization: Normalization = "none"
               ) -> tuple[int, list[float]]:
        """The argmax candidate and every candidate's (normalised) score."""
        scores = []
        for candidate in candidates:
            total, tokens = self.continuation_logprobs(prompt, candidate)
            scores.append(total / tokens if normalization == "token" else
                          total / max(1, len(candidate)) if normalization == "char" else total)
        return int(np.argmax(scores)), scores

    @torch.no_grad()
    def complete(self, prompt: str, max_new_tokens: int = 32) -> str:
        """Greedy continuation until a newline (or end of sequence)."""
        from plm_lightning.generation import GenerationConfig, generate

        context = self._context(prompt, max_new_tokens)
        ids = torch.tensor([[*context, self.eos] if self.encoder_decoder else context])
        out = generate(self.model, ids, None, GenerationConfig(max_new_tokens=max_new_tokens), self.eos, self.start)
        text = self.tokenizer.decode([t for t in out[0] if t != self.eos])
        return text.strip().split("\n")[0].strip()


def _normalize_answer(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


@dataclass
class PromptReport:
    task: str
    shots: int
    seed: int
    examples: int
    metrics: dict[str, float] = field(default_factory=dict)
    predictions: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"task": self.task, "shots": self.shots, "seed": self.seed, "examples": self.examples, **self.metrics}


def evaluate_prompts(scorer: PromptScorer, task: str, shots: int = 0, seed: int = 0, split: str = "validation",
                     limit: int | None = None, normalization: Normalization = "none", max_new_tokens: int = 32,
                     progress: Callable[[], None] | None = None) -> PromptReport:
    """Accuracy (choice/classification) or exact match and ROUGE-L (generation) of ``task`` with ``shots``
    demonstrations drawn with ``seed``; the first ``limit`` examples of ``split``."""
    splits = load_prompt_task(task)
    examples = splits[split][:limit] if limit else splits[split]
    if not examples:
        raise ConfigError(f"prompt: the {split} split of {task} is empty")
    demos = demonstrations(splits["train"], shots, seed)
    report = PromptReport(task, shots, seed, len(examples))
    if examples[0].candidates:
        correct = []
        for example in examples:
            choice, scores = scorer.choose(build_prompt(example, demos), example.candidates, normalization)
            correct.append(choice == example.label)
            report.predictions.append({"choice": choice, "label": example.label, "scores": scores})
            if progress:
                progress()
        report.metrics = {"accuracy": float(np.mean(correct))}
        return report
    from rouge_score import rouge_scorer

    rouge = rouge_scorer.RougeScorer(["rougeL"])
    exact, rouge_l = [], []
    for example in examples:
        output = scorer.complete(build_prompt(example, demos), max_new_tokens)
        exact.append(_normalize_answer(output) == _normalize_answer(example.target))
        rouge_l.append(rouge.score(example.target, output)["rougeL"].fmeasure)
        report.predictions.append({"output": output, "target": example.target})
        if progress:
            progress()
    report.metrics = {"exact_match": float(np.mean(exact)), "rougeL": float(np.mean(rouge_l))}
    return report
