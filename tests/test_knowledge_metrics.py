"""Metric functions of the knowledge tools on hand-built rankings and texts."""

import math

import numpy as np
import pytest

from plm_lightning.knowledge.edit_metrics import harmonic_mean, n_gram_entropy, update_ranks
from plm_lightning.knowledge.probing import ProbeReport, macro_scores, mean_reciprocal_rank, precision_at


def test_precision_and_mrr_on_hand_built_ranks() -> None:
    ranks = [1, 2, 10, 11]
    assert precision_at(ranks, 1) == 0.25 and precision_at(ranks, 10) == 0.75
    assert mean_reciprocal_rank(ranks) == pytest.approx((1 + 1 / 2 + 1 / 10 + 1 / 11) / 4)


def test_scores_are_macro_averaged_over_relations() -> None:
    # relation a: 3 probes all first; relation b: 1 probe at rank 4 -> P@1 = (1 + 0) / 2, not 3/4
    scores = macro_scores([1, 1, 1, 4], ["a", "a", "a", "b"])
    assert scores["p@1"] == 0.5 and scores["p@10"] == 1.0
    assert scores["mrr"] == pytest.approx((1 + 0.25) / 2)


def test_forgotten_counts_facts_found_in_the_middle_but_not_at_the_end() -> None:
    ranks = np.array([[9, 9, 9, 9],    # embeddings: never counted
                      [1, 5, 1, 1],    # layer 1
                      [3, 1, 1, 2],    # layer 2
                      [2, 1, 7, 1]])   # last layer
    report = ProbeReport("lens", ranks, ["a"] * 4, [{"mentions": 2}] * 4, 0)
    # probe 0: first at layer 1, not at the end -> forgotten; probe 2: first at 1 and 2, rank 7 at the end -> forgotten
    assert report.forgotten() == 0.5
    assert report.last["p@1"] == 0.5 and report.layers[0]["p@1"] == 0.0


def test_n_gram_entropy_falls_on_repetition() -> None:
    varied = "the quick brown fox jumps over the lazy dog near the river bank"
    repeated = "the dog the dog the dog the dog the dog the dog"
    assert n_gram_entropy([varied]) > n_gram_entropy([repeated])
    # 12 distinct bigrams and 11 distinct trigrams of 13 words: log2 counts, weighted 2/3 and 4/3
    assert n_gram_entropy([varied]) == pytest.approx((2 / 3 * math.log2(12) + 4 / 3 * math.log2(11)) / 2)


def test_harmonic_mean_and_update_ranks() -> None:
    import torch

    assert harmonic_mean([1.0, 0.5]) == pytest.approx(2 / 3)
    assert harmonic_mean([1.0, 0.0, 1.0]) == 0.0
    u, v = torch.randn(6), torch.randn(4)
    ranks = update_ranks({"one": torch.outer(u, v), "two": torch.randn(6, 4), "none": torch.zeros(6, 4)})
    assert ranks == {"one": 1, "two": 4}


def test_classifier_and_mdl_probes_separate_a_readable_property_from_noise() -> None:
    """Voita & Titov's setting in miniature: labels linearly readable from layer 1, not from layer 0 (noise)."""
    import torch

    from plm_lightning.knowledge.representations import classifier_probe, online_code_length

    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (200,), generator=gen)
    noise = torch.randn(200, 16, generator=gen)
    readable = noise.clone()
    readable[:, :4] += 3 * torch.nn.functional.one_hot(labels, 4)
    accuracy = classifier_probe(torch.stack([noise, readable]), labels.tolist())
    assert accuracy[0] < 0.45 and accuracy[1] > 0.9
    codes = [online_code_length(x, labels.tolist(), 4) for x in (noise, readable)]
    assert all(c["uniform_bits"] == 200 * 2 for c in codes)  # log2(4) bits per label
    # noise codes at about the uniform length, not far above it (probes fitted to a few examples without early
    # stopping are overconfident: compression 0.27 here); readable labels compress
    assert 0.9 < codes[0]["compression"] < 1.1 and codes[1]["compression"] > codes[0]["compression"] + 0.3
    tiny = online_code_length(readable[:5], labels[:5].tolist(), 4, (0.2, 1.0))  # blocks of one example: finite, no NaN
    assert tiny["online_bits"] == tiny["online_bits"] and tiny["online_bits"] > 0
