"""The IsoFLOP analysis on synthetic studies with a planted answer: it must give the answer back.

Each arm's per-budget optimum follows a planted law L*(C) = E + A·C^(−α); around it, the loss of a
size N is L*(C) + κ·(ln N − ln N*(C))², so each budget's three sizes lie on an exact parabola."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from hfpretrain.study.analysis import analyse_isoflop, isoflop_optimum, noise_floor, to_json

E, A, ALPHA = 1.8, 391.0, 0.15
BUDGETS = [1e15, 1e16, 1e17, 1e18]
FACTORS = (0.25, 0.8, 2.5)  # sizes around N*: the optimum lies between two of them


def study(arms: dict, seeds: int = 1, sigma: float = 0.0, factors=FACTORS, kappa: float = 0.05, rng_seed: int = 0):
    rng = np.random.default_rng(rng_seed)
    rows = []
    for arm, (e, a, alpha) in arms.items():
        for c in BUDGETS:
            n_star, l_star = 0.05 * c**0.5, e + a * c ** (-alpha)
            for f in factors:
                for s in range(seeds):
                    loss = l_star + kappa * math.log(f) ** 2 + (rng.normal(0, sigma) if sigma else 0.0)
                    rows.append(
                        {
                            "arm": arm,
                            "budget": c,
                            "size": f"x{f}",
                            "seed": s,
                            "params": n_star * f,
                            "ratio_params": n_star * f,
                            "flops": c,
                            "val_loss": loss,
                        }
                    )
    return rows


def test_recovers_the_planted_exponent_and_floor():
    r = analyse_isoflop(study({"base": (E, A, ALPHA)}), n_boot=0)
    fit = r["fits"]["base"]
    assert fit.alpha == pytest.approx(ALPHA, rel=0.02) and fit.E == pytest.approx(E, abs=0.02)
    for b in BUDGETS:
        o = r["optima"]["base", b]
        assert o["bracketed"] and o["n_opt"] == pytest.approx(0.05 * b**0.5, rel=1e-6)
        assert o["loss_opt"] == pytest.approx(E + A * b ** (-ALPHA), rel=1e-9)
    assert r["backtest"]["arms"]["base"]["error"] == pytest.approx(0, abs=0.01)
    assert r["edge"] == [] and r["noise"] is None and r["intervals"] is None


def test_recovers_a_constant_compute_multiplier():
    """Arm 'better' reaches at C what the baseline reaches at 2C: the multiplier is 2 at every budget."""
    m = 2.0
    r = analyse_isoflop(study({"base": (E, A, ALPHA), "better": (E, A * m ** (-ALPHA), ALPHA)}), n_boot=0)
    for b in BUDGETS:
        assert r["multiplier"]["better"][b] == pytest.approx(m, rel=0.05)
        assert r["gap"]["better"][b] < 0
    assert r["trend"]["better"] == pytest.approx(0, abs=0.02)
    assert r["crossover"]["better"] == []


def test_finds_the_crossover():
    """A change that helps small budgets and hurts large ones (it raises the floor): the separate fits find the
    crossing where planted; the shared-floor model cannot represent two floors, and says so by missing the top
    budget in its back-test by more than the separate fits do."""
    a_c, e_c = 0.6 * A, E + 0.3
    planted = ((A - a_c) / (e_c - E)) ** (1 / ALPHA)
    r = analyse_isoflop(study({"base": (E, A, ALPHA), "change": (e_c, a_c, ALPHA)}), n_boot=0)
    sep = r["sensitivity"]["separate"]
    assert abs(sep["backtest"]["gap"]["change"]["error"]) < abs(r["backtest"]["gap"]["change"]["error"])
    r = {**r, **sep}
    (cross,) = r["crossover"]["change"]
    assert math.log10(cross) == pytest.approx(math.log10(planted), abs=0.1)
    gaps = r["gap"]["change"]
    assert gaps[BUDGETS[0]] < 0  # helps at the smallest budget...
    assert r["extrapolated"]["change"] > r["extrapolated"]["base"]  # ...and loses at 10x the largest
    assert r["trend"]["change"] < 0  # its compute multiplier shrinks with scale


def test_noise_floor_and_intervals_cover_the_planted_gap():
    """3 seeds per cell with σ = 0.01: the noise floor is found, and the 95% intervals of the gap cover
    the planted gap in most of 8 independent synthetic studies (a calibrated interval, not a lucky one)."""
    m, sigma = 2.0, 0.01
    planted_gap = (A * m ** (-ALPHA) - A) * BUDGETS[-1] ** (-ALPHA)
    covered = 0
    for rng_seed in range(8):
        rows = study(
            {"base": (E, A, ALPHA), "better": (E, A * m ** (-ALPHA), ALPHA)}, seeds=3, sigma=sigma, rng_seed=rng_seed
        )
        r = analyse_isoflop(rows, n_boot=100, seed=rng_seed)
        assert r["noise"]["sigma"] == pytest.approx(sigma, rel=0.4) and r["noise"]["cells"] == 24
        lo, hi = r["intervals"]["gap"]["better"][BUDGETS[-1]]
        assert hi < 0  # resolved: the whole interval is below zero
        covered += lo < planted_gap < hi
    assert covered >= 6
    assert to_json(r)["intervals"]["gap"]["better"]["1e+18"] == [lo, hi]


def test_intervals_do_not_depend_on_the_order_of_the_runs():
    """A study read back from its folders lists the runs in another order than its plan: the bootstrap draws
    its noise cell by cell, in a fixed order, so its intervals are the same (300 draws put the 10x gap's upper
    end of the vocabulary study at -0.0001 in one order and +0.0047 in another, before)."""
    rows = study({"base": (E, A, ALPHA), "better": (E, A * 0.8, ALPHA)}, seeds=2, sigma=0.01)
    reordered = [r for arm in ("base", "better") for r in reversed([x for x in rows if x["arm"] == arm])]
    assert (
        to_json(analyse_isoflop(rows, n_boot=50))["intervals"]
        == to_json(analyse_isoflop(reordered, n_boot=50))["intervals"]
    )


def test_best_size_at_the_edge_is_flagged():
    rows = study({"base": (E, A, ALPHA)}, factors=(1.5, 3.0, 6.0))  # every size larger than the optimum
    r = analyse_isoflop(rows, n_boot=0)
    assert len(r["edge"]) == len(BUDGETS)
    o = r["optima"]["base", BUDGETS[0]]
    assert not o["bracketed"] and o["n_opt"] == pytest.approx(0.05 * BUDGETS[0] ** 0.5 * 1.5)


def test_isoflop_optimum_needs_three_points_and_a_minimum():
    assert not isoflop_optimum(np.array([1.0, 2.0]), np.array([3.0, 2.0]))["bracketed"]
    assert not isoflop_optimum(np.array([1.0, 2.0, 4.0]), np.array([3.0, 2.0, 1.0]))["bracketed"]  # monotone
    o = isoflop_optimum(np.array([1.0, 2.0, 4.0]), np.array([3.0, 2.0, 3.0]))
    assert o["bracketed"] and o["n_opt"] == pytest.approx(2.0) and o["loss_opt"] == pytest.approx(2.0)
    assert noise_floor([{"arm": "a", "budget": 1, "size": "s", "params": 1, "flops": 1, "val_loss": 2.0}]) is None


def test_isoflop_optimum_inner_best_with_a_tilted_parabola_uses_its_neighbours():
    """The cell of gpt2_50k at 8e15 in the vocab2 study: five sizes falling steeply to the fourth, the fifth higher.
    The parabola through all five has its minimum beyond the largest size; the measured minimum is an inner one,
    so the optimum is the parabola's through it and its two neighbours. A best size at the edge stays a bound."""
    n, loss = np.array([1.0, 2.0, 4.0, 8.0, 16.0]), np.array([2.07, 1.88, 1.58, 1.39, 1.42])
    c, b, _ = np.polyfit(np.log(n), loss, 2)
    assert math.exp(-b / (2 * c)) > 16.0
    c3, b3, a3 = np.polyfit(np.log(n[2:]), loss[2:], 2)
    o = isoflop_optimum(n, loss)
    assert o["bracketed"] and o["points"] == 3
    assert math.log(o["n_opt"]) == pytest.approx(-b3 / (2 * c3)) and 4.0 < o["n_opt"] < 16.0
    assert o["loss_opt"] == pytest.approx(a3 - b3**2 / (4 * c3)) and o["loss_opt"] < 1.39
    assert not isoflop_optimum(n, np.array([2.07, 1.88, 1.58, 1.42, 1.39]))["bracketed"]


