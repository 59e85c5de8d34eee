"""plm-lightning: the pretraining objectives of the PLM literature as Lightning modules over shared blocks.

An objective = a corruption of the input (``plm_lightning.data.corruption``) + an attention-mask shape
(``plm_lightning.nn.masks``) + the positions that carry loss (``labels != -100``).

The public names below are imported on first use (PEP 562), so ``import plm_lightning`` (and the CLI's ``--help``)
does not load Lightning, transformers' neighbours or every objective; ``from plm_lightning import MaskedLM`` works as
an eager import would. Every objective, data module and fine-tuning class is here by its name, found in its
package (``plm_lightning.lazy``): a new one needs no edit to this file.
"""

from __future__ import annotations

from plm_lightning.lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(__name__, {
    "plm_lightning.callbacks": ("AtomicCheckpointIO", "MetricsFile", "ThroughputMFU", "TrainingSamples"),
    "plm_lightning.corpus": ("Cleaner", "CleaningConfig", "TextTokenizer", "build_world", "embedded_corpus",
                             "load_documents", "streaming_dataset", "write_streams"),
    "plm_lightning.data.corruption": ("mask_tokens", "MaskingConfig"),
    "plm_lightning.errors": ("ConfigError",),
    "plm_lightning.evaluation": ("evaluate_pairs", "evaluate_prompts", "PromptScorer", "template_pairs"),
    "plm_lightning.knowledge": ("ClozeReader", "LanguageModel", "MEMIT", "MEND", "ROME"),
    "plm_lightning.nn": ("BackboneConfig", "Decoder", "Encoder", "EncoderDecoder", "get_preset", "PRESETS",
                         "ScalarMix"),
}, classes_of=("plm_lightning.objectives", "plm_lightning.data", "plm_lightning.finetune"))
