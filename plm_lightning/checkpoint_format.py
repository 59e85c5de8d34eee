"""The key under which a plm_lightning checkpoint records what it holds (recipe, backbone, tokenizer, transformers
family, token counters, RNG state). Its own module, so that the readers of checkpoints (``interop``, the tools)
need not import the objectives, and the objectives need not import the readers."""

CHECKPOINT_KEY = "plm_lightning"
