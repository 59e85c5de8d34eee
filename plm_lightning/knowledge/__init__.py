"""Knowledge inside a model: a synthetic world with known facts, probing, locating and editing."""

from plm_lightning.knowledge.world import RELATIONS, Document, Fact, Relation, World, WorldConfig, build_world, prompt_of

__all__ = ["RELATIONS", "Document", "Fact", "Relation", "World", "WorldConfig", "build_world", "prompt_of"]
