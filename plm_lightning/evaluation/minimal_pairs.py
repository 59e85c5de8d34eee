"""Minimal-pair acceptability (BLiMP: Warstadt et al. 2020, "BLiMP: The Benchmark of Linguistic Minimal Pairs for
English"): a model prefers the acceptable sentence of a pair when it gives it the higher score, and accuracy is
reported per phenomenon.

Scores: a causal LM's log-likelihood ``sum_t log p(x_t | <eos> x_<t)`` (BLiMP's full-sentence comparison); a masked
LM's pseudo-log-likelihood (Salazar et al. 2020, "Masked Language Model Scoring", eq. 1)
``PLL(W) = sum_t log P(w_t | W_\\t)``, each token masked in turn, every other token visible.

Pairs come from BLiMP-format JSONL files (``sentence_good``, ``sentence_bad`` and the phenomenon in
``linguistics_term``, ``UID`` or ``phenomenon``) or from :func:`template_pairs`, a small built-in generator
(subject-verb and determiner-noun number agreement) so the evaluation runs offline.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from plm_lightning.errors import ConfigError

PHENOMENON_KEYS = ("linguistics_term", "UID", "phenomenon")


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    phenomenon: str


def read_pairs(path: str | Path) -> list[MinimalPair]:
    """Pairs of a BLiMP-format JSONL file; a one-line error for a missing, empty or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"minimal pairs: no such file '{path}' (BLiMP JSONL: sentence_good, sentence_bad per line)")
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"minimal pairs: '{path}' line {number} is not JSON ({err.msg})") from err
        if not isinstance(row, dict) or not row.get("sentence_good") or not row.get("sentence_bad"):
            raise ConfigError(f"minimal pairs: '{path}' line {number} needs non-empty sentence_good and sentence_bad")
        phenomenon = next((str(row[k]) for k in PHENOMENON_KEYS if row.get(k)), path.stem)
        pairs.append(MinimalPair(row["sentence_good"], row["sentence_bad"], phenomenon))
    if not pairs:
        raise ConfigError(f"minimal pairs: '{path}' holds no pair (BLiMP JSONL: sentence_good, sentence_bad per line)")
    return pairs


_NOUNS = [("dog", "dogs"), ("teacher", "teachers"), ("car", "cars"), ("student", "students"), ("river", "rivers"),
          ("book", "books"), ("doctor", "doctors"), ("window", "windows"), ("program", "programs"), ("bird", "birds"),
          ("computer", "computers"), ("city", "cities"), ("child", "children"), ("woman", "women"), ("man", "men")]
_VERBS = [("runs", "run"), ("works", "work"), ("sleeps", "sleep"), ("waits", "wait"), ("returns", "return"),
          ("changes", "change"), ("falls", "fall"), ("sings", "sing")]
_ADVERBS = ["quickly", "every day", "at night", "again", "now", "today"]
_ADJECTIVES = ["old", "new", "small", "large", "red", "quiet"]
_PREDICATES = ["is here", "was found", "looks old", "seems new", "fell over", "stood still"]
_PLURAL_PREDICATES = ["are here", "were found", "look old", "seem new", "fell over", "stood still"]


def template_pairs(per_phenomenon: int = 100, seed: int = 0) -> list[MinimalPair]:
    """Built-in minimal pairs (seeded): ``subject_verb_agreement`` ("The dog runs quickly." / "The dog run quickly.",
    also across an attractor: "The dog near the cars runs ...") and ``determiner_noun_agreement`` ("This old book is
    here." / "These old book is here.", "These books ..." / "This books ...")."""
    rng = np.random.default_rng(seed)
    pick = lambda items: items[int(rng.integers(len(items)))]  # noqa: E731
    pairs: list[MinimalPair] = []
    for _ in range(per_phenomenon):
        (sg, pl), (v_sg, v_pl), adverb = pick(_NOUNS), pick(_VERBS), pick(_ADVERBS)
        plural = bool(rng.integers(2))
        subject, good, bad = (pl, v_pl, v_sg) if plural else (sg, v_sg, v_pl)
        if rng.integers(2):  # an attractor of the other number between subject and verb
            other = pick(_NOUNS)[0 if plural else 1]
            subject = f"{subject} near the {other}"
        pairs.append(MinimalPair(f"The {subject} {good} {adverb}.", f"The {subject} {bad} {adverb}.",
                                 "subject_verb_agreement"))
    for _ in range(per_phenomenon):
        (sg, pl), adjective = pick(_NOUNS), pick(_ADJECTIVES)
        if rng.integers(2):
            predicate = pick(_PREDICATES)
            good, bad = f"This {adjective} {sg} {predicate}.", f"These {adjective} {sg} {predicate}."
        else:
            predicate = _PLURAL_PREDICATES[_PREDICATES.index(pick(_PREDICATES))]
            good, bad = f"These {adjective} {pl} {predicate}.", f"This {adjective} {pl} {predicate}."
        pairs.append(MinimalPair(good, bad, "determiner_noun_agreement"))
    return pairs


