"""UnusedParameters stops a run on a trainable parameter that no loss reaches (DDP's find_unused_parameters=False
would stop on its second step), names it, and lets frozen parameters and fully used models through."""

import lightning as L
import pytest
import torch
from torch import nn

from plm_lightning.callbacks import UnusedParameters
from plm_lightning.errors import ConfigError


class _Model(L.LightningModule):
    def __init__(self, extra: bool, frozen: bool = False) -> None:
        super().__init__()
        self.used = nn.Linear(3, 1)
        self.extra = nn.Linear(3, 1) if extra else None
        if frozen and self.extra is not None:
            self.extra.requires_grad_(False)

    def training_step(self, batch, batch_idx):
        return self.used(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(model: L.LightningModule, tmp_path) -> None:
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)), batch_size=4)
    L.Trainer(max_steps=2, callbacks=[UnusedParameters()], logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path).fit(model, data)


def test_a_parameter_no_loss_reaches_stops_the_run_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"step 1: no loss reached extra.weight, extra.bias; DDP"):
        _fit(_Model(extra=True), tmp_path)


@pytest.mark.parametrize("extra", [False, True])
def test_used_or_frozen_parameters_pass(tmp_path, extra):
    _fit(_Model(extra=extra, frozen=True), tmp_path)


def test_steps_must_be_positive():
    with pytest.raises(ValueError, match="steps=0"):
        UnusedParameters(0)
