"""LightningDataModules: text -> tokenizer -> packed blocks -> (epoch, index)-seeded corruption collator."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import Dataset

from plm_lightning.corpus.block_cache import build_or_load
from plm_lightning.corpus.blocks import PACKING_MODES, PackedBlocks, PackingMode, reads_sentences
from plm_lightning.corpus.knowledge_units import KnowledgeSpec, PhraseConfig
from plm_lightning.corpus.pack_partitions import (
    PackingJob,
    available_cores,
    corpus_partitions,
    load_shards,
    prepare_shards,
)
from plm_lightning.corpus.partitions import DEFAULT_PARTITION_BYTES, Partition, sample_documents
from plm_lightning.corpus.phrase_table import phrase_table_file
from plm_lightning.corpus.sentences import check_splitter
from plm_lightning.corpus.shards import ShardedBlocks
from plm_lightning.corpus.sources import load_documents, source_fingerprint
from plm_lightning.corpus.streaming import (
    check_stream_meta,
    check_streaming,
    has_split,
    read_stream_meta,
    stream_tokenizer,
    streaming_dataset,
    streaming_loader,
)
from plm_lightning.corpus.tokenizer import KINDS, TextTokenizer, get_tokenizer
from plm_lightning.data.block_datasets import BlockDataset, StreamDataset
from plm_lightning.data.collators import (
    MASKING_SCHEMES,
    CausalLMCollator,
    KnowledgeMaskingNotes,
    MaskedLMCollator,
    MaskedLMSettings,
)
from plm_lightning.data.corruption import MaskingConfig
from plm_lightning.data.corruption.span_mask import SpanConfig, ngram_distribution
from plm_lightning.data.inspection_notes import InspectionNotes
from plm_lightning.data.sampling import (
    BlockSampler,
    InterleavedSampler,
    MixtureSampler,
    ResumableDataLoader,
    data_replicas,
)
from plm_lightning.data_contract import DataContract
from plm_lightning.errors import ConfigError
from plm_lightning.files import default_cache_dir


def stage_boundaries(stages: tuple[str, ...], epochs: list[float] | None, key: str, what: str) -> tuple[float, ...]:
    """The training progress (in epochs) at which each of ``stages`` after the first begins: ``epochs`` checked, or
    by default equal steps over the first epoch (ERNIE's knowledge stages, ERNIE 2.0's tasks)."""
    n = len(stages)
    bounds = tuple(epochs if epochs is not None else [i / n for i in range(1, n)])
    if len(bounds) != n - 1 or any(b <= a for a, b in zip(bounds, bounds[1:])) or any(e < 0 for e in bounds):
        raise ConfigError(f"data.{key}={list(bounds)} needs {n - 1} increasing non-negative values, one per {what} "
                          f"after the first of {list(stages)}")
    return bounds


MAX_VOCAB_SIZE = 1 << 21
"""The largest vocabulary a tokenizer is trained to (2,097,152 entries)."""


class TextDataModule(L.LightningDataModule):
    document_mask_refusal: ClassVar[str | None] = None
    """Why ``data.document_mask: true`` cannot be honoured by this data module's rows (None: it can)."""
    """Shared data path of every objective; subclasses choose the packing mode and the collator."""

    inspection_view: ClassVar[str] = "token"
    """Which of ``inspect``'s views measures this data (``plm_lightning.inspection.VIEWS``): ``token`` (a corrupted
    or causal row and its loss positions), ``seq2seq`` (encoder input and decoder target), ``blank_infilling``,
    ``permutation``, ``retrieval``; a data module of a new kind of objective names its own."""

    required_special_tokens: tuple[str, ...] = ("pad",)
    token_type_vocab: int | None = None
    """Token types the model must embed when the data defines its own (XLM's languages); None keeps the model's."""
    decoder_start_token: str | None = None
    """Encoder-decoder data: the special token the decoder input starts from."""

    def __init__(
        self,
        source: str | None = None,
        text_field: str = "text",
        split: str = "train",
        tokenizer: str = "wordpiece",
        tokenizer_vocab_size: int = 8192,
        seq_len: int = 128,
        packing: PackingMode = "full_sentences",
        batch_size: int = 32,
        num_workers: int = 0,
        val_fraction: float = 0.02,
        seed: int = 1234,
        document_mask: bool = False,
        max_documents: int | None = None,
        cache_dir: str | None = None,
        word_segmenter: Literal["tokenizer", "jieba"] = "tokenizer",
        sentence_splitter: Literal["pysbd", "blingfire"] = "pysbd",
        streaming: list[str] | None = None,
        streaming_weights: list[float] | None = None,
        preparation_workers: int | None = None,
        partition_bytes: int = DEFAULT_PARTITION_BYTES,
        tokenizer_train_bytes: int = 256 << 20,
    ) -> None:
        """
        Args:
            source: ``embedded`` (default corpus), a .txt/.jsonl/.parquet file, directory or glob, or a HF dataset.
            text_field: Field (jsonl) or column (parquet, datasets) holding the text.
            split: Split of a Hugging Face dataset.
            tokenizer: A kind to train on the corpus (wordpiece, bpe, gpt2) or a tokenizer.json / HF directory.
            tokenizer_vocab_size: Vocabulary size when training a tokenizer.
            seq_len: Tokens per block.
            packing: contiguous (documents joined by EOS) | concatenated (joined with no separator: T5) |
                documents (one per row, GPT-style) | full_sentences | doc_sentences |
                sentence_pairs (NSP) | sentence_order (SOP).
            batch_size: Blocks per batch on each device.
            num_workers: DataLoader worker processes.
            val_fraction: Fraction of documents held out for validation.
            seed: Seeds the split, the sample order and every corruption (with epoch and sample index).
            document_mask: Block-diagonal attention so packed documents never see each other.
            max_documents: Use only the first N documents (quick experiments).
            cache_dir: Where trained tokenizers and packed blocks are cached (default $PLM_LIGHTNING_CACHE or
                ~/.cache/plm_lightning).
            word_segmenter: Where word boundaries (whole-word, n-gram, span and ERNIE masking) come from: the
                tokenizer's pre-tokenization, or jieba for Chinese (Chinese whole-word masking, Cui et al. 2019;
                pip install 'plm-lightning[zh]').
            sentence_splitter: Where sentence boundaries (NSP/SOP pairs, full_sentences, ERNIE's units, REALM's
                blocks, Fake-English pairs) come from: pysbd (rule-based, ~0.3 MB/s a core) or blingfire (compiled,
                ~30x faster; the choice for a corpus of gigabytes). See ``plm_lightning.corpus.sentences``.
            streaming: Train on litdata streams instead of ``source``: directories or object-store URIs (s3://,
                gs://, ...) written by ``python -m plm_lightning optimize`` (``plm_lightning.corpus.streaming``);
                several are mixed by ``streaming_weights``. Resumes mid-epoch at the same sample.
            streaming_weights: Sampling weight of each ``streaming`` corpus (default: by size).
            preparation_workers: Processes that tokenize and pack a corpus on disk into shards (default: one per
                CPU core). The shards are the same for any number (``plm_lightning.corpus.pack_partitions``).
            partition_bytes: Text per partition of a corpus on disk: the unit of work of the preparation workers and
                nodes, and one shard of packed blocks each (part of what the shards depend on).
            tokenizer_train_bytes: Text a tokenizer kind is trained on: the corpus if smaller, else this many bytes
                spread over all of its partitions.
        """
        super().__init__()
        if packing not in PACKING_MODES:
            raise ConfigError(f"data.packing={packing!r} is not one of {', '.join(PACKING_MODES)}")
        for key, value in (("seq_len", seq_len), ("batch_size", batch_size), ("tokenizer_vocab_size", tokenizer_vocab_size)):
            if value < 1:
                raise ConfigError(f"data.{key}={value} must be a positive integer")
        if tokenizer_vocab_size > MAX_VOCAB_SIZE:
            raise ConfigError(f"data.tokenizer_vocab_size={tokenizer_vocab_size} is more than {MAX_VOCAB_SIZE:,}; the "
                              "largest vocabularies in use hold about 1M entries (XLM-V), and training one allocates "
                              "per entry")
        if seq_len < 8:
            raise ConfigError(f"data.seq_len={seq_len} is too short; use at least 8 tokens")
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={val_fraction} must be in [0, 1)")
        for key, value in (("partition_bytes", partition_bytes), ("tokenizer_train_bytes", tokenizer_train_bytes),
                           ("preparation_workers", 1 if preparation_workers is None else preparation_workers)):
            if value < 1:
                raise ConfigError(f"data.{key}={value} must be a positive integer")
        if word_segmenter not in ("tokenizer", "jieba"):
            raise ConfigError(f"data.word_segmenter={word_segmenter!r} is not one of tokenizer, jieba")
        self.word_segmenter = word_segmenter
        self.sentence_splitter = check_splitter(sentence_splitter)
        check_streaming(streaming, streaming_weights, type(self), TextDataModule)
        self.streaming, self.streaming_weights = streaming, streaming_weights
        self.save_hyperparameters()
        self.source, self.text_field, self.split_name = source, text_field, split
        self.tokenizer_spec, self.vocab_size_to_train = tokenizer, tokenizer_vocab_size
        self.seq_len, self.packing, self.batch_size, self.num_workers = seq_len, packing, batch_size, num_workers
        if document_mask and self.document_mask_refusal:
            raise ConfigError(f"data.document_mask: {type(self).__name__} {self.document_mask_refusal}; set "
                              "data.document_mask=false (recipes that keep packed documents apart: docs/data.md)")
        self.val_fraction, self.seed, self.document_mask, self.max_documents = val_fraction, seed, document_mask, max_documents
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self._tokenizer: TextTokenizer | None = None
        self._documents: tuple[list[str], str] | None = None
        self.preparation_workers = preparation_workers or available_cores()
        self.partition_bytes, self.tokenizer_train_bytes = partition_bytes, tokenizer_train_bytes
        self._partitions: dict[str | None, tuple[list[Partition], str] | None] = {}
        self.blocks: dict[str, PackedBlocks] = {}

    # -- text and tokenizer -------------------------------------------------------------------------------------
    def documents(self) -> tuple[list[str], str]:
        if self._documents is None:
            self._documents = load_documents(self.source, self.text_field, self.split_name, self.max_documents)
        return self._documents

    def partitions(self, source: str | None | bool = False) -> tuple[list[Partition], str] | None:
        """The partitions and fingerprint of a corpus on disk (``source``, default ``data.source``), read as a stream
        (``corpus.partitions``); None for a corpus built in memory (the embedded corpus, the knowledge world) and with
        ``max_documents``."""
        source = self.source if source is False else source
        if source not in self._partitions:
            self._partitions[source] = (None if self.max_documents is not None else corpus_partitions(
                source, self.text_field, self.split_name, self.partition_bytes))
        return self._partitions[source]

    def _tokenizer_texts(self) -> Iterable[str]:
        planned = self.partitions()
        if planned is None:
            return self.documents()[0]
        return sample_documents(planned[0], self.text_field, self.tokenizer_train_bytes)

    @property
    def max_input_length(self) -> int:
        """The longest input a row can be (``seq_len``; BART's noise lengthens it)."""
        return self.seq_len

    def contract(self) -> DataContract:
        """What this data tells the model (:mod:`plm_lightning.data_contract`), read once by its ``setup``; a data
        module with more to say adds it with ``dataclasses.replace(super().contract(), ...)``."""
        return DataContract(tokenizer=self.tokenizer, seq_len=self.seq_len, max_input_length=self.max_input_length,
                            token_type_vocab=self.token_type_vocab, packing=self.packing,
                            decoder_start_token=self.decoder_start_token)

    @property
    def tokenizer(self) -> TextTokenizer:
        if self._tokenizer is None:
            if self.streaming is not None and self.tokenizer_spec in KINDS:  # the streams' own tokenizer
                self.tokenizer_spec = stream_tokenizer(self.streaming[0])
            fingerprint = self._tokenizer_fingerprint() if self.tokenizer_spec in KINDS else ""
            tok = get_tokenizer(self.tokenizer_spec, self._tokenizer_texts, self.vocab_size_to_train,
                                self.cache_dir, fingerprint)
            tok.require(self.required_special_tokens, f"{type(self).__name__} (packing={self.packing})")
            self._tokenizer = tok
        return self._tokenizer

    # -- Lightning hooks ----------------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        self._load_blocks()

    def setup(self, stage: str | None = None) -> None:
        if not self.blocks:
            self._load_blocks()

    def _load_blocks(self) -> None:
        if self.streaming is not None:
            for uri in self.streaming:  # nothing to build: the streams' packing must be the recipe's
                check_stream_meta(uri, read_stream_meta(uri), self.packing, self.packed_length())
            return
        self.blocks = self.blocks_of(self.source, lambda: self.documents()[0], self._fingerprint)
        if len(self.blocks["train"]) == 0:
            raise ConfigError(f"data.source '{self.source or 'embedded'}' yields no {self.packed_length()}-token "
                              f"training block with packing={self.packing}; add text or lower data.seq_len")

    def streams_from_disk(self, source: str | None | bool = False) -> bool:
        """Whether blocks of ``source`` (default ``data.source``) are packed from a corpus on disk into shards as it
        streams: every recipe on files or a dataset (not with ``max_documents``)."""
        return self.partitions(source) is not None

    def packing_job(self, mode: str | None = None, length: int | None = None,
                    source: str | None | bool = False) -> PackingJob:
        """What the preparation workers need to pack blocks of ``mode`` (default ``data.packing``) from any
        partition of ``source`` (default ``data.source``)."""
        mode = mode or self.packing
        knowledge = self.knowledge_spec()
        phrases = self.phrase_table_file(source, mode) if knowledge is not None else None
        return PackingJob(self.tokenizer.file, mode, length or self.packed_length(), self.val_fraction, self.seed,
                          self.text_field, self.word_segmenter, self.sentence_splitter, knowledge=knowledge,
                          phrases_file=None if phrases is None else str(phrases))

    def phrase_table_file(self, source: str | None | bool, mode: str) -> Path | None:
        """ERNIE's phrase table of a corpus on disk, fitted before packing; None where the recipe has none."""
        return None

    def corpus_sources(self) -> list[str | None]:
        """The corpora this data module packs (``data.source``; one per language for multilingual data)."""
        return [self.source]

    def prepare_corpora(self, nodes: tuple[int, int] = (1, 0)) -> list[Path]:
        """Pack each corpus on disk of :meth:`corpus_sources` into shards now, or with ``nodes`` = (number, rank)
        this node's share of them (``python -m plm_lightning pack``); the shard sets' directories."""
        return [prepare_shards(self.packing_job(mode, source=source), *self.partitions(source), self.cache_dir,
                               self.preparation_workers, nodes)
                for source in self.corpus_sources() if self.streams_from_disk(source)
                for mode in self.packing_modes()]

    def packing_modes(self) -> tuple[str, ...]:
        """The packing modes this data module packs every corpus in (ERNIE 2.0 adds its sentence-distance pairs)."""
        return (self.packing,)

    def blocks_of(self, source: str | None, documents: Callable[[], list[str]], fingerprint: Callable[[], str],
                  mode: str | None = None) -> dict[str, PackedBlocks]:
        """The train/validation blocks of ``source`` in packing ``mode`` (default ``data.packing``): streamed into
        shards from disk (:meth:`streams_from_disk`), else packed in memory from ``documents()``; both cached under
        what the blocks depend on."""
        mode = mode or self.packing
        if self.streams_from_disk(source):
            partitions, key = self.partitions(source)
            root = prepare_shards(self.packing_job(mode, source=source), partitions, key, self.cache_dir,
                                  self.preparation_workers, share_first=self._node_share())
            return load_shards(root)
        return build_or_load(documents, fingerprint(), self.tokenizer, self.tokenizer.file, mode,
                             self.packed_length(), self.val_fraction, self.seed, self.cache_dir, self.knowledge_spec(),
                             self.word_segmenter, self.sentence_splitter)

    def _node_share(self) -> tuple[int, int]:
        """(nodes, this node's rank) of the trainer running this data module, (1, 0) without one: the packing of a
        corpus on disk starts with this node's share of its partitions."""
        if self.trainer is None:
            return 1, 0
        return max(1, self.trainer.num_nodes), self.trainer.node_rank

    def packed_length(self) -> int:
        """Tokens per packed block: ``seq_len``, or the raw length a corruption shortens to ``seq_len`` (T5)."""
        return self.seq_len

    def knowledge_spec(self) -> KnowledgeSpec | None:
        """Phrase/entity units to mark at packing (ERNIE); None for every other recipe."""
        return None

    def _tokenizer_fingerprint(self) -> str:
        planned = self.partitions()
        if planned is None:
            return self._fingerprint()
        size = sum(p.size for p in planned[0])
        budget = f"-sample{self.tokenizer_train_bytes}" if size > self.tokenizer_train_bytes else ""
        return planned[1] + budget

    def _fingerprint(self) -> str:
        planned = self.partitions()
        if planned is not None:
            return planned[1]
        if self._documents is not None:
            return self._documents[1]
        cheap = source_fingerprint(self.source, self.text_field, self.max_documents)
        return cheap if cheap is not None else self.documents()[1]

    def collator(self) -> Any:
        raise NotImplementedError

    def inspection_notes(self) -> list[InspectionNotes]:
        """What this objective's data adds to ``inspect`` (statistics, lines about a sample) beyond its view's
        common fields: none by default."""
        return []

    def _replicas(self) -> tuple[int, int]:
        return data_replicas(self.trainer)

    def _resumable(self, dataset: Dataset, sampler: BlockSampler, shuffle: bool) -> ResumableDataLoader:
        return ResumableDataLoader(dataset, batch_size=self.batch_size, sampler=sampler, collate_fn=self.collator(),
                                   num_workers=self.num_workers, drop_last=shuffle, persistent_workers=False,
                                   # its own generator: creating an iterator must not draw from the global RNG, or a
                                   # resumed run's dropout would be shifted by one draw
                                   generator=torch.Generator().manual_seed(self.seed))

    def _loader(self, split: str, shuffle: bool) -> ResumableDataLoader | list:
        blocks = self.blocks[split]
        if len(blocks) == 0:
            return []
        replicas, rank = self._replicas()
        sampler = BlockSampler(len(blocks), shuffle=shuffle, seed=self.seed, num_replicas=replicas, rank=rank,
                               drop_last=shuffle, lazy=isinstance(blocks, ShardedBlocks))
        return self._resumable(BlockDataset(blocks), sampler, shuffle)

    def _stream_loader(self, streams: list[PackedBlocks], shuffle: bool, weights: np.ndarray | None = None,
                       languages: list[int] | None = None, stage_epochs: tuple[float, ...] = ()
                       ) -> ResumableDataLoader | list:
        """Several streams of blocks (languages, ERNIE 2.0's pairs): training draws mix them by ``weights`` (per
        stage with ``stage_epochs``), validation reads every block once, the streams interleaved."""
        dataset = StreamDataset(streams, languages)
        if len(dataset) == 0:
            return []
        replicas, rank = self._replicas()
        sizes = dataset.sizes.tolist()
        sampler = (MixtureSampler(sizes, weights, self.seed, replicas, rank, stage_epochs=stage_epochs) if shuffle
                   else InterleavedSampler(sizes, self.seed, replicas, rank))
        return self._resumable(dataset, sampler, shuffle)

    def _streaming_loader(self, split: str, shuffle: bool) -> Any:
        uris = [u for u in self.streaming if split == "train" or has_split(u, split)]
        if not uris:
            return []
        replicas = self._replicas()
        dataset = streaming_dataset(uris, split, shuffle, self.seed, self.streaming_weights if shuffle else None,
                                    replicas)
        return streaming_loader(dataset, replicas[0], batch_size=self.batch_size, num_workers=self.num_workers,
                                collate_fn=self.collator(), drop_last=shuffle)

    def train_dataloader(self) -> ResumableDataLoader:
        if self.streaming is not None:
            return self._streaming_loader("train", shuffle=True)
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> ResumableDataLoader | list:
        if self.streaming is not None:
            return self._streaming_loader("val", shuffle=False)
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> ResumableDataLoader | list:
        """None: a pretraining corpus holds out only its validation documents, and ``test`` on them would report
        the validation scores again under another name."""
        raise ConfigError(f"test: {type(self).__name__} holds out no test split, only validation documents "
                          "(data.val_fraction); run `validate` for their scores, or `test` a fine-tuning recipe "
                          "(configs/finetune/*.yaml), whose tasks have test splits")

    def predict_dataloader(self) -> ResumableDataLoader | list:
        return self.val_dataloader()


