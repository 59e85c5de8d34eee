"""Knowledge inside a model: a synthetic world with known facts; probing, locating, tracing and editing facts in any
causal or masked LM trained here or imported from transformers."""

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

__all__ = [
    "MEMIT", "MEND", "RELATIONS", "ROME", "ClozeReader", "ConstrainedFinetune", "Document", "Edit", "EditRequest",
    "Editor", "Fact", "KnowledgeNeuronEditor", "LanguageModel", "ProbeReport", "Query", "Relation", "TargetConfig",
    "World", "WorldConfig", "build_world", "causal_trace", "counterfact_scores", "evaluate_edit", "knowledge_neurons",
    "load_reader", "locate_layer", "neuron_effects", "probe", "prompt_of", "trace_world", "train_layer_heads",
]
