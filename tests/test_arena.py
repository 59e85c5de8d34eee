"""The objective arena: one-line errors for bad settings, the sanity gate (a claim judged only where its recipes beat
random weights), claims judged at every budget from results, the report rebuilt from results.csv alone,
FLOPs-matched runs from the CLI through submitit's executors, and a killed arena that trains only what is missing."""

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
    ({"seeds": 0}, "--seeds=0 must be >= 1"),
    ({"random_init": ("albert",)}, "--random-init albert is not in --recipes"),
    ({"accelerator": "tpu"}, "--accelerator 'tpu' is not cpu or gpu"),
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
    assert config.device_args() == [] and "--trainer.precision=bf16-mixed" in ArenaConfig(
        **{**TINY, "accelerator": "gpu"}).device_args()
    for bad, words in (("continuum[bidirectional_fraction=1]", "dotted key"), ("bert]", "is not NAME"),
                       ("nope[data.x=1]", "no recipe nope[data.x=1]")):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            ArenaConfig(**{**TINY, "recipes": (bad,)})


OBJECTIVES = {"t5": "Seq2SeqLM", "bart": "Seq2SeqLM", "continuum": "CausalLM", "gpt2": "CausalLM"}


def _result(recipe: str, scores: dict[str, float], target: tuple[float, float] | None = None, seed: int = 0,
            random_init: dict[str, float] | None = None, parameters: int = 0, budget: float = 1e12) -> RunResult:
    objective = OBJECTIVES.get(recipe.split("[")[0], "MaskedLM")
    return RunResult(recipe, budget, seed, objective, steps=10, flops=budget, flops_per_step=1e11, downstream=scores,
                     val_curve=[(5e11, 3.0), (1e12, 2.5)], val_loss=2.5, parameters=parameters,
                     statistics={"target_length_mean": target[0], "input_length_mean": target[1]} if target else {},
                     random_init=random_init or {})


def _seeds(recipe: str, means: dict[str, float], spread: float = 0.01, random_init: dict[str, float] | None = None,
           **kwargs) -> list[RunResult]:
    """Three seeds of ``recipe`` whose scores (and random-init scores) are ``means`` -spread, 0, +spread (a standard
    deviation of ``spread``)."""
    return [_result(recipe, {t: m + d for t, m in means.items()}, seed=i,
                    random_init={t: m + d for t, m in (random_init or {}).items()}, **kwargs)
            for i, d in enumerate((-spread, 0.0, spread))]


def test_target_lengths_are_compared_per_input_token_and_sharing_that_halves_parameters_cuts_them():
    """The page's own runs (2026-12-07): T5's 14.0 target tokens per 64-token row against BART's 20.3 per 16.8-token
    corrupted document are 0.69x in absolute length but 0.18x per input token; ALBERT at 2 layers: 0.53x."""
    from plm_lightning.arena import ArenaConfig, check_claims

    config = ArenaConfig(recipes=("t5", "bart", "albert", "bert"), budgets=(1e12,), configs_dir=CONFIGS,
                         downstream=("code-or-prose",), num_layers=2)
    results = [_result("t5", {}, target=(14.0, 64.0)), _result("bart", {}, target=(20.28125, 16.796875)),
               _result("albert", {}, parameters=86452), _result("bert", {}, parameters=163796)]
    claims = {c.statement.split()[0]: c for c in check_claims(results, config)}
    assert claims["T5's"].verdict == "reproduces" and "(t5: 0.22 per input token)" in claims["T5's"].evidence
    assert "(bart, the whole text: 1.21): 0.18x" in claims["T5's"].evidence
    assert claims["ALBERT's"].verdict == "reproduces" and "(0.53x; one set of layer weights for 2 layers" in \
        claims["ALBERT's"].evidence
    results[1].statistics.pop("input_length_mean")  # statistics of older runs: not measured, never guessed
    assert {c.statement.split()[0]: c.verdict for c in check_claims(results, config)}["T5's"] == "not measured"


