"""Which objectives and data modules exist, without a hand-kept list: a class declares itself by subclassing
Lightning's ``LightningModule`` or ``LightningDataModule``, as every recipe's classes (and a user's own, in their own
package) do. ``lightning_classes`` imports every module of our packages (their ``__init__`` imports lazily), then walks
the subclass tree; a user's class is found once its module is imported (LightningCLI imports it from the
``class_path`` it is given).

Used where the CLI names what a section accepts (the valid keys of ``--model.*`` and ``--data.*``)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Literal

PACKAGES = ("plm_lightning.objectives", "plm_lightning.data", "plm_lightning.finetune")
"""The packages whose import defines our classes."""


def _subclasses(base: type) -> list[type]:
    found, todo = [], list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.append(cls)
            todo.extend(cls.__subclasses__())
    return found


def lightning_classes(section: Literal["model", "data"]) -> list[type]:
    """Every ``LightningModule`` (``model``) or ``LightningDataModule`` (``data``) class defined outside Lightning's
    own packages, ours first, in name order; FSDP2's per-instance ``FSDP<Name>`` classes are left out."""
    import lightning as L

    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(module.name)
    base = L.LightningModule if section == "model" else L.LightningDataModule
    classes = [c for c in _subclasses(base) if not c.__module__.startswith(("lightning.", "pytorch_lightning."))
               and not c.__name__.startswith(("FSDP", "_"))]
    return sorted(classes, key=lambda c: (not c.__module__.startswith("plm_lightning."), c.__name__))