@torch.no_grad()
def sentence_log_likelihood(lm, sentence: str) -> float:  # noqa: ANN001 - a knowledge.lm.LanguageModel
    """Causal LM: ``sum_t log p(x_t | <eos> x_<t)`` over the sentence's tokens."""
    ids = lm.encode(sentence)
    if not ids:
        raise ConfigError(f"minimal pairs: the sentence {sentence!r} has no tokens")
    inputs = torch.tensor([[lm.tokenizer.ids["eos"], *ids]], device=lm.device)
    hidden = lm.backbone(inputs).last_hidden_state[0, :-1]
    logprobs = lm.logits(hidden).float().log_softmax(-1)
    return float(logprobs.gather(1, inputs[0, 1:, None]).sum())


@torch.no_grad()
def pseudo_log_likelihood(lm, sentence: str, batch_size: int = 64) -> float:  # noqa: ANN001
    """Masked LM: ``sum_t log P(w_t | W_\\t)`` (Salazar et al. 2020, eq. 1): ``[CLS] W [SEP]`` with token t masked,
    for every t, in batches of ``batch_size`` copies."""
    ids = lm.encode(sentence)
    if not ids:
        raise ConfigError(f"minimal pairs: the sentence {sentence!r} has no tokens")
    special = lm.tokenizer.ids
    row = torch.tensor([special["cls"], *ids, special["sep"]], device=lm.device)
    total = 0.0
    for start in range(0, len(ids), batch_size):
        positions = torch.arange(start, min(start + batch_size, len(ids)), device=lm.device) + 1
        copies = row.repeat(len(positions), 1)
        copies[torch.arange(len(positions)), positions] = special["mask"]
        hidden = lm.backbone(copies).last_hidden_state[torch.arange(len(positions)), positions]
        logprobs = lm.logits(hidden).float().log_softmax(-1)
        total += float(logprobs.gather(1, row[positions, None]).sum())
    return total


def score_sentence(lm, sentence: str) -> float:  # noqa: ANN001
    """Log-likelihood (causal) or pseudo-log-likelihood (masked)."""
    return sentence_log_likelihood(lm, sentence) if lm.causal else pseudo_log_likelihood(lm, sentence)


@dataclass
class AcceptabilityReport:
    """Per pair, the two scores; accuracy (good scored above bad) overall and per phenomenon."""

    scoring: str
    pairs: list[MinimalPair]
    good_scores: list[float]
    bad_scores: list[float]

    def correct(self) -> list[bool]:
        return [g > b for g, b in zip(self.good_scores, self.bad_scores, strict=True)]

    def by_phenomenon(self) -> dict[str, dict[str, float]]:
        groups: dict[str, list[bool]] = defaultdict(list)
        for pair, ok in zip(self.pairs, self.correct(), strict=True):
            groups[pair.phenomenon].append(ok)
        return {name: {"pairs": len(oks), "accuracy": float(np.mean(oks))} for name, oks in sorted(groups.items())}

    def summary(self) -> dict:
        per = self.by_phenomenon()
        return {"scoring": self.scoring, "pairs": len(self.pairs), "accuracy": float(np.mean(self.correct())),
                "macro_accuracy": float(np.mean([v["accuracy"] for v in per.values()])), "phenomena": per}


def evaluate_pairs(lm, pairs: Sequence[MinimalPair], progress=None) -> AcceptabilityReport:  # noqa: ANN001
    """Score both sentences of every pair with ``lm`` (a :class:`~plm_lightning.knowledge.lm.LanguageModel`)."""
    if not pairs:
        raise ConfigError("minimal pairs: no pair to score")
    good, bad = [], []
    for pair in pairs:
        good.append(score_sentence(lm, pair.good))
        bad.append(score_sentence(lm, pair.bad))
        if progress is not None:
            progress()
    return AcceptabilityReport("log-likelihood" if lm.causal else "pseudo-log-likelihood", list(pairs), good, bad)
