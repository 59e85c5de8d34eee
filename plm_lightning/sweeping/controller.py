"""W&B sweeps without a W&B server: the same YAML spec ``wandb sweep`` takes, its suggestions (grid, random, bayes)
and hyperband early termination computed by W&B's open-source ``sweeps`` engine (the library the W&B server runs),
each trial a subprocess of the spec's ``command``.

State lives in ``<dir>/sweep.json`` (rewritten atomically after every change): the spec, every trial's parameters,
state, metric history and summary. Interrupting the controller terminates the running trials and marks them
pending; running the same command again continues the sweep, resuming those trials from their ``last.ckpt``.

Each trial writes under ``<dir>/trials/<name>`` (its logger's ``save_dir`` and the trainer's ``default_root_dir``),
logs to whatever loggers its recipe has (W&B in offline mode unless ``WANDB_MODE`` says otherwise) and also to a
metrics file the controller reads (:class:`~plm_lightning.callbacks.MetricsFile`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from plm_lightning.callbacks.metrics_file import METRICS_FILE_ENV, read_metrics
from plm_lightning.errors import ConfigError, last_line

METHODS = ("grid", "random", "bayes")
GOALS = ("minimize", "maximize")
DONE = ("finished", "failed", "stopped")


def load_spec(path: str | Path) -> dict:
    """The sweep spec at ``path``, checked: a known method, a metric with a goal, parameters, a command that passes
    ``${args}``, and the W&B schema (``sweeps.schema_violations_from_proposed_config``)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"sweep: no such spec file '{path}'")
    try:
        spec = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"sweep: '{path}' is not valid YAML ({str(err).splitlines()[0]})") from err
    if not isinstance(spec, dict):
        raise ConfigError(f"sweep: '{path}' must be a mapping with method, metric, parameters and command")
    method = spec.get("method")
    if method not in METHODS:
        raise ConfigError(f"sweep: method {method!r} in '{path}' is not one of {', '.join(METHODS)}")
    metric = spec.get("metric") or {}
    if not metric.get("name") or metric.get("goal", "minimize") not in GOALS:
        raise ConfigError(f"sweep: '{path}' needs metric.name and metric.goal ({' or '.join(GOALS)})")
    if not isinstance(spec.get("parameters"), dict) or not spec["parameters"]:
        raise ConfigError(f"sweep: '{path}' has no parameters to sweep")
    command = spec.get("command")
    if not isinstance(command, list) or not any("${args" in str(c) for c in command):
        raise ConfigError(f"sweep: '{path}' needs a command list that passes ${{args}} (see sweeps/*.yaml)")
    sweeps = _engine()
    violations = sweeps.schema_violations_from_proposed_config(spec)
    if violations:
        raise ConfigError(f"sweep: '{path}': {violations[0]}")
    return spec


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if hasattr(value, "item"):  # numpy scalars from the bayes search
        value = value.item()
    return repr(value) if isinstance(value, float) else str(value)


def trial_command(spec: dict, params: dict[str, Any]) -> list[str]:
    """The spec's ``command`` with W&B's macros expanded: ``${env}`` dropped, ``${interpreter}`` and ``python`` as this
    interpreter, ``${program}``, ``${args}`` as ``--key=value``, ``${args_no_hyphens}`` and ``${args_json}``."""
    args = [f"--{k}={_format(v)}" for k, v in params.items()]
    out: list[str] = []
    for token in spec["command"]:
        token = str(token)
        if token == "${env}":
            continue
        if token in ("${interpreter}", "python", "python3"):
            out.append(sys.executable)
        elif token == "${args}":
            out.extend(args)
        elif token == "${args_no_hyphens}":
            out.extend(a[2:] for a in args)
        elif token == "${args_json}":
            out.append(json.dumps({k: v.item() if hasattr(v, "item") else v for k, v in params.items()}))
        else:
            out.append(token.replace("${program}", str(spec.get("program", "plm_lightning"))))
    return out


def check_overrides(spec: dict, overrides: list[str]) -> list[str]:
    """``overrides`` as ``--key=value`` arguments, or a ConfigError: each must be a ``--key value`` pair (or
    ``--key=value``), and no key the spec sweeps (the trial's value would be overridden without a word)."""
    out, i = [], 0
    while i < len(overrides):
        arg = overrides[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"sweep: {arg!r} is not an override; give --key value (e.g. --trainer.max_steps 50)")
        if "=" in arg:
            key, value = arg[2:].split("=", 1)
            i += 1
        elif i + 1 < len(overrides):
            key, value = arg[2:], overrides[i + 1]
            i += 2
        else:
            raise ConfigError(f"sweep: the override {arg} has no value")
        if key in spec.get("parameters", {}):
            raise ConfigError(f"sweep: --{key} is a parameter the spec sweeps; it cannot also be overridden")
        out.append(f"--{key}={value}")
    return out