def test_isoflop_plot_has_the_gap_panel_with_two_arms(tmp_path):
    """Two arms: a third panel, the gap vs compute with its intervals and the 10× point; one arm: two panels."""
    from matplotlib import image

    from hfpretrain.study.plots import plot_isoflop

    rows = study({"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA)}, seeds=2, sigma=0.01)
    two = plot_isoflop(rows, analyse_isoflop(rows, n_boot=20), tmp_path / "two.png")
    one_rows = [r for r in rows if r["arm"] == "base"]
    one = plot_isoflop(one_rows, analyse_isoflop(one_rows, n_boot=20), tmp_path / "one.png")
    width = {p.name: image.imread(p).shape[1] for p in (two, one)}
    assert width["two.png"] == pytest.approx(1.5 * width["one.png"], rel=0.01)


def test_a_shared_floor_is_recovered_and_the_gap_back_test_is_exact_on_the_law():
    """Two arms on one planted floor with different exponents: the joint fit returns the floor and both exponents,
    and fitted without the top budget it predicts the gap there."""
    planted = {"base": (E, A, ALPHA), "steeper": (E, 3 * A, 0.2)}
    r = analyse_isoflop(study(planted), n_boot=0)
    assert r["model"] == "shared_E"
    assert r["fits"]["base"].E == r["fits"]["steeper"].E == pytest.approx(E, abs=0.02)
    assert r["fits"]["steeper"].alpha == pytest.approx(0.2, rel=0.03)
    top = BUDGETS[-1]
    bt = r["backtest"]["gap"]["steeper"]
    planted_gap = 3 * A * top**-0.2 - A * top**-ALPHA
    assert bt["observed"] == pytest.approx(planted_gap, rel=1e-6) and bt["error"] == pytest.approx(0, abs=0.01)
    assert r["pairs"]["steeper vs base"]["gap"][top] == pytest.approx(planted_gap, rel=1e-6)


def test_no_crossing_is_reported_below_the_smallest_budget():
    """Curves that cross only below the data (as the first vocabulary report's 1.2e14 did) report none."""
    from hfpretrain.study.analysis import crossovers
    from hfpretrain.study.fit import PowerLawFit

    a, b = (
        PowerLawFit(E=1.0, A=100.0, alpha=0.1, n=4, r2=1, rmse=0),
        PowerLawFit(E=1.0, A=30.0, alpha=0.05, n=4, r2=1, rmse=0),
    )
    below = (100 / 30) ** (1 / 0.05)  # where they meet: ~3e10
    assert crossovers(a, b, below / 10, 1e18)
    assert crossovers(a, b, below * 10, 1e18) == []
    r = analyse_isoflop(study({"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA)}), n_boot=0)
    assert r["crossover_range"] == [BUDGETS[0], 10 * BUDGETS[-1]]


def test_seed_outliers_are_named_and_kept_in_the_floor():
    """A wild seed is named; the noise floor keeps it (a floor chosen after seeing which pairs disagree is post hoc:
    it once turned the vocabulary study's size effect from "undecided" to "resolved")."""
    rows = study({"base": (E, A, ALPHA)}, seeds=3, sigma=0.01, rng_seed=3)
    for i, r in enumerate(rows):
        r["run"] = f"run{i}"
    calm = analyse_isoflop(rows, n_boot=0)
    rows[5]["val_loss"] += 0.2  # one wild seed
    r = analyse_isoflop(rows, n_boot=20)
    assert list(r["outliers"]["runs"]) == ["run5"]
    assert r["noise"]["sigma"] > 2 * calm["noise"]["sigma"]
    wild_budget = rows[5]["budget"]
    assert (
        r["budget_noise"]["budgets"][wild_budget]["sigma"] > 2 * calm["budget_noise"]["budgets"][wild_budget]["sigma"]
    )
    assert "noise_without_outliers" not in r and "intervals_without_outliers" not in r


def test_a_two_seed_pair_that_disagrees_is_named():
    """With two seeds per cell (the vocabulary study's design) either run of a wild pair could be the outlier: both
    are named (it once could not fire below three seeds)."""
    rows = study({"base": (E, A, ALPHA)}, seeds=2, sigma=0.01, rng_seed=5)
    for i, r in enumerate(rows):
        r["run"] = f"run{i}"
    wild = next(r for r in rows if r["seed"] == 1)
    pair = sorted(r["run"] for r in rows if (r["size"], r["budget"]) == (wild["size"], wild["budget"]))
    wild["val_loss"] += 0.2
    r = analyse_isoflop(rows, n_boot=20)
    assert sorted(r["outliers"]["runs"]) == pair


def test_the_noise_floor_is_pooled_by_default_and_by_the_rule_otherwise():
    """Seed noise 0.002 at the small budgets and 0.03 at the largest (the vocabulary study's spread was sevenfold):
    ``per_budget`` gives each budget its own σ, so the largest budget's gap interval is wide and the small ones
    narrow; by default (a spec that names no rule was written when there was one) every budget gets one pooled σ;
    fixed values written in the spec are used as written."""
    rows, lo, hi = [], 0.002, 0.03
    for rng_seed, sigma, keep in ((1, lo, BUDGETS[:-1]), (2, hi, BUDGETS[-1:])):
        part = study(
            {"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA)}, seeds=3, sigma=sigma, rng_seed=rng_seed
        )
        rows += [r for r in part if r["budget"] in keep]
    r = analyse_isoflop(rows, n_boot=60, noise_rule="per_budget")
    bn = r["budget_noise"]
    assert bn["rule"] == "per_budget" and bn["default"] is False
    assert bn["budgets"][BUDGETS[0]]["sigma"] == pytest.approx(0.002, rel=0.5)
    assert bn["budgets"][BUDGETS[-1]]["sigma"] == pytest.approx(0.03, rel=0.5)
    width = {b: np.diff(r["intervals"]["gap"]["better"][b])[0] for b in (BUDGETS[0], BUDGETS[-1])}
    assert width[BUDGETS[-1]] > 5 * width[BUDGETS[0]]
    pooled = analyse_isoflop(rows, n_boot=0, noise_rule="pooled")["budget_noise"]
    assert not pooled["default"] and len({v["sigma"] for v in pooled["budgets"].values()}) == 1
    default = analyse_isoflop(rows, n_boot=0)["budget_noise"]
    assert default["default"] and default["rule"] == "pooled" and default["budgets"] == pooled["budgets"]
    fixed = analyse_isoflop(rows, n_boot=0, noise_rule={b: 0.05 for b in BUDGETS})["budget_noise"]
    assert {v["sigma"] for v in fixed["budgets"].values()} == {0.05} and fixed["rule"] == "fixed"


def test_the_spec_checks_its_noise_rule():
    from hfpretrain.study.grid import _decision

    arms = {"a": [], "b": []}
    comps = [{"arm": "a", "baseline": "b"}]
    assert _decision({"comparisons": comps, "noise": "per_budget"}, arms)["noise"] == "per_budget"
    assert _decision({"comparisons": comps, "noise": {"1e15": 0.02}}, arms)["noise"] == {1e15: 0.02}
    for bad in ("after the runs", {"1e15": -1}, {}):
        with pytest.raises(ValueError, match="decision.noise"):
            _decision({"comparisons": comps, "noise": bad}, arms)


@pytest.mark.parametrize(
    "extra, key",
    [
        ({"fit": "parabola"}, "decision.fit:"),
        ({"fit": "frontier"}, "decision.fit: read by criterion: multiplier only"),
        ({"criterion": "multiplier", "fit": "frontier", "amended": ""}, "decision.amended:"),
        ({"criterion": "multiplier", "fits": "frontier"}, "decision.fits: not a key of the rule"),
    ],
)
def test_the_spec_checks_which_fit_its_rule_reads(extra, key):
    from hfpretrain.study.grid import _decision

    arms, comps = {"a": [], "b": []}, [{"arm": "a", "baseline": "b"}]
    rule = {"comparisons": comps, "criterion": "multiplier", "fit": "frontier", "amended": "2026-12-01, before"}
    assert _decision(rule, arms)["fit"] == "frontier"
    with pytest.raises(ValueError, match=re.escape(key)):
        _decision({"comparisons": comps, **extra}, arms)


def test_the_decision_rule_gives_its_verdicts():
    from hfpretrain.study.analysis import decide

    arms = {"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA), "same": (E, A, ALPHA)}
    r = analyse_isoflop(study(arms, seeds=2, sigma=0.005), n_boot=60)
    rule = {
        "margin": 0.01,
        "comparisons": [
            {"name": "b", "arm": "better", "baseline": "base"},
            {"name": "reverse", "arm": "base", "baseline": "better"},
            {"name": "s", "arm": "same", "baseline": "base"},
        ],
    }
    verdicts = {v["name"]: v for v in decide(r, rule)}
    assert verdicts["b"]["verdict"] == "better, also at 10×" and verdicts["b"]["gap"] < 0
    assert verdicts["reverse"]["verdict"] == "worse" and verdicts["reverse"]["gap"] == -verdicts["b"]["gap"]
    assert verdicts["s"]["verdict"] in ("no practical difference", "undecided")
    rule = {**rule, "at": BUDGETS[-1] * 10}  # a budget that was not run
    assert {v["verdict"] for v in decide(r, rule)} == {"incomplete"}
    # the MoE study's rule: the compute multiplier (2 planted) above 1.2 with its interval above 1
    by_multiplier = {
        "criterion": "multiplier",
        "multiplier_min": 1.2,
        "comparisons": [
            {"name": "m", "arm": "better", "baseline": "base"},
            {"name": "n", "arm": "same", "baseline": "base"},
        ],
    }
    verdicts = {v["name"]: v for v in decide(r, by_multiplier)}
    assert verdicts["m"]["verdict"] == "recommended" and verdicts["m"]["multiplier"] == pytest.approx(2, rel=0.1)
    assert verdicts["n"]["verdict"] in ("no gain", "undecided")
    assert verdicts["m"]["sigma"] == r["budget_noise"]["budgets"][BUDGETS[-1]]["sigma"]
    # a verdict waits for every seed the spec planned at its budget: seed 1 of one arm missing there
    rows = [
        x
        for x in study(arms, seeds=2, sigma=0.005)
        if not (x["arm"] == "better" and x["seed"] == 1 and x["budget"] == BUDGETS[-1])
    ]
    short = analyse_isoflop(rows, n_boot=60)
    assert short["optima"]["better", BUDGETS[-1]]["seeds"] == [0]
    assert decide(short, by_multiplier)[0]["verdict"] == "recommended"  # the caller did not say which seeds
    m = decide(short, by_multiplier, lambda budget: [0, 1])[0]
    assert m["verdict"] == "incomplete" and m["why"] == f"a planned seed not run: better @ {BUDGETS[-1]:.3g} (seed 1)"
    assert decide(r, by_multiplier, lambda budget: [0, 1])[0]["verdict"] == "recommended"
    # seed 1 finished at one size of the cell only (a chain cut part-way): still short of a planned seed
    sizes = sorted({x["size"] for x in rows if x["arm"] == "better" and x["budget"] == BUDGETS[-1]})
    partial = rows + [
        x
        for x in study(arms, seeds=2, sigma=0.005)
        if x["arm"] == "better" and x["seed"] == 1 and x["budget"] == BUDGETS[-1] and x["size"] == sizes[0]
    ]
    assert (
        decide(analyse_isoflop(partial, n_boot=60), by_multiplier, lambda budget: [0, 1])[0]["verdict"] == "incomplete"
    )
    # a size the spec added to a decision cell (isoflop.extra) and not yet run: it may move the best, so no verdict
    late = decide(r, by_multiplier, lambda budget: [0, 1], lambda arm, budget: [f"{arm}/L9 seed 0"] * (arm == "base"))
    assert late[0]["verdict"] == "incomplete" and late[0]["why"] == "a planned run not finished: base/L9 seed 0"
    assert decide(r, by_multiplier, lambda budget: [0, 1], lambda arm, budget: [])[0]["verdict"] == "recommended"


def test_losses_of_other_vocabularies_without_bits_per_byte_are_not_one_unit():
    """The shared-E fit (and any gap) needs one unit: bits per byte, or one vocabulary. Nats per token of two
    tokenizers were fitted with one irreducible term, the report saying they were scored in the same unit."""
    from hfpretrain.study.report import isoflop_lines

    rows = study({"base": (E, A, ALPHA), "other": (E, A * 1.1, ALPHA)})
    for r in rows:
        r["vocab_size"] = 50304 if r["arm"] == "base" else 8192
    mixed = analyse_isoflop(rows, n_boot=0)
    assert mixed["shared_unit"] is False
    assert any("not one unit" in line for line in isoflop_lines(mixed, None))
    same = analyse_isoflop([{**r, "vocab_size": 8192} for r in rows], n_boot=0)
    assert same["shared_unit"] is True and not any("not one unit" in line for line in isoflop_lines(same, None))
    bpb = analyse_isoflop([{**r, "val_bpb": r["val_loss"]} for r in rows], y="val_bpb", n_boot=0)
    assert bpb["shared_unit"] is True


def test_the_report_compares_two_arms_that_are_not_the_baseline():
    """A vocabulary study's size effect is 8k against 32k, neither of them the baseline: the report gives that
    pair its own per-budget gaps (the same numbers as the analysis' pairs), not only each arm against the baseline."""
    from hfpretrain.study.report import isoflop_lines

    m = 2.0
    arms = {"base": (E, A, ALPHA), "mid": (E, A * m ** (-ALPHA), ALPHA), "best": (E, A * (2 * m) ** (-ALPHA), ALPHA)}
    r = analyse_isoflop(study(arms, seeds=2, sigma=0.005), n_boot=40)
    text = "\n".join(isoflop_lines(r, None))
    assert "### best vs mid" in text and "### mid vs best" not in text and "### mid vs base" in text
    section = text.split("### best vs mid")[1].split("###")[0]
    for b, gap in r["pairs"]["best vs mid"]["gap"].items():
        assert gap < 0 and f"| {b:.3g} | {gap:+.4f} [" in section
    assert f"shared E {r['pairs']['best vs mid']['gap_extrapolated']:+.4f}" in section


ND_LAW = (1.7, 400.0, 0.34, 410.0, 0.28)  # E, A, α, B, β of the planted L(N, D)


def nd_study(seeds=(0,), sigma: float = 0.0, rng_seed: int = 0) -> list[dict]:
    """Runs drawn from ND_LAW (6 FLOPs per parameter and token, 5 sizes per budget, 4 budgets); arm "better" has
    the N term at 0.8×; each run gets Gaussian noise of ``sigma``."""
    e, a, alpha, b, beta = ND_LAW
    rng = np.random.default_rng(rng_seed)
    rows = []
    for arm, scale in (("base", 1.0), ("better", 0.8)):
        for c in BUDGETS:
            n_star = (c / 6) ** 0.5 / 8
            for f in (0.25, 0.5, 1.0, 2.0, 4.0):
                n = n_star * f
                d = c / (6 * n)
                for s in seeds:
                    loss = e + scale * a * n**-alpha + b * d**-beta + (rng.normal(0, sigma) if sigma else 0.0)
                    rows.append(
                        {
                            "arm": arm,
                            "budget": c,
                            "size": f"x{f}",
                            "seed": s,
                            "params": n,
                            "ratio_params": n,
                            "tokens": d,
                            "flops_per_token": 6 * n,
                            "flops": c,
                            "val_loss": loss,
                        }
                    )
    return rows


def test_the_frontier_recovers_a_planted_law_of_n_and_d(tmp_path):
    """Runs drawn from a planted L(N, D) = E + A·N^−α + B·D^−β (6 FLOPs per parameter and token, 5 sizes per budget,
    4 budgets): the per-arm fit gives E, α and β back; its frontier agrees with the parabola optima (the check);
    the back-test predicts the held budget; the report labels the 10× figure an extrapolation."""
    from hfpretrain.study.report import isoflop_lines

    e, alpha, beta = ND_LAW[0], ND_LAW[2], ND_LAW[4]
    r = analyse_isoflop(nd_study(), n_boot=0)
    nd = r["nd"]
    fit = nd["fits"]["base"]
    assert fit["E"] == pytest.approx(e, abs=0.02) and fit["alpha"] == pytest.approx(alpha, rel=0.05)
    assert fit["beta"] == pytest.approx(beta, rel=0.05) and fit["rmse"] < 1e-3
    for arm, per in nd["check"].items():
        for budget, c in per.items():
            assert c["bracketed"] and abs(c["difference"]) < 0.01, (arm, budget)
    assert abs(nd["backtest"]["gap"]["better vs base"]["error"]) < 0.005
    assert nd["pairs"]["better vs base"]["target"] < 0 and nd["multiplier"]["better"]["target"] > 1
    text = "\n".join(isoflop_lines(r, None))
    assert "### The frontier: L(N, D)" in text and f"{10 * BUDGETS[-1]:.3g} (extrapolation)" in text


def test_a_rule_on_the_frontier_reads_the_baseline_fit_at_the_measured_optimum():
    """``decision.fit: frontier``: the multiplier is the compute on the baseline's L(N, D) frontier that reaches the
    arm's measured optimum, over C. Planted: the arm's N term at 0.8×, two seeds with σ 0.002; the verdict reads
    that figure and its interval (the bootstrap redraws the runs, so the arm's optimum moves in each draw too),
    which hold the frontier-to-frontier multiplier of the planted law."""
    from hfpretrain.study.analysis import decide
    from hfpretrain.study.report import decision_lines

    rows = nd_study(seeds=(0, 1), sigma=0.002, rng_seed=3)
    r = analyse_isoflop(rows, n_boot=40, nd_boot=20, noise_rule="per_budget")
    nd, top = r["nd"], f"{BUDGETS[-1]:.6g}"
    at_opt = nd["multiplier_at_optimum"]["better"][top]
    assert at_opt == pytest.approx(nd["multiplier"]["better"][top], rel=0.1) and at_opt > 1.2
    lo, hi = nd["intervals"]["multiplier_at_optimum"]["better"][top]
    assert lo < at_opt < hi and lo > 1
    rule = {
        "criterion": "multiplier",
        "multiplier_min": 1.2,
        "fit": "frontier",
        "amended": "a test, before the runs",
        "rule": "recommended above 1.2",
        "comparisons": [{"name": "m", "arm": "better", "baseline": "base"}],
    }
    (v,) = decide(r, rule)
    assert v["verdict"] == "recommended" and v["fit"] == "frontier"
    assert v["multiplier"] == at_opt and v["multiplier_interval"] == [lo, hi]
    (shared,) = decide(r, {**rule, "fit": "optima"})
    assert shared["multiplier"] == r["multiplier"]["better"][BUDGETS[-1]] != at_opt
    text = "\n".join(decision_lines(None, r, rule, [v]))
    assert "It is read on base's L(N, D) fit on its runs" in text and "Amended (`decision.amended`): a test" in text
    assert "on base's power law on the per-budget optima, one floor E shared by the arms" in text


def test_the_trend_at_other_floors():
    """``trend_at_floors`` refits the baseline's curve at each given E: at the planted floor the constant multiplier
    has no slope; at a floor far below it the same optima read a trend (what a trend claim must be checked
    against); a floor above the baseline's lowest loss is skipped, not clipped."""
    from hfpretrain.study.analysis import optima, cells, trend_at_floors

    m = 2.0
    rows = study({"base": (E, A, ALPHA), "better": (E, A * m ** (-ALPHA), ALPHA)})
    opt = optima(cells(rows, "val_loss"))
    ((at_e, at_zero),) = trend_at_floors(opt, ["base", "better"], BUDGETS, [E, 0.0]).values()
    assert at_e["E"] == E and at_e["trend"] == pytest.approx(0, abs=1e-6)
    assert at_zero["E"] == 0.0 and abs(at_zero["trend"]) > 0.05
    assert trend_at_floors(opt, ["base", "better"], BUDGETS, [10.0]) == {"better": []}


def test_the_trend_sentence_carries_its_interval_and_floors():
    """The Discussion's trend of the multiplier comes with its bootstrap interval and the slope at the ends of E's
    interval, with no floor and at the baseline's own floor; a direction is claimed only where all of them agree. A study
    without seeds claims none."""
    from hfpretrain.study.report import discussion_lines

    def trend_line(r):
        (line,) = [x for x in discussion_lines(r) if "per decade" in x]
        return line

    rows = study({"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA)}, seeds=2, sigma=0.005)
    r = analyse_isoflop(rows, n_boot=60)
    line = trend_line(r)
    lo, hi = (10**v for v in r["intervals"]["trend"]["better"])
    assert f"[×{lo:.2f}, ×{hi:.2f}]" in line
    floors = r["trend_floor"]["better"]
    # the ends of E's interval, then no floor at all (a pure power law)
    assert [f["E"] for f in floors] == pytest.approx([*r["intervals"]["E"]["base"], 0.0])
    for f in floors[:-1]:
        assert f"×{10 ** f['trend']:.2f} at E = {f['E']:.3f}" in line
    assert f"×{10 ** floors[-1]['trend']:.2f} with no floor (E = 0" in line
    sep = r["sensitivity"]["separate"]
    assert f"×{10 ** sep['trend']['better']:.2f} at E = {sep['fits']['base'].E:.3f}" in line
    readings = [lo, hi, 10 ** r["trend"]["better"], *(10 ** f["trend"] for f in floors)]
    readings.append(10 ** sep["trend"]["better"])
    assert min(readings) <= 1 <= max(readings)  # a constant planted multiplier: no direction to claim
    if 0.95 <= min(readings) and max(readings) <= 1.05:
        assert "it stays within ±5% per decade, in the interval and at every floor above" in line
    else:
        assert "direction is not established" in line
    assert "rises" not in line and "falls" not in line
    # the same study read on a floor the interval leaves out: the sentence names the disagreement
    r_bad = {**r, "trend_floor": {"better": [*floors[:-1], {"E": 0.0, "trend": 0.5}]}}
    assert "direction is not established" in trend_line(r_bad)
    r_up = {
        **r,
        "trend": {"better": 0.1},
        "intervals": {**r["intervals"], "trend": {"better": [0.05, 0.2]}},
        "trend_floor": {"better": [{"E": 1.7, "trend": 0.05}, {"E": 1.9, "trend": 0.2}]},
        "sensitivity": {"separate": {**sep, "trend": {"better": 0.1}}},
    }
    assert "it rises, in the interval and at every floor above" in trend_line(r_up)
    # the curves it is read on: on the planted law they pass within 2σ of every optimum; one optimum moved off its
    # curve by 10σ is named in the same sentence
    assert "The curves it is read on miss" not in line
    key = max(k for k in r["optima"] if k[0] == "better")
    sigma = r["budget_noise"]["budgets"][key[1]]["sigma"]
    moved = {**r["optima"], key: {**r["optima"][key], "loss_opt": r["optima"][key]["loss_opt"] + 10 * sigma}}
    n = sum(1 for k in r["optima"] if k[0] in ("base", "better"))
    said = re.search(
        r"miss (\d+) of these (\d+) optima by more than twice their budget's σ \(at most ([\d.]+)σ",
        trend_line({**r, "optima": moved}),
    )
    assert said and (int(said[1]), int(said[2])) == (1, n) and 8 < float(said[3]) < 12  # 10σ, less its own miss
    # a direction read on such curves is not claimed as the runs': the planted rise, with the optimum moved
    assert "So its direction is not established: on those curves it rises" in trend_line({**r_up, "optima": moved})
    no_seeds = analyse_isoflop(study({"base": (E, A, ALPHA), "better": (E, A * 2.0 ** (-ALPHA), ALPHA)}), n_boot=0)
    line = trend_line(no_seeds)
    assert "no direction is claimed" in line and "rises" not in line and "falls" not in line


def test_the_curve_check_flags_an_optimum_off_its_curve():
    """The multipliers are read on the shared-E curves: an optimum the curve misses by more than its budget's σ is
    starred and counted; optima on their curves pass."""
    from hfpretrain.study.fit import PowerLawFit
    from hfpretrain.study.report import curve_check_lines

    fit = PowerLawFit(E=E, A=A, alpha=ALPHA, n=3, r2=1.0, rmse=0.0)
    budgets = (1e15, 1e16, 1e17)
    on_curve = {("base", b): {"flops": b, "loss_opt": float(fit.predict(b))} for b in budgets}
    r = {"fits": {"base": fit}, "optima": on_curve, "budget_noise": {"budgets": {b: {"sigma": 0.01} for b in budgets}}}
    (line, _) = curve_check_lines(r)
    assert "base +0.000, +0.000, +0.000. Every optimum within its budget's noise" in line
    off = {**on_curve, ("base", 1e16): {"flops": 1e16, "loss_opt": float(fit.predict(1e16)) + 0.02}}
    (line, _) = curve_check_lines({**r, "optima": off})
    assert "base +0.000, +0.020*, +0.000" in line and "1 optima lie further from their curve" in line
