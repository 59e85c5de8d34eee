"""One lm-evaluation-harness run of a checkpoint (``python -m plm_lightning evaluate``): the task names checked against
lm-eval's index (and the user's task YAMLs), the request types each task asks checked against what the checkpoint's
family can answer, all before a request is scored; then ``lm_eval.simple_evaluate`` with :class:`HarnessLM`, and
the results as one JSON-ready dict (written beside the checkpoint, where ``export``'s model card reads them)."""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any

from plm_lightning.errors import ConfigError


def _lm_eval() -> Any:
    try:
        import lm_eval
    except ImportError as err:
        raise ConfigError("evaluate needs EleutherAI's lm-evaluation-harness: pip install 'plm-lightning[eval]' "
                          f"(or lm-eval) ({err})") from err
    return lm_eval


def task_manager(include_path: list[str] | None, include_defaults: bool = True) -> Any:
    """lm-eval's ``TaskManager`` over its own task definitions (unless ``include_defaults`` is False) and the
    directories of ``include_path``; a directory that does not exist is a one-line error."""
    _lm_eval()
    from lm_eval.tasks import TaskManager

    for path in include_path or []:
        if not Path(path).is_dir():
            raise ConfigError(f"evaluate: --include-path '{path}' is not a directory (a directory of task YAMLs)")
    return TaskManager(include_path=list(include_path) if include_path else None, include_defaults=include_defaults)


def check_task_names(names: list[str], manager: Any) -> None:
    """A name lm-eval does not know is a one-line error with the nearest known ones."""
    known = set(manager.all_tasks)
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            where = "lm-eval's tasks and --include-path" if manager.include_path else "lm-eval's tasks"
            raise ConfigError(f"evaluate: unknown task {name!r} (not in {where}: {len(known)} names){hint} "
                              "A task of your own: its YAML in a directory given as --include-path DIR")


def output_types(task_dict: dict) -> dict[str, str]:
    """Each task's request type (``loglikelihood``, ``multiple_choice``, ``loglikelihood_rolling``,
    ``generate_until``), groups walked into."""
    from lm_eval.api.task import Task

    found: dict[str, str] = {}
    for key, value in task_dict.items():
        if isinstance(value, dict):
            found.update(output_types(value))
        elif isinstance(value, Task):
            found[str(getattr(value, "task_name", key) or key)] = str(value.OUTPUT_TYPE)
    return found


def evaluate_checkpoint(checkpoint: str, tasks: list[str], include_path: list[str] | None = None,
                        include_defaults: bool = True, num_fewshot: int | None = None, limit: float | None = None,
                        batch_size: int = 16, pll: str = "original", max_length: int | None = None,
                        add_bos_token: bool = False, device: str = "cpu", bootstrap_iters: int = 100000,
                        seed: int = 0) -> dict[str, Any]:
    """Score ``checkpoint`` on lm-eval's ``tasks``: {"checkpoint", "tasks" (per task, its metrics and their standard
    errors), "n_samples", "versions", "settings", "lm_eval_version"}."""
    lm_eval = _lm_eval()
    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    if not Path(checkpoint).exists():
        raise ConfigError(f"evaluate: no such checkpoint or transformers directory: '{checkpoint}'")
    manager = task_manager(include_path, include_defaults)
    check_task_names(tasks, manager)
    from lm_eval.tasks import get_task_dict

    from plm_lightning.evaluation.harness import HarnessLM

    kinds = output_types(get_task_dict(tasks, manager))
    model = HarnessLM(checkpoint, batch_size=batch_size, pll=pll, max_length=max_length, add_bos_token=add_bos_token,
                      device=device)
    generating = sorted(name for name, kind in kinds.items() if kind == "generate_until")
    if model.masked and generating:
        raise ConfigError(f"evaluate: {', '.join(generating)} ask generate_until, which a {model.kind} checkpoint "
                          "cannot answer (it fills masks; it scores loglikelihood and multiple_choice tasks by "
                          "pseudo-log-likelihood): leave them out or give a causal or encoder-decoder checkpoint")
    out = lm_eval.simple_evaluate(model=model, tasks=tasks, num_fewshot=num_fewshot, limit=limit,
                                  bootstrap_iters=bootstrap_iters, task_manager=manager, log_samples=False,
                                  random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                  fewshot_random_seed=seed)
    scores = {task: {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
              for task, metrics in out["results"].items()}
    return {"checkpoint": str(checkpoint), "objective": model.kind, "tasks": scores,
            "n_samples": out.get("n-samples", {}), "versions": out.get("versions", {}),
            "request_types": kinds,
            "settings": {"num_fewshot": num_fewshot, "limit": limit, "pll": pll if model.masked else None,
                         "max_length": model.max_length, "add_bos_token": add_bos_token, "seed": seed},
            "lm_eval_version": getattr(lm_eval, "__version__", "unknown")}


def results_table(report: dict[str, Any]) -> str:
    """One line per task and metric: value and, where lm-eval gives it, its standard error."""
    from plm_lightning.interop.model_card import metric_rows

    lines = [f"{'task':<28} {'metric':<22} {'value':>9}  stderr"]
    lines += [f"{task:<28} {metric:<22} {value:>9.4f}  " + (f"± {err:.4f}" if err is not None else "")
              for task, metric, value, err in metric_rows(report)]
    return "\n".join(lines)


__all__ = ["check_task_names", "evaluate_checkpoint", "output_types", "results_table", "task_manager"]
