"""Other readings of the MoE compute multiplier at 2.5e16 than the report's (README § Result). First the rule's, since
its amendment of 2026-12-01 (`decision.fit: frontier`): the dense arm's L(N, D) fit on its runs, reaching the MoE
arm's measured optimum (analysis.json), and the same fit without the L2w runs trained after the amendment
(results.json, refitted with the project's code). Then the same per-budget optima fitted other ways with the
project's own fit code (the first line: the report's reading until the amendment). Each reading also gives the multiplier at
every budget and its trend (the slope of a line in ln C through them, as a factor per decade of compute): the trend
depends on the floor E of the dense fit, and its prediction of the dense loss at 3e16 and 5e16 against the measured
optima there (the spec's multiplier checks, out of sample: the fits end at 2.5e16). Last, the joint least-squares fit of
log L over E and each arm's A and α (scipy), against the project's fit (a profile over E with A and α from the line
through log(L − E): fit.py), and the same for the dense arm alone; then the measured dense optima on a line in ln C,
read at the MoE optimum, with the 5e16 check's interval at the rule's pooled σ and at each arm's own. Run from the
repository root:

    python results/study_gpu_moe2/sensitivity.py > results/study_gpu_moe2/sensitivity.txt
"""

import json
import math
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from hfpretrain.study.analysis import analyse_isoflop, cells, compute_multiplier, is_check, noise_floor
from hfpretrain.study.analysis import optima as cell_optima
from hfpretrain.study.fit import PowerLawFit, fit_power_law, fit_power_law_at, fit_shared_floor

HERE = Path(__file__).parent
BUDGETS = ("8e+14", "2.5e+15", "8e+15", "2.5e+16")
analysis = json.loads((HERE / "analysis.json").read_text())
optima = analysis["optima"]
# the dense arm measured at 3e16 and at 5e16 (three seeds each): each curve is scored at both
CHECKS = [
    (c["baseline_optimum"]["flops"], c["baseline_optimum"]["loss_opt"], c["sigma"])
    for c in analysis["multiplier_checks"]
]
c_check, l_check, s_check = CHECKS[0]


def at_check(curve) -> str:
    """``curve(C)`` -> loss, scored against the measured dense optimum at each check budget."""
    said = []
    for c, measured, sigma in CHECKS:
        predicted = float(curve(c))
        miss = predicted - measured
        said.append(f"{c:.2g}: {predicted:.4f}, {miss:+.4f}{' (beyond sigma)' if abs(miss) > sigma else ''}")
    return "; ".join(said)


def points(arm: str, measured: tuple = (), drop: tuple = ()) -> tuple[list, list]:
    """(C, L) of an arm's optima; at the budgets in ``measured`` the best measured seed mean instead."""
    cells = [optima[f"{arm} @ {b}"] for b in BUDGETS if b not in drop]
    keys = [b for b in BUDGETS if b not in drop]
    return [o["flops"] for o in cells], [
        o["best_measured"]["loss"] if b in measured else o["loss_opt"] for b, o in zip(keys, cells)
    ]


def shared(measured: tuple = (), drop: tuple = ()) -> PowerLawFit:
    return fit_shared_floor({"dense": points("dense", measured, drop), "moe": points("moe", measured, drop)})["dense"]


c_top, moe_top = optima["moe @ 2.5e+16"]["flops"], optima["moe @ 2.5e+16"]["loss_opt"]
nd = analysis["nd"]
print(
    f"{nd['multiplier_at_optimum']['moe']['2.5e+16']:5.2f}  the rule's (decision.fit: frontier): the dense arm's "
    f"L(N, D) fit (E = {nd['fits']['dense']['E']:.3f}, RMSE {nd['fits']['dense']['rmse']:.4f}) reaching the MoE "
    f"optimum; frontier to frontier {nd['multiplier']['moe']['2.5e+16']:.2f}"
)
rows = json.loads((HERE / "results.json").read_text())