@dataclass
class Trial:
    name: str
    params: dict[str, Any]
    state: str = "pending"
    history: list[dict] = field(default_factory=list)
    exitcode: int | None = None

    def summary(self, metric: str) -> float | None:
        """The metric's last logged value (W&B's summary)."""
        values = [row[metric] for row in self.history if metric in row]
        return values[-1] if values else None


class SweepController:
    """Runs ``count`` trials of ``spec``, ``parallel`` at a time, keeping its state in ``directory``."""

    def __init__(self, spec: dict, directory: str | Path, parallel: int = 1, poll_seconds: float = 1.0,
                 log: Callable[[str], None] = print, overrides: list[str] | None = None) -> None:
        """``overrides``: ``--key value`` / ``--key=value`` arguments added to every trial's command (and the checks),
        e.g. ``--trainer.max_steps 50`` for a quick sweep; a key the spec sweeps is refused."""
        if parallel < 1:
            raise ConfigError(f"sweep: --parallel={parallel} must be >= 1")
        self.spec, self.dir, self.parallel, self.poll, self.log = spec, Path(directory), parallel, poll_seconds, log
        self.overrides = check_overrides(spec, overrides or [])
        self.metric = spec["metric"]["name"]
        self.state_file = self.dir / "sweep.json"
        self.trials: list[Trial] = []
        self.checked = False
        self.processes: dict[str, subprocess.Popen] = {}
        if self.state_file.is_file():
            saved = json.loads(self.state_file.read_text(encoding="utf-8"))
            if saved["spec"] != json.loads(json.dumps(spec)):
                raise ConfigError(f"sweep: '{self.dir}' holds a sweep of another spec; use another --dir")
            if saved.get("overrides", []) != self.overrides:
                raise ConfigError(f"sweep: '{self.dir}' holds this sweep with the overrides "
                                  f"{' '.join(saved.get('overrides', [])) or '(none)'}; give the same, or another --dir")
            self.trials = [Trial(**t) for t in saved["trials"]]
            self.checked = saved.get("checked", False)
            for trial in self.trials:  # interrupted trials run again, from their last checkpoint
                if trial.state == "running":
                    trial.state = "pending"

    # -- state ----------------------------------------------------------------------------------------------------
    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name("sweep.json.tmp")
        payload = {"spec": self.spec, "overrides": self.overrides, "checked": self.checked,
                   "trials": [{"name": t.name, "params": t.params, "state": t.state, "history": t.history,
                               "exitcode": t.exitcode} for t in self.trials]}
        tmp.write_text(json.dumps(payload, indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v)),
                       encoding="utf-8")
        tmp.replace(self.state_file)

    def _runs(self) -> list:
        sweeps = _engine()
        states = {"pending": sweeps.RunState.pending, "running": sweeps.RunState.running,
                  "finished": sweeps.RunState.finished, "failed": sweeps.RunState.failed,
                  "stopped": sweeps.RunState.finished}
        runs = []
        for t in self.trials:
            summary = {self.metric: t.summary(self.metric)} if t.summary(self.metric) is not None else {}
            runs.append(sweeps.SweepRun(name=t.name, config={k: {"value": v} for k, v in t.params.items()},
                                        state=states[t.state], history=[r for r in t.history if self.metric in r],
                                        summary_metrics=summary))
        return runs

    def _suggest(self) -> Trial | None:
        sweeps = _engine()
        run = sweeps.next_run(self.spec, self._runs(), validate=False)
        if run is None:
            return None
        params = {k: (v["value"].item() if hasattr(v["value"], "item") else v["value"]) for k, v in run.config.items()}
        return Trial(f"trial-{len(self.trials):03d}", params)

    # -- checks before the first trial ----------------------------------------------------------------------------
    def check(self) -> None:
        """Fail before the first trial on parameters the recipe does not take (``--print_config`` with the first
        suggestion) and on a metric it never logs (a 2-step run with one validation batch)."""
        if self.checked:
            return
        probe = self._suggest()
        if probe is None:
            raise ConfigError("sweep: the spec suggests no trial (an empty grid?)")
        command = [*trial_command(self.spec, probe.params), *self.overrides]
        self.log("checking the spec: the recipe's parameters (--print_config with the first suggestion) ...")
        result = subprocess.run([*command, "--print_config"], capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise ConfigError(f"sweep: the recipe refuses the spec's parameters: {last_line(result.stderr)}")
        scratch = self.dir / "check"
        metrics = scratch / "metrics.jsonl"
        metrics.unlink(missing_ok=True)
        quick = ["--trainer.max_steps=2", "--trainer.val_check_interval=1", "--trainer.limit_val_batches=1",
                 "--trainer.log_every_n_steps=1",
                 f"--trainer.default_root_dir={scratch}", f"--trainer.logger.init_args.save_dir={scratch}"]
        self.log(f"checking the spec: a 2-step run logs {self.metric} ...")
        result = subprocess.run([*command, *quick], capture_output=True, text=True, timeout=900,
                                env=self._env(metrics))
        if result.returncode != 0:
            raise ConfigError(f"sweep: a 2-step check run of the recipe failed: {last_line(result.stderr)}")
        logged = {k for row in read_metrics(metrics) for k in row}
        if self.metric not in logged:
            names = ", ".join(sorted(k for k in logged if "/" in k and "device" not in k))
            raise ConfigError(f"sweep: metric.name={self.metric!r} is never logged by this recipe; it logs {names}")
        self.checked = True
        self.save()

    # -- running --------------------------------------------------------------------------------------------------
    def _trial_dir(self, trial: Trial) -> Path:
        return self.dir / "trials" / trial.name

    def _env(self, metrics_file: Path) -> dict[str, str]:
        env = dict(os.environ)
        env[METRICS_FILE_ENV] = str(metrics_file)
        env.setdefault("WANDB_MODE", "offline")
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.parallel)))
        return env

    def _launch(self, trial: Trial) -> None:
        where = self._trial_dir(trial)
        where.mkdir(parents=True, exist_ok=True)
        command = [*trial_command(self.spec, trial.params), *self.overrides, f"--trainer.default_root_dir={where}",
                   f"--trainer.logger.init_args.save_dir={where}"]
        last = sorted(where.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
        if last:
            command.append(f"--ckpt_path={last[-1]}")
        log = open(where / "output.log", "a", encoding="utf-8")  # noqa: SIM115 - closed when the trial ends
        self.processes[trial.name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                      env=self._env(where / "metrics.jsonl"),
                                                      start_new_session=True)
        trial.state = "running"
        self.log(f"{trial.name}: started {' '.join(f'{k}={_format(v)}' for k, v in trial.params.items())}"
                 + (" (resumed)" if last else ""))

    def _read(self, trial: Trial) -> None:
        file = self._trial_dir(trial) / "metrics.jsonl"
        if file.is_file():
            trial.history = read_metrics(file)

    def _poll(self) -> None:
        for trial in [t for t in self.trials if t.state == "running"]:
            self._read(trial)
            process = self.processes[trial.name]
            code = process.poll()
            if code is not None:
                trial.exitcode = code
                trial.state = "finished" if code == 0 else "failed"
                del self.processes[trial.name]
                value = trial.summary(self.metric)
                self.log(f"{trial.name}: {trial.state} (exit {code}), {self.metric} = "
                         f"{'-' if value is None else f'{value:.4f}'}")
        if self.spec.get("early_terminate"):
            for name in _engine().stop_runs(self.spec, self._runs(), validate=False):
                trial = next(t for t in self.trials if t.name == name)
                if trial.name in self.processes and trial.state == "running":
                    self.log(f"{trial.name}: stopped early by {self.spec['early_terminate'].get('type')}")
                    self._terminate(self.processes.pop(trial.name))
                    self._read(trial)
                    trial.state, trial.exitcode = "stopped", None

    @staticmethod
    def _terminate(process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            process.kill()

    def run(self, count: int) -> list[Trial]:
        """Run trials until ``count`` are done (or the grid is exhausted); returns every trial."""
        if count < 1:
            raise ConfigError(f"sweep: --count={count} must be >= 1")
        self.check()
        try:
            while True:
                self._poll()
                running = [t for t in self.trials if t.state == "running"]
                pending = [t for t in self.trials if t.state == "pending"]
                while len(running) < self.parallel:
                    if pending:
                        trial = pending.pop(0)
                    elif len(self.trials) < count:
                        trial = self._suggest()
                        if trial is None:  # a grid with nothing left
                            break
                        self.trials.append(trial)
                    else:
                        break
                    self._launch(trial)
                    running.append(trial)
                self.save()
                if not running:
                    break
                time.sleep(self.poll)
        except KeyboardInterrupt:
            for name, process in list(self.processes.items()):
                self._terminate(process)
                trial = next(t for t in self.trials if t.name == name)
                self._read(trial)
                trial.state = "pending"
            self.processes.clear()
            self.save()
            raise
        return self.trials


def _engine():  # noqa: ANN202
    """W&B's ``sweeps`` package (its pydantic-v1 config keys warn under pydantic 2: silenced)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import sweeps
        except ImportError as err:
            raise ConfigError("sweep: needs W&B's sweeps engine: pip install 'plm-lightning[sweep]'") from err
    return sweeps
