"""ELMo's character ids (Peters et al. 2018, sec. 3; the reference bilm-tf's ``UnicodeCharsVocabulary``): each word
as its UTF-8 bytes between begin/end-of-word marks, padded to a fixed width; the input of the character-CNN token
encoder (``nn.recurrent.CharCNNEncoder``), which takes ``NUM_CHARS`` and ``CHAR_PAD`` from here."""

from __future__ import annotations

CHAR_PAD, BOW, EOW, BOS_CHAR, EOS_CHAR = 260, 258, 259, 256, 257
"""ELMo's 261 character ids: the 256 bytes, begin/end-of-sentence characters, begin/end-of-word marks, padding."""
NUM_CHARS = 261


def char_ids(word: str, max_chars: int = 50) -> list[int]:
    """``[BOW, bytes..., EOW, PAD...]`` of length ``max_chars`` (the bytes cut to fit); ``<s>`` and ``</s>`` are the
    single begin/end-of-sentence characters."""
    if word == "<s>":
        body = [BOS_CHAR]
    elif word == "</s>":
        body = [EOS_CHAR]
    else:
        body = list(word.encode("utf-8"))[: max_chars - 2]
    ids = [BOW, *body, EOW]
    return ids + [CHAR_PAD] * (max_chars - len(ids))
