"""The recipes' command line: LightningCLI over every LightningModule and LightningDataModule, with the defaults every
recipe composes on (callbacks, metrics logger, atomic checkpoints), ``--ckpt_path last`` and checks of a checkpoint
against the recipe, and the run's directory and lineage (``run_directory``)."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from plm_lightning.errors import ConfigError
from plm_lightning.run_directory import claim_versions, find_last_checkpoint, follow_default_root_dir, lineage_of, run_directory


def default_config_files() -> list[str]:
    """Defaults under every recipe: callbacks/default.yaml, a CSV metrics logger and atomic checkpoints."""
    package = Path(__file__).resolve().parent
    return [str(package / "callbacks" / "default.yaml"), str(package / "trainer_defaults.yaml")]


EVALUATION_KEYS = ("eval_mem_len",)
"""Model arguments that only change how a trained model is evaluated: given with ``--ckpt_path``, they override the
checkpoint's (Lightning otherwise restores every hyperparameter from it)."""


class RunConfig(SaveConfigCallback):
    """The run's ``config.yaml`` in the run's own directory (:func:`run_directory`, beside its ``checkpoints/``):
    Lightning's callback writes to ``trainer.log_dir``, which for a W&B logger is its ``save_dir``, shared by every
    run (each overwrote the one before, and ``--ckpt_path last`` found no config to check a checkpoint's lineage
    against)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.is_global_zero:
            directory = Path(run_directory(trainer))
            directory.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, str(directory / self.config_filename), skip_none=False, overwrite=True,
                             multifile=self.multifile)
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


class PLMCLI(LightningCLI):
    """LightningCLI over every LightningModule and LightningDataModule (our `PretrainingModule` / `TextDataModule`
    subclasses, the static embeddings and their `WordEmbeddingDataModule`), omegaconf interpolation on."""

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            parser_kwargs=self._parser_kwargs(run),
            save_config_callback=RunConfig,
            save_config_kwargs={"overwrite": True},
            args=args,
            run=run,
            auto_configure_optimizers=False,
        )

    def _parse_ckpt_path(self) -> None:
        """Take the model's hyperparameters from a ``--ckpt_path`` checkpoint, as Lightning does, but never the class:
        the recipe's model class stays (a checkpoint of another objective is refused), and a ``_class_path`` stored
        in the checkpoint is ignored, so a checkpoint can never choose a module to import (Lightning's own parser
        would import it). The evaluation-time arguments (``EVALUATION_KEYS``) given on the command line or in the
        config win over the checkpoint's."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path or ckpt_path in ("last", "best", "hpc", "registry"):
            return
        if Path(ckpt_path).is_dir():
            raise ConfigError(f"ckpt_path: '{ckpt_path}' is a directory; give a checkpoint file (.ckpt) or 'last'")
        if not Path(ckpt_path).is_file():
            return  # Lightning's own one-line error names the missing file
        hparams = self._checkpoint_hparams(subcommand, ckpt_path)
        model = self.config[subcommand].model
        init = model.get("init_args") or {}
        given = {k: init[k] for k in EVALUATION_KEYS if k in init}
        if hparams:
            update = {"class_path": str(model.class_path), "init_args": hparams}  # the recipe's class, always
            try:
                self.config = self.parser.parse_object({subcommand: {"model": update}}, self.config)
            except (SystemExit, ArgumentError, ValueError, TypeError) as err:
                reason = next((ln.strip() for ln in str(err).splitlines() if "not accepted" in ln),
                              " ".join(str(err).split())[:200])
                raise ConfigError(f"ckpt_path: '{ckpt_path}' holds hyperparameters the recipe's "
                                  f"{str(model.class_path).rsplit('.', 1)[-1]} does not accept ({reason})") from err
        if given:
            model = self.config[subcommand].model
            target = model.dict_kwargs if model.get("dict_kwargs") else model.init_args
            for key, value in given.items():
                target[key] = value

    def _checkpoint_hparams(self, subcommand: str, ckpt_path: str) -> dict[str, Any]:
        """The constructor arguments stored in a plm_lightning checkpoint of the configured objective (keys starting
        with ``_``, Lightning's ``_class_path`` and ``_instantiator``, dropped)."""
        import torch

        from plm_lightning.checkpoint_format import CHECKPOINT_KEY

        try:
            ckpt = torch.load(ckpt_path, weights_only=True, map_location="cpu")
        except Exception as err:
            raise ConfigError(f"ckpt_path: '{ckpt_path}' is not a readable checkpoint ({err})") from err
        meta = ckpt.get(CHECKPOINT_KEY) if isinstance(ckpt, dict) else None
        if not isinstance(meta, dict) or not isinstance(ckpt.get("state_dict"), dict):
            raise ConfigError(f"ckpt_path: '{ckpt_path}' was not written by plm_lightning (no state_dict and "
                              f"'{CHECKPOINT_KEY}' metadata)")
        configured = str(self.config[subcommand].model.class_path).rsplit(".", 1)[-1]
        if meta.get("objective") != configured:
            raise ConfigError(f"ckpt_path: '{ckpt_path}' is from a {meta.get('objective')} recipe, not {configured}; "
                              "resume it with the recipe it was trained with")
        hparams = ckpt.get("hyper_parameters") or {}
        if not isinstance(hparams, dict):
            raise ConfigError(f"ckpt_path: '{ckpt_path}' has hyper_parameters that are not a mapping")
        return {k: v for k, v in hparams.items() if not str(k).startswith("_")}

    def before_instantiate_classes(self) -> None:
        subcommand = self.config.get("subcommand")
        follow_default_root_dir(self.config[subcommand] if subcommand else self.config)

    def before_fit(self) -> None:
        """``--ckpt_path last`` means the newest last.ckpt of this recipe's earlier runs (any logger version); with
        ``PLM_LIGHTNING_METRICS_FILE`` set (the sweep controller's trials), the metrics also go to that file."""
        from plm_lightning.callbacks.metrics_file import METRICS_FILE_ENV, MetricsFile

        if os.environ.get(METRICS_FILE_ENV):
            self.trainer.callbacks.append(MetricsFile(os.environ[METRICS_FILE_ENV], self.trainer.log_every_n_steps))
        sub = self.config_init.subcommand
        if self.config_init[sub].get("ckpt_path") == "last":
            found = find_last_checkpoint(self.trainer, self._lineage(sub))
            if found is None:
                print("plm_lightning: no last.ckpt from an earlier run of this recipe; starting from scratch",
                      file=sys.stderr)
            else:
                print(f"plm_lightning: resuming from {found}", file=sys.stderr)
            self.config_init[sub]["ckpt_path"] = str(found) if found else None
        claim_versions(self.trainer)
        if self.trainer.global_rank == 0:
            print(f"plm_lightning: this run writes to {run_directory(self.trainer)}", file=sys.stderr)

    def before_validate(self) -> None:
        claim_versions(self.trainer)

    def before_test(self) -> None:
        claim_versions(self.trainer)

    def _lineage(self, subcommand: str) -> dict[str, Any] | None:
        """What makes a run the continuation of an earlier one: its seed, model and data configuration, as the
        run's saved ``config.yaml`` writes them (the trainer section may change on resume: more steps)."""
        import yaml

        try:
            dumped = yaml.safe_load(self._parser(subcommand).dump(self.config[subcommand], skip_none=False))
        except Exception:  # noqa: BLE001 - a config jsonargparse cannot dump: no lineage check
            return None
        return lineage_of(dumped)

    @staticmethod
    def _parser_kwargs(run: bool) -> dict[str, Any]:
        common: dict[str, Any] = {"parser_mode": "omegaconf", "exit_on_error": False}
        if not run:
            return common | {"default_config_files": default_config_files()}
        per_command = {"default_config_files": default_config_files()}
        return {cmd: dict(per_command) for cmd in ("fit", "validate", "test", "predict")} | common


