"""The model-data contract: what an objective needs to know about its data, stated once by the data module and
handed to the objective as one typed value.

A data module says it with ``contract()`` (``TextDataModule.contract``: its tokenizer, block length, packing and
the facts of its kind; subclasses add theirs with ``dataclasses.replace``). ``PretrainingModule.setup`` reads it
once (:func:`read_contract`) into ``self.data`` and checks it (``check_data``): no objective looks an attribute up
on the data module by name. A data module without ``contract()`` (a user's plain ``LightningDataModule``) states
nothing, and every field is None: the model then takes its settings from its own configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ATTENTION_KINDS = ("bidirectional", "left_to_right", "right_to_left", "prefix")
"""A batch's ``attention_kind`` (UniLM's per-batch LM) is an index into this tuple: the mask shapes
``nn.masks.ATTENTION_KINDS`` builds, in the same order (tests/test_architecture.py), named here so the data layer
needs nothing of ``nn``."""


@dataclass(frozen=True)
class DataContract:
    """What the data says; None = the data does not say (the model's own setting stands)."""

    tokenizer: Any = None
    """The ``TextTokenizer`` the token ids come from (vocabulary size, special ids)."""
    seq_len: int | None = None
    """Tokens per packed block."""
    max_input_length: int | None = None
    """The longest model input (BART's noise lengthens it beyond ``seq_len``); default ``seq_len``."""
    token_type_vocab: int | None = None
    """Token types the rows use beyond segments A/B (XLM's language embeddings: one per language)."""
    packing: str | None = None
    """``data.packing`` (which sentence pairs, if any, the rows hold: NSP, SOP, ...)."""
    decoder_only: bool | None = None
    """Span-corruption data: prefix-LM rows for a decoder alone (True) or (input, target) pairs (False)."""
    decoder_start_token: str | None = None
    """Encoder-decoder data: the special token the decoder input starts from."""
    bidirectional_data: bool | None = None
    """XLNet: half of each batch read right to left."""
    max_reorder_segments: int | None = None
    """ERNIE 2.0: the sentence-reordering task's largest segment count."""
    stream_names: Sequence[str] | None = None
    """Multi-corpus data: the name of each stream (validation losses are logged per stream)."""
    entity_embeddings: Any = None
    """ERNIE (THU): the knowledge graph's TransE entity embeddings ``[entities, dim]``."""
    knowledge_blocks: Sequence[Any] | None = None
    """REALM: the token ids of every retrievable block, in block-id order."""
    examples: str | None = None
    """Word-level data: what it yields (``pairs``, ``cooccurrence``, ``sequences``: ``data.examples``;
    ``translation``: source-target sentence pairs); None for token blocks."""
    word_vocabulary: Any = None
    """Word-level data: the ``WordVocabulary`` of its inputs (a translation's source side)."""
    target_vocabulary: Any = None
    """Translation data: the target side's ``WordVocabulary``."""

    @property
    def longest_input(self) -> int | None:
        return self.max_input_length if self.max_input_length is not None else self.seq_len


NO_CONTRACT = DataContract()


def read_contract(datamodule: object) -> DataContract:
    """``datamodule.contract()``, or :data:`NO_CONTRACT` for a data module that states none (or no data module)."""
    contract = getattr(datamodule, "contract", None)
    if not callable(contract):
        return NO_CONTRACT
    stated = contract()
    if not isinstance(stated, DataContract):
        raise TypeError(f"{type(datamodule).__name__}.contract() returned {type(stated).__name__}, not a DataContract")
    return stated