def test_estimates_and_the_two_standard_error_rule() -> None:
    """Welch's standard error of a difference: a clear win reproduces, the reverse does not, a tie within noise is
    inconclusive, and one seed (no error bar) is never more than inconclusive."""
    from plm_lightning.arena.signal import Estimate, judge

    a, b = Estimate.of([0.80, 0.81, 0.82]), Estimate.of([0.70, 0.71, 0.72])
    assert (a.mean, round(a.std, 6), a.n) == (0.81, 0.01, 3)
    assert judge(a, b)[0] == "reproduces" and judge(b, a)[0] == "does not reproduce"
    verdict, numbers = judge(Estimate.of([0.80, 0.81, 0.82]), Estimate.of([0.795, 0.805, 0.815]))
    assert verdict == "inconclusive at this scale" and "two standard errors 0.0163" in numbers
    assert judge(Estimate.of([0.9]), Estimate.of([0.1]))[0] == "inconclusive at this scale"
    floor = Estimate.of([0.4743] * 3)  # every seed at the majority-class score: no error bar to judge by
    assert judge(floor, Estimate.of([0.4741] * 3))[0] == "inconclusive at this scale"
    assert "every seed of each scored the same" in judge(floor, floor)[1]
    assert judge(Estimate.of([0.795, 0.80, 0.805]), a, margin=0.01)[0] == "inconclusive at this scale"
    assert judge(Estimate.of([0.835, 0.84, 0.845]), a, margin=0.01)[0] == "reproduces"  # non-inferior beyond noise


def test_claims_are_judged_from_the_scores_and_the_report_is_written(tmp_path) -> None:
    no_nsp = "bert[model.sentence_prediction=none;data.packing=full_sentences]"
    config = ArenaConfig(recipes=("bert", "electra", no_nsp, "spanbert", "t5", "bart", "albert"), budgets=(1e12,),
                         downstream=("code-or-prose", "cloze-spans"), configs_dir=CONFIGS, seeds=3,
                         random_init=("bert",))
    results = [*_seeds("bert", {"code-or-prose": 0.80, "cloze-spans": 0.40}, parameters=1000,
                       random_init={"code-or-prose": 0.60, "cloze-spans": 0.20}),
               *_seeds("electra", {"code-or-prose": 0.85, "cloze-spans": 0.45}),  # a clear win
               *_seeds(no_nsp, {"code-or-prose": 0.805, "cloze-spans": 0.40}),  # a tie within noise
               *_seeds("spanbert", {"code-or-prose": 0.80, "cloze-spans": 0.30}),  # clearly worse on the span task
               _result("t5", {}, target=(30.0, 128.0)), _result("bart", {}, target=(128.0, 120.0)),
               *_seeds("albert", {"code-or-prose": 0.79, "cloze-spans": 0.40}, parameters=300)]
    verdicts = {c.statement.split()[0]: c.verdict for c in check_claims(results, config)}
    assert verdicts == {"Replaced": "reproduces", "RTD": "not measured", "Removing": "inconclusive at this scale",
                        "Span": "does not reproduce", "T5's": "reproduces", "Pretraining": "reproduces",
                        "ALBERT's": "reproduces", "Fine-tuning": "not measured"}
    claims = {c.statement.split()[0]: c.evidence for c in check_claims(results, config)}
    assert claims["Removing"].startswith(f"{no_nsp} 0.6025 ± 0.0100 (n=3) vs bert 0.6000 ± 0.0100 (n=3); difference +0.0025")
    assert "1,000 vs 300" not in claims["ALBERT's"] and "300 vs 1,000 parameters (0.30x;" in claims["ALBERT's"]
    missing = check_claims(results[3:], config)  # no bert: its claims cannot be judged
    assert {c.statement.split()[0]: c.verdict for c in missing}["Replaced"] == "not measured"
    for run in results:
        run.seconds = 360.0
    files = write_report(results, config, tmp_path, command="python -m plm_lightning arena --seeds 3")
    report = files["report"].read_text()
    assert ("Downstream: code-or-prose, cloze-spans fine-tuned for 200 steps each (code-or-prose by macro-F1: always "
            "answering prose, its majority class, scores about 0.47).") in report
    assert f"the runs reported took {len(results) / 10:.1f} hours on this machine" in report
    assert "**does not reproduce**" in report and "python -m plm_lightning arena --seeds 3" in report
    assert "| electra | 1e+12 | 3 | 10 | 0 | 2.5000 ± 0.0000 | 0.8500 ± 0.0100 | 0.4500 ± 0.0100 |" in report
    assert len(files["csv"].read_text().strip().splitlines()) == 1 + len(results)
    for name in ("loss_plot", "downstream_plot"):
        png = files[name].read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 300