def nd_without(label: str, keep) -> None:
    """The rule's reading on the L(N, D) fit of a subset of the runs (the MoE optimum at 2.5e16 is the same)."""
    nd_sub = analyse_isoflop([r for r in rows if keep(r)], y="val_bpb", n_boot=0)["nd"]
    fit = nd_sub["fits"]["dense"]
    print(
        f"{nd_sub['multiplier_at_optimum']['moe']['2.5e+16']:5.2f}  the same {label}: E = {fit['E']:.3f}, RMSE "
        f"{fit['rmse']:.4f}; frontier to frontier {nd_sub['multiplier']['moe']['2.5e+16']:.2f}"
    )


# L2w's spec entry came back with the amendment, its dense pair already run: the reading without it is the one
# the amendment's text calls unknown; the sizes off the ladder (L2w, L3w: `window: false`) and the 8e14 budget,
# whose fit checks fail, are the fit's other choices
nd_without("without the L2w runs", lambda r: r["size"] != "L2w")
nd_without("without the sizes off the ladder (L2w, L3w)", lambda r: r["size"] not in ("L2w", "L3w"))
nd_without("without the 8e14 budget", lambda r: abs(r["budget"] - 8e14) > 1)


def nd_linear(arm: str) -> tuple:
    """The arm's L(N, D) fit by least squares of L itself (not log L), started from the project's fit; with its
    flops per token and N range as the analysis takes them."""
    from scipy.optimize import least_squares as lsq

    from hfpretrain.study.analysis import _flops_per_token, _n, _nd_rows
    from hfpretrain.study.fit import NDFit

    data = [r for r in _nd_rows(rows, "val_bpb") if r["arm"] == arm]
    n, d, y = (np.array(v, dtype=float) for v in zip(*[(_n(r), r["tokens"], r["val_bpb"]) for r in data]))
    f0 = nd["fits"][arm]
    sol = lsq(
        lambda p: p[0] + p[1] * n ** -p[2] + p[3] * d ** -p[4] - y,
        [f0["E"], f0["A"], f0["alpha"], f0["B"], f0["beta"]],
        bounds=([0, 0, 0.01, 0, 0.01], [y.min(), np.inf, 3, np.inf, 3]),
        x_scale="jac",
    )
    fit = NDFit(*sol.x, n=len(y), rmse=float(np.sqrt(np.mean(sol.fun**2))))
    return fit, _flops_per_token(data), (n.min() / 100, n.max() * 100)


def _linear_reading() -> None:
    from hfpretrain.study.analysis import _nd_multiplier

    fit, fpt, n_range = nd_linear("dense")
    m = _nd_multiplier(fit, fpt, moe_top, c_top, n_range)
    print(f"{m:5.2f}  the same fit by least squares of L, not log L: E = {fit.E:.3f}, RMSE {fit.rmse:.4f}")


_linear_reading()
readings = {
    "shared floor, the report's until 2026-12-01": shared(),
    "shared floor, the flagged 8e14 optima replaced by the best measured means": shared(measured=("8e+14",)),
    "shared floor, without 8e14": shared(drop=("8e+14",)),
    "the dense arm's own floor (separate-E fit)": fit_power_law(*points("dense")),
}
vocab2 = json.loads((HERE.parent / "study_gpu_vocab2" / "fits.json").read_text())["arms"]["bpe_8k"]["fit"]
readings["the vocabulary study's fit of the same dense runs (its floor shared with two other arms)"] = PowerLawFit(
    E=vocab2["E"], A=vocab2["A"], alpha=vocab2["alpha"], n=vocab2["n"], r2=vocab2["r2"], rmse=vocab2["rmse"]
)
moe_c, moe_l = points("moe")


def trend(fit: PowerLawFit, drop: tuple = ()) -> str:
    """The multiplier at every budget (those of ``drop`` left out) on ``fit`` and its slope per decade."""
    keep = [i for i, b in enumerate(BUDGETS) if b not in drop]
    m = [compute_multiplier(fit, moe_l[i], moe_c[i]) for i in keep]
    per_decade = 10 ** np.polyfit(np.log([moe_c[i] for i in keep]), np.log(m), 1)[0]
    return f"{' / '.join(f'{x:.2f}' for x in m)} at {', '.join(BUDGETS[i] for i in keep)}: x{per_decade:.2f} per decade"


