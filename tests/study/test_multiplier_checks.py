"""Multiplier checks (spec ``multiplier_checks``): an arm's cell measured at a budget beyond the grid, so that a
compute multiplier's threshold is read from runs where the fits extrapolate (the MoE study's dense arm at
1.2 x 2.5e16): the spec's entries, the runs and their folders, their rows kept out of every cell, fit and
decision, the reading against the decision, the report's lines, and the committed study's reading."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from hfpretrain.study.analysis import analyse_isoflop, cells, check_gaps, is_check, multiplier_checks, to_json
from hfpretrain.study.grid import collect, folder_runs, load_spec, multiplier_check_runs, plan_study, write_results
from hfpretrain.study.report import check_gap_lines, multiplier_check_lines, per_set_lines, study_verdicts

from test_analysis import ALPHA, BUDGETS, FACTORS, A, E, study
from test_study import MICRO

REPO = Path(__file__).resolve().parents[2]
CHECK = {"arm": "dense", "budget": 3e16, "sizes": ["a", "b", "c"]}


def _spec(**extra) -> dict:
    return {
        "recipe": "r.yaml",
        "sizes": ["a", "b", "c", "d"],
        "flops": [1e15, 2.5e16],
        "seeds": [3, 5],
        "isoflop": {"tokens_per_param": 20},
        "arms": {"dense": [], "moe": ["moe.aux_loss_coef=0.001"]},
        "multiplier_checks": CHECK,
        **extra,
    }


@pytest.mark.parametrize(
    "checks, key",
    [
        ([3e16], "multiplier_checks:"),  # not a mapping
        ({"arm": "dense", "budget": 3e16}, "multiplier_checks:"),  # no sizes
        ({**CHECK, "seed": 3}, "multiplier_checks:"),  # an unknown key
        ({**CHECK, "arm": "mlp"}, "multiplier_checks.arm"),
        ({**CHECK, "budget": 2.5e16}, "multiplier_checks.budget"),  # a grid budget: a cell of its own
        ({**CHECK, "budget": -1}, "multiplier_checks.budget"),
        ({**CHECK, "budget": "lots"}, "multiplier_checks.budget"),
        ({**CHECK, "sizes": ["a", "b"]}, "multiplier_checks.sizes"),  # two sizes bracket nothing
        ({**CHECK, "sizes": ["a", "b", "z"]}, "multiplier_checks.sizes"),
        ({**CHECK, "sizes": ["a", "b", "b"]}, "multiplier_checks.sizes"),
        ({**CHECK, "sizes": "a b c"}, "multiplier_checks.sizes"),
        ({**CHECK, "seeds": [0]}, "multiplier_checks.seeds"),  # not one of the spec's seeds
        ({**CHECK, "overrides": ["training.learning_rate=1"]}, "multiplier_checks.overrides"),  # trains otherwise
        ({**CHECK, "overrides": ["evaluation.per_set"]}, "multiplier_checks.overrides"),  # no value
        ({**CHECK, "overrides": "evaluation.per_set=true"}, "multiplier_checks.overrides"),
        ({**CHECK, "overrides": ["evaluation.final_eval_tokens=1000"]}, "multiplier_checks.overrides"),  # the measure
        ({**CHECK, "seeds": [5.0]}, "multiplier_checks.seeds"),
        ([CHECK, {**CHECK, "seeds": [5]}], "share seeds [5]"),  # one run, two entries
    ],
)
def test_a_bad_multiplier_check_is_one_line_naming_its_key(checks, key):
    with pytest.raises(ValueError) as err:
        load_spec(_spec(multiplier_checks=checks))
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_spec_with_multiplier_checks_reads_back_its_own_dump():
    spec = load_spec(_spec(multiplier_checks=[{**CHECK, "budget": "3.0e16", "seeds": [5]}]))
    assert spec.multiplier_checks == [{**CHECK, "seeds": [5]}]
    assert load_spec(spec.to_dict()).multiplier_checks == spec.multiplier_checks
    assert "multiplier_checks" not in load_spec(_spec(multiplier_checks=None)).to_dict()


@pytest.mark.parametrize(
    "added, key",
    [
        ({"budget": 2.5e16}, "added_seeds:"),  # no seeds
        ({"budget": 2.5e16, "seeds": [7], "lr": 2}, "added_seeds:"),  # an unknown key
        ({"budget": 3e16, "seeds": [7]}, "added_seeds.budget"),  # not a grid budget
        ({"budget": 2.5e16, "seeds": [5]}, "added_seeds.seeds"),  # already one of seeds
        ({"budget": 2.5e16, "seeds": [7, 7]}, "added_seeds.seeds"),
        ([{"budget": 2.5e16, "seeds": [7]}, {"budget": 2.5e16, "seeds": [7]}], "added_seeds.seeds"),
        ({"budget": 2.5e16, "seeds": [7], "overrides": ["model.config=x"]}, "added_seeds.overrides"),
        ({"budget": 2.5e16, "seeds": ["x"]}, "added_seeds.seeds"),
        ({"budget": 2.5e16, "seeds": [[7]]}, "added_seeds.seeds"),
    ],
)
def test_a_bad_added_seed_is_one_line_naming_its_key(added, key):
    with pytest.raises(ValueError) as err:
        load_spec(_spec(added_seeds=added))
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_added_seeds_need_the_specs_seeds_and_seeds_are_integers():
    for spec, key in (
        (_spec(seeds=None, added_seeds={"budget": 2.5e16, "seeds": [7]}), "needs the spec's seeds"),
        (_spec(seeds=["x"]), "seeds: distinct integers"),
        (_spec(seeds=[1, 1]), "seeds: distinct integers"),
    ):
        with pytest.raises(ValueError, match=key):
            load_spec(spec)


def test_added_seeds_run_every_cell_of_their_budget_scored_as_written(tmp_path):
    """A third seed at one budget: its cells gain it (every arm and size), the other budgets do not; its scoring
    overrides reach only its runs; a check entry may name it; the spec reads back its own dump."""
    added = {"budget": 2.5e16, "seeds": [7], "overrides": ["evaluation.per_set=true"]}
    check = {**CHECK, "seeds": [7], "overrides": ["evaluation.per_set=true"]}
    spec = load_spec(_spec(added_seeds=added, multiplier_checks=[{**CHECK, "seeds": [3, 5]}, check]))
    assert spec.seeds_for(2.5e16) == [3, 5, 7] and spec.seeds_for(1e15) == [3, 5]
    assert load_spec(spec.to_dict()).added_seeds == spec.added_seeds == [added]
    from hfpretrain.study.grid import expand

    runs = expand(spec, tmp_path)
    seventh = [r for r in runs if r.seed == 7]
    assert {(r.arm, r.size, r.budget) for r in seventh} == {(a, s, 2.5e16) for a in spec.arms for s in "abcd"}
    assert all("evaluation.per_set=true" in r.overrides for r in seventh)
    assert not any("evaluation.per_set=true" in r.overrides for r in runs if r.seed != 7)
    checks = multiplier_check_runs(spec, tmp_path)
    assert [(r.seed, "evaluation.per_set=true" in r.overrides) for r in checks] == [
        *[(seed, False) for seed in (3, 5) for _ in "abc"],
        *[(7, True) for _ in "abc"],
    ]


def test_a_folder_of_a_seed_the_spec_does_not_plan_is_not_read(tmp_path):
    """Two studies share an arm's folder (the MoE study's dense arm is the vocabulary study's 8k arm): the one whose
    spec added a seed reads that seed's runs, the other does not."""
    out = tmp_path / "study"
    for name in ("b__c2.50e+16__seed3", "b__c2.50e+16__seed7", "b__c1.00e+15__seed7", "b__c3.00e+16__seed7"):
        _finished(out / "runs" / "dense" / name, 3.0)
    plain = [r.name for r in folder_runs(load_spec(_spec()), out)]
    assert plain == ["dense/b__c2.50e+16__seed3"]
    spec = load_spec(
        _spec(added_seeds={"budget": 2.5e16, "seeds": [7]}, multiplier_checks=[CHECK, {**CHECK, "seeds": [7]}])
    )
    assert [r.name for r in folder_runs(spec, out)] == [
        "dense/b__c2.50e+16__seed3",
        "dense/b__c2.50e+16__seed7",
        "dense/b__c3.00e+16__seed7",
    ]