def test_the_bidirectionality_claim_reads_the_continuum_variants() -> None:
    uni, bi = "continuum[data.bidirectional_fraction=0]", "continuum[data.bidirectional_fraction=1;data.prediction=masked]"
    config = ArenaConfig(recipes=(uni, "continuum", bi), budgets=(1e12,),
                         downstream=("code-or-prose", "prompt-next-sentence"), configs_dir=CONFIGS, seeds=3,
                         random_init=(uni,))
    scratch = {"code-or-prose": 0.50, "prompt-next-sentence": 0.10}  # the decoder family's random weights

    def claim(scores: dict[str, dict[str, float]]):  # noqa: ANN202
        results = [r for name in scores for r in _seeds(name, scores[name], random_init=scratch if name == uni else None)]
        return next(c for c in check_claims(results, config) if c.statement.startswith("Fine-tuning"))

    found = claim({uni: {"code-or-prose": 0.70, "prompt-next-sentence": 0.40},
                   "continuum": {"code-or-prose": 0.75, "prompt-next-sentence": 0.35},  # f = 0.5: in between
                   bi: {"code-or-prose": 0.80, "prompt-next-sentence": 0.25}})
    assert found.verdict == "reproduces" and "fraction 1 vs 0: fine-tuned 0.8000 ± 0.0100 (n=3) vs 0.7000" in \
        found.evidence
    found = claim({uni: {"code-or-prose": 0.70, "prompt-next-sentence": 0.20},
                   bi: {"code-or-prose": 0.80, "prompt-next-sentence": 0.25}})
    assert found.verdict == "does not reproduce"
    found = claim({uni: {"code-or-prose": 0.70, "prompt-next-sentence": 0.25},
                   bi: {"code-or-prose": 0.80, "prompt-next-sentence": 0.25}})
    assert found.verdict == "inconclusive at this scale"
    assert claim({uni: {"code-or-prose": 0.7}, bi: {"code-or-prose": 0.8}}).verdict == "not measured"
    found = claim({uni: {"code-or-prose": 0.70, "prompt-next-sentence": 0.11},  # prompting at random weights' level
                   bi: {"code-or-prose": 0.80, "prompt-next-sentence": 0.10}})
    assert found.verdict == "not judged: below the floor" and "prompted: no task where both variants beat random" \
        in found.evidence and "prompt-next-sentence below the floor" in found.evidence
    spans = ArenaConfig(**{**config.__dict__, "downstream": ("cloze-spans", *config.downstream)})
    results = [*_seeds(uni, {"code-or-prose": 0.70, "prompt-next-sentence": 0.40}, random_init=scratch),
               *_seeds(bi, {"cloze-spans": 0.30, "code-or-prose": 0.80, "prompt-next-sentence": 0.25})]
    for run in results[:3]:
        run.downstream["cloze-spans"] = None  # extractive QA refuses the causal end: compared on what both took
    found = next(c for c in check_claims(results, spans) if c.statement.startswith("Fine-tuning"))
    assert found.verdict == "reproduces" and "0.8000 ± 0.0100 (n=3) vs 0.7000 ± 0.0100 (n=3) (code-or-prose;" in \
        found.evidence
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


