"""Multilingual masked-LM data: XLM (Lample & Conneau 2019) and multilingual BERT (Devlin et al. 2019, the
multilingual README).

One corpus per language packs into its own stream of blocks; one tokenizer is trained on all of them (XLM's shared
BPE vocabulary); each training draw picks a stream with exponentially smoothed probabilities (q_i ~ p_i^alpha,
:func:`smoothed_probabilities`). XLM adds a language embedding to every token (carried as ``token_type_ids``, so
the backbone's type embedding is the language embedding) and trains translation language modelling (TLM, sec. 3.3)
on parallel corpora: a sentence pair is concatenated, positions restart at the target sentence and masking hits
both sides, so a masked word can be recovered from its translation.

corruption: MLM masking of any scheme, in every language and on both sides of a TLM pair | attention:
bidirectional | loss: masked positions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from plm_lightning.corpus.block_cache import cached_splits, tokenizer_hash
from plm_lightning.corpus.blocks import (
    FORMAT_VERSION,
    PackedBlocks,
    pack_translation_pairs,
    split_documents,
)
from plm_lightning.corpus.pack_partitions import PackingJob, load_shards, prepare_shards
from plm_lightning.corpus.partitions import Partition, plan_pair_partitions, sample_documents
from plm_lightning.corpus.sources import (
    FAKE_PREFIX,
    load_documents,
    load_parallel,
    parallel_fingerprint,
    source_fingerprint,
)
from plm_lightning.corpus.tokenized import flagged_pairs
from plm_lightning.data.collators import MaskedLMCollator
from plm_lightning.data.datamodule import MaskedLMDataModule
from plm_lightning.data.inspection_notes import InspectionNotes, StreamNotes
from plm_lightning.data.sampling import ResumableDataLoader, smoothed_probabilities
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError

PAIR_PACKINGS = ("sentence_pairs", "sentence_order")


class MultilingualMLMCollator(MaskedLMCollator):
    """Any masked-LM corruption, plus the language of every token as ``token_type_ids`` (XLM's language
    embeddings; without them a TLM pair's sides take segment ids 0 and 1) and, with TLM, the restarted positions."""

    def __init__(self, *args: Any, language_embeddings: bool = True, restart_positions: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.language_embeddings, self.restart_positions = language_embeddings, restart_positions

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        out = super().__call__(samples)
        real = out["attention_mask"].numpy()
        positions = np.stack([s["position_ids"] for s in samples]).astype(np.int64)
        if self.language_embeddings:
            types = np.stack([s["language_ids"] for s in samples]).astype(np.int64)
            out["token_type_ids"] = torch.from_numpy(np.where(real, types, 0))
        elif self.restart_positions and "token_type_ids" not in out:  # side of a TLM pair: 0 source, 1 target
            sides = np.cumsum((positions == 0) & real, axis=1) - 1
            out["token_type_ids"] = torch.from_numpy(np.where(real, np.clip(sides, 0, 1), 0))
        if self.restart_positions:
            out["position_ids"] = torch.from_numpy(positions)
        out["stream"] = torch.tensor([s["stream"] for s in samples])
        return out


class MultiCorpusMixin:
    """One corpus per language for any :class:`TextDataModule`: the shared tokenizer trains on all of them, each
    packs into its own stream, and training draws pick a language with q_i ~ p_i^``language_alpha``
    (:func:`smoothed_probabilities`)."""

    def _init_corpora(self, corpora: dict[str, str] | None, language_alpha: float) -> None:
        if not corpora:
            raise ConfigError("data.corpora: give at least one language, e.g. {en: embedded, fake: fake:embedded}")
        if language_alpha <= 0:
            raise ConfigError(f"data.language_alpha={language_alpha} must be > 0 (XLM 0.5, multilingual BERT 0.7, "
                              "XLM-R and mT5 0.3; 1 keeps the natural mix)")
        self.corpora, self.languages, self.language_alpha = dict(corpora), list(corpora), language_alpha
        self._language_documents: dict[str, tuple[list[str], str]] = {}
        self.stream_names: list[str] = []
        self.stream_languages: list[int] = []
        self.stream_blocks: dict[str, list[PackedBlocks]] = {}

    # -- text: every language feeds the shared tokenizer --------------------------------------------------------
    def language_documents(self, language: str) -> tuple[list[str], str]:
        if language not in self._language_documents:
            try:
                self._language_documents[language] = load_documents(self.corpora[language], self.text_field,
                                                                    self.split_name, self.max_documents)
            except ConfigError as err:
                raise ConfigError(f"data.corpora[{language}]: {err}") from err
        return self._language_documents[language]

    def _language_fingerprint(self, language: str) -> str:
        if language in self._language_documents:
            return self._language_documents[language][1]
        cheap = source_fingerprint(self.corpora[language], self.text_field, self.max_documents)
        return cheap if cheap is not None else self.language_documents(language)[1]

    def documents(self) -> tuple[list[str], str]:
        docs = [d for lang in self.languages for d in self.language_documents(lang)[0]]
        return docs, self._fingerprint()

    def corpus_sources(self) -> list[str | None]:
        return [self.corpora[lang] for lang in self.languages]

    def _language_partitions(self, language: str) -> tuple[list, str] | None:
        try:
            return self.partitions(self.corpora[language])
        except ConfigError as err:
            raise ConfigError(f"data.corpora[{language}]: {err}") from err

    def _tokenizer_texts(self) -> Iterator[str]:
        """Every language's text, a corpus on disk through its bounded sample (``tokenizer_train_bytes`` shared
        equally by the languages)."""
        for lang in self.languages:
            planned = self._language_partitions(lang)
            if planned is None:
                yield from self.language_documents(lang)[0]
            else:
                yield from sample_documents(planned[0], self.text_field, self.tokenizer_train_bytes // len(self.languages))

    def _tokenizer_fingerprint(self) -> str:
        sampled = [lang for lang in self.languages if (planned := self._language_partitions(lang)) is not None
                   and sum(p.size for p in planned[0]) > self.tokenizer_train_bytes // len(self.languages)]
        return self._fingerprint() + (f"-sample{self.tokenizer_train_bytes}" if sampled else "")

    def _fingerprint(self) -> str:
        return "multilingual-" + "|".join(f"{lang}={self._language_fingerprint(lang)}" for lang in self.languages)

    # -- blocks: one stream per language ------------------------------------------------------------------------
    def _load_blocks(self) -> None:
        length, _ = self.packed_length(), self.tokenizer  # the tokenizer's errors name their own language
        streams: dict[str, list[PackedBlocks]] = {"train": [], "val": []}
        for lang in self.languages:
            try:
                blocks = self.blocks_of(self.corpora[lang], lambda lang=lang: self.language_documents(lang)[0],
                                        lambda lang=lang: self._language_fingerprint(lang))
            except ConfigError as err:
                raise ConfigError(f"data.corpora[{lang}]: {err}") from err
            if len(blocks["train"]) == 0:
                raise ConfigError(f"data.corpora[{lang}]: '{self.corpora[lang]}' yields no {length}-token "
                                  f"training block with packing={self.packing}; add text or lower data.seq_len")
            for split in streams:
                streams[split].append(blocks[split])
        self.stream_names, self.stream_languages = list(self.languages), list(range(len(self.languages)))
        self.stream_blocks = streams
        self.blocks = {split: streams[split][0] for split in streams}  # the first language's, for generic readers

    def inspection_notes(self) -> list[InspectionNotes]:
        return [*super().inspection_notes(), StreamNotes(self)]  # type: ignore[misc] - the mixin precedes a TextDataModule

    def stream_weights(self) -> np.ndarray:
        """Training probability of each language's stream."""
        sizes = [len(b) for b in self.stream_blocks["train"][: len(self.languages)]]
        return smoothed_probabilities(sizes, self.language_alpha)

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        return self._stream_loader(self.stream_blocks[split], shuffle, self.stream_weights() if shuffle else None,
                                   self.stream_languages)


class MultilingualDataModule(MultiCorpusMixin, MaskedLMDataModule):
    """XLM / multilingual BERT data: ``corpora`` (language -> source), smoothed language sampling, language ids,
    and TLM from ``parallel_corpora``. Every masked-LM option (masking scheme, packing, static masking) applies
    per language."""

    def contract(self) -> DataContract:
        return replace(super().contract(), stream_names=tuple(self.stream_names))

    def __init__(
        self,
        *args: Any,
        corpora: dict[str, str] | None = None,
        language_alpha: float = 0.5,
        parallel_corpora: dict[str, str] | None = None,
        tlm_fraction: float = 0.5,
        language_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            corpora: Language code -> source (any data.source: embedded, files, a HF dataset, or fake:<source> for
                Fake-English), in the order that numbers the languages.
            language_alpha: Sampling exponent: a language is drawn with probability q_i ~ p_i^alpha, p_i its share
                of the blocks (XLM 0.5, multilingual BERT 0.7, XLM-R 0.3; 1 = the natural mix). Parallel corpora
                are mixed among themselves with the same exponent.
            parallel_corpora: TLM: "src-tgt" (two languages of ``corpora``) -> a UTF-8 file of source<TAB>target
                lines, or fake:<source> (each sentence paired with its Fake-English version).
            tlm_fraction: Share of the training draws that are TLM pairs when parallel corpora are given (XLM
                alternates MLM and TLM batches: 0.5).
            language_embeddings: XLM: add a learned language embedding to every token (the backbone's
                token-type embedding, resized to the number of languages); multilingual BERT has none.
        """
        super().__init__(*args, **kwargs)
        self._init_corpora(corpora, language_alpha)
        if not 0.0 <= tlm_fraction < 1.0:
            raise ConfigError(f"data.tlm_fraction={tlm_fraction} must be in [0, 1)")
        self.parallel_corpora = dict(parallel_corpora or {})
        for name in self.parallel_corpora:
            pair = name.split("-")
            if len(pair) != 2 or any(lang not in self.corpora for lang in pair):
                raise ConfigError(f"data.parallel_corpora: key {name!r} must be 'src-tgt' with both languages in "
                                  f"data.corpora ({', '.join(self.languages)})")
        if self.packing in PAIR_PACKINGS and (language_embeddings or self.parallel_corpora):
            raise ConfigError(f"data.packing={self.packing} puts NSP/SOP segments in the token types, which language "
                              "embeddings and TLM pairs need; use full_sentences with them, or set "
                              "data.language_embeddings=false and no parallel_corpora (multilingual BERT)")
        self.tlm_fraction, self.language_embeddings = tlm_fraction, language_embeddings
        self.token_type_vocab = len(self.languages) if language_embeddings else None

    # -- blocks: one stream per language (MultiCorpusMixin), one per parallel corpus -----------------------------
    def _load_blocks(self) -> None:
        super()._load_blocks()
        if self.tlm_fraction > 0:
            for name, source in self.parallel_corpora.items():
                blocks = self._translation_blocks(name, source)
                self.stream_names.append(name)
                self.stream_languages.append(self.languages.index(name.split("-")[0]))
                for split in self.stream_blocks:
                    self.stream_blocks[split].append(blocks[split])

    def _parallel_partitions(self, source: str) -> tuple[list[Partition], str] | None:
        """The partitions and fingerprint of a parallel corpus file, read as a stream; None for Fake-English pairs
        (built in memory), with ``max_documents``, or for a missing or empty file (read now, for its error)."""
        path = Path(source).expanduser()
        if self.max_documents is not None or source.startswith(FAKE_PREFIX) or not path.is_file() or \
                not path.stat().st_size:
            return None
        return plan_pair_partitions(path, self.partition_bytes), parallel_fingerprint(source)

    def _translation_job(self, name: str) -> PackingJob:
        return PackingJob(self.tokenizer.file, "translation", self.seq_len, self.val_fraction, self.seed,
                          segmenter=self.word_segmenter,
                          languages=tuple(self.languages.index(lang) for lang in name.split("-")),
                          where=f"data.parallel_corpora[{name}]")

    def prepare_corpora(self, nodes: tuple[int, int] = (1, 0)) -> list[Path]:
        roots = super().prepare_corpora(nodes)
        for name, source in self.parallel_corpora.items() if self.tlm_fraction > 0 else ():
            planned = self._parallel_partitions(source)
            if planned is not None:
                roots.append(prepare_shards(self._translation_job(name), *planned, self.cache_dir,
                                            self.preparation_workers, nodes))
        return roots

    def _translation_blocks(self, name: str, source: str) -> dict[str, PackedBlocks]:
        """TLM blocks of a parallel corpus: a file streamed into shards, or Fake-English pairs packed in memory."""
        planned = self._parallel_partitions(source)
        if planned is not None:
            return load_shards(prepare_shards(self._translation_job(name), *planned, self.cache_dir,
                                              self.preparation_workers, share_first=self._node_share()))
        tok = self.tokenizer
        src, tgt = (self.languages.index(lang) for lang in name.split("-"))
        fingerprint = parallel_fingerprint(source, self.max_documents, self.sentence_splitter)
        if fingerprint is None:  # read it now: a missing or empty file is reported before anything else
            fingerprint = load_parallel(name, source, self.max_documents, splitter=self.sentence_splitter)[1]
        key_fields = dict(v=FORMAT_VERSION, kind="tlm", pairs=fingerprint, tokenizer=tokenizer_hash(tok, tok.file),
                          length=self.seq_len, languages=[src, tgt], val_fraction=self.val_fraction, seed=self.seed,
                          segmenter=self.word_segmenter)

        def build() -> dict[str, PackedBlocks]:
            pairs = load_parallel(name, source, self.max_documents, splitter=self.sentence_splitter)[0]
            tokenized = flagged_pairs(pairs, tok, self.word_segmenter)
            train_idx, val_idx = split_documents(len(tokenized), self.val_fraction, self.seed)
            ids = tok.ids
            return {split: pack_translation_pairs([tokenized[i] for i in idx], self.seq_len, ids["cls"], ids["sep"],
                                                  ids["pad"], (src, tgt), np.random.default_rng(self.seed))
                    for split, idx in (("train", train_idx), ("val", val_idx))}

        return cached_splits(self.cache_dir, f"tlm-{self.seq_len}", key_fields, build)

    def stream_weights(self) -> np.ndarray:
        """Training probability of each stream: (1 - tlm_fraction) * q over the languages, tlm_fraction * q over
        the parallel corpora (q smoothed by ``language_alpha`` within each group)."""
        sizes = np.array([len(b) for b in self.stream_blocks["train"]])
        mono = len(self.languages)
        weights = super().stream_weights()
        if len(sizes) == mono:
            return weights
        if (sizes[mono:] == 0).any():
            empty = [n for n, s in zip(self.stream_names[mono:], sizes[mono:]) if s == 0]
            raise ConfigError(f"data.parallel_corpora{empty}: no training pair left after the validation split")
        tlm = smoothed_probabilities(sizes[mono:], self.language_alpha)
        return np.concatenate([(1 - self.tlm_fraction) * weights, self.tlm_fraction * tlm])

    def collator(self) -> MultilingualMLMCollator:
        return MultilingualMLMCollator(self.collator_settings(), language_embeddings=self.language_embeddings,
                                       restart_positions=bool(self.parallel_corpora) and self.tlm_fraction > 0)