def test_the_check_runs_are_grid_runs_at_their_budget_flagged(tmp_path):
    spec = load_spec(_spec(multiplier_checks=[{**CHECK, "seeds": [5]}, {**CHECK, "budget": 4e16, "arm": "moe"}]))
    runs = multiplier_check_runs(spec, tmp_path)
    assert [r.name for r in runs] == [
        "dense/a__c3.00e+16__seed5",
        "dense/b__c3.00e+16__seed5",
        "dense/c__c3.00e+16__seed5",
        *[f"moe/{s}__c4.00e+16__seed{seed}" for seed in (3, 5) for s in "abc"],
    ]
    assert all(r.multiplier_check and r.lr_factor is None and r.setting is None for r in runs)
    first = runs[0]
    assert first.budget == 3e16 and first.seed == 5 and first.out_dir == tmp_path / "runs" / first.name
    assert "training.seed=5" in first.overrides and "moe.aux_loss_coef=0.001" in runs[-1].overrides


def test_the_plan_trains_a_check_as_the_grid_would_at_its_budget(tmp_path):
    """plan_study from dry runs: the check's runs spend their own budget by the same rules (steps, LR by width)."""
    sizes = [*MICRO["sizes"], {"name": "h48", "config": "tiny", "fields": {"hidden_size": 48}}]
    spec = load_spec(
        {
            **{k: v for k, v in MICRO.items() if k != "steps"},
            "sizes": sizes,
            "flops": [1e13],
            "isoflop": {"tokens_per_param": 20, "sizes_per_budget": 2},
            "seeds": [0],
            "rules": {"lr": 1e-3, "lr_width": 64, "warmup_fraction": 0.1, "min_steps": 1},
            "multiplier_checks": {"arm": "baseline", "budget": 2e13, "sizes": ["h32", "h48", "h64"]},
        }
    )
    planned = {run.name: (run, p) for run, p in plan_study(spec, tmp_path)}
    checks = {name: p for name, (run, p) in planned.items() if run.multiplier_check}
    assert sorted(checks) == [f"baseline/{s}__c2.00e+13__seed0" for s in ("h32", "h48", "h64")]
    in_grid = [n for n in checks if n.replace("c2.00e+13", "c1.00e+13") in planned]
    assert in_grid  # the grid's window (two sizes) shares at least one size with the check
    for name, p in checks.items():
        grid = planned.get(name.replace("c2.00e+13", "c1.00e+13"))
        if grid:  # the same size in the grid: twice the budget, twice the steps (±1), the same LR
            assert abs(p.steps - 2 * grid[1].steps) <= 1
            assert p.learning_rate == grid[1].learning_rate
        assert p.flops == pytest.approx(2e13, rel=0.05)