def test_cli_seeds_run_seed_by_seed_with_their_own_seeds_and_continue(tmp_path, monkeypatch, capsys) -> None:
    """``arena --seeds 2 --random-init bert`` from the CLI: every (seed, recipe) run once, seed by seed, each
    pretraining and fine-tuning with its own seeds (seed 0: the recipe's), the random-init control for the named
    recipe, a result file per seed, the page published; a re-run trains nothing. The training itself is the slow
    CLI test's (one seed) and the published arena's; here ``fit`` is replaced by a recorder."""
    from plm_lightning.arena import runner
    from tests.conftest import cli_output

    fits: list[list[str]] = []

    def fake_fit(self, args, where):  # noqa: ANN001, ANN202
        fits.append(args)
        (where / "v" / "checkpoints").mkdir(parents=True, exist_ok=True)
        (where / "v" / "checkpoints" / "last.ckpt").write_bytes(b"")
        seed = next((int(a.split("=")[1]) for a in args if a.startswith("--seed_everything=")), 0)
        return 0, "", [{"step": 1, "val/loss": 3.0 - seed, "val/f1": 0.5 + 0.1 * seed}]

    monkeypatch.setattr(runner, "measure_recipe", lambda config, recipe: {
        "objective": "MaskedLM", "flops_per_step": 1e9, "parameters": 10, "seconds_per_step": 0.1, "statistics": {}})
    monkeypatch.setattr(runner.Arena, "_fit", fake_fit)
    args = ["arena", "--recipes", "bert,electra", "--budget-flops", "2e9", "--downstream", "cloze-spans",
            "--seeds", "2", "--random-init", "bert", "--dir", str(tmp_path / "a"), "--page", str(tmp_path / "page.md"),
            "--configs-dir", CONFIGS, "--executor", "debug"]  # in this process: fit is the recorder
    report = cli_output(args, capsys)
    names = sorted(p.name for p in (tmp_path / "a" / "results").glob("*.json"))
    assert names == ["bert@2e+09.json", "bert@2e+09~s1.json", "electra@2e+09.json", "electra@2e+09~s1.json"]
    pretraining = [a for a in fits if any(x.endswith("bert.yaml") or x.endswith("electra.yaml") for x in a)]
    assert [next((x for x in a if x.startswith("--seed_everything")), None) for a in pretraining] == \
        [None, None, "--seed_everything=1", "--seed_everything=1"]  # seed by seed; seed 0 keeps the recipe's
    assert "--data.seed=1235" in pretraining[2]
    random = [a for a in fits if "--model.random_init=true" in a]
    assert len(random) == 2 and "--seed_everything=1" in random[1] and "--data.seed=1235" not in random[1]
    assert "0.5500 ± 0.0707" in report and (tmp_path / "page" / "downstream_vs_flops.png").is_file()
    assert "](page/loss_vs_flops.png)" in (tmp_path / "page.md").read_text()
    fits.clear()
    cli_output(args, capsys)
    assert fits == []  # every seed's result was saved: nothing is trained again
    (tmp_path / "a" / "results" / "electra@2e+09~s1.json").unlink()
    table = tmp_path / "a" / "results.csv"  # --report-only reads this file alone: one run less in it, one less reported
    lines = table.read_text().splitlines(keepends=True)
    table.write_text("".join(line for line in lines if not line.startswith("electra,1,")))
    partial = cli_output([*args[:args.index("--seeds")], "--seeds", "3", *args[args.index("--seeds") + 2:],
                          "--report-only"], capsys)
    assert fits == [] and "| electra | 2e+09 | 1 |" in partial and "| bert | 2e+09 | 2 |" in partial
    added = [*args[:args.index("cloze-spans")], "cloze-spans,code-or-prose", *args[args.index("cloze-spans") + 1:]]
    saved = tmp_path / "a" / "arena.json"  # as an arena saved before tasks could be added wrote it
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "downstream": ["cloze-spans"]}))
    cli_output(added, capsys)  # a task added to an arena: scored from each saved run's checkpoint, nothing retrained
    tasks = [(next(x for x in a if x.endswith(".yaml")).rsplit("/", 1)[1], "--model.random_init=true" in a)
             for a in fits]  # bert s0, electra s0, bert s1 (+ its random init); electra s1, whose file went, in full
    assert tasks == [("code-or-prose.yaml", False), ("code-or-prose.yaml", True), ("code-or-prose.yaml", False),
                     ("code-or-prose.yaml", False), ("code-or-prose.yaml", True), ("electra.yaml", False),
                     ("cloze-spans.yaml", False), ("code-or-prose.yaml", False)]
    saved = json.loads((tmp_path / "a" / "results" / "bert@2e+09~s1.json").read_text())
    assert set(saved["downstream"]) == {"cloze-spans", "code-or-prose"}


