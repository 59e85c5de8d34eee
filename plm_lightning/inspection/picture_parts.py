"""What ``inspect --png`` draws, as data: ``ObjectivePicture`` (one recipe's mask, loss rows and text) and the
encoder-decoder layout of T5's figure. Shared by the token-level pictures (``picture``) and the word-level ones
(``word_pictures``) so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ObjectivePicture:
    """What ``inspect --png`` draws for one recipe (the first row of the first training batch).

    Attributes:
        title: The recipe and its corruption.
        tokens: The axis: the tokens the mask is over (encoder-decoders: encoder input, then decoder input).
        mask: ``[n, n]`` bool, ``mask[i, j]``: query ``i`` may attend to key ``j``.
        loss: ``[n]`` bool: the rows whose output is scored by the loss.
        blocks: Named consecutive parts of the axis (encoder/decoder, prefix/target), drawn as separators.
        original: The row's text before corruption.
        corrupted: What the model is fed.
        attention: One line naming the mask.
        row_tokens: The rows' labels when they are not ``tokens`` (ELMo: each word once per direction).
        row_blocks: Named parts of the rows when they are not ``blocks``.
    """

    title: str
    tokens: list[str]
    mask: np.ndarray
    loss: np.ndarray
    blocks: list[tuple[str, int]]
    original: str
    corrupted: str
    attention: str
    row_tokens: list[str] | None = None
    row_blocks: list[tuple[str, int]] | None = None


def encoder_decoder_picture(title: str, source: list[str], target: list[str], target_loss: np.ndarray, original: str,
                            corrupted: str, attention: str = "encoder bidirectional; decoder causal, cross-attending to "
                            "every encoder token", cross_visible: np.ndarray | None = None) -> ObjectivePicture:
    """One matrix over [encoder input; decoder input] (T5, Fig. 3): the encoder block full, decoder rows seeing every
    encoder token (or those ``cross_visible`` marks: MASS hides the masks) and the decoder tokens up to their own;
    loss on the decoder rows that have a target."""
    enc, dec = len(source), len(target)
    mask = np.zeros((enc + dec, enc + dec), dtype=bool)
    mask[:enc, :enc] = True
    mask[enc:, :enc] = True if cross_visible is None else np.asarray(cross_visible, bool)[None, :]
    mask[enc:, enc:] = np.tril(np.ones((dec, dec), dtype=bool))
    loss = np.concatenate([np.zeros(enc, bool), np.asarray(target_loss, bool)])
    return ObjectivePicture(title, source + target, mask, loss, [("encoder", enc), ("decoder", dec)], original,
                            corrupted, attention)