def check_config_files(argv: list[str]) -> None:
    """Each ``--config`` file readable as UTF-8 text and not empty, or one line naming it (jsonargparse would raise
    a UnicodeDecodeError, or say "Unexpected config" without the file)."""
    for i, arg in enumerate(argv):
        path = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else arg[len("--config="):] \
            if arg.startswith("--config=") else None
        if path is None or not Path(path).is_file():
            continue
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"--config: '{path}' is not UTF-8 text (byte {err.start}); save it as UTF-8") from err
        if not text.strip():
            raise ConfigError(f"--config: '{path}' is empty; give a recipe YAML (configs/*.yaml)")


def build_recipe(configs: list[str], overrides: list[str], prepare: bool = True) -> tuple[Any, Any]:
    """(data module, model) of a recipe (``configs`` and ``--key value`` ``overrides``), instantiated exactly as
    ``fit`` would, its data prepared with ``prepare``: the programmatic way in, used by ``inspect``, the arena, the
    data commands and the tools."""
    args = [a for c in configs for a in ("--config", c)] + overrides
    check_config_files(args)
    with warnings.catch_warnings():  # args given while sys.argv holds the `inspect` command line: intended here
        warnings.filterwarnings("ignore", message=".*args parameter is intended")
        cli = PLMCLI(args=args, run=False)
    datamodule = cli.datamodule
    if prepare:
        datamodule.prepare_data()
        datamodule.setup("fit")
    return datamodule, cli.model
