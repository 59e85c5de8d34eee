"""Data for recurrent-memory language models: Transformer-XL's ordered streams of consecutive segments."""

from __future__ import annotations

from plm_lightning.data.datamodule import BlockDataset, CausalLMDataModule
from plm_lightning.data.sampling import ResumableDataLoader, SegmentStreamSampler
from plm_lightning.errors import ConfigError


class RecurrentLMDataModule(CausalLMDataModule):
    """Transformer-XL data (Dai et al. 2019): contiguous blocks read as ``batch_size`` parallel streams of consecutive
    segments (``SegmentStreamSampler``), in training and validation alike, so a model with memory (``mem_len``)
    carries each row's context from one batch to the next."""

    document_mask_refusal = ("streams contiguous text whose memory crosses rows and documents by design (Dai et al. "
                            "2019); the memory has no per-document mask")

    recurrent = True

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        blocks = self.blocks[split]
        replicas, rank = self._replicas()
        if len(blocks) < self.batch_size * replicas:
            if split == "train":
                raise ConfigError(f"data: {len(blocks)} training blocks of data.seq_len={self.seq_len} cannot fill "
                                  f"data.batch_size={self.batch_size} streams; lower data.batch_size or data.seq_len")
            return []
        sampler = SegmentStreamSampler(len(blocks), self.batch_size, replicas, rank)
        return self._resumable(BlockDataset(blocks), sampler, True)
