"""The model card ``export`` writes beside a transformers directory (``README.md``, Mitchell et al. 2019, *Model
Cards for Model Reporting*), through ``huggingface_hub``'s ``ModelCard`` / ``ModelCardData`` so the Hub reads its
metadata: what the checkpoint itself records and nobody else writes down - the objective and its corruption
settings, the recipe's model and data settings, the steps, tokens and FLOPs seen, the last logged losses of the
run (its ``metrics.csv`` beside the checkpoint, when there is one), and the lm-evaluation-harness scores that
``evaluate`` wrote beside the checkpoint (``<name>.lm-eval.json``) and the GLUE table of ``glue``
(``<name>.glue.json``), both also as the card's ``model-index`` so the Hub shows them."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

PIPELINE = {"bert": "fill-mask", "roberta": "fill-mask", "albert": "fill-mask", "modernbert": "fill-mask",
            "deberta-v2": "fill-mask", "electra": "fill-mask", "xlnet": "text-generation", "gpt2": "text-generation",
            "t5": "text2text-generation", "bart": "text2text-generation"}
"""The Hub's pipeline tag of each transformers family export writes (ELECTRA's generator and discriminator: the
masked-LM view)."""
_INTERNAL = ("_class_path", "_instantiator")


def _settings(hparams: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in hparams.items() if k not in _INTERNAL]


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "\n".join(f"| `{k}` | `{v!r}` |" if not isinstance(v, str) else f"| `{k}` | `{v}` |" for k, v in rows)
    return "| setting | value |\n|---|---|\n" + body


def last_metrics(checkpoint: Path) -> dict[str, float]:
    """The last value of every ``train/``, ``val/`` and ``test/`` metric in the run's ``metrics.csv`` (the CSV
    logger's, found in the checkpoint's version directory), or {} when the run left none there."""
    for directory in (checkpoint.parent, checkpoint.parent.parent):
        path = directory / "metrics.csv"
        if path.is_file():
            last: dict[str, float] = {}
            with open(path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    for key, value in row.items():
                        if key and key.startswith(("train/", "val/", "test/")) and value not in ("", None):
                            last[key] = float(value)
            return last
    return {}


def evaluation_scores(checkpoint: Path, suffix: str | None = None) -> dict[str, Any] | None:
    """The report ``evaluate`` (``suffix``: ``glue``'s ``.glue.json``) wrote beside ``checkpoint`` (``last.ckpt`` ->
    ``last.lm-eval.json``), or None."""
    from plm_lightning.run_directory import RESULTS_SUFFIX, results_path

    path = results_path(checkpoint, suffix or RESULTS_SUFFIX)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def metric_rows(report: dict[str, Any]) -> list[tuple[str, str, float, float | None]]:
    """(task, metric, value, standard error) of an ``evaluate`` report, lm-eval's ``name,filter`` keys read."""
    rows = []
    for task, metrics in sorted(report.get("tasks", {}).items()):
        for key, value in metrics.items():
            name, _, filt = key.partition(",")
            if name.endswith("_stderr") or name == "sample_len":
                continue
            shown = name + (f" ({filt})" if filt and filt != "none" else "")
            rows.append((task, shown, float(value), metrics.get(f"{name}_stderr,{filt}")))
    return rows


GLUE_NAMES = {"mcc": "Matthews correlation", "accuracy": "accuracy", "f1_positive": "F1",
              "pearson": "Pearson correlation", "spearman": "Spearman correlation",
              "mismatched_accuracy": "accuracy (mismatched)"}
"""How the card and ``glue``'s table name the metrics of a ``glue`` report."""


def glue_rows(report: dict[str, Any]) -> list[tuple[str, str, float, float | None]]:
    """(task, metric, value, majority-class floor) of a ``glue`` report, values in percent."""
    return [(task, GLUE_NAMES.get(metric, metric), 100 * value,
             None if row["majority"].get(metric) is None else 100 * row["majority"][metric])
            for task, row in report.get("tasks", {}).items() for metric, value in row["metrics"].items()]


def _glue_section(report: dict[str, Any]) -> list[str]:
    settings = report.get("settings", {})
    lines = ["## GLUE (fine-tuned)", "",
             f"`python -m plm_lightning glue`: each task fine-tuned from this checkpoint for "
             f"{settings.get('epochs')} epochs" + (f" (at most {settings['max_steps']} steps)"
                                                   if settings.get("max_steps", -1) > 0 else "")
             + f", learning rate {settings.get('learning_rate')}, batch {settings.get('batch_size')}, "
             f"{settings.get('max_length')} tokens, seed {settings.get('seed')}; validation splits, in percent, "
             f"beside what always answering the majority class scores.", "",
             "| task | metric | value | majority class |", "|---|---|---|---|",
             *(f"| {t} | {m} | {v:.1f} | {'n/a' if f is None else f'{f:.1f}'} |" for t, m, v, f in glue_rows(report))]
    lines += [f"| **{bench} average** | task score mean | **{100 * value:.1f}** | |"
              for bench, value in report.get("average", {}).items()]
    return [*lines, ""]