def test_the_gate_blocks_a_verdict_below_the_floor_and_lets_one_through() -> None:
    """At the small budget BERT scores what random weights score and ELECTRA less: without the gate that reads "does
    not reproduce"; with it, "not judged: below the floor" with the numbers. At the large budget both beat random
    weights on cloze-spans (ELECTRA through BERT's baseline, its family's), code-or-prose sits at one floor for every
    run and next-sentence is passed by ELECTRA alone: the claim is judged on cloze-spans only, and reproduces."""
    from plm_lightning.arena.signal import Estimate, judge

    config = ArenaConfig(recipes=("bert", "electra"), budgets=(1e12, 8e12), configs_dir=CONFIGS, seeds=3,
                         downstream=("code-or-prose", "cloze-spans", "next-sentence"), random_init=("bert",))
    floor = {"code-or-prose": 0.4743}
    scratch = {"cloze-spans": 0.10, "next-sentence": 0.25}
    results = [
        *_seeds("bert", {**floor, "cloze-spans": 0.10, "next-sentence": 0.25}, random_init={**floor, **scratch}),
        *_seeds("electra", {**floor, "cloze-spans": 0.05, "next-sentence": 0.24}),
        *_seeds("bert", {**floor, "cloze-spans": 0.20, "next-sentence": 0.255}, budget=8e12),
        *_seeds("electra", {**floor, "cloze-spans": 0.25, "next-sentence": 0.30}, budget=8e12)]
    for run in results:  # code-or-prose: every seed at the majority-class score, no spread
        run.downstream["code-or-prose"] = 0.4743
        if run.random_init:
            run.random_init["code-or-prose"] = 0.4743
    small = [r for r in results if r.budget == 1e12]
    raw = judge(*(Estimate.of([r.downstream["cloze-spans"] for r in small if r.recipe == n]) for n in ("electra", "bert")))
    assert raw[0] == "does not reproduce"  # what the page said before the gate
    claims = {c.statement.split()[0]: c for c in check_claims(results, config)}
    rtd = claims["Replaced"]
    assert rtd.verdict == "reproduces" and "(cloze-spans; 8e+12 FLOPs each)" in rtd.evidence
    assert "code-or-prose uninformative (every run scored 0.4743)" in rtd.evidence
    assert "next-sentence below the floor (electra 0.3000 vs random weights (bert's) 0.2500: +0.0500" in rtd.evidence
    assert "bert 0.2550 vs random weights 0.2500: +0.0050 ± 0.0163" in rtd.evidence
    assert rtd.by_budget.startswith("1e+12: not judged: below the floor; 8e+12: +0.0500 ± 0.0163, reproduces")
    at_small = check_claims(small, ArenaConfig(**{**config.__dict__, "budgets": (1e12,)}))
    assert at_small[0].verdict == "not judged: below the floor" and "bert 0.1000 vs random weights 0.1000: " \
        "+0.0000 ± 0.0163" in at_small[0].evidence
    assert claims["Pretraining"].verdict == "reproduces" and "encoder: electra on cloze-spans +0.1500 ± 0.0163 " \
        "(against bert's random weights)" in claims["Pretraining"].evidence  # the family's best, on its baseline
    assert claims["Pretraining"].by_budget.startswith("1e+12: +0.0000 ± 0.0163, inconclusive at this scale")


def test_one_seed_or_a_zero_spread_never_passes_the_gate() -> None:
    from plm_lightning.arena.signal import Estimate, Signal, signal

    one = Signal("bert", "lama", 1e12, "bert", *(Estimate.of([v]) for v in (0.9, 0.0)))
    flat = Signal("bert", "lama", 1e12, "bert", *(Estimate.of([v] * 3) for v in (0.3, 0.0)))
    assert not one.passed and one.short() == "+0.9000 ± one seed" and not flat.passed
    results = _seeds("bert", {"lama": 0.3})
    found = signal(results, ("bert",), "bert", "lama", 1e12)
    assert found.baseline is None and not found.passed and found.short() == "no random-init baseline"


