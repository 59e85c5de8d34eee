"""Offline W&B sweeps: the spec's suggestions and early termination from W&B's open-source ``sweeps`` engine, each
trial a subprocess, results as a table and a plot."""

from plm_lightning.sweeping.controller import SweepController, Trial, load_spec, trial_command
from plm_lightning.sweeping.report import best_trial, write_report

__all__ = ["SweepController", "Trial", "best_trial", "load_spec", "trial_command", "write_report"]
