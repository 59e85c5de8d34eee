"""Building one LightningModule inside another's ``__init__``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def nested_construction() -> Iterator[None]:
    """Build a LightningModule inside another one's ``__init__`` (a pretrained model a fine-tuning head loads, a
    distillation teacher): LightningCLI hands the outer module's arguments to every ``save_hyperparameters`` call
    made while it instantiates, so without this the inner module would record the outer one's hyperparameters."""
    from lightning.pytorch.core.mixins import hparams_mixin

    token = hparams_mixin._given_hyperparameters.set(None)
    try:
        yield
    finally:
        hparams_mixin._given_hyperparameters.reset(token)