def test_the_pretraining_claim_needs_every_family() -> None:
    config = ArenaConfig(recipes=("bert", "continuum[data.bidirectional_fraction=0]"), budgets=(1e12,),
                         downstream=("code-or-prose",), configs_dir=CONFIGS, seeds=3,
                         random_init=("bert", "continuum[data.bidirectional_fraction=0]"))
    decoder = "continuum[data.bidirectional_fraction=0]"

    def verdict(decoder_score: float) -> str:
        results = [*_seeds("bert", {"code-or-prose": 0.8}, random_init={"code-or-prose": 0.6}),
                   *_seeds(decoder, {"code-or-prose": decoder_score}, random_init={"code-or-prose": 0.6})]
        claim = next(c for c in check_claims(results, config) if c.statement.startswith("Pretraining"))
        return claim.verdict + " | " + claim.evidence

    assert verdict(0.7).startswith("reproduces") and "decoder: continuum[data.bidirectional_fraction=0] on " \
        "code-or-prose +0.1000" in verdict(0.7)
    assert verdict(0.61).startswith("inconclusive at this scale") and ", below two standard errors" in verdict(0.61)
    assert verdict(0.5).startswith("does not reproduce")


def test_the_report_is_rebuilt_from_results_csv_alone(tmp_path) -> None:
    from plm_lightning.arena import read_results
    from plm_lightning.arena.report import recipe_signal_rows, signal_rows

    config = ArenaConfig(recipes=("bert", "electra", "t5", "bart"), budgets=(1e12, 4e12), configs_dir=CONFIGS,
                         downstream=("code-or-prose", "cloze-spans", "prompt-next-sentence"), seeds=3,
                         random_init=("bert", "t5"))
    results = [*_seeds("bert", {"code-or-prose": 0.80, "cloze-spans": 0.40}, parameters=1000,
                       random_init={"code-or-prose": 0.60, "cloze-spans": 0.20}),
               *_seeds("electra", {"code-or-prose": 0.85, "cloze-spans": 0.45}, budget=4e12),
               *_seeds("t5", {"code-or-prose": 0.70, "prompt-next-sentence": 0.3}, target=(29.0, 128.0),
                       random_init={"code-or-prose": 0.5, "prompt-next-sentence": 0.25}),
               _result("bart", {"code-or-prose": 0.7}, target=(100.0, 95.0))]
    results[0].errors["prompt-next-sentence"] = "a one-line reason; with a semicolon"
    for i, run in enumerate(results):
        run.started, run.finished, run.seconds, run.job = 1e9 + 100 * i, 1e9 + 100 * i + 150, 150.0, f"local:{i}"
    files = write_report(results, config, tmp_path)
    again = read_results(files["csv"], config)
    assert [(r.recipe, r.budget, r.seed, r.downstream, r.random_init, r.errors, r.val_curve, r.statistics, r.job)
            for r in again] == [(r.recipe, r.budget, r.seed, r.downstream, r.random_init, r.errors,
                                 [tuple(p) for p in r.val_curve], r.statistics, r.job) for r in results]
    assert check_claims(again, config) == check_claims(results, config)
    assert signal_rows(again, config) == signal_rows(results, config)
    every = recipe_signal_rows(again, config, 4e12)
    assert every == recipe_signal_rows(results, config, 4e12) and every[0][:3] == [
        "electra", "encoder", "+0.2500 ± 0.0163 (bert's) **passes**"]
    report = files["report"].read_text()
    assert "at most 2 runs at once" in report and "| code-or-prose | encoder | bert | 0.6000 ± 0.0100 (n=3) |" in report
    assert "| code-or-prose | encoder-decoder | t5 |" in report
    with pytest.raises(ConfigError, match="no .*results.csv"):
        read_results(tmp_path / "nope" / "results.csv", config)


