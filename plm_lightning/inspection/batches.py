"""The batches ``inspect`` looks at, and the stream (language) mix of multilingual data."""

from __future__ import annotations

from plm_lightning.data.datamodule import TextDataModule


def sample_batches(datamodule: TextDataModule, n: int, progress: float | None = None):  # noqa: ANN202
    """``n`` training batches spread evenly over the first epoch (so schedules show all their stages), or the
    batch at training ``progress`` (in epochs)."""
    loader = datamodule.train_dataloader()
    if progress is not None:
        loader.sampler.set_epoch(int(progress))
    keys = list(loader.sampler)
    bs = datamodule.batch_size
    total = max(1, len(keys) // bs)
    if progress is not None:
        starts = [min(total - 1, int((progress - int(progress)) * total))]
    else:
        starts = sorted({int(i * total / min(n, total)) for i in range(min(n, total))})
    for b in starts:
        samples = [loader.dataset[k] for k in keys[b * bs:(b + 1) * bs]]
        yield samples, loader.collate_fn(samples)