def model_card(ckpt: dict[str, Any], checkpoint: Path, architecture: str, family: str,
               license: str | None = None) -> Any:
    """The ``huggingface_hub.ModelCard`` of an exported checkpoint (``ckpt``: the loaded checkpoint)."""
    from huggingface_hub import ModelCard, ModelCardData

    meta = ckpt["plm_lightning"]
    objective = meta["objective"]
    model = dict(ckpt.get("hyper_parameters") or {})
    data = dict(ckpt.get("datamodule_hyper_parameters") or {})
    source = data.get("source")
    card_data = ModelCardData(
        library_name="transformers", license=license, pipeline_tag=PIPELINE.get(family),
        tags=["plm-lightning", "pretraining", objective.lower(), family],
        datasets=[source] if isinstance(source, str) and "/" in source and not Path(source).exists() else None)
    steps, tokens, flops = ckpt.get("global_step", 0), meta.get("tokens_seen", 0), meta.get("flops_seen", 0)
    metrics = last_metrics(checkpoint)
    report = evaluation_scores(checkpoint)
    scores = metric_rows(report) if report else []
    if scores:
        from huggingface_hub import EvalResult

        card_data.model_name = checkpoint.stem
        card_data.eval_results = [EvalResult(task_type=PIPELINE.get(family) or "text-generation", dataset_type=task,
                                             dataset_name=task, metric_type=metric, metric_value=value,
                                             source_name="lm-evaluation-harness",
                                             source_url="https://github.com/EleutherAI/lm-evaluation-harness")
                                  for task, metric, value, _ in scores]
    from plm_lightning.run_directory import GLUE_SUFFIX

    glue = evaluation_scores(checkpoint, GLUE_SUFFIX)
    if glue and glue.get("tasks"):
        from huggingface_hub import EvalResult

        card_data.model_name = checkpoint.stem
        card_data.eval_results = [*(card_data.eval_results or []), *(
            EvalResult(task_type="text-classification", dataset_type=glue["tasks"][task]["dataset"],
                       dataset_name=f"{glue['tasks'][task]['dataset']} {task}",
                       dataset_config=glue["tasks"][task]["config"], dataset_split="validation",
                       metric_type=metric, metric_value=round(value, 2))
            for task, metric, value, _ in glue_rows(glue))]
    lines = [
        f"# {checkpoint.stem}: {objective} pretrained with plm-lightning", "",
        f"A `{architecture}` (transformers family `{family}`) exported from the plm-lightning checkpoint "
        f"`{checkpoint.name}`: the objective `{model.get('_class_path', objective)}` on "
        f"`{data.get('_class_path', 'its data module')}`.", "",
        "## Training", "",
        "| | |", "|---|---|",
        f"| optimizer steps | {steps} |",
        f"| tokens seen (real tokens of the inputs, all ranks) | {tokens} |",
        f"| loss tokens seen | {meta.get('loss_tokens_seen', 0)} |",
        f"| training FLOPs (counted per step from the shapes, all ranks) | "
        f"{f'{flops:.3e}' if flops else 'not counted by this objective or checkpoint'} |",
        f"| data | {source or 'the embedded default corpus'} |",
        f"| license | {license or 'not stated (export --license)'} |", "",
        "## Objective and corruption (the data module's settings)", "", _table(_settings(data)), "",
        "## Model settings (the objective's)", "", _table(_settings(model)), "",
    ]
    if metrics:
        lines += ["## Last logged metrics of the run", "", "| metric | value |", "|---|---|",
                  *(f"| `{k}` | {v:.4f} |" for k, v in sorted(metrics.items())), ""]
    else:
        lines += ["## Metrics", "", "No `metrics.csv` was found beside the checkpoint.", ""]
    if scores:
        settings = report.get("settings", {})
        lines += ["## Evaluation (lm-evaluation-harness)", "",
                  f"`python -m plm_lightning evaluate` with lm-eval {report.get('lm_eval_version', '?')}: "
                  f"{settings.get('num_fewshot') if settings.get('num_fewshot') is not None else 'task default'} "
                  f"shots, limit {settings.get('limit') or 'none'}"
                  + (f", pseudo-log-likelihood `{settings['pll']}`" if settings.get("pll") else "") + ".", "",
                  "| task | metric | value | stderr |", "|---|---|---|---|",
                  *(f"| {t} | {m} | {v:.4f} | {'' if e is None else f'{e:.4f}'} |" for t, m, v, e in scores), ""]
    if glue and glue.get("tasks"):
        lines += _glue_section(glue)
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(lines))