def test_tasks_are_matched_to_each_recipe_before_anything_trains(tmp_path) -> None:
    from plm_lightning.arena.report import skipped_lines

    with pytest.raises(ConfigError, match="prompt-next-sentence fits none of --recipes bert, electra "
                                          r"\(prompting scores continuations"):
        ArenaConfig(**{**TINY, "recipes": ("bert", "electra"), "downstream": ("prompt-next-sentence",)})
    uni, prefix = "continuum[data.bidirectional_fraction=0]", "continuum"
    config = ArenaConfig(**{**TINY, "recipes": ("bert", "t5", uni, prefix, "xlnet"),
                            "downstream": ("cloze-spans", "prompt-next-sentence", "next-sentence", "code-or-prose")})
    assert config.tasks_for("bert") == ("cloze-spans", "next-sentence", "code-or-prose")
    assert config.tasks_for("t5") == ("prompt-next-sentence", "code-or-prose")
    assert config.tasks_for(uni) == ("prompt-next-sentence", "next-sentence", "code-or-prose")
    assert config.tasks_for(prefix)[0] == "cloze-spans"  # its bidirectional prefix reads the whole context
    masked = "continuum[data.bidirectional_fraction=1;data.prediction=masked]"
    assert "prompt-next-sentence" not in ArenaConfig(**{**TINY, "recipes": (masked, "t5")}).tasks_for(masked)
    assert config.reader("xlnet").family == "encoder" and config.reader("t5").family == "encoder-decoder"
    world = ArenaConfig(**{**TINY, "recipes": ("bert", "spanbert", "t5"), "data": "world",
                           "downstream": ("world-spans", "world-objects")})
    assert world.tasks_for("spanbert") == ("world-spans", "world-objects") and world.tasks_for("t5") == ("world-objects",)
    assert "--data.task=offline:world_spans=world" in world.finetune_args("world-spans")
    with pytest.raises(ConfigError, match="world-spans asks the synthetic world's facts"):
        ArenaConfig(**{**TINY, "recipes": ("bert",), "downstream": ("world-spans",)})
    lines = skipped_lines(config)
    assert lines[0] == (f"- cloze-spans: not applicable to t5, {uni} (extractive QA reads the whole context at every "
                        "position: a bidirectional reader (an encoder))")


@pytest.mark.parametrize("args, words", [
    (["--executor", "pbs"], "--executor 'pbs' is not one of local, slurm, debug"),
    (["--max-parallel", "0"], "--max-parallel=0 must be >= 1"),
    (["--executor-option", "partition"], "--executor-option 'partition' is not name=value"),
    (["--executor-option", "no_such_parameter=1"], "--executor-option: "),
    (["--budget-flops", "1e12,lots"], "--budget-flops '1e12,lots' must be numbers"),
    (["--downstream", "prompt-next-sentence"], "prompt-next-sentence fits none of --recipes bert"),
    (["--finetune-lr", "0"], "--finetune-lr=0.0 must be a positive learning rate"),
])
def test_bad_arena_options_are_one_line_before_anything_trains(args: list[str], words: str, tmp_path, capsys) -> None:
    from tests.conftest import cli_error

    line = cli_error(["arena", "--recipes", "bert", "--dir", str(tmp_path / "a"), "--configs-dir", CONFIGS, *args],
                     capsys)
    assert words in line
    assert not (tmp_path / "a" / "runs").exists()  # nothing trained


def test_random_weights_checkpoint_keeps_everything_but_the_weights(tmp_path) -> None:
    import torch

    from plm_lightning.arena.runner import random_weights_checkpoint
    from plm_lightning.objectives.loading import load_pretrained
    from tests.conftest import tiny_pretrained

    source = tmp_path / "gpt2.ckpt"
    tiny_pretrained(source, "gpt2")
    trained = torch.load(source, weights_only=True)
    for value in trained["state_dict"].values():  # "pretrained": every weight moved off its initialisation
        value.add_(0.5)
    torch.save(trained, source)
    first = random_weights_checkpoint(source, tmp_path / "a.ckpt", seed=3)
    second = random_weights_checkpoint(source, tmp_path / "b.ckpt", seed=3)
    a, b = (torch.load(p, weights_only=True) for p in (first, second))
    assert a["hyper_parameters"] == trained["hyper_parameters"] and set(a) == set(trained)
    weights = [k for k, v in trained["state_dict"].items() if v.dtype.is_floating_point]
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in weights)  # seeded
    assert not any(torch.equal(a["state_dict"][k], trained["state_dict"][k]) for k in weights)
    module, tokenizer = load_pretrained(first)
    assert type(module).__name__ == "CausalLM" and tokenizer.vocab_size > 0
    assert random_weights_checkpoint(source, first, seed=4) == first  # written once


