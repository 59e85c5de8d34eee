"""CounterFact's editing scores (Meng et al. 2022, sec. 3.2 and appendix D).

Per request, with P the model's probability of a whole target (every token, teacher-forced):

* efficacy score ES: P(target_new) > P(target_true) on the rewrite prompt; efficacy magnitude EM: their difference;
* paraphrase score PS: the same on the paraphrase prompts (``heldout_paraphrase`` on prompts in wordings the model
  never read, when the cases have them);
* neighbourhood score NS: P(target_true) > P(target_new) on prompts about other subjects that hold target_true;
* S: the harmonic mean of ES, PS and NS;
* fluency: the n-gram entropy of text generated from the subject's prompts, weighted 2/3 bigram + 4/3 trigram
  entropy (ROME's ``n_gram_entropy``); an edit that breaks the model collapses into repetition;
* unrelated facts: P@1 over every other probe of the world, before and after (the accuracy change).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from plm_lightning.errors import ConfigError
from plm_lightning.knowledge.editing import answer_log_probs, sample_continuations
from plm_lightning.knowledge.lm import LanguageModel


@torch.no_grad()
def target_log_probs(lm: LanguageModel, prompts: Sequence[str], target: str) -> np.ndarray:
    """log P(target | prompt) for each prompt."""
    if not prompts:
        return np.zeros(0)
    answer = lm.query(prompts[0], target).answer
    queries = [lm.query(p) for p in prompts]
    return answer_log_probs(lm, queries, list(answer)).cpu().numpy()


def n_gram_entropy(texts: Sequence[str], weights: tuple[float, ...] = (2 / 3, 4 / 3), orders: tuple[int, ...] = (2, 3)
                   ) -> float:
    """Mean over texts of the weighted average of the n-gram entropies (bits) of each text's words."""
    if not texts:
        return float("nan")
    scores = []
    for text in texts:
        words = text.split()
        entropies = []
        for n in orders:
            grams = Counter(tuple(words[i: i + n]) for i in range(len(words) - n + 1))
            total = sum(grams.values())
            entropies.append(-sum(c / total * math.log2(c / total) for c in grams.values()) if total else 0.0)
        scores.append(float(np.average(entropies, weights=weights)))
    return float(np.mean(scores))


def harmonic_mean(values: Sequence[float]) -> float:
    values = [float(v) for v in values]
    if any(v <= 0 for v in values):
        return 0.0
    return len(values) / sum(1.0 / v for v in values)


def _better(lm: LanguageModel, prompts: Sequence[str], first: str, second: str) -> tuple[float, float]:
    """(share of prompts where P(first) > P(second), mean P(first) - P(second))."""
    a, b = target_log_probs(lm, prompts, first), target_log_probs(lm, prompts, second)
    return float(np.mean(a > b)), float(np.mean(np.exp(a) - np.exp(b)))


def counterfact_scores(lm: LanguageModel, cases: Sequence[dict], fluency_tokens: int = 20, seed: int = 0) -> dict:
    """ES, EM, PS, NS, S and fluency averaged over CounterFact ``cases`` (dicts with ``prompt``, ``subject``,
    ``target_new``, ``target_true`` and the prompt lists)."""
    if not cases:
        raise ConfigError("edit scores: no cases to score")
    rows = []
    for case in cases:
        if case.get("target_true") is None:
            raise ConfigError(f"edit scores: case {case.get('case_id', '?')} has no target_true to compare against")
        new, true = case["target_new"], case["target_true"]
        es, em = _better(lm, [case["prompt"].format(case["subject"])], new, true)
        ps = _better(lm, case["paraphrase_prompts"], new, true)[0] if case.get("paraphrase_prompts") else None
        hps = (_better(lm, case["heldout_paraphrase_prompts"], new, true)[0] if case.get("heldout_paraphrase_prompts")
               else None)
        ns = 1.0 - _better(lm, case["neighborhood_prompts"], new, true)[0] if case.get("neighborhood_prompts") else None
        generated = sample_continuations(lm, case.get("generation_prompts") or [case["prompt"].format(case["subject"])],
                                         fluency_tokens, seed)
        rows.append({"efficacy": es, "magnitude": em, "paraphrase": ps, "heldout_paraphrase": hps, "neighborhood": ns,
                     "fluency": n_gram_entropy(generated)})

    def mean(key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return float(np.mean(values)) if values else None

    out = {key: mean(key) for key in ("efficacy", "magnitude", "paraphrase", "heldout_paraphrase", "neighborhood",
                                      "fluency")}
    parts = [out[k] for k in ("efficacy", "paraphrase", "neighborhood") if out[k] is not None]
    out["score"] = harmonic_mean(parts)
    out["cases"] = len(rows)
    return out


def update_ranks(deltas: dict[str, torch.Tensor], tol: float = 1e-6) -> dict[str, int]:
    """Numerical rank of each parameter's change (singular values above ``tol`` x the largest)."""
    out = {}
    for name, d in deltas.items():
        if d.abs().max() == 0:
            continue
        matrix = d.reshape(d.shape[0], -1).double() if d.ndim > 1 else d[None].double()
        s = torch.linalg.svdvals(matrix)
        out[name] = int((s > tol * s[0]).sum())
    return out


def evaluate_edit(lm: LanguageModel, editor, cases: Sequence[dict],  # noqa: ANN001
                  unrelated: dict[str, Sequence[dict]] | Sequence[dict] | None = None, restore: bool = True) -> dict:
    """Scores before and after ``editor`` applies every case at once, the P@1 of each group of ``unrelated`` probes
    (e.g. other subjects; the edited subjects' other relations) before and after, which parameters changed and the
    rank of each change; the model is restored afterwards unless ``restore=False`` (then the
    :class:`~plm_lightning.knowledge.editing.Edit` is returned under ``"edit"``)."""
    from plm_lightning.knowledge.editing import EditRequest
    from plm_lightning.knowledge.probing import probe

    requests = [EditRequest.from_dict(c) for c in cases]
    groups = {"unrelated": unrelated} if isinstance(unrelated, Sequence) else dict(unrelated or {})
    groups = {name: rows for name, rows in groups.items() if rows}
    before = counterfact_scores(lm, cases)
    accuracy_before = {name: probe(lm, rows).last["p@1"] for name, rows in groups.items()}
    edit = editor.apply(lm, requests)
    after = counterfact_scores(lm, cases)
    accuracy_after = {name: probe(lm, rows).last["p@1"] for name, rows in groups.items()}
    out = {"editor": edit.info, "cases": len(cases), "before": before, "after": after,
           "p@1_before": accuracy_before, "p@1_after": accuracy_after, "changed": update_ranks(edit.delta())}
    if "unrelated" in groups:
        out["unrelated_p@1_before"], out["unrelated_p@1_after"] = accuracy_before["unrelated"], accuracy_after["unrelated"]
    if restore:
        edit.restore()
    else:
        out["edit"] = edit
    return out