def _finished(folder: Path, loss: float) -> None:
    folder.mkdir(parents=True)
    plan = {"max_steps": 10, "parameters": {"total": 100, "non_embedding": 80}, "tokens_per_step": 64}
    summary = {"global_step": 10, "plan": {**plan, "flops_per_token": 600.0}, "final_eval": {"eval_loss": loss}}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_a_finished_check_is_read_back_flagged_and_written(tmp_path):
    spec = load_spec(_spec())
    out = tmp_path / "study"
    runs = out / "runs" / "dense"
    _finished(runs / "b__c2.50e+16__seed3", 3.0)
    _finished(runs / "b__c3.00e+16__seed3", 2.9)
    _finished(runs / "d__c3.00e+16__seed3", 2.8)  # a size the check does not list: left out
    _finished(runs / "b__c4.00e+16__seed3", 2.7)  # a budget of neither the grid nor a check: left out
    found = folder_runs(spec, out)
    assert [(r.name, r.budget, r.multiplier_check) for r in found] == [
        ("dense/b__c2.50e+16__seed3", 2.5e16, False),
        ("dense/b__c3.00e+16__seed3", 3e16, True),
    ]
    planned = {r.name: r for r in multiplier_check_runs(spec, out)}
    assert (
        planned["dense/b__c3.00e+16__seed3"].done and planned["dense/b__c3.00e+16__seed3"].out_dir == found[1].out_dir
    )
    rows = collect(found)
    assert [is_check(r) for r in rows] == [False, True] and "multiplier_check" not in rows[0]
    write_results(rows, out)
    assert [t["multiplier_check"] for t in csv.DictReader(open(out / "results.csv"))] == ["", "True"]
    write_results(rows[:1], out)  # a study without the checks keeps its files' columns
    assert "multiplier_check" not in open(out / "results.csv").readline()


DECISION = {
    "at": BUDGETS[-1],
    "criterion": "multiplier",
    "multiplier_min": 1.2,
    "noise": "per_budget",
    "comparisons": [{"name": "m", "arm": "better", "baseline": "base"}],
}


