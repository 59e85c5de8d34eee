"""``python -m plm_lightning``: LightningCLI (fit/validate/test/predict) plus inspect, export, import and the knowledge
tools (world, probe, causal-trace, edit).

Errors in user input print one line on stderr and exit with code 2; ``PLM_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningCLI

from plm_lightning.command_index import EXTRA_COMMANDS, answer_without_lightning
from plm_lightning.errors import ConfigError
from plm_lightning.files import os_error_line
from plm_lightning.run_directory import claim_versions, find_last_checkpoint, follow_default_root_dir, lineage_of, run_directory


def default_config_files() -> list[str]:
    """Defaults under every recipe: callbacks/default.yaml, a CSV metrics logger and atomic checkpoints."""
    package = Path(__file__).resolve().parent
    return [str(package / "callbacks" / "default.yaml"), str(package / "trainer_defaults.yaml")]


EVALUATION_KEYS = ("eval_mem_len",)
"""Model arguments that only change how a trained model is evaluated: given with ``--ckpt_path``, they override the
checkpoint's (Lightning otherwise restores every hyperparameter from it)."""


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


def _fail(message: str) -> None:
    first = " ".join(str(message).strip().split("\n")[0].split())
    print(f"plm_lightning: error: {first}", file=sys.stderr)
    raise SystemExit(2)


def _explain_parse_error(err: Exception) -> str:
    """Turn a jsonargparse error into one line naming the key and the valid alternatives."""
    import re

    text = " ".join(str(err).split())
    section = re.search(r'Parser key "([\w.]+)"', text)
    option = re.search(r"Option '([\w.]+)' is not accepted", text) or re.search(r'No action for key "([\w.]+)"', text)
    if option:
        key = f"{section.group(1)}.{option.group(1)}" if section else option.group(1)
        top = key.split(".")[0]
        given = re.search(r"given class_path '([\w.]+)'", text)  # the recipe's class: its keys, not every class's
        valid = _valid_keys(top, given.group(1).rsplit(".", 1)[-1] if given else None)
        if valid:
            return f"unknown key '{key}'; valid keys under '{top}': {', '.join(valid)}"
        return f"unknown key '{key}'"
    typed = re.search(r'Parser key "([\w.]+)": Expected a (.+?)\. Got value: (\S+)', text)
    if typed:
        key = f"{section.group(1)}.{typed.group(1)}" if section and section.group(1) != typed.group(1) else typed.group(1)
        expected, got = typed.group(2), typed.group(3)
        choices = re.fullmatch(r"typing\.Literal\[(.*)\]", expected)
        if choices:
            return f"{key}={got!r} is not one of {choices.group(1)}"
        expected = re.sub(r"<class '([\w.]+)'>", r"\1", expected)
        return f"{key}={got!r} is not a valid {expected}"
    return text


def _valid_keys(section: str, class_name: str | None = None) -> list[str]:
    """The constructor keys under ``section``: of the class named ``class_name`` when it is one of ours, else of every
    class that section may name (a name is matched, never imported)."""
    import inspect as pyinspect

    from plm_lightning.registry import lightning_classes

    classes: dict[str, list[type]] = {"model": lightning_classes("model"), "data": lightning_classes("data")}
    if section.split(".")[0] == "trainer":
        import lightning as L

        classes["trainer"] = [L.Trainer]
    names: list[str] = []
    candidates = classes.get(section.split(".")[0], [])
    named = [cls for cls in candidates if cls.__name__ == class_name]
    for cls in named or candidates:
        for klass in cls.__mro__:
            if "__init__" in vars(klass):
                for p in pyinspect.signature(klass.__init__).parameters.values():
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" and p.name not in names:
                        names.append(p.name)
    return names


class _NoAdvertisement(logging.Filter):
    """Drops Lightning's "try installing litlogger" tip, printed at the start of every run of the CLI."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in str(record.msg)


_NO_ADVERTISEMENT = _NoAdvertisement()


def show_our_log() -> None:
    """Our modules' INFO messages (which attention kernel runs, once) on stderr as ``plm_lightning: ...`` lines."""
    ours = logging.getLogger("plm_lightning")
    if not ours.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("plm_lightning: %(message)s"))
        ours.addHandler(handler)
        ours.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> None:
    for name in ("lightning.fabric.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NO_ADVERTISEMENT)
    show_our_log()
    from_sys = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    answered = answer_without_lightning(argv)
    if answered is not None:
        sys.exit(answered)
    try:
        generating = argv[:1] == ["predict"] and len(argv) > 1 and (not argv[1].startswith("-")
                                                                    or argv[1:] in (["-h"], ["--help"]))
        if argv and (argv[0] in EXTRA_COMMANDS or generating):  # `predict --config ...` stays LightningCLI's
            from plm_lightning import commands

            getattr(commands, f"run_{argv[0].replace('-', '_')}")(argv[1:])
        else:
            check_config_files(argv)
            PLMCLI(args=None if from_sys else argv)
    except SystemExit:
        raise
    except BrokenPipeError:  # `inspect ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as err:  # noqa: BLE001 - the CLI's one-line error contract
        if os.environ.get("PLM_DEBUG"):
            raise
        user_error = _find_user_error(err)
        if user_error is not None:
            _fail(_explain_parse_error(user_error) if _is_parse_error(user_error) else str(user_error))
        line = os_error_line(err) if isinstance(err, OSError) else None
        if line is not None:
            _fail(line)
        raise


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


def _is_parse_error(err: BaseException) -> bool:
    from jsonargparse import ArgumentError

    return isinstance(err, ArgumentError)


def _find_user_error(err: BaseException) -> BaseException | None:
    """The ConfigError / parse error / missing file / Lightning misconfiguration (``trainer.enable_progress_bar=false``
    with a progress-bar callback, ...) behind ``err`` (possibly wrapped by Lightning or jsonargparse)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        if isinstance(e, ConfigError | FileNotFoundError | MisconfigurationException) or _is_parse_error(e):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None