for name, fit in readings.items():
    drop = ("8e+14",) if "without 8e14" in name else ()
    print(
        f"{compute_multiplier(fit, moe_top, c_top):5.2f}  {name} (E = {fit.E:.3f}); {trend(fit, drop)}; "
        f"{at_check(fit.predict)}"
    )
# a straight line in ln C through the dense optima at 8e15 and 2.5e16, extended to the MoE optimum's loss
(c1, c2), (l1, l2) = (x[2:] for x in points("dense"))
slope = (l2 - l1) / math.log(c2 / c1)
print(
    f"{math.exp((moe_top - l2) / slope):5.2f}  a straight line in ln C through the dense optima at 8e15 and 2.5e16; "
    f"{at_check(lambda c: l2 + slope * math.log(c / c2))}"
)
print(
    "(each check budget: the dense curve's loss there against the measured optimum "
    + ", ".join(f"{c:.2g}: {m:.4f}, sigma {sg:.4f}" for c, m, sg in CHECKS)
    + ")"
)

# the trend at other floors: the dense arm's curve refitted (A, α) at each E, the MoE optima read on it. E = 0 is
# the first MoE study's form; 0.666 and 0.947 are the ends of the vocabulary study's interval of its shared floor,
# the last two this study's (the report's trend_floor; its lower end is 1.000 since the 8e14 intermediate size),
# each with its curve's loss at 3e16
print("The trend at other floors of the dense fit (A and alpha refitted at each E):")
for E in sorted(
    {
        0.0,
        0.6,
        0.666,
        0.869,
        0.947,
        readings["shared floor, the report's until 2026-12-01"].E,
        readings["the dense arm's own floor (separate-E fit)"].E,
        *(f["E"] for f in analysis["trend_floor"]["moe"] if f["E"] > 0),
    }
):
    floor_fit = fit_power_law_at(*points("dense"), E)
    print(f"  E = {E:.3f}: {trend(floor_fit)}; {at_check(floor_fit.predict)}")

# the joint least-squares fit of log L (E shared, A and alpha per arm), started from the reported fit
data = {arm: points(arm) for arm in ("dense", "moe")}
fits = fit_shared_floor(data)
c0 = {arm: float(np.exp(np.mean(np.log(c)))) for arm, (c, _) in data.items()}


def residual(p):  # p = E, then per arm ln A' and alpha (A' = A * c0^-alpha)
    out = []
    for k, (arm, (c, y)) in enumerate(data.items()):
        pred = p[0] + np.exp(p[1 + 2 * k] - p[2 + 2 * k] * np.log(np.asarray(c) / c0[arm]))
        out.append(np.log(pred) - np.log(y))
    return np.concatenate(out)


start = [fits["dense"].E]
for arm in data:
    start += [math.log(fits[arm].A) - fits[arm].alpha * math.log(c0[arm]), fits[arm].alpha]
top = min(min(y) for _, y in data.values())
sol = least_squares(residual, start, bounds=([0] + [-50, 0.0] * 2, [top * (1 - 1e-9)] + [50, 5.0] * 2))
E, la, alpha = sol.x[0], sol.x[1], sol.x[2]
joint = PowerLawFit(E=E, A=math.exp(la) * c0["dense"] ** alpha, alpha=alpha, n=4, r2=float("nan"), rmse=float("nan"))
print("Joint least squares of log L against the project's fit (shared floor):")
print(
    f"  sum of squares of log L: project {float(np.sum(residual(start) ** 2)):.3g}, joint {float(np.sum(sol.fun**2)):.3g}"
)
print(f"  E: project {fits['dense'].E:.3f}, joint {E:.3f}")
print(
    f"  multiplier at 2.5e16: project {compute_multiplier(fits['dense'], moe_top, c_top):.2f}, joint "
    f"{compute_multiplier(joint, moe_top, c_top):.2f}; joint {trend(joint)}"
)


