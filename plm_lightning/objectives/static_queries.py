"""The static embeddings after training: a checkpoint back to its module (word2vec, fastText, GloVe), and the
neighbour and analogy queries of ``predict CHECKPOINT QUERIES``."""

from __future__ import annotations

from typing import Any

from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.data.static import WordVocabulary
from plm_lightning.objectives.glove import GloVe
from plm_lightning.objectives.static_embeddings import FastText, StaticEmbeddings, Word2Vec

STATIC_OBJECTIVES = {"Word2Vec": Word2Vec, "FastText": FastText, "GloVe": GloVe}


def load_static_embeddings(checkpoint: dict[str, Any]) -> StaticEmbeddings:
    """The trained module of a static-embedding checkpoint (its vocabulary travels in the checkpoint)."""
    import inspect

    cls = STATIC_OBJECTIVES[checkpoint[CHECKPOINT_KEY]["objective"]]
    accepted = inspect.signature(cls.__init__).parameters
    model = cls(**{k: v for k, v in checkpoint.get("hyper_parameters", {}).items() if k in accepted})
    model.set_vocabulary(WordVocabulary.from_dict(checkpoint[CHECKPOINT_KEY]["vocabulary"]))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()


def answer_query(model: StaticEmbeddings, line: str, k: int = 10) -> dict[str, Any]:
    """``word`` -> its nearest neighbours; ``a - b + c`` -> the analogy's answers (3CosAdd)."""
    from plm_lightning.data.static import split_words

    parts = [p.strip() for p in line.replace("+", " + ").replace("-", " - ").split()]
    if len(parts) == 5 and parts[1] == "-" and parts[3] == "+":
        a, b, c = (split_words(w)[0] for w in parts[0::2])
        missing = [w for w in (a, b, c) if not _known(model, w)]
        if missing:
            return {"query": line, "analogy": [a, b, c], "error": f"not in the vocabulary: {', '.join(missing)}"}
        return {"query": line, "analogy": [a, b, c], "neighbours": model.analogy(a, b, c, k)}
    words = split_words(line)
    if len(words) != 1:
        return {"query": line, "error": "give one word, or an analogy 'a - b + c'"}
    if not _known(model, words[0]):
        return {"query": line, "error": f"not in the vocabulary: {words[0]}"}
    return {"query": words[0], "neighbours": model.neighbours(words[0], k)}


def _known(model: StaticEmbeddings, word: str) -> bool:
    return word in model.vocabulary.index or isinstance(model, FastText)
