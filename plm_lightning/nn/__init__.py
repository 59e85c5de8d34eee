"""Shared Transformer blocks in plain PyTorch (no Lightning imports): reusable on their own."""

from plm_lightning.nn.attention import MultiHeadAttention, resolve_backend
from plm_lightning.nn.backbone import BackboneOutput, Decoder, Encoder, EncoderDecoder, TransformerStack, init_weights
from plm_lightning.nn.block import TransformerBlock
from plm_lightning.nn.config import PRESETS, BackboneConfig, get_preset
from plm_lightning.nn.embeddings import Embeddings
from plm_lightning.nn.feedforward import FeedForward
from plm_lightning.nn.heads import LMHead, Pooler, SentenceHead, SpanBoundaryHead
from plm_lightning.nn.masks import (
    causal_mask,
    combine,
    document_mask,
    padding_mask,
    prefix_lm_mask,
    sliding_window_mask,
)
from plm_lightning.nn.norms import RMSNorm
from plm_lightning.nn.positions import RelativePositionBias, RotaryEmbedding, relative_position_bucket, sinusoidal_table
from plm_lightning.nn.recurrent import AttentionalDecoder, BiLM, CharCNNEncoder, Highway, ScalarMix
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.nn.xl_relative import RelativeSelfAttention, XLRelative, relative_sinusoids
from plm_lightning.nn.xl_stack import XLOutput, XLStack

__all__ = [
    "AttentionalDecoder", "BackboneConfig", "BackboneOutput", "BiLM", "CharCNNEncoder", "Decoder", "Embeddings",
    "Encoder", "EncoderDecoder", "FeedForward", "Highway", "LMHead", "MultiHeadAttention", "PRESETS", "Pooler",
    "RMSNorm", "RelativePositionBias", "RelativeSelfAttention", "RotaryEmbedding", "ScalarMix", "SentenceHead",
    "SpanBoundaryHead", "StackInputs", "TransformerBlock", "TransformerStack", "XLOutput", "XLRelative", "XLStack", "causal_mask",
    "combine", "document_mask", "get_preset", "init_weights", "padding_mask", "prefix_lm_mask",
    "relative_position_bucket", "relative_sinusoids", "resolve_backend", "sinusoidal_table", "sliding_window_mask",
]
