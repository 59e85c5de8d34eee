"""MASS data: contiguous rows of the corpus, one masked fragment per row (``data.corruption.mass``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.blocks import PackingMode
from plm_lightning.data.collators import sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.mass import mass_corrupt
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.errors import ConfigError


class MASSCollator:
    """Rows -> encoder ``input_ids`` (fragment masked), ``decoder_input_ids`` (the fragment shifted right, the token
    before it first), ``labels`` (the fragment), ``cross_attention_mask`` (the encoder positions the decoder sees: all
    real ones but the mask tokens, as microsoft/MASS; a row masked whole keeps them all, else the decoder would attend
    to nothing), padded per batch."""

    objective = "masked_seq2seq"
    sentinels = np.zeros(0, dtype=np.int64)

    def __init__(self, mask_id: int, pad_id: int, eos_id: int, random_ids: np.ndarray, fragment_ratio: float = 0.5,
                 mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, seed: int = 0,
                 hide_masks_from_decoder: bool = True) -> None:
        self.mask_id, self.pad_id, self.eos_id, self.random_ids = mask_id, pad_id, eos_id, random_ids
        self.fragment_ratio, self.seed, self.hide_masks_from_decoder = fragment_ratio, seed, hide_masks_from_decoder
        self.mask_replace_prob, self.random_replace_prob = mask_replace_prob, random_replace_prob

    def describe(self, batch: dict[str, torch.Tensor]) -> str:
        """The corruption of the batch's first row, in words (``inspect``)."""
        return f"fragment_ratio={self.fragment_ratio} (fragment starts at {int(batch['fragment_start'][0])})"

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = []
        for s, key in zip(samples, sample_keys(self.seed, samples)):
            tokens = np.asarray(s["input_ids"])[np.asarray(s["document_ids"]) >= 0].astype(np.int64)
            rows.append(mass_corrupt(tokens, self.fragment_ratio, np.random.default_rng(int(key)), self.mask_id,
                                     self.random_ids, self.mask_replace_prob, self.random_replace_prob, self.pad_id))
        n, m = max(len(r[0]) for r in rows), max(len(r[2]) for r in rows)
        enc = np.full((len(rows), n), self.pad_id, dtype=np.int64)
        dec = np.full((len(rows), m), self.pad_id, dtype=np.int64)
        labels = np.full((len(rows), m), IGNORE_INDEX, dtype=np.int64)
        real = np.zeros((len(rows), n), dtype=bool)
        for i, (e, d, t, _) in enumerate(rows):
            enc[i, : len(e)], real[i, : len(e)], dec[i, : len(d)], labels[i, : len(t)] = e, True, d, t
        batch = {"input_ids": torch.from_numpy(enc), "attention_mask": torch.from_numpy(real),
                 "decoder_input_ids": torch.from_numpy(dec), "labels": torch.from_numpy(labels),
                 "decoder_attention_mask": torch.from_numpy(labels != IGNORE_INDEX),
                 "fragment_start": torch.tensor([r[3] for r in rows])}
        if self.hide_masks_from_decoder:
            seen = real & (enc != self.mask_id)
            whole = ~seen.any(axis=1)
            seen[whole] = real[whole]
            batch["cross_attention_mask"] = torch.from_numpy(seen)
        return batch


class MASSDataModule(TextDataModule):
    """MASS: contiguous ``seq_len`` rows, one fragment of ``fragment_ratio`` of each masked for the encoder and
    predicted by the decoder."""

    document_mask_refusal = ("masks one fragment of the packed row and its encoder-decoder has no per-document mask")

    inspection_view = "seq2seq"

    required_special_tokens = ("pad", "eos", "mask")
    decoder_start_token = "pad"

    def __init__(self, *args: Any, tokenizer: str = "bpe", packing: PackingMode = "contiguous",
                 fragment_ratio: float = 0.5, mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
                 hide_masks_from_decoder: bool = True, **kwargs: Any) -> None:
        """
        Args:
            fragment_ratio: k / length, the masked fragment's share of each row (MASS: 0.5; a ratio giving k = 1 is
                BERT-like, 1.0 GPT-like).
            mask_replace_prob: Of the fragment's encoder tokens, the share replaced by the mask token.
            random_replace_prob: ... replaced by a random token (the rest stay unchanged).
            hide_masks_from_decoder: The decoder's cross-attention skips the encoder's mask tokens (microsoft/MASS's
                ``enc_mask``); false lets it attend to every real encoder position.
        """
        super().__init__(*args, tokenizer=tokenizer, packing=packing, **kwargs)
        if not 0.0 < fragment_ratio <= 1.0:
            raise ConfigError(f"data.fragment_ratio={fragment_ratio} must lie in (0, 1] (MASS: 0.5)")
        if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1:
            raise ConfigError(f"data.mask_replace_prob={mask_replace_prob} + data.random_replace_prob="
                              f"{random_replace_prob} must be probabilities summing to <= 1")
        self.fragment_ratio, self.mask_replace_prob, self.random_replace_prob = (fragment_ratio, mask_replace_prob,
                                                                                random_replace_prob)
        self.hide_masks_from_decoder = hide_masks_from_decoder

    def collator(self) -> MASSCollator:
        tok = self.tokenizer
        random_ids = np.setdiff1d(np.arange(tok.vocab_size), tok.special_ids())
        return MASSCollator(tok.ids["mask"], tok.ids["pad"], tok.ids["eos"], random_ids, self.fragment_ratio,
                            self.mask_replace_prob, self.random_replace_prob, self.seed,
                            self.hide_masks_from_decoder)
