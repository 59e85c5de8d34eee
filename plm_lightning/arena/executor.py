"""The arena's runs sent out as jobs through submitit (Meta's job launcher: SLURM on a cluster, its local executor on
one machine, its debug executor in this process), at most ``max_parallel`` at once.

Why submitit and not Ray: the arena's runs are independent, coarse (minutes to hours each) and write their results
to a shared directory, which is the batch-job shape submitit is made for: it pickles a function call, submits it to
SLURM (``sbatch``, requeue on pre-emption) or starts it as a local process, and gives back its result or its
traceback, with no server or cluster runtime to keep up; Ray's strengths (fine-grained tasks, actors, a shared object
store) are not needed, and a Ray cluster is one more service for a SLURM user to run. The same command runs here
(``--executor local --max-parallel 2``) and on a cluster (``--executor slurm``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plm_lightning.errors import ConfigError

EXECUTORS = ("local", "slurm", "debug")
"""``local``: each run a process of this machine; ``slurm``: each run a SLURM job (``sbatch``); ``debug``: each run
in this process, one after another (what a debugger or a test can step into)."""


@dataclass(frozen=True)
class ExecutorSettings:
    """Where and how the runs go: the executor, how many at once, and what each job asks for."""

    kind: str = "local"
    max_parallel: int = 1
    timeout_min: int = 24 * 60
    """A job's time limit (SLURM's ``--time``; the local executor ends a job past it)."""
    cpus_per_task: int | None = None
    """CPU cores per job (default: this machine's cores shared among ``max_parallel`` local jobs; SLURM's default)."""
    gpus_per_node: int = 0
    options: tuple[tuple[str, str], ...] = ()
    """More submitit parameters as (name, value), e.g. ``slurm_partition=dev`` (``--executor-option``)."""

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ConfigError(f"arena: --executor {self.kind!r} is not one of {', '.join(EXECUTORS)}")
        if self.max_parallel < 1:
            raise ConfigError(f"arena: --max-parallel={self.max_parallel} must be >= 1 (runs at once)")
        if self.timeout_min < 1:
            raise ConfigError(f"arena: --timeout-min={self.timeout_min} must be >= 1")

    def threads(self) -> int:
        """Threads each job's PyTorch may use: its CPUs, this machine's shared among the local jobs, or (0) what the
        cluster gives the job (``SLURM_CPUS_PER_TASK``, read where it runs)."""
        import os

        if self.cpus_per_task:
            return self.cpus_per_task
        if self.kind == "slurm":
            return 0
        return max(1, (os.cpu_count() or 1) // (self.max_parallel if self.kind == "local" else 1))


def parse_options(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``name=value`` items of ``--executor-option`` (a one-line error for anything else)."""
    options = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"arena: --executor-option {item!r} is not name=value (e.g. slurm_partition=dev)")
        options.append((name.strip(), value.strip()))
    return tuple(options)


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def make_executor(settings: ExecutorSettings, folder: Path) -> Any:
    """A submitit executor of ``settings.kind`` writing its job files (pickles, logs) under ``folder``."""
    import submitit

    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=settings.kind)
    except RuntimeError as err:  # no srun on this machine
        raise ConfigError(f"arena: --executor {settings.kind}: {str(err).splitlines()[0]} (run the arena where "
                          "sbatch and srun are, or use --executor local)") from err
    parameters: dict[str, Any] = {"timeout_min": settings.timeout_min, "name": "plm-arena"}
    if settings.kind != "debug":
        if settings.threads():
            parameters["cpus_per_task"] = settings.threads()
        parameters["gpus_per_node"] = settings.gpus_per_node
    parameters.update({name: _value(value) for name, value in settings.options})
    try:
        executor.update_parameters(**parameters)
    except (NameError, ValueError, TypeError) as err:
        raise ConfigError(f"arena: --executor-option: {str(err).splitlines()[0]}") from err
    return executor


@dataclass(frozen=True)
class Call:
    """One job: a name for the log and the function call it runs."""

    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]


def run_calls(calls: Sequence[Call], settings: ExecutorSettings, folder: Path,
              done: Callable[[Call, Any, BaseException | None], None], log: Callable[[str], None],
              poll_seconds: float = 1.0) -> None:
    """Submit ``calls`` in order, keeping at most ``settings.max_parallel`` in flight, and call ``done(call, result,
    error)`` as each ends (``error``: what the job raised, its result then None)."""
    executor = make_executor(settings, folder)
    pending, running = list(calls), []
    while pending or running:
        while pending and len(running) < settings.max_parallel:
            call = pending.pop(0)
            job = executor.submit(call.function, *call.args)
            log(f"{call.name}: submitted ({settings.kind} job {job.job_id})")
            if settings.kind == "debug":  # the debug executor runs a job when its result is asked for
                _finish(call, job, done)
                continue
            running.append((call, job))
        finished = [(c, j) for c, j in running if j.done()]
        for call, job in finished:
            running.remove((call, job))
            _finish(call, job, done)
        if running and not finished:
            time.sleep(poll_seconds)


def _finish(call: Call, job: Any, done: Callable[[Call, Any, BaseException | None], None]) -> None:
    try:
        result = job.result()
    except Exception as err:  # noqa: BLE001 - a failed job is reported and the others go on
        done(call, None, err)
        return
    done(call, result, None)