@pytest.mark.slow
def test_a_killed_arena_runs_only_what_is_missing(tmp_path) -> None:
    """``--executor local --max-parallel 2`` from the CLI: killed (the driver and its jobs, SIGKILL) once the first run
    has saved its result, then run again: the finished runs are not retrained (their files untouched, "done
    earlier"), the missing ones train, and the report covers all of them, with the runs that overlapped."""
    import os
    import signal
    import subprocess
    import sys
    import time

    args = ["arena", "--recipes", "gpt2", "--budget-flops", "3e8", "--seeds", "3", "--dir", str(tmp_path / "a"),
            "--downstream", "lama", "--data", WORLD_SPEC, "--evaluations", "1", "--val-batches", "1",
            "--executor", "local", "--max-parallel", "2", "--configs-dir", CONFIGS,
            *[f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k != "configs_dir"]]
    results = tmp_path / "a" / "results"
    driver = subprocess.Popen([sys.executable, "-m", "plm_lightning", *args], cwd=tmp_path, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and not list(results.glob("*.json")):
        time.sleep(0.5)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    assert 1 <= len(finished) < 3, finished
    res = run_cli(args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    now = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    assert set(now) == {"gpt2@3e+08.json", "gpt2@3e+08~s1.json", "gpt2@3e+08~s2.json"}
    assert all(now[name] == mtime for name, mtime in finished.items())  # not retrained
    for name in finished:
        assert f"{name.removesuffix('.json')}: done earlier" in res.stderr
    submitted = [line for line in res.stderr.splitlines() if ": submitted (local job" in line]
    assert len(submitted) == 3 - len(finished)
    saved = [json.loads(p.read_text()) for p in results.glob("*.json")]
    assert all(s["job"].startswith("local:") and s["finished"] > s["started"] > 0 for s in saved)
    assert "| gpt2 | 3e+08 | 3 |" in res.stdout and "at most 2 runs at once" in res.stdout


def test_executors_get_their_parameters(tmp_path, monkeypatch) -> None:
    """Local jobs share this machine's cores; SLURM jobs take the cluster's (none asked unless --cpus-per-task) and
    any submitit parameter by name; without srun, --executor slurm is a one-line error."""
    import os

    from plm_lightning.arena.executor import ExecutorSettings, make_executor

    local = make_executor(ExecutorSettings("local", 2, 90), tmp_path / "jobs")
    assert local.cluster == "local" and local._executor.parameters["timeout_min"] == 90
    assert ExecutorSettings("local", 2).threads() == max(1, (os.cpu_count() or 1) // 2)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="--executor slurm: Could not detect \"srun\""):
        make_executor(ExecutorSettings("slurm"), tmp_path / "jobs")
    for tool in ("srun", "sbatch"):
        (tmp_path / tool).write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / tool).chmod(0o755)
    slurm = make_executor(ExecutorSettings("slurm", 8, 60, options=(("slurm_partition", "dev"),)), tmp_path / "jobs")
    parameters = slurm._executor.parameters
    assert parameters["partition"] == "dev" and parameters["time"] == 60 and "cpus_per_task" not in parameters
    assert ExecutorSettings("slurm").threads() == 0  # the job reads SLURM_CPUS_PER_TASK where it runs
    asked = make_executor(ExecutorSettings("slurm", cpus_per_task=4), tmp_path / "jobs")._executor.parameters
    assert asked["cpus_per_task"] == 4


def test_a_sanity_row_below_the_floor_names_the_gpu_command(tmp_path) -> None:
    from plm_lightning.arena.report import gpu_command

    assert gpu_command("python -m plm_lightning arena --recipes 'bert,t5' --budget-flops 5e11,4e12 --dir=/x "
                       "--accelerator cpu --seeds 3") == ("python -m plm_lightning arena --recipes bert,t5 "
                                                          "--budget-flops 5e+13,4e+14 --seeds 3 --dir arena_gpu "
                                                          "--accelerator gpu")
    config = ArenaConfig(recipes=("bert",), budgets=(1e12,), downstream=("code-or-prose",), configs_dir=CONFIGS,
                         seeds=3, random_init=("bert",))
    results = _seeds("bert", {"code-or-prose": 0.60}, random_init={"code-or-prose": 0.60})
    report = write_report(results, config, tmp_path, command="python -m plm_lightning arena --budget-flops 1e12")
    text = report["report"].read_text()
    assert "The sanity row (pretraining beats random weights) is *inconclusive at this scale*" in text
    assert "`python -m plm_lightning arena --budget-flops 1e+14 --dir arena_gpu --accelerator gpu`" in text