class MaskedLMDataModule(TextDataModule):
    """BERT / RoBERTa data: sentence-pair packing for NSP (BERT) or FULL-SENTENCES (RoBERTa), dynamic masking; the
    whole-word, n-gram, span and ERNIE knowledge masking schemes."""

    required_special_tokens = ("pad", "cls", "sep", "mask")

    def __init__(
        self,
        *args: Any,
        mask_prob: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        static_masking: bool = False,
        dupe_factor: int = 10,
        masking_scheme: Literal["token", "whole_word", "ngram", "span", "ernie"] = "token",
        span_geometric_p: float = 0.2,
        max_span_length: int = 10,
        max_ngram: int = 3,
        knowledge_stages: list[Literal["basic", "phrase", "entity"]] | None = None,
        stage_epochs: list[float] | None = None,
        phrase_lexicon: str | None = None,
        entity_lexicon: str | None = None,
        phrase_min_count: int = 5,
        phrase_threshold: float = 0.5,
        phrase_sample_bytes: int = 64 << 20,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            mask_prob: Fraction of non-special tokens chosen for prediction (exact per sequence).
            mask_replace_prob: Of the chosen, fraction replaced by the mask token.
            random_replace_prob: Of the chosen, fraction replaced by a random token (the rest stay unchanged).
            static_masking: Fixed masks per sample (BERT's original pipeline) instead of dynamic masking (RoBERTa).
            dupe_factor: With static masking, the number of distinct maskings cycled over epochs.
            masking_scheme: token (BERT), whole_word (BERT-wwm: complete words, from the tokenizer's
                pre-tokenization), ngram (ALBERT: n-grams of complete words, P(n) ~ 1/n) or span (SpanBERT).
            span_geometric_p: SpanBERT span length (in words) ~ Geometric(p).
            max_span_length: SpanBERT clips span lengths at this many words.
            max_ngram: ALBERT n-gram masking: longest n-gram, in words.
            knowledge_stages: ERNIE (masking_scheme=ernie): the stages in training order, each masking whole units
                of its level first: basic (words), phrase, entity. Default: basic, phrase, entity.
            stage_epochs: ERNIE: the training progress, in epochs, at which each stage after the first begins
                (one value per later stage, increasing). Default: the stages share the first epoch equally.
            phrase_lexicon: ERNIE: a file of phrases (one per line) instead of fitting collocations on the corpus.
            entity_lexicon: ERNIE: a file of entities (one per line) instead of detecting capitalised runs.
            phrase_min_count: ERNIE collocations: minimum bigram count (word2phrase's min_count).
            phrase_threshold: ERNIE collocations: minimum normalised PMI in [-1, 1].
            phrase_sample_bytes: ERNIE collocations of a corpus on disk: fitted on the corpus if smaller, else on
                this many bytes spread over all of its partitions (once, before packing; the counts only are held).
        """
        super().__init__(*args, **kwargs)
        self.masking = MaskingConfig(mask_prob, mask_replace_prob, random_replace_prob)
        self.static_masking, self.dupe_factor = static_masking, dupe_factor
        if masking_scheme not in MASKING_SCHEMES:
            raise ConfigError(f"data.masking_scheme={masking_scheme!r} is not one of {', '.join(MASKING_SCHEMES)}")
        self.masking_scheme = masking_scheme
        self.spans = SpanConfig(span_geometric_p, max_span_length)
        ngram_distribution(max_ngram)  # validates max_ngram
        self.max_ngram = max_ngram
        self.knowledge_stages = tuple(knowledge_stages or ("basic", "phrase", "entity"))
        unknown = [s for s in self.knowledge_stages if s not in ("basic", "phrase", "entity")]
        if unknown:
            raise ConfigError(f"data.knowledge_stages: {unknown} are not stages; use basic, phrase, entity")
        self.stage_epochs = stage_boundaries(self.knowledge_stages, stage_epochs, "stage_epochs", "stage")
        if not -1.0 <= phrase_threshold <= 1.0 or phrase_min_count < 1:
            raise ConfigError(f"data.phrase_threshold={phrase_threshold} must lie in [-1, 1] and "
                              f"data.phrase_min_count={phrase_min_count} must be >= 1")
        self.knowledge_source = KnowledgeSpec(phrase_lexicon, entity_lexicon,
                                              PhraseConfig(phrase_min_count, phrase_threshold))
        self.knowledge = self.knowledge_source if masking_scheme == "ernie" else None
        if phrase_sample_bytes < 1:
            raise ConfigError(f"data.phrase_sample_bytes={phrase_sample_bytes} must be a positive integer")
        self.phrase_sample_bytes = phrase_sample_bytes
        self._phrase_files: dict[tuple, Path | None] = {}

    def knowledge_spec(self) -> KnowledgeSpec | None:
        return self.knowledge

    def phrase_table_file(self, source: str | None | bool, mode: str) -> Path | None:
        by_sentence = reads_sentences(mode)
        if (source, by_sentence) not in self._phrase_files:
            partitions, key = self.partitions(source)
            self._phrase_files[source, by_sentence] = phrase_table_file(
                self.knowledge_spec(), partitions, key, self.text_field, self.tokenizer, by_sentence,
                self.word_segmenter, self.phrase_sample_bytes, self.cache_dir, self.sentence_splitter)
        return self._phrase_files[source, by_sentence]

    def collator_settings(self) -> MaskedLMSettings:
        """The :class:`MaskedLMSettings` of :class:`MaskedLMCollator` (and its subclasses) for this data."""
        tok = self.tokenizer
        return MaskedLMSettings(
            special_ids=tok.special_ids(), mask_token_id=tok.ids["mask"], vocab_size=tok.vocab_size,
            masking=self.masking, seed=self.seed, static_masking=self.static_masking, dupe_factor=self.dupe_factor,
            document_mask=self.document_mask, masking_scheme=self.masking_scheme, spans=self.spans,
            max_ngram=self.max_ngram, stages=self.knowledge_stages, stage_epochs=tuple(self.stage_epochs))

    def collator(self) -> MaskedLMCollator:
        return MaskedLMCollator(self.collator_settings())

    def inspection_notes(self) -> list[InspectionNotes]:
        return [KnowledgeMaskingNotes(self.knowledge_stages)] if self.masking_scheme == "ernie" else []


class CausalLMDataModule(TextDataModule):
    """GPT / GPT-2 data: documents joined by the end-of-text token, contiguous blocks, no corruption."""

    required_special_tokens = ("eos",)

    def __init__(self, *args: Any, tokenizer: str = "gpt2", packing: PackingMode = "contiguous",
                 **kwargs: Any) -> None:
        super().__init__(*args, tokenizer=tokenizer, packing=packing, **kwargs)

    def collator(self) -> CausalLMCollator:
        return CausalLMCollator(self.document_mask)

