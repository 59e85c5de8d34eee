"""BART data (Lewis et al. 2020): documents cut into rows of whole sentences (fairseq's ``complete_doc`` blocks:
RoBERTa's DOC-SENTENCES packing), each row ``<s> ... </s>`` noised for the encoder (``data.corruption.bart_noise``)
and reconstructed whole by the decoder, which reads it shifted right from ``</s>`` (BART's decoder start token)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.blocks import PackingMode
from plm_lightning.data.collators import length_mask, pad_rows, sample_keys
from plm_lightning.data.corruption import IGNORE_INDEX
from plm_lightning.data.corruption.bart_noise import BARTNoise, MaskLength, SpanPlacement, bart_noise
from plm_lightning.data.datamodule import TextDataModule
from plm_lightning.data.seq2seq import shift_right
from plm_lightning.errors import ConfigError


class BARTCollator:
    """Rows -> encoder ``input_ids`` (noised), ``labels`` (the original row), ``decoder_input_ids`` (the original
    shifted right from ``</s>``), padded per batch; ``noise_tokens``, ``noise_spans`` and ``inserted_tokens`` per row
    for ``inspect``."""

    objective = "denoising"
    sentinels = np.zeros(0, dtype=np.int64)

    def __init__(self, noise: BARTNoise, bos_id: int, eos_id: int, pad_id: int, mask_id: int, random_ids: np.ndarray,
                 seed: int = 0) -> None:
        self.noise, self.bos_id, self.eos_id, self.pad_id, self.mask_id = noise, bos_id, eos_id, pad_id, mask_id
        self.random_ids, self.seed = random_ids, seed

    def describe(self, batch: dict[str, torch.Tensor]) -> str:
        """The noise of the batch's first row, in words (``inspect``)."""
        n = self.noise
        return (f"{n.mask_length} masking of {n.mask_ratio:g} of the words (replace_length={n.replace_length}, "
                f"lambda={n.poisson_lambda:g}, {n.placement}), sentence permutation {n.permute_sentence_ratio:g}, "
                f"rotation {n.rotate_ratio:g}, insertion {n.insert_ratio:g}; {int(batch['noise_tokens'][0])} "
                f"tokens noised in {int(batch['noise_spans'][0])} spans")

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        targets, noised = [], []
        for s, key in zip(samples, sample_keys(self.seed, samples)):
            real = np.asarray(s["document_ids"]) >= 0
            row = np.asarray(s["input_ids"])[real].astype(np.int64)
            row[0], row[-1] = self.bos_id, self.eos_id  # the packer's [CLS]/[SEP] are <s>/</s> for a BART vocabulary
            words = np.asarray(s["word_starts"])[real]
            sentences = (np.asarray(s["sentence_starts"])[real] if s.get("sentence_starts") is not None
                         else np.zeros(len(row), dtype=bool))
            targets.append(row)
            noised.append(bart_noise(row, words, sentences, self.noise, np.random.default_rng(int(key)), self.mask_id,
                                     self.random_ids))
        labels = pad_rows(targets, IGNORE_INDEX)
        decoder_inputs = shift_right(labels.numpy(), self.eos_id, self.pad_id)
        return {"input_ids": pad_rows([x.source for x in noised], self.pad_id),
                "attention_mask": length_mask([x.source for x in noised]), "labels": labels,
                "decoder_input_ids": torch.from_numpy(decoder_inputs), "decoder_attention_mask": labels != IGNORE_INDEX,
                "noise_tokens": torch.tensor([x.noised for x in noised]),
                "noise_spans": torch.tensor([x.spans for x in noised]),
                "inserted_tokens": torch.tensor([x.inserted for x in noised])}


class BARTDataModule(TextDataModule):
    """BART's denoising data: rows of whole sentences of one document, noised by :class:`BARTNoise`."""

    document_mask_refusal = ("permutes and infills the row as one text and its encoder-decoder has no per-document mask "
                            "(its doc_sentences packing keeps one document per row)")

    inspection_view = "seq2seq"

    required_special_tokens = ("pad", "bos", "eos", "mask", "cls", "sep")
    decoder_start_token = "eos"

    def __init__(self, *args: Any, tokenizer: str = "bpe", packing: PackingMode = "doc_sentences",
                 mask_ratio: float = 0.3, mask_length: MaskLength = "span-poisson", poisson_lambda: float = 3.0,
                 replace_length: int = 1, mask_random: float = 0.0, insert_ratio: float = 0.0,
                 permute_sentence_ratio: float = 1.0, rotate_ratio: float = 0.0, placement: SpanPlacement = "exact",
                 **kwargs: Any) -> None:
        """
        Args:
            mask_ratio: Share of the words masked (BART: 0.3).
            mask_length: subword (token masking/deletion), word (whole words) or span-poisson (text infilling).
            poisson_lambda: Mean span length in words for span-poisson (BART: 3; fairseq's bart.large run: 3.5).
            replace_length: -1 = a mask per masked token, 0 = delete the masked tokens, 1 = one mask per span.
            mask_random: Share of the masked spans that get a random token instead of <mask> (fairseq: 0.1).
            insert_ratio: Extra mask/random tokens inserted, as a share of the row.
            permute_sentence_ratio: Share of the sentences shuffled (BART: 1.0, every sentence).
            rotate_ratio: Probability of rotating the document to start at a random token.
            placement: exact (spans never overlap, exactly mask_ratio of the words) or fairseq (independent starts
                that may overlap, about 27% covered for 0.3).
        """
        super().__init__(*args, tokenizer=tokenizer, packing=packing, **kwargs)
        if self.packing not in ("doc_sentences", "full_sentences"):
            raise ConfigError(f"data.packing={self.packing}: BART reads rows of whole sentences (doc_sentences, as "
                              "fairseq's complete_doc, or full_sentences)")
        self.noise = BARTNoise(mask_ratio=mask_ratio, mask_length=mask_length, poisson_lambda=poisson_lambda,
                               replace_length=replace_length, mask_random=mask_random, placement=placement,
                               insert_ratio=insert_ratio, permute_sentence_ratio=permute_sentence_ratio,
                               rotate_ratio=rotate_ratio)

    @property
    def max_input_length(self) -> int:
        """The longest encoder input noise can make: zero-length spans and insertions add tokens."""
        zero_spans = math.ceil(self.seq_len * self.noise.mask_ratio) if self.noise.mask_length == "span-poisson" else 0
        return self.seq_len + zero_spans + math.ceil((self.seq_len + zero_spans) * self.noise.insert_ratio)

    def collator(self) -> BARTCollator:
        tok = self.tokenizer
        random_ids = np.setdiff1d(np.arange(tok.vocab_size), tok.special_ids())
        return BARTCollator(self.noise, tok.ids["bos"], tok.ids["eos"], tok.ids["pad"], tok.ids["mask"], random_ids,
                            self.seed)
