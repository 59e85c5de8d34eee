"""Where a run of the CLI writes, and which earlier run it continues: the recipes' file loggers follow
``trainer.default_root_dir``, each run claims a version directory of its own (``mkdir``, atomic), and
``--ckpt_path last`` finds the newest ``last.ckpt`` of this run's lineage (its seed, model and data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plm_lightning.errors import ConfigError

LINEAGE_KEYS = ("seed_everything", "model", "data")


def lineage_of(config: Any) -> dict[str, Any] | None:
    return {k: config.get(k) for k in LINEAGE_KEYS} if isinstance(config, dict) else None


def _saved_lineage(checkpoint: Path) -> dict[str, Any] | None:
    """The lineage in the ``config.yaml`` of the run that wrote ``checkpoint`` (``<version>/checkpoints/last.ckpt``)."""
    import yaml

    for directory in (checkpoint.parent.parent, checkpoint.parent):
        config = directory / "config.yaml"
        if config.is_file():
            try:
                return lineage_of(yaml.safe_load(config.read_text(encoding="utf-8")))
            except (OSError, ValueError, yaml.YAMLError):
                return None
    return None


def find_last_checkpoint(trainer: Any, lineage: dict[str, Any] | None = None) -> Path | None:
    """Newest ``last.ckpt`` under the logger's directory for this recipe (all versions) or default_root_dir, of this
    run's lineage: a run whose saved config has another seed, model or data configuration (another run started in
    the same directory) is never resumed; when every candidate is of another lineage, a one-line error lists them.
    A checkpoint without a saved config is taken as it is."""
    roots = [Path(trainer.default_root_dir)]
    logger = trainer.logger
    if logger is not None and getattr(logger, "save_dir", None):
        roots.append(Path(logger.save_dir) / (logger.name or ""))
    found = sorted({p.resolve() for root in roots if root.is_dir() for p in root.rglob("last.ckpt")},
                   key=lambda p: p.stat().st_mtime)
    if not found or lineage is None:
        return found[-1] if found else None
    ours = [p for p in found if _saved_lineage(p) in (None, lineage)]
    if not ours:
        listed = ", ".join(str(p) for p in found[-3:])
        raise ConfigError(f"ckpt_path last: the last.ckpt files here ({listed}) are of runs with another seed, model "
                          "or data configuration; give the one to resume with --ckpt_path PATH")
    return ours[-1]


WANDB_LOGGER = "plm_lightning.loggers.WandbLogger"
RECIPE_LOG_DIR = "runs"
"""Where the recipes' file loggers write (``save_dir``), each under its recipe's name: ``runs/<recipe>``, which is
also their ``trainer.default_root_dir``."""


def follow_default_root_dir(config: Any) -> None:
    """The recipes' loggers write under ``trainer.default_root_dir``: a root other than the recipe's moves its
    CSV/TensorBoard loggers there too (logs in ``<dir>/version_N``, checkpoints in ``<dir>/version_N/checkpoints``),
    and our W&B logger (``configs/logger/wandb.yaml``) writes its runs there (``<dir>/<run id>``, W&B's files in
    ``<dir>/wandb``), unless their ``save_dir`` was changed as well: without this the recipes' ``save_dir: runs``
    kept every run in ``./runs/<recipe>``, and W&B's in ``./runs/<project>``."""
    trainer = config.get("trainer") if config is not None else None
    root = trainer.get("default_root_dir") if trainer is not None else None
    loggers = trainer.get("logger") if trainer is not None else None
    if not root or loggers is None or isinstance(loggers, bool):
        return
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        class_path = str(logger.get("class_path", ""))
        args = logger.get("init_args")
        if args is None or args.get("save_dir") != RECIPE_LOG_DIR:
            continue
        if class_path == WANDB_LOGGER:
            args["save_dir"] = str(root)
        elif class_path.endswith(("CSVLogger", "TensorBoardLogger")) and \
                Path(RECIPE_LOG_DIR) / str(args.get("name")) != Path(root):
            args["save_dir"], args["name"] = str(Path(root).parent), Path(root).name


def run_directory(trainer: Any) -> str:
    """The directory of this run, where its checkpoints go (``<run directory>/checkpoints``, as Lightning's
    ``ModelCheckpoint`` places them: the first logger's ``save_dir/name/version``) and its config is saved; the
    trainer's root without a logger."""
    import os

    if not trainer.loggers:
        return trainer.default_root_dir
    logger = trainer.loggers[0]
    if logger.version is None:
        logger.experiment  # noqa: B018 - W&B's run id is known once its run is started (Lightning starts it anyway)
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return os.path.join(logger.save_dir or trainer.default_root_dir, str(logger.name), version)


def claim_versions(trainer: Any) -> None:
    """Give each file logger (CSV, TensorBoard) without a set version a version directory of its own, claimed with
    ``mkdir`` (atomic), so runs started together in one directory never share ``version_N``. Rank 0 claims; other
    ranks never write logs."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    if trainer.global_rank != 0:
        return
    for logger in trainer.loggers:
        if not isinstance(logger, CSVLogger | TensorBoardLogger) or logger._version is not None:
            continue
        root = Path(logger.root_dir)
        root.mkdir(parents=True, exist_ok=True)
        version = logger._get_next_version()
        while True:
            try:
                (root / f"version_{version}").mkdir()
                break
            except FileExistsError:
                version += 1
        logger._version = version


RESULTS_SUFFIX = ".lm-eval.json"
"""``evaluate``'s results beside a checkpoint: ``last.ckpt`` -> ``last.lm-eval.json`` (export's model card reads them)."""
GLUE_SUFFIX = ".glue.json"
"""``glue``'s report beside a checkpoint: ``last.ckpt`` -> ``last.glue.json`` (export's model card reads it)."""


def results_path(checkpoint: str | Path, suffix: str = RESULTS_SUFFIX) -> Path:
    """Where ``evaluate`` (``suffix``: ``glue``'s) writes a checkpoint's results by default (a transformers
    directory: inside it)."""
    path = Path(checkpoint)
    return path / f"results{suffix}" if path.is_dir() else path.with_name(path.stem + suffix)
