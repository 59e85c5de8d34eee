"""The objective arena: one-line errors for bad settings, claims judged from results (reproduces / does not / not
measured), the report files, FLOPs-matched runs from the CLI, and a re-run that continues instead of retraining."""

import json
import struct

import pytest

from plm_lightning.arena import Arena, ArenaConfig, RunResult, check_claims, write_report
from plm_lightning.errors import ConfigError
from tests.conftest import ROOT, WORLD_SPEC, run_cli

CONFIGS = str(ROOT / "configs")
TINY = dict(hidden_size=32, num_heads=2, num_layers=2, intermediate_size=64, seq_len=32, batch_size=8,
            configs_dir=CONFIGS)


@pytest.mark.parametrize("changes, words", [
    ({"recipes": ("bert", "nope")}, "no recipe nope"),
    ({"budgets": (0.0,)}, "must be positive"),
    ({"downstream": ("glue",)}, "unknown --downstream task(s) glue"),
    ({"hidden_size": 30, "num_heads": 4}, "multiple of --num-heads"),
    ({"downstream": ("lama",)}, "must be pretrained on it: add --data world"),
    ({"prompt_limit": 0}, "--prompt-limit=0 must be >= 1"),
])
def test_bad_settings_are_one_line_errors(changes: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        ArenaConfig(**{**TINY, **changes})


def test_recipe_variants_are_points_of_one_recipe() -> None:
    from plm_lightning.arena.runner import recipe_variant, split_recipes

    recipes = split_recipes("gpt2, continuum[data.bidirectional_fraction=0.25;data.prediction=masked],continuum")
    assert recipes == ("gpt2", "continuum[data.bidirectional_fraction=0.25;data.prediction=masked]", "continuum")
    config = ArenaConfig(**{**TINY, "recipes": recipes})
    args = config.recipe_args(recipes[1])
    assert args[:2] == ["--config", f"{CONFIGS}/continuum.yaml"] and args[2:-2] == config.overrides()
    assert args[-2:] == ["--data.bidirectional_fraction=0.25", "--data.prediction=masked"]  # after the arena's shape
    assert recipe_variant("bert") == ("bert", {})
    for bad, words in (("continuum[bidirectional_fraction=1]", "dotted key"), ("bert]", "is not NAME"),
                       ("nope[data.x=1]", "no recipe nope[data.x=1]")):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            ArenaConfig(**{**TINY, "recipes": (bad,)})


def _result(recipe: str, scores: dict[str, float], target: float | None = None) -> RunResult:
    return RunResult(recipe, 1e12, steps=10, flops=1e12, flops_per_step=1e11, downstream=scores,
                     val_curve=[(5e11, 3.0), (1e12, 2.5)], val_loss=2.5,
                     statistics={"target_length_mean": target} if target else {})


def test_claims_are_judged_from_the_scores_and_the_report_is_written(tmp_path) -> None:
    config = ArenaConfig(recipes=("bert", "electra", "roberta", "spanbert", "t5", "bart"), budgets=(1e12,),
                         downstream=("code-or-prose", "cloze-spans"), configs_dir=CONFIGS)
    results = [_result("bert", {"code-or-prose": 0.80, "cloze-spans": 0.40}),
               _result("electra", {"code-or-prose": 0.85, "cloze-spans": 0.45}),
               _result("roberta", {"code-or-prose": 0.795, "cloze-spans": 0.40}),  # within one point: no harm
               _result("spanbert", {"code-or-prose": 0.80, "cloze-spans": 0.35}),  # worse on the span task
               _result("t5", {}, target=30.0), _result("bart", {}, target=128.0)]
    verdicts = {c.statement.split()[0]: c.verdict for c in check_claims(results, config)}
    assert verdicts == {"Replaced": "reproduces", "RTD": "not measured", "Removing": "reproduces",
                        "Span": "does not reproduce", "T5's": "reproduces", "Fine-tuning": "not measured"}
    files = write_report(results, config, tmp_path)
    assert "**does not reproduce**" in files["report"].read_text() and "spanbert 0.3500 vs bert 0.4000" in \
        files["report"].read_text()
    assert len(files["csv"].read_text().strip().splitlines()) == 7
    for name in ("loss_plot", "downstream_plot"):
        png = files[name].read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 300


def test_the_bidirectionality_claim_reads_the_continuum_variants() -> None:
    uni, bi = "continuum[data.bidirectional_fraction=0]", "continuum[data.bidirectional_fraction=1;data.prediction=masked]"
    config = ArenaConfig(recipes=(uni, "continuum", bi), budgets=(1e12,),
                         downstream=("code-or-prose", "prompt-next-sentence"), configs_dir=CONFIGS)

    def claim(scores: dict[str, dict[str, float]]):  # noqa: ANN202
        results = [_result(r, scores[r]) for r in scores]
        return next(c for c in check_claims(results, config) if c.statement.startswith("Fine-tuning"))

    found = claim({uni: {"code-or-prose": 0.70, "prompt-next-sentence": 0.40},
                   "continuum": {"code-or-prose": 0.75, "prompt-next-sentence": 0.35},  # f = 0.5: in between
                   bi: {"code-or-prose": 0.80, "prompt-next-sentence": 0.25}})
    assert found.verdict == "reproduces" and "fraction 1 vs 0: fine-tuned 0.8000 vs 0.7000" in found.evidence
    found = claim({uni: {"code-or-prose": 0.70, "prompt-next-sentence": 0.20},
                   bi: {"code-or-prose": 0.80, "prompt-next-sentence": 0.25}})
    assert found.verdict == "does not reproduce"
    assert claim({uni: {"code-or-prose": 0.7}, bi: {"code-or-prose": 0.8}}).verdict == "not measured"
    with pytest.raises(ConfigError, match="prompt-next-sentence"):
        ArenaConfig(**{**TINY, "downstream": ("prompt-nope",)})


@pytest.mark.slow
def test_cli_arena_trains_two_recipes_to_the_budget_scores_and_continues(tmp_path) -> None:
    """T5 and BART at one tiny size: BART's decoder rebuilds the whole row, T5's only the noise, so a BART step costs
    more and it gets fewer steps for the same FLOPs; both are fine-tuned and scored, the T5 claim is judged from
    the measured target lengths, the LAMA probe asks each its world's facts, and a re-run reports the saved results
    instead of retraining."""
    args = ["arena", "--recipes", "t5,bart", "--budget-flops", "2e9", "--dir", str(tmp_path / "a"), "--downstream",
            "code-or-prose,lama,prompt-next-sentence", "--data", WORLD_SPEC, "--finetune-steps", "3", "--evaluations", "2",
            "--val-batches", "2", "--prompt-limit", "200",
            "--configs-dir", CONFIGS, *[f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k != "configs_dir"]]
    res = run_cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    saved = {p.name.split("@")[0]: p for p in (tmp_path / "a" / "results").glob("*.json")}
    t5, bart = (json.loads(saved[r].read_text()) for r in ("t5", "bart"))
    for result in (t5, bart):
        assert result["flops"] >= 2e9 > result["flops"] - result["flops_per_step"]  # the budget, to one step
        assert len(result["val_curve"]) >= 2 and result["downstream"]["code-or-prose"] > 0
        assert 0 <= result["downstream"]["lama"] <= 1 and not result["errors"]
        assert 0 <= result["downstream"]["prompt-next-sentence"] <= 1  # zero-shot, by candidate log-likelihood
    probe = json.loads((tmp_path / "a" / "probe" / "t5@2e+09" / "lama.json").read_text())
    (reader,) = probe["readers"]  # every training fact asked (109 of the world's 120; 11 are alias-only)
    assert reader["objects"] == "first-token" and reader["probes"] == 109 and reader["skipped_multi_token"] == 0
    assert bart["flops_per_step"] > t5["flops_per_step"] and bart["steps"] < t5["steps"]
    assert "| T5's span corruption shortens the targets | Raffel et al. 2020, sec. 3.3.4 | **reproduces** |" in res.stdout
    for name in ("results.csv", "results.md", "loss_vs_flops.png", "downstream_vs_flops.png"):
        assert (tmp_path / "a" / name).stat().st_size > 100
    config = ArenaConfig(recipes=("t5", "bart"), budgets=(2e9,), downstream=("code-or-prose", "lama",
                                                                               "prompt-next-sentence"),
                         finetune_steps=3, evaluations=2, val_batches=2, data=WORLD_SPEC, prompt_limit=200, **TINY)
    said: list[str] = []
    again = Arena(config, tmp_path / "a", log=said.append).run()  # nothing left to train: the saved results
    assert [r.recipe for r in again] == ["t5", "bart"] and all("done earlier" in m for m in said)
    assert again[0].downstream == t5["downstream"]
    with pytest.raises(ConfigError, match="another size"):
        Arena(ArenaConfig(**{**config.__dict__, "seq_len": 64}), tmp_path / "a")