# the dense arm alone: the joint least-squares fit of log L over its own E, A and alpha
dc, dy = data["dense"]


def residual_dense(p):  # p = E, ln A', alpha
    return np.log(p[0] + np.exp(p[1] - p[2] * np.log(np.asarray(dc) / c0["dense"]))) - np.log(dy)


own = fit_power_law(dc, dy)
sol = least_squares(
    residual_dense,
    [own.E, math.log(own.A) - own.alpha * math.log(c0["dense"]), own.alpha],
    bounds=([0, -50, 0.0], [min(dy) * (1 - 1e-9), 50, 5.0]),
)
alone = PowerLawFit(
    E=sol.x[0], A=math.exp(sol.x[1]) * c0["dense"] ** sol.x[2], alpha=sol.x[2], n=4, r2=float("nan"), rmse=float("nan")
)
print(
    f"The dense arm alone, joint least squares: E {alone.E:.3f}, multiplier at 2.5e16 "
    f"{compute_multiplier(alone, moe_top, c_top):.2f}; {at_check(alone.predict)}"
)

# No fit beyond the runs: the dense optima measured at 2.5e16 (the grid's cell) and at the check budgets, a straight
# line in ln C through them, read at the MoE optimum's loss; the 5e16 check's interval mapped through the same line
measured = [(c_top, optima["dense @ 2.5e+16"]["loss_opt"])] + [(c, m) for c, m, _ in CHECKS]
slope, intercept = np.polyfit([math.log(c) for c, _ in measured], [m for _, m in measured], 1)
reach = math.exp((moe_top - intercept) / slope)
last = analysis["multiplier_checks"][-1]
ends = [math.exp(math.log(last["budget"]) - g / slope) / c_top for g in last["interval"]]
print(
    f"The measured dense optima ({', '.join(f'{c:.2g}: {m:.4f}' for c, m in measured)}) on a line in ln C "
    f"({slope:+.4f} per e-fold): the MoE optimum {moe_top:.4f} at {reach / c_top:.2f}x 2.5e16; the {last['budget']:.2g} "
    f"check's interval [{last['interval'][0]:+.4f}, {last['interval'][1]:+.4f}] maps to [{min(ends):.2f}, {max(ends):.2f}]"
)

# The same mapping with each arm's own σ at 2.5e16 (the rule pools both arms' replicates there; the MoE arm's seeds
# spread about three times the dense arm's): the check cell drawn at the dense arm's σ, the MoE cell at its own

grid_rows = [r for r in rows if r.get("val_bpb") is not None]
DECISION = 2.5e16  # the decision budget (c_top is its MoE optimum's measured FLOPs, not the budget)
own_sigma = {
    arm: noise_floor([r for r in grid_rows if r["arm"] == arm and r["budget"] == DECISION], "val_bpb")["sigma"]
    for arm in ("dense", "moe")
}
check_cell = cells(
    [r for r in grid_rows if is_check(r) and r["budget"] == last["budget"] and r["arm"] == "dense"],
    "val_bpb",
    skip=lambda r: False,
)
moe_cell = {k: v for k, v in cells(grid_rows, "val_bpb").items() if k == ("moe", DECISION)}
rng = np.random.default_rng(0)
draws = [
    cell_optima(check_cell, rng, {last["budget"]: own_sigma["dense"]})[("dense", last["budget"])]["loss_opt"]
    - cell_optima(moe_cell, rng, {DECISION: own_sigma["moe"]})[("moe", DECISION)]["loss_opt"]
    for _ in range(2000)
]
lo_hi = np.percentile(draws, [2.5, 97.5])
ends = [math.exp(math.log(last["budget"]) - g / slope) / c_top for g in lo_hi]
print(
    f"With each arm's own sigma at 2.5e16 (dense {own_sigma['dense']:.4f}, moe {own_sigma['moe']:.4f}; the rule "
    f"pools them: {last['sigma']:.4f}): the {last['budget']:.2g} check's interval [{lo_hi[0]:+.4f}, {lo_hi[1]:+.4f}] "
    f"maps to [{min(ends):.2f}, {max(ends):.2f}]"
)
