"""Offline sweeps: spec checks, macro expansion, a 3-trial grid that is interrupted and continued and finds the best
trial, and one-line errors for bad specs (before any trial)."""

import json
import struct
from pathlib import Path

import pytest
import yaml

from plm_lightning.errors import ConfigError
from plm_lightning.sweeping import SweepController, load_spec, trial_command
from tests.conftest import ROOT, run_cli

pytest.importorskip("sweeps")

QUICK = ["--trainer.val_check_interval=4", "--trainer.limit_val_batches=2", "--data.batch_size=8", "--data.seq_len=32"]
STEPS = ["--trainer.max_steps", "8"]
"""Given as the sweep's overrides (added to every trial), not in the spec."""


def _spec(tmp_path: Path, **changes) -> Path:
    spec = {"program": "plm_lightning", "method": "grid", "metric": {"name": "val/loss", "goal": "minimize"},
            "parameters": {"model.init_args.learning_rate": {"values": [1e-4, 1e-3, 3e-3]}},
            "command": ["${env}", "python", "-m", "${program}", "fit", "--config", str(ROOT / "configs" / "gpt2.yaml"),
                        *QUICK, "${args}"]}
    spec.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_specs_are_checked_and_commands_expanded(tmp_path) -> None:
    spec = load_spec(_spec(tmp_path))
    command = trial_command(spec, {"model.init_args.learning_rate": 0.001, "data.masking_scheme": "span"})
    assert command[1:4] == ["-m", "plm_lightning", "fit"] and "${env}" not in command
    assert command[-2:] == ["--model.init_args.learning_rate=0.001", "--data.masking_scheme=span"]
    with pytest.raises(ConfigError, match="method 'hyperopt'"):
        load_spec(_spec(tmp_path, method="hyperopt"))
    with pytest.raises(ConfigError, match="args"):
        load_spec(_spec(tmp_path, command=["python", "-m", "plm_lightning", "fit"]))
    for shipped in sorted((ROOT / "sweeps").glob("*.yaml")):  # every spec we ship is a valid W&B spec
        assert load_spec(shipped)["command"]


def test_overrides_are_key_value_pairs_of_keys_the_spec_does_not_sweep(tmp_path) -> None:
    from plm_lightning.sweeping.controller import check_overrides

    spec = load_spec(_spec(tmp_path))
    assert check_overrides(spec, ["--trainer.max_steps", "50", "--data.seq_len=64"]) == [
        "--trainer.max_steps=50", "--data.seq_len=64"]
    for bad, words in ((["--model.init_args.learning_rate", "1e-3"], "the spec sweeps"),
                       (["trainer.max_steps", "5"], "not an override"), (["--trainer.max_steps"], "no value")):
        with pytest.raises(ConfigError, match=words):
            check_overrides(spec, bad)


@pytest.mark.slow
def test_sweep_is_interrupted_continued_and_finds_the_best_trial(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = load_spec(_spec(tmp_path))
    directory = tmp_path / "sweep"
    SweepController(spec, directory, overrides=STEPS).run(count=2)

    def interrupt(message: str) -> None:  # Ctrl-C as soon as the third trial starts
        if message.startswith("trial-002: started"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        SweepController(spec, directory, poll_seconds=0.2, log=interrupt, overrides=STEPS).run(count=3)
    saved = json.loads((directory / "sweep.json").read_text())
    assert [t["state"] for t in saved["trials"]] == ["finished", "finished", "pending"]
    assert saved["overrides"] == ["--trainer.max_steps=8"]
    with pytest.raises(ConfigError, match="with the overrides --trainer.max_steps=8"):
        SweepController(spec, directory)
    started: list[str] = []
    trials = SweepController(spec, directory, log=started.append, overrides=STEPS).run(count=3)
    assert [m.split(":")[0] for m in started if "started" in m] == ["trial-002"]  # only the interrupted one reruns
    assert [t.state for t in trials] == ["finished"] * 3
    assert sorted(t.params["model.init_args.learning_rate"] for t in trials) == [1e-4, 1e-3, 3e-3]
    res = run_cli(["sweep", str(_spec(tmp_path)), "--count", "3", "--dir", str(directory), *STEPS], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    losses = {t.name: t.summary("val/loss") for t in trials}
    best = min(losses, key=losses.get)
    assert f"**Best**: {best}" in res.stdout
    png = (directory / "metric.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 100
    assert len((directory / "results.csv").read_text().strip().splitlines()) == 4


@pytest.mark.slow
@pytest.mark.parametrize("change, words", [
    ({"parameters": {"model.init_args.learning_rat": {"values": [1e-3]}}}, "learning_rat"),
    ({"metric": {"name": "val/bleu", "goal": "maximize"}}, "never logged"),
])
def test_bad_specs_fail_before_the_first_trial(tmp_path, change: dict, words: str) -> None:
    res = run_cli(["sweep", str(_spec(tmp_path, **change)), "--count", "2", "--dir", str(tmp_path / "s")], cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "s" / "trials").exists()
