"""Learning-rate schedules: a multiplier of the peak rate per optimizer step (``torch.optim.lr_scheduler.LambdaLR``)."""

from __future__ import annotations

import math


def lr_lambda(warmup: int, total: int, schedule: str, min_ratio: float):  # noqa: ANN201
    """Linear warmup to the peak, then linear (BERT, Devlin et al. 2019 A.2) or cosine (GPT-3) decay to
    ``min_ratio`` at ``total`` steps."""

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        decay = 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * decay

    return factor