def _check_rows(budget: float, factors=FACTORS, sigma: float = 0.005, arm: str = "base", a: float = A) -> list[dict]:
    """``arm``'s planted cell (law E + a·C^−α) at ``budget``, two seeds, as a multiplier check's rows."""
    rows = [r for r in study({arm: (E, a, ALPHA)}, seeds=2, sigma=sigma, factors=factors, rng_seed=7)]
    n_scale = math.sqrt(budget / BUDGETS[-1])  # study() puts N* at 0.05·√C
    l_shift = a * (budget ** (-ALPHA) - BUDGETS[-1] ** (-ALPHA))
    return [
        {
            **r,
            "budget": budget,
            "flops": budget,
            "params": r["params"] * n_scale,
            "ratio_params": r["ratio_params"] * n_scale,
            "val_loss": r["val_loss"] + l_shift,
            "multiplier_check": True,
        }
        for r in rows
        if r["budget"] == BUDGETS[-1]
    ]


def _grid():
    # "better" reaches at C the loss "base" reaches at 2C: a multiplier of 2 at every budget
    return study({"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA)}, seeds=2, sigma=0.005)


@pytest.mark.parametrize(
    "k, factors, reading",
    [
        (1.2, FACTORS, "multiplier above 1.2, measured"),
        (4.0, FACTORS, "multiplier below 4, measured"),
        (2.0, FACTORS, "within noise of 2"),
        (1.2, (0.1, 0.25, 0.5), "incomplete: a cell is not bracketed (its optimum is a bound)"),
    ],
)
def test_the_check_reads_the_planted_multiplier(k, factors, reading):
    grid = _grid()
    result = analyse_isoflop(grid, n_boot=40, noise_rule="per_budget")
    (check,) = multiplier_checks(grid + _check_rows(k * BUDGETS[-1], factors), result, DECISION, n_boot=200)
    assert check["reading"] == reading, check
    assert (check["baseline"], check["arm"], check["factor"]) == ("base", "better", pytest.approx(k))
    # the check's σ: its own seed pairs' under per_budget, never below the decision budget's (three pairs)
    assert check["sigma_at"] == pytest.approx(result["budget_noise"]["budgets"][BUDGETS[-1]]["sigma"])
    assert check["sigma"] >= check["sigma_at"]
    assert check["sigma_source"] == "seeds of this check" or check["sigma_source"].startswith("the decision budget's")
    if factors == FACTORS:  # the gap is the planted law's: base at k·C against base at 2·C
        planted = A * ((k * BUDGETS[-1]) ** (-ALPHA) - (2 * BUDGETS[-1]) ** (-ALPHA))
        assert check["gap"] == pytest.approx(planted, abs=0.01)
        assert check["interval"][0] <= check["gap"] <= check["interval"][1]


def test_the_check_scores_each_curve_out_of_sample():
    """On the planted law (a floor E = 1.8) the main model's curve predicts the check's optimum within noise, and
    the curve forced to no floor, fitted on the same optima, misses it by more."""
    grid = _grid()
    result = analyse_isoflop(grid, n_boot=40, noise_rule="per_budget")
    (check,) = multiplier_checks(grid + _check_rows(1.2 * BUDGETS[-1]), result, DECISION, n_boot=40)
    curves = {c["fit"]: c for c in check["curves"]}
    assert list(curves)[:2] == ["shared E (the main model)", "separate E"] and "no floor (E = 0)" in curves
    main = curves["shared E (the main model)"]
    assert main["E"] == pytest.approx(result["fits"]["base"].E)
    assert main["predicted"] == pytest.approx(float(result["fits"]["base"].predict(check["baseline_optimum"]["flops"])))
    assert main["miss"] == pytest.approx(main["predicted"] - check["baseline_optimum"]["loss_opt"])
    assert abs(main["miss"]) < 0.01 < abs(curves["no floor (E = 0)"]["miss"])


def test_checks_stay_out_of_the_cells_the_fits_and_the_decision():
    grid = _grid()
    spec = load_spec(
        {
            "recipe": "r.yaml",
            "sizes": [f"x{f}" for f in FACTORS],
            "flops": BUDGETS,
            "seeds": [0, 1],
            "arms": {"base": [], "better": []},
            "decision": DECISION,
        }
    )
    with_checks = grid + _check_rows(1.2 * BUDGETS[-1])
    assert cells(with_checks) == cells(grid)
    a = analyse_isoflop(grid, n_boot=20, noise_rule="per_budget")
    b = analyse_isoflop(with_checks, n_boot=20, noise_rule="per_budget")
    for key in ("optima", "budget_noise", "noise", "gap", "multiplier", "intervals", "fits", "outliers"):
        assert json.dumps(to_json(a)[key], sort_keys=True) == json.dumps(to_json(b)[key], sort_keys=True), key
    assert json.dumps(study_verdicts(spec, a), default=str) == json.dumps(study_verdicts(spec, b), default=str)
    assert multiplier_checks(grid, a, DECISION) == []  # no check rows: nothing to read


def test_the_report_gives_the_check_beside_the_rule():
    grid = _grid()
    result = analyse_isoflop(grid, n_boot=20, noise_rule="per_budget")
    result["multiplier_checks"] = multiplier_checks(grid + _check_rows(1.2 * BUDGETS[-1]), result, DECISION, n_boot=60)
    text = "\n".join(multiplier_check_lines(result, "nats"))
    (c,) = result["multiplier_checks"]
    assert f"| base @ {1.2 * BUDGETS[-1]:.3g} (1.2× {BUDGETS[-1]:.3g}) |" in text
    assert f"{c['gap']:+.4f} [{c['interval'][0]:+.4f}, {c['interval'][1]:+.4f}]" in text
    assert "**multiplier above 1.2, measured**" in text and "on the runs alone (no fit, no floor)" in text
    for curve in c["curves"]:  # the out-of-sample table: a row per curve, starred beyond the check's σ
        star = " *" if abs(curve["miss"]) > c["sigma"] else ""
        assert f"| {curve['fit']} | {curve['E']:.3f} | {curve['predicted']:.4f} | {curve['miss']:+.4f}{star} |" in text
    assert multiplier_check_lines({**result, "multiplier_checks": []}, "nats") == []


def test_the_report_says_a_check_within_noise_puts_the_multiplier_near_its_factor():
    grid = _grid()  # a planted multiplier of 2: the check at 2x reads within noise
    result = analyse_isoflop(grid, n_boot=20, noise_rule="per_budget")
    result["multiplier_checks"] = multiplier_checks(grid + _check_rows(2.0 * BUDGETS[-1]), result, DECISION, n_boot=60)
    (c,) = result["multiplier_checks"]
    assert c["reading"] == "within noise of 2"
    text = "\n".join(multiplier_check_lines(result, "nats"))
    assert f"ends {c['gap']:+.4f} nats against better's optimum" in text
    assert "within noise, so these runs cannot tell whether the multiplier is above or below 2." in text
    assert "interim" not in text  # the synthetic check has no planned runs to fall short of


def test_a_check_read_before_its_planned_runs_is_said_to_be_interim():
    """with_planned_runs counts the spec's planned runs of each check beside those read: fewer, and the table, the
    sentence and the verdict line all say "interim"."""
    from types import SimpleNamespace

    from hfpretrain.study.report import interim, with_planned_runs

    grid = _grid()
    result = analyse_isoflop(grid, n_boot=20, noise_rule="per_budget")
    rows = _check_rows(2.0 * BUDGETS[-1])
    spec = SimpleNamespace(
        multiplier_checks=[
            {"arm": "base", "budget": 2.0 * BUDGETS[-1], "sizes": [1] * len(FACTORS), "seeds": [0, 1, 2]}
        ]
    )
    (c,) = with_planned_runs(multiplier_checks(grid + rows, result, DECISION, n_boot=60), spec)
    assert (c["ran"], c["planned"]) == (len(rows), 3 * len(FACTORS)) and c["ran"] < c["planned"]
    said = f" (interim: {len(rows)} of the {3 * len(FACTORS)} runs planned for it)"
    assert interim(c) == said
    text = "\n".join(multiplier_check_lines({**result, "multiplier_checks": [c]}, "nats"))
    assert f"**within noise of 2**{said} |" in text and f"- {c['name']}{said}: base on 2× the decision budget" in text
    assert interim({**c, "ran": c["planned"]}) == ""


@pytest.mark.parametrize(
    "factors, reading",
    [
        (FACTORS, "better lower, beyond noise"),
        ((0.1, 0.25, 0.5), "incomplete: a cell is not bracketed (its optimum is a bound)"),
    ],
)
def test_both_arms_at_a_check_budget_read_the_planted_gap(factors, reading):
    """The compared arm's check cell beside the baseline's at the same budget: the gap of the planted laws (the
    arm reaches at C what the baseline reaches at 2C), its interval, and the multiplier on the baseline's curve."""
    grid = _grid()
    result = analyse_isoflop(grid, n_boot=40, noise_rule="per_budget")
    k = 1.2 * BUDGETS[-1]
    better = _check_rows(k, factors, arm="better", a=A * 2.0 ** (-ALPHA))
    rows = grid + _check_rows(k) + better
    (gap,) = check_gaps(rows, result, DECISION, n_boot=200)
    assert gap["reading"] == reading, gap
    assert (gap["arm"], gap["baseline"], gap["budget"], gap["at"]) == ("better", "base", pytest.approx(k), BUDGETS[-1])
    assert gap["gap"] == pytest.approx(gap["optimum"]["better"]["loss_opt"] - gap["optimum"]["base"]["loss_opt"])
    assert gap["sigma"] >= result["budget_noise"]["budgets"][BUDGETS[-1]]["sigma"]  # never below the decision's
    if factors == FACTORS:
        planted = A * 2.0 ** (-ALPHA) * k ** (-ALPHA) - A * k ** (-ALPHA)
        assert gap["gap"] == pytest.approx(planted, abs=0.01) and gap["interval"][0] <= gap["gap"] <= gap["interval"][1]
        main = next(m for m in gap["multipliers"] if m["fit"] == "shared E (the main model)")
        assert main["multiplier"] == pytest.approx(2.0, rel=0.25)  # the planted multiplier, on the main curve
    # the compared arm's check is not read as a threshold check; without the baseline's cell there is no gap
    assert [c["baseline"] for c in multiplier_checks(rows, result, DECISION, n_boot=0)] == ["base"]
    assert check_gaps(grid + better, result, DECISION, n_boot=0) == []


def test_the_report_gives_both_arms_at_the_check_budget():
    grid = _grid()
    result = analyse_isoflop(grid, n_boot=20, noise_rule="per_budget")
    k = 1.2 * BUDGETS[-1]
    rows = grid + _check_rows(k) + _check_rows(k, arm="better", a=A * 2.0 ** (-ALPHA))
    result["check_gaps"] = check_gaps(rows, result, DECISION, n_boot=60)
    (g,) = result["check_gaps"]
    text = "\n".join(check_gap_lines(result, "nats"))
    assert f"Both arms measured at {k:.3g}" in text and "m, better against base." in text
    assert f"| better @ {k:.3g} |" in text and f"| base @ {k:.3g} |" in text
    assert f"**{g['gap']:+.4f} [{g['interval'][0]:+.4f}, {g['interval'][1]:+.4f}]** nats, **better lower" in text
    for m in g["multipliers"]:
        assert f"{m['fit']} (E = {m['E']:.3f}) {m['multiplier']:.3g}" in text
    assert check_gap_lines({**result, "check_gaps": []}, "nats") == []


def test_per_set_scores_are_set_side_by_side():
    def row(arm, run, sets, overall):
        return {
            "run": run,
            "arm": arm,
            "size": "L6",
            "budget": 2.5e16,
            "seed": 0,
            "setting": "per_set",
            "lr_factor": None,
            "val_bpb": overall,
            "val_bpb_per_set": sets,
        }

    rows = [
        row("dense", "dense/a", {"Code": 0.70, "Books": 1.50}, 1.20),
        row("moe", "moe/a", {"Code": 0.69, "Books": 1.52}, 1.19),
        {"run": "moe/b", "arm": "moe", "size": "L5", "budget": 2.5e16, "val_bpb": 1.3},  # not scored per set
    ]
    text = "\n".join(per_set_lines(rows, "val_bpb"))
    assert "L6 at 2.5e+16, seed 0, setting per_set" in text and "`dense/a`, `moe/a`" in text
    assert "| Code | 0.7000 | 0.6900 | -0.0100 |" in text and "| Books | 1.5000 | 1.5200 | +0.0200 |" in text
    assert (
        "| all (overall) | 1.2000 | 1.1900 | -0.0100 |" in text
        and "moe is lower than dense on 1 of 2 sets in 1 of 1 comparison." in text
    )
    assert "moe/b" not in text and per_set_lines(rows[2:], "val_bpb") == []
    # more comparisons: one table of differences, a column each (by budget), the values of the pair where the first
    # arm is lowest; a run no other arm matches in a table of its own
    more = [
        {**row("dense", "dense/c", {"Code": 0.66, "Books": 1.40}, 1.10), "size": "L7", "seed": 2, "setting": None},
        {**row("moe", "moe/c", {"Code": 0.65, "Books": 1.37}, 1.08), "size": "L7", "seed": 2, "setting": None},
        {**row("moe", "moe/d", {"Code": 0.7, "Books": 1.4}, 1.2), "size": "L8", "seed": 2, "setting": None},
    ]
    text = "\n".join(per_set_lines(rows + more, "val_bpb"))
    assert "L7 at 2.5e+16, seed 2, the dense arm's lowest of these" in text and "| Books | 1.4000 | 1.3700 |" in text
    assert "| set | L6 2.5e+16 s0 per_set | L7 2.5e+16 s2 |" in text
    assert "| Code | -0.0100 | -0.0100 |" in text and "| Books | +0.0200 | -0.0300 |" in text
    assert "| sets where moe is lower | 1 of 2 | 2 of 2 |" in text
    assert "moe is lower than dense on 2 of 2 sets in 1 of 2, 1 of 2 sets in 1 of 2 comparisons." in text
    alone = text.split("no other arm's run beside it")[1]
    assert "| set | `moe/d` |" in alone and "| all (overall) | 1.2000 |" in alone and "moe/c" not in alone
    # a third arm beside the pair: every later arm against the first, a table of differences each
    third = {**row("mlp", "mlp/a", {"Code": 0.72, "Books": 1.47}, 1.21), "arm": "mlp"}
    text = "\n".join(per_set_lines(rows + [third], "val_bpb"))
    assert "| set | dense | moe | mlp | moe − dense | mlp − dense |" in text
    assert "moe − dense per set" in text and "mlp − dense per set" in text and "| Books | -0.0300 |" in text


def test_the_moe_studys_dense_arm_at_3e16_is_read_from_its_committed_runs():
    """results/study_gpu_moe2: the dense arm at 1.2 x 2.5e16 (twelve runs in the arm's folder: four sizes, three
    seeds), its reading in analysis.json and report.md against the runs' own results."""
    study_dir = REPO / "results" / "study_gpu_moe2"
    rows = [
        r
        for r in json.loads((study_dir / "results.json").read_text())
        if r.get("multiplier_check") and r["budget"] == 3e16
    ]
    assert sorted(r["run"] for r in rows) == sorted(
        f"{arm}/{s}__c3.00e+16__seed{seed}"
        for arm in ("dense", "moe")
        for s in ("L5", "L6", "L7", "L8")
        for seed in (0, 1, 2)
    )
    rows = [r for r in rows if r["arm"] == "dense"]
    (check,) = [
        c for c in json.loads((study_dir / "analysis.json").read_text())["multiplier_checks"] if c["factor"] < 2
    ]
    for size, v in check["sizes"].items():
        mine = sorted(r["val_bpb"] for r in rows if r["size"] == size)
        assert sorted(v["losses"]) == pytest.approx(mine) and v["mean"] == pytest.approx(sum(mine) / 3)
    assert check["baseline_optimum"]["bracketed"] and check["reading"] == "multiplier above 1.2, measured"
    assert check["interval"][0] > 0
    assert check["sigma"] == pytest.approx(0.0038, abs=1e-4)  # 2.5e16's: the 3e16 cells' replicates give less
    analysis = json.loads(
        (study_dir / "analysis.json").read_text()
    )  # the spec's bootstrap: 2000 draws, 300 for L(N, D)
    assert analysis["n_boot"] == 2000 and analysis["nd"]["intervals"]["n_boot"] == 300
    report = (study_dir / "report.md").read_text()
    assert f"{check['gap']:+.4f} [{check['interval'][0]:+.4f}, {check['interval'][1]:+.4f}]" in report
    curves = {c["fit"]: c for c in check["curves"]}
    # the main model's dense curve passes within σ of the 3e16 runs; the curve with no floor (the 1.09 reading)
    # runs below them
    assert abs(curves["shared E (the main model)"]["miss"]) < check["sigma"] < -curves["no floor (E = 0)"]["miss"]
    for name, curve in curves.items():
        assert f"| {name} | {curve['E']:.3f} | {curve['predicted']:.4f} | {curve['miss']:+.4f}" in report
    # the rule reads the dense arm's L(N, D) frontier (decision.fit, amended 2026-12-01); its check at 3e16 is a row
    # of the table, and the report names the other readings beside it
    assert "L(N, D) frontier" in curves and abs(curves["L(N, D) frontier"]["miss"]) > check["sigma"]
    nd = analysis["nd"]
    assert f"It is read on dense's L(N, D) fit on its runs (E = {nd['fits']['dense']['E']:.3f})" in report
    separate = analysis["sensitivity"]["separate"]
    own, (lo, hi) = separate["multiplier"]["moe"]["2.5e+16"], separate["intervals"]["multiplier"]["moe"]["2.5e+16"]
    assert f"on dense's own power law on its optima (E = {separate['fits']['dense']['E']:.3f}): " in report
    assert f"moe {own:.3g} [{lo:.3g}, {hi:.3g}] (the same seed-noise bootstrap)." in report


def test_the_moe_studys_both_arms_at_3e16_are_read_from_its_committed_runs():
    """results/study_gpu_moe2: the MoE arm at 3e16 (L5-L8, three seeds) beside the dense arm's check cell: both
    bracketed, the MoE optimum below the dense one beyond noise, the report's figures from analysis.json; every
    seed-2 run at 2.5e16 and 3e16 scored per validation set, in one table of differences."""
    study_dir = REPO / "results" / "study_gpu_moe2"
    rows = [
        r
        for r in json.loads((study_dir / "results.json").read_text())
        if r.get("multiplier_check") and r["budget"] == 3e16
    ]
    (gap,) = json.loads((study_dir / "analysis.json").read_text())["check_gaps"]
    for arm in ("moe", "dense"):
        for size, v in gap["sizes"][arm].items():
            mine = sorted(r["val_bpb"] for r in rows if r["arm"] == arm and r["size"] == size)
            assert sorted(v["losses"]) == pytest.approx(mine) and len(mine) == 3
        assert gap["optimum"][arm]["bracketed"]
    assert gap["reading"] == "moe lower, beyond noise" and gap["interval"][1] < 0
    report = (study_dir / "report.md").read_text()
    assert f"**{gap['gap']:+.4f} [{gap['interval'][0]:+.4f}, {gap['interval'][1]:+.4f}]** bits/byte" in report
    scored = [r for r in json.loads((study_dir / "results.json").read_text()) if r.get("val_bpb_per_set")]
    assert sorted(r["run"] for r in scored) == sorted(
        [
            "dense/L6__c2.50e+16__per_set__seed0",
            "moe/L6__c2.50e+16__per_set__seed0",
            *(f"{arm}/L6__c3.00e+16__per_set__seed{seed}" for arm in ("dense", "moe") for seed in (0, 1)),
            *(f"{arm}/L{n}__c2.50e+16__seed2" for arm, sizes in (("dense", "4567"), ("moe", "45678")) for n in sizes),
            *(f"{arm}/L{n}__c3.00e+16__seed2" for arm in ("dense", "moe") for n in "5678"),
            *FIVE_E16_RUNS,
        ]
    )
    section = report.split("## Per validation set")[1].split("\n## ")[0]
    counts = "12 of 12 sets in 8 of 11, 11 of 12 sets in 2 of 11, 8 of 12 sets in 1 of 11 comparisons."
    assert f"moe is lower than dense on {counts}" in section and "| L5 3e+16 s2 (check) |" in section
    assert "`moe/L8__c2.50e+16__seed2`" in section.split("no other arm's run beside it")[1]  # dense has no L8 there


# The dense arm at 2 x 2.5e16, pre-registered 2026-12-01 (L6-L9, three seeds), all twelve run that day
FIVE_E16_RUNS = [f"dense/L{n}__c5.00e+16__seed{seed}" for n in "6789" for seed in (0, 1, 2)]


def test_the_moe_studys_dense_arm_at_5e16_is_read_from_its_committed_runs():
    """results/study_gpu_moe2: the dense arm at 2 x 2.5e16 against the MoE optimum at 2.5e16: every run it has, its
    cell bracketed, its gap and reading in the report, and the fits' predictions there (written in the spec before
    the runs) against the measured optimum."""
    study_dir = REPO / "results" / "study_gpu_moe2"
    rows = [r for r in json.loads((study_dir / "results.json").read_text()) if r["budget"] == 5e16]
    assert sorted(r["run"] for r in rows) == sorted(FIVE_E16_RUNS) and all(r["multiplier_check"] for r in rows)
    (check,) = [
        c for c in json.loads((study_dir / "analysis.json").read_text())["multiplier_checks"] if c["factor"] == 2
    ]
    for size, v in check["sizes"].items():
        assert sorted(v["losses"]) == pytest.approx(sorted(r["val_bpb"] for r in rows if r["size"] == size))
    assert check["baseline_optimum"]["bracketed"] and check["arm_optimum"] == pytest.approx(1.1353, abs=1e-4)
    lo, hi = check["interval"]
    assert check["reading"] == "within noise of 2" and lo < 0 < hi
    report = (study_dir / "report.md").read_text()
    assert f"ends {check['gap']:+.4f} bits/byte against moe's optimum at 2.5e+16 [{lo:+.4f}, {hi:+.4f}]" in report
    # the spec's comment gave each curve's prediction before the runs; the analysis computes the same ones
    spec = (REPO / "src/hfpretrain/study/specs/gpu_moe2.yaml").read_text()
    curves = {c["fit"]: c for c in check["curves"]}
    for name in ("shared E (the main model)", "separate E", "L(N, D) frontier"):
        assert f"{curves[name]['predicted']:.4f}" in spec, name
