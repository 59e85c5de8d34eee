"""The key under which a plm_lightning checkpoint records what it holds (recipe, backbone, tokenizer, transformers
family, token counters, RNG state). Its own module, so that the readers of checkpoints (``interop``, the tools)
need not import the objectives, and the objectives need not import the readers."""

CHECKPOINT_KEY = "plm_lightning"

WORD_VECTOR_OBJECTIVES = ("Word2Vec", "FastText", "GloVe")
"""The objectives whose checkpoints hold static word vectors (``export`` writes them in the word2vec text format);
``objectives.static_queries.STATIC_OBJECTIVES`` maps these names to their classes."""
