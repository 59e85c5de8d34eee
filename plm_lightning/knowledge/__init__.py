"""Knowledge inside a model: a synthetic world with known facts; probing, locating, tracing and editing facts in any
causal or masked LM trained here or imported from transformers.

Every name is imported on first use (``plm_lightning.lazy``): importing one module of this package does not
import the rest."""

# ruff: noqa: F401 - the TYPE_CHECKING imports are re-exports for type checkers
from __future__ import annotations

from typing import TYPE_CHECKING

from plm_lightning.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "plm_lightning.knowledge.attribution": ("trace_world",),
    "plm_lightning.knowledge.cloze": ("ClozeReader", "load_reader",),
    "plm_lightning.knowledge.constrained": ("ConstrainedFinetune",),
    "plm_lightning.knowledge.edit_metrics": ("counterfact_scores", "evaluate_edit",),
    "plm_lightning.knowledge.editing": ("Edit", "Editor", "EditRequest", "TargetConfig",),
    "plm_lightning.knowledge.lm": ("LanguageModel", "Query",),
    "plm_lightning.knowledge.mend": ("MEND",),
    "plm_lightning.knowledge.neurons": ("KnowledgeNeuronEditor", "knowledge_neurons", "neuron_effects",),
    "plm_lightning.knowledge.probing": ("ProbeReport", "probe", "train_layer_heads",),
    "plm_lightning.knowledge.rome": ("MEMIT", "ROME",),
    "plm_lightning.knowledge.tracing": ("causal_trace", "locate_layer",),
    "plm_lightning.knowledge.world": ("RELATIONS", "Document", "Fact", "Relation", "World", "WorldConfig",
        "build_world", "prompt_of",),
})

if TYPE_CHECKING:  # what a type checker and an IDE see: the same names, imported eagerly
    from plm_lightning.knowledge.attribution import trace_world
    from plm_lightning.knowledge.cloze import ClozeReader, load_reader
    from plm_lightning.knowledge.constrained import ConstrainedFinetune
    from plm_lightning.knowledge.edit_metrics import counterfact_scores, evaluate_edit
    from plm_lightning.knowledge.editing import Edit, Editor, EditRequest, TargetConfig
    from plm_lightning.knowledge.lm import LanguageModel, Query
    from plm_lightning.knowledge.mend import MEND
    from plm_lightning.knowledge.neurons import KnowledgeNeuronEditor, knowledge_neurons, neuron_effects
    from plm_lightning.knowledge.probing import ProbeReport, probe, train_layer_heads
    from plm_lightning.knowledge.rome import MEMIT, ROME
    from plm_lightning.knowledge.tracing import causal_trace, locate_layer
    from plm_lightning.knowledge.world import RELATIONS, Document, Fact, Relation, World, WorldConfig, build_world, prompt_of
