"""The analysis that answers an ablation's questions from an IsoFLOP study's results.

1. **Per budget and arm, the best size and its loss** (seeds averaged): bracketed only when the best *measured*
   size is an inner one; the optimum is then the minimum of the parabola in ln N through that size and its two
   neighbours. A best size at the edge of the grid (``bracketed: false``) gives only a bound: the report says so
   and the decision rule answers "incomplete". The parabola through all of a cell's sizes is the fit check: a cell
   it misses by more than its budget's noise floor is ``flagged`` and named in the report.
2. **Noise floor, by the rule written before the runs** (the spec's ``decision.noise``): ``pooled`` (the
   default: one σ from every replicate of every budget, the only rule before ``decision.noise`` existed, so what a
   spec without one was written under), ``per_budget`` (σ of each budget pooled from that budget's seed
   replicates; seed noise differed sevenfold between the budgets of one study) or fixed values per budget. The
   report also gives the verdicts under the other of the first two rules, labelled a sensitivity. Every replicate
   counts: runs far from their seed siblings (k robust σ) are named, never dropped from the floor afterwards.
3. **Fits on the per-budget optima** L*_arm(C) = E + A_arm·C^(−α_arm). Main model (the compute multipliers of
   the comparisons and of a decision are read on it): **one E shared by the arms** (both are scored in bits per
   byte of the same text: the irreducible part belongs to the text).
   Sensitivity check: each arm with its own E (``sensitivity.separate``).
4. **The arms compared**: per budget the gap L*(arm) − L*(baseline); the *effective compute multiplier*
   of the arm (the compute the baseline needs, on its fit, to reach the arm's loss, divided by C: > 1
   means the change is worth that much more compute); its trend with compute (slope of ln multiplier vs
   ln C), with its bootstrap interval and its sensitivity to the floor (``trend_floor``: the slope with the
   baseline's fit held at the ends of E's interval and at E = 0; the separate-E fit gives another): the multipliers read the
   baseline's curve, whose floor few budgets do not pin down; where the fitted curves cross between the smallest budget and the extrapolation target (never
   below the data); and both arms extrapolated to 10× the largest budget.
5. **Uncertainty** by a parametric bootstrap: each cell mean gets Gaussian noise of its budget's noise
   floor (σ_b/√seeds), everything is refitted, and 95% intervals are the 2.5/97.5 percentiles. Without
   seeds there is no noise estimate and no interval (reported as such, never invented).
6. **Back-test**: each model refitted without the largest budget predicts that budget: each arm's optimum,
   and the gap between the arms (what the verdict rests on).
7. **The frontier: L(N, D) per arm on every run** (``nd``; Hoffmann et al.'s approach 3, scipy least
   squares): L(N, D) = E + A·N^(−α) + B·D^(−β), its compute-optimal frontier L*(C) = min over N of
   L(N, C / flops_per_token(N)), flops per token as a power of N fitted on the arm's runs. Per budget the frontier
   is set beside the parabola optimum (the check); beyond the largest budget it is an *extrapolation*, given with
   the back-test error of the same fit refitted without the largest budget (none with fewer than 3 budgets). A
   multiplier rule reads it instead of the optima's shared-E law when the spec says ``decision.fit: frontier``
   (``multiplier_at_optimum``: the baseline frontier's compute that reaches the arm's measured optimum).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from hfpretrain.study.fit import NDFit, fit_nd, fit_power_law, fit_power_law_at, fit_shared_floor

BOOTSTRAP_FIT = dict(grid=40, zooms=10)  # a coarser E search inside the bootstrap loop (hundreds of fits)
OUTLIER_K = 4.0  # robust σ: a seed replicate further from its siblings is named (and kept: the rule is written first)
NOISE_RULES = ("per_budget", "pooled")
DEFAULT_NOISE = "pooled"  # what "the pooled seed noise" of the specs written before decision.noise meant


def is_check(row: dict) -> bool:
    """A learning-rate, setting or multiplier check's row (spec lr_checks, setting_checks, multiplier_checks): in no
    cell, fit or decision."""
    return row.get("lr_factor") is not None or row.get("setting") is not None or bool(row.get("multiplier_check"))


def _n(row: dict) -> float:
    return float(row.get("ratio_params") or row["params"])


def cells(rows: list[dict], y: str = "val_loss", skip=is_check) -> dict:
    """(arm, budget) -> {size: {"n": N, "flops": mean C, "losses": [...]}} of the rows with a loss, in a fixed
    order (arm and budget, then N, seeds by seed): the bootstrap draws its noise cell by cell, so the intervals
    must not depend on the order the run folders were read in. ``skip``: rows in no cell (default: the checks)."""
    out: dict = defaultdict(dict)
    for r in sorted(rows, key=lambda r: (str(r.get("seed")), str(r.get("run")))):
        if r.get(y) is None or not math.isfinite(r[y]) or skip(r):  # the checks: no cell
            continue
        cell = out[r["arm"], r["budget"]].setdefault(r["size"], {"n": _n(r), "flops": [], "losses": []})
        cell["flops"].append(r["flops"])
        cell["losses"].append(float(r[y]))
    return {key: dict(sorted(sizes.items(), key=lambda kv: (kv[1]["n"], kv[0]))) for key, sizes in sorted(out.items())}


def _replicates(rows: list[dict], y: str, exclude=(), skip=is_check) -> list[tuple[list[str], np.ndarray]]:
    """(run names, losses) of every cell run with several seeds, without the ``exclude``d runs (and the checks)."""
    out: dict = defaultdict(lambda: ([], []))
    for r in rows:
        if r.get(y) is None or not math.isfinite(r[y]) or r.get("run") in exclude or skip(r):
            continue
        names, losses = out[r["arm"], r["budget"], r["size"]]
        names.append(r.get("run") or f"{r['arm']}/{r['size']}@{r['budget']:.3g}/seed{r.get('seed')}")
        losses.append(float(r[y]))
    return [(names, np.asarray(losses)) for names, losses in out.values() if len(losses) > 1]


def noise_floor(rows: list[dict], y: str = "val_loss", exclude=(), skip=is_check) -> dict | None:
    """Pooled standard deviation of seed replicates: {"sigma", "cells", "runs"}; None without replicates."""
    ss, dof, n_cells = 0.0, 0, 0
    for _, losses in _replicates(rows, y, exclude, skip):
        ss += float(((losses - losses.mean()) ** 2).sum())
        dof += len(losses) - 1
        n_cells += 1
    if dof == 0:
        return None
    return {"sigma": math.sqrt(ss / dof), "cells": n_cells, "runs": dof + n_cells}


def seed_outliers(rows: list[dict], y: str = "val_loss", k: float = OUTLIER_K) -> dict:
    """Runs far from their seed siblings: {"runs": {name: deviation}, "robust_sigma", "k"}; at most one run per
    cell of 3+ seeds, both runs of a 2-seed cell whose pair disagrees.

    A run's deviation is its loss minus the mean of its cell's other seeds, scaled by √(1 + 1/(n−1)) so that
    it has the spread of one run; the robust σ is 1.4826 × the median absolute deviation over all replicated
    runs (a few wild runs cannot inflate it, as they inflate the pooled σ); an outlier deviates by more than
    k robust σ. With two seeds either run could be the wild one: the pair is named. Outliers are reported, never
    dropped from the noise floor or the cell means: a floor chosen after seeing which pairs disagree is post hoc
    (it once turned a verdict from "undecided" to "resolved"), and a configuration that sometimes diverges is a
    result."""
    devs, candidates = [], []
    for names, losses in _replicates(rows, y):
        n = len(losses)
        cell = [
            (name, float((losses[i] - np.delete(losses, i).mean()) / math.sqrt(1 + 1 / (n - 1))))
            for i, name in enumerate(names)
        ]
        devs += cell
        if n >= 3:  # a wild run also pulls its siblings' deviations: only the worst is a candidate
            candidates.append(max(cell, key=lambda nd: abs(nd[1])))
        else:  # two seeds: both deviations are the pair's difference, ±; the pair is the candidate
            candidates += cell
    if len(devs) < 6:
        return {"runs": {}, "robust_sigma": None, "k": k}
    robust = 1.4826 * float(np.median([abs(d) for _, d in devs]))
    return {
        "runs": {name: d for name, d in candidates if robust > 0 and abs(d) > k * robust},
        "robust_sigma": robust,
        "k": k,
    }


def isoflop_optimum(n: np.ndarray, loss: np.ndarray) -> dict:
    """Best size and loss of one budget from (N, loss) points (loss: the mean over seeds of each size).

    Bracketed only when the best *measured* size is an inner one: the optimum is then the minimum of the parabola
    in ln N through that size and its two neighbours (with the middle point lowest, that parabola opens upwards
    and its minimum lies between the neighbours). A parabola through all 4–5 sizes is not the estimator: far sizes
    on a steep side tilt it, its minimum landed 0.089 bits per byte above a measured run mean (bpe_32k at 2.5e15
    in the second vocabulary study), and it called a cell lowest at its largest size bracketed (GPT-2 at 2.5e16).
    It is kept as the fit check: ``misfit``, its largest miss of a size's mean (None with 3 sizes or fewer, where
    it is the same parabola), compared with the budget's noise by the caller.
    Not bracketed (the best size at the edge, or fewer than 3 sizes): the best measured size and loss, a bound."""
    order = np.argsort(n)
    n, loss = np.asarray(n, float)[order], np.asarray(loss, float)[order]
    best = int(np.argmin(loss))
    out = {
        "n_opt": float(n[best]),
        "loss_opt": float(loss[best]),
        "bracketed": False,
        "points": len(n),
        "best_measured": {"n": float(n[best]), "loss": float(loss[best]), "index": best},
        "misfit": None,
    }
    x = np.log(n)
    if len(n) > 3:
        coef = np.polyfit(x, loss, 2)
        out["misfit"] = float(np.max(np.abs(loss - np.polyval(coef, x))))
    if not 0 < best < len(n) - 1:
        return out
    c, b, a = np.polyfit(x[best - 1 : best + 2], loss[best - 1 : best + 2], 2)
    if c <= 0:  # a tie of three equal means: no curvature to place a minimum
        return out
    x_opt = -b / (2 * c)
    return {
        **out,
        "n_opt": float(math.exp(x_opt)),
        "loss_opt": float(a + b * x_opt + c * x_opt**2),
        "bracketed": True,
        "points": 3,
    }


def budget_noise(rows: list[dict], y: str = "val_loss", rule=None) -> dict:
    """The noise floor of each budget by the spec's rule (``decision.noise``; None: the default, ``pooled``).

    {"rule": "per_budget" | "pooled" | "fixed", "default": bool, "budgets": {budget: {"sigma", "cells", "runs",
    "source"}}}; source: "seeds of this budget", "seeds of every budget" (``pooled``, or a budget without
    replicates under ``per_budget``), "spec" (fixed values), or None where nothing gives one."""
    budgets = sorted({r["budget"] for r in rows})
    pooled = noise_floor(rows, y)
    kind = "fixed" if isinstance(rule, dict) else (rule or DEFAULT_NOISE)
    out = {"rule": kind, "default": rule is None, "budgets": {}}
    fixed = {float(b): float(v) for b, v in rule.items()} if isinstance(rule, dict) else {}
    for b in budgets:
        own = noise_floor([r for r in rows if r["budget"] == b], y) if kind == "per_budget" else None
        if kind == "fixed" and any(math.isclose(b, fb, rel_tol=1e-9) for fb in fixed):
            sigma = next(v for fb, v in fixed.items() if math.isclose(b, fb, rel_tol=1e-9))
            out["budgets"][b] = {"sigma": sigma, "cells": None, "runs": None, "source": "spec"}
        elif own is not None:
            out["budgets"][b] = {**own, "source": "seeds of this budget"}
        elif pooled is not None:
            out["budgets"][b] = {**pooled, "source": "seeds of every budget"}
        else:
            out["budgets"][b] = {"sigma": None, "cells": 0, "runs": 0, "source": None}
    return out


def fit_flags(opt: dict, noise: dict) -> list[dict]:
    """Cells whose all-size parabola misses one of its size means by more than the budget's noise floor σ."""
    out = []
    for (arm, b), o in sorted(opt.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        sigma = (noise.get(b) or {}).get("sigma")
        if o.get("misfit") is not None and sigma is not None and o["misfit"] > sigma:
            out.append({"cell": f"{arm} @ {b:.3g}", "arm": arm, "budget": b, "misfit": o["misfit"], "sigma": sigma})
    return out


def optima(cell_map: dict, noise: np.random.Generator | None = None, sigma: dict | None = None) -> dict:
    """(arm, budget) -> isoflop_optimum + "flops"; with ``noise``, each cell mean is perturbed by its budget's σ
    (``sigma``: budget -> σ) over √seeds (bootstrap)."""
    out = {}
    for (arm, budget), sizes in cell_map.items():
        n = np.array([c["n"] for c in sizes.values()])
        means = np.array([np.mean(c["losses"]) for c in sizes.values()])
        if noise is not None:
            counts = np.array([len(c["losses"]) for c in sizes.values()])
            means = means + noise.normal(0.0, sigma[budget], len(means)) / np.sqrt(counts)
        opt = isoflop_optimum(n, means)
        opt["flops"] = float(np.mean([f for c in sizes.values() for f in c["flops"]]))
        out[arm, budget] = opt
    return out


def _points(opt: dict, arm: str, budgets: list[float]) -> tuple[list[float], list[float]]:
    keep = [b for b in budgets if (arm, b) in opt]
    return [opt[arm, b]["flops"] for b in keep], [opt[arm, b]["loss_opt"] for b in keep]


def fit_separate(opt: dict, arms: list[str], budgets: list[float], **kw) -> dict:
    """Per arm, its own E, A, α (the sensitivity check of a shared floor)."""
    out = {}
    for arm in arms:
        try:
            out[arm] = fit_power_law(*_points(opt, arm, budgets), **kw)
        except ValueError:
            out[arm] = None
    return out


def fit_shared(opt: dict, arms: list[str], budgets: list[float], **kw) -> dict:
    """One irreducible E for every arm, A and α per arm: the arms' losses are bits per byte of the same text."""
    points = {}
    for arm in arms:
        c, y = _points(opt, arm, budgets)
        if len(set(c)) >= 2:
            points[arm] = (c, y)
    fits = fit_shared_floor(points, **kw) if points else {}
    return {arm: fits.get(arm) for arm in arms}


MODELS = {"shared_E": fit_shared, "separate": fit_separate}
MAIN = "shared_E"


def compute_multiplier(baseline_fit, loss: float, flops: float) -> float:
    """C_baseline(loss) / C: how much compute the baseline's fit needs to reach ``loss``."""
    if baseline_fit is None:
        return float("nan")
    if loss <= baseline_fit.E:
        return float("inf")
    return (baseline_fit.A / (loss - baseline_fit.E)) ** (1 / baseline_fit.alpha) / flops


def _trend(opt: dict, arm: str, mults: dict) -> float | None:
    """d ln(multiplier) / d ln C over the budgets with a finite multiplier (None below 2 of them)."""
    finite = [(opt[arm, b]["flops"], m) for b, m in mults.items() if math.isfinite(m) and m > 0]
    if len(finite) < 2:
        return None
    lc, lm = np.log([c for c, _ in finite]), np.log([m for _, m in finite])
    return float(np.polyfit(lc, lm, 1)[0])


def trend_at_floors(opt: dict, arms: list[str], budgets: list[float], floors: list[float]) -> dict:
    """arm -> [{"E", "trend"}]: each arm's multiplier trend with the baseline's curve refitted at each of
    ``floors`` (A and α from ``fit_power_law_at``). A floor the baseline's losses do not allow is skipped."""
    base, out = arms[0], {}
    for arm in arms[1:]:
        out[arm] = []
        for E in floors:
            try:
                fit = fit_power_law_at(*_points(opt, base, budgets), E)
            except ValueError:
                continue
            mults = {
                b: compute_multiplier(fit, opt[arm, b]["loss_opt"], opt[arm, b]["flops"])
                for b in budgets
                if (arm, b) in opt and (base, b) in opt
            }
            t = _trend(opt, arm, mults)
            if t is not None:
                out[arm].append({"E": float(E), "trend": t})
    return out


def crossovers(fit_a, fit_b, lo: float, hi: float) -> list[float]:
    """Compute values in [lo, hi] where the two fitted curves cross (sign changes on a log grid). Callers pass
    the measured budgets up to the extrapolation target: a crossing below the smallest budget is the two
    curves' shapes meeting where no run was made (the first report named one at 1.2e14), not a finding."""
    if fit_a is None or fit_b is None:
        return []
    grid = np.logspace(math.log10(lo), math.log10(hi), 2001)
    diff = fit_a.predict(grid) - fit_b.predict(grid)
    out = []
    for i in np.nonzero(np.sign(diff[:-1]) * np.sign(diff[1:]) < 0)[0]:
        # linear in log C between the two grid points
        t = diff[i] / (diff[i] - diff[i + 1])
        out.append(float(10 ** (math.log10(grid[i]) + t * (math.log10(grid[i + 1]) - math.log10(grid[i])))))
    return out


def _summaries(
    opt: dict, arms: list[str], budgets: list[float], extrapolate_to: float, model: str, fit_kw: dict
) -> dict:
    """Fits (of ``model``), gaps, multipliers, the extrapolation and crossings from one set of per-budget optima."""
    fits = MODELS[model](opt, arms, budgets, **fit_kw)
    base = arms[0]
    out = {"fits": fits, "gap": {}, "multiplier": {}, "extrapolated": {}, "trend": {}, "crossover": {}}
    for arm in arms:
        f = fits[arm]
        out["extrapolated"][arm] = float(f.predict(extrapolate_to)) if f is not None else float("nan")
        if arm == base:
            continue
        gaps, mults = {}, {}
        for b in budgets:
            if (arm, b) in opt and (base, b) in opt:
                gaps[b] = opt[arm, b]["loss_opt"] - opt[base, b]["loss_opt"]
                mults[b] = compute_multiplier(fits[base], opt[arm, b]["loss_opt"], opt[arm, b]["flops"])
        out["gap"][arm], out["multiplier"][arm] = gaps, mults
        trend = _trend(opt, arm, mults)  # d ln(multiplier) / d ln C
        if trend is not None:
            out["trend"][arm] = trend
        out["crossover"][arm] = crossovers(fits[base], f, min(budgets), extrapolate_to)
    out["pairs"] = {}
    for i, b_arm in enumerate(arms):
        for arm in arms[i + 1 :]:
            gaps = {
                b: opt[arm, b]["loss_opt"] - opt[b_arm, b]["loss_opt"]
                for b in budgets
                if (arm, b) in opt and (b_arm, b) in opt
            }
            out["pairs"][pair_key(arm, b_arm)] = {
                "gap": gaps,
                "gap_extrapolated": out["extrapolated"][arm] - out["extrapolated"][b_arm],
                "crossover": crossovers(fits[b_arm], fits[arm], min(budgets), extrapolate_to),
            }
    return out


def pair_key(arm: str, baseline: str) -> str:
    return f"{arm} vs {baseline}"


def backtest(opt: dict, arms: list[str], budgets: list[float], model: str, fit_kw: dict | None = None) -> dict:
    """The ``model`` fitted without the largest budget predicts it: each arm's optimum, and the gap between each
    arm and the baseline (the ablation's question: was the trend of the gap right?). Needs 3+ budgets."""
    out: dict = {"arms": {}, "gap": {}}
    if len(budgets) < 3:
        return out
    held, base = budgets[-1], arms[0]
    fits = MODELS[model](opt, arms, budgets[:-1], **(fit_kw or {}))
    predicted = {}
    for arm in arms:
        if (arm, held) in opt and fits.get(arm) is not None:
            predicted[arm] = float(fits[arm].predict(opt[arm, held]["flops"]))
            observed = opt[arm, held]["loss_opt"]
            out["arms"][arm] = {
                "budget": held,
                "predicted": predicted[arm],
                "observed": observed,
                "error": predicted[arm] - observed,
            }
    for arm in arms[1:]:
        if arm in predicted and base in predicted:
            observed = opt[arm, held]["loss_opt"] - opt[base, held]["loss_opt"]
            gap = predicted[arm] - predicted[base]
            out["gap"][arm] = {"budget": held, "predicted": gap, "observed": observed, "error": gap - observed}
    return out


def _interval(values: list[float]) -> list[float] | None:
    v = np.asarray([x for x in values if math.isfinite(x)])
    return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if len(v) >= 10 else None


def _bootstrap(
    cell_map: dict,
    arms: list[str],
    budgets: list[float],
    target: float,
    sigma: dict,
    n_boot: int,
    seed: int,
    models=tuple(MODELS),
) -> dict:
    """95% intervals of the ``models``' figures: the cell means perturbed by σ_budget/√seeds, everything refitted."""
    rng = np.random.default_rng(seed)
    out = {}
    draws: dict = {model: [] for model in models}
    for _ in range(n_boot):
        opt = optima(cell_map, rng, sigma)
        for model in models:
            d = _summaries(opt, arms, budgets, target, model, BOOTSTRAP_FIT)
            d["backtest"] = backtest(opt, arms, budgets, model, BOOTSTRAP_FIT)
            draws[model].append(d)
    for model, ds in draws.items():
        iv: dict = {
            "alpha": {},
            "E": {},
            "extrapolated": {},
            "gap": {},
            "multiplier": {},
            "gap_extrapolated": {},
            "backtest_gap": {},
            "trend": {},
        }
        for arm in arms:
            iv["alpha"][arm] = _interval([d["fits"][arm].alpha for d in ds if d["fits"][arm] is not None])
            iv["E"][arm] = _interval([d["fits"][arm].E for d in ds if d["fits"][arm] is not None])
            iv["extrapolated"][arm] = _interval([d["extrapolated"][arm] for d in ds])
            if arm == arms[0]:
                continue
            iv["gap"][arm] = {b: _interval([d["gap"][arm].get(b, float("nan")) for d in ds]) for b in budgets}
            iv["multiplier"][arm] = {
                b: _interval([d["multiplier"][arm].get(b, float("nan")) for d in ds]) for b in budgets
            }
            iv["trend"][arm] = _interval([d["trend"].get(arm, float("nan")) for d in ds])
            iv["gap_extrapolated"][arm] = _interval([d["extrapolated"][arm] - d["extrapolated"][arms[0]] for d in ds])
            iv["backtest_gap"][arm] = _interval(
                [d["backtest"]["gap"].get(arm, {}).get("predicted", float("nan")) for d in ds]
            )
        iv["pairs"] = (
            {
                key: {
                    "gap": {b: _interval([d["pairs"][key]["gap"].get(b, float("nan")) for d in ds]) for b in budgets},
                    "gap_extrapolated": _interval([d["pairs"][key]["gap_extrapolated"] for d in ds]),
                }
                for key in ds[0]["pairs"]
            }
            if ds
            else {}
        )
        out[model] = iv
    return out


ND_BOOT = 100  # bootstrap draws of the L(N, D) fits (each refits every arm): fewer than the optima's


def analyse_isoflop(
    rows: list[dict],
    y: str = "val_loss",
    n_boot: int = 300,
    seed: int = 0,
    extrapolate_factor: float = 10.0,
    noise_rule=None,
    frontier: bool = True,
    nd_boot: int = ND_BOOT,
) -> dict:
    """Everything the report needs (see the module docstring). The first arm is the baseline.

    The main model (``model``: one E shared by the arms) fills the top-level keys; ``sensitivity`` holds the
    same figures from separate per-arm fits. ``intervals`` come from the noise floor of each budget by
    ``noise_rule`` (the spec's ``decision.noise``; None: ``DEFAULT_NOISE``, and ``budget_noise["default"]`` says so);
    ``noise`` is the pooled floor of every replicate, for reference. ``frontier=False`` leaves out the L(N, D) fits
    (``nd``), which no verdict reads: a second analysis under another noise rule needs only the verdicts."""
    cell_map = cells(rows, y)
    arms = list(dict.fromkeys(r["arm"] for r in rows if (r["arm"], r["budget"]) in cell_map))
    budgets = sorted({b for _, b in cell_map})
    if not arms or not budgets:
        return {"arms": arms, "budgets": budgets, "optima": {}}
    opt = optima(cell_map)
    c_max = max(o["flops"] for o in opt.values())
    target = extrapolate_factor * c_max
    per_model = {model: _summaries(opt, arms, budgets, target, model, {}) for model in MODELS}
    for model, d in per_model.items():
        d["backtest"] = backtest(opt, arms, budgets, model)
    grid_rows = [r for r in rows if not is_check(r)]  # LR and setting checks are no cell's replicates
    for (arm, b), o in opt.items():  # the seeds finished at every size of the cell: a decision needs all it planned
        by_size: dict = defaultdict(set)
        for r in grid_rows:
            finished = r.get(y) is not None and math.isfinite(r[y])
            if r["arm"] == arm and r["budget"] == b and r.get("seed") is not None and finished:
                by_size[r["size"]].add(r["seed"])
        o["seeds"] = sorted(set.intersection(*by_size.values())) if by_size else []
    noise = noise_floor(grid_rows, y)
    by_budget = budget_noise([r for r in grid_rows if r["budget"] in budgets], y, noise_rule)
    point = per_model[MAIN]
    result = {
        "y": y,
        "arms": arms,
        "baseline": arms[0],
        "budgets": budgets,
        "optima": opt,
        "noise": noise,
        "budget_noise": by_budget,
        # one unit for every arm: bits per byte of the same text, or one vocabulary (nats per token of other
        # tokenizers are not comparable, and neither is a shared irreducible term between them)
        "shared_unit": y == "val_bpb" or len({r.get("vocab_size") for r in rows if r.get("vocab_size")}) <= 1,
        "outliers": seed_outliers(rows, y),
        "model": MAIN,
        "fits": point["fits"],
        "gap": point["gap"],
        "multiplier": point["multiplier"],
        "trend": point["trend"],
        "extrapolate_to": target,
        "extrapolated": point["extrapolated"],
        "crossover": point["crossover"],
        "crossover_range": [min(budgets), target],
        "backtest": point["backtest"],
        "pairs": point["pairs"],
        "edge": sorted(f"{arm} @ {b:.3g}" for (arm, b), o in opt.items() if not o["bracketed"]),
        "flagged": fit_flags(opt, by_budget["budgets"]),
        "sensitivity": {model: d for model, d in per_model.items() if model != MAIN},
    }
    result["intervals"] = None
    sigma = {b: v["sigma"] for b, v in by_budget["budgets"].items()}
    result["nd"] = (
        analyse_nd(rows, arms, budgets, opt, sigma, target, y, min(n_boot, nd_boot), seed) if frontier else None
    )
    if all(v is not None for v in sigma.values()) and n_boot > 0:
        boot = _bootstrap(cell_map, arms, budgets, target, sigma, n_boot, seed)
        result["intervals"] = boot[MAIN]
        for model, d in result["sensitivity"].items():
            d["intervals"] = boot[model]
        result["n_boot"] = n_boot
        e_iv = (result["intervals"].get("E") or {}).get(arms[0])
        base_fit = result["fits"].get(arms[0])
        if e_iv is not None and len(arms) > 1 and base_fit is not None and not base_fit.fixed_E:
            # the ends of E's interval, and no floor at all (a pure power law, as the first studies fitted)
            result["trend_floor"] = trend_at_floors(opt, arms, budgets, list(dict.fromkeys([*e_iv, 0.0])))
    return result


def _nd_rows(rows: list[dict], y: str) -> list[dict]:
    return [
        r
        for r in rows
        if r.get(y) is not None
        and math.isfinite(r[y])
        and not is_check(r)
        and r.get("tokens")
        and r.get("flops_per_token")
    ]


def _flops_per_token(rows: list[dict]):
    """ln(flops per token) as a line in ln N over the arm's runs (6·N plus attention: close to a power of N)."""
    n = np.log([_n(r) for r in rows])
    f = np.log([float(r["flops_per_token"]) for r in rows])
    slope, icpt = np.polyfit(n, f, 1) if len(set(n)) > 1 else (1.0, float(f.mean() - n.mean()))
    return lambda size: math.exp(icpt + slope * math.log(size))


def nd_frontier(fit: NDFit, fpt, c: float, n_range: tuple[float, float]) -> dict:
    """The fit's compute-optimal point at compute c: {"n_opt", "loss", "at_bound"} (N searched over n_range)."""
    from scipy.optimize import minimize_scalar

    lo, hi = math.log(n_range[0]), math.log(n_range[1])
    sol = minimize_scalar(
        lambda x: float(fit.predict(math.exp(x), c / fpt(math.exp(x)))),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-6},
    )
    return {
        "n_opt": float(math.exp(sol.x)),
        "loss": float(sol.fun),
        "at_bound": bool(min(sol.x - lo, hi - sol.x) < 1e-3),
    }


def _nd_multiplier(base: NDFit, fpt, loss: float, c: float, n_range) -> float:
    """C_baseline(loss) / c on the baseline's L(N, D) frontier (nan when it never reaches ``loss`` in 1e±4 × c)."""
    from scipy.optimize import brentq

    def f(lc):
        return nd_frontier(base, fpt, math.exp(lc), n_range)["loss"] - loss

    lo, hi = math.log(c) - 4 * math.log(10), math.log(c) + 4 * math.log(10)
    try:
        return math.exp(brentq(f, lo, hi, xtol=1e-6)) / c if f(lo) * f(hi) < 0 else float("nan")
    except ValueError:
        return float("nan")


def _nd_fits(rows: list[dict], arms: list[str], y: str, start: dict | None = None) -> dict:
    out = {}
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        try:
            out[arm] = fit_nd(
                [_n(r) for r in mine],
                [float(r["tokens"]) for r in mine],
                [float(r[y]) for r in mine],
                start=(start or {}).get(arm),
            )
        except ValueError:
            out[arm] = None
    return out


def _nd_figures(fits: dict, fpts: dict, arms: list[str], flops: dict, n_range: dict) -> dict:
    """Frontier per arm at each compute of ``flops`` (label -> C), gaps of every pair, multipliers vs the baseline."""
    front = {
        arm: {k: nd_frontier(f, fpts[arm], c, n_range[arm]) for k, c in flops.items()}
        for arm, f in fits.items()
        if f is not None
    }
    pairs = {}
    for i, b_arm in enumerate(arms):
        for arm in arms[i + 1 :]:
            if arm in front and b_arm in front:
                pairs[pair_key(arm, b_arm)] = {k: front[arm][k]["loss"] - front[b_arm][k]["loss"] for k in flops}
    base = arms[0]
    mult = {
        arm: {
            k: _nd_multiplier(fits[base], fpts[base], front[arm][k]["loss"], c, n_range[base]) for k, c in flops.items()
        }
        for arm in arms[1:]
        if arm in front and base in front
    }
    return {"frontier": front, "pairs": pairs, "multiplier": mult}


def _nd_at_optima(fits: dict, fpts: dict, arms: list[str], opt: dict, n_range: dict) -> dict:
    """Per arm and budget: the baseline frontier's compute to reach the arm's measured optimum (the parabola's
    loss, not the arm's own frontier), over the cell's compute: the multiplier a rule reads with ``decision.fit:
    frontier`` (whether the cell is bracketed is the rule's to check)."""
    base = arms[0]
    if fits.get(base) is None:
        return {}
    return {
        arm: {
            f"{b:.6g}": _nd_multiplier(fits[base], fpts[base], o["loss_opt"], o["flops"], n_range[base])
            for (a, b), o in sorted(opt.items(), key=lambda kv: kv[0][1])
            if a == arm
        }
        for arm in arms[1:]
    }


def analyse_nd(
    rows: list[dict],
    arms: list[str],
    budgets: list[float],
    opt: dict,
    sigma: dict,
    target: float,
    y: str,
    n_boot: int = ND_BOOT,
    seed: int = 0,
) -> dict:
    """Section 7 of the module docstring, JSON-ready (budgets as "%.6g", "target" for the extrapolation)."""
    data = _nd_rows(rows, y)
    fpts = {
        arm: _flops_per_token([r for r in data if r["arm"] == arm])
        for arm in arms
        if any(r["arm"] == arm for r in data)
    }
    if len(fpts) < len(arms):
        return {}
    n_range = {
        arm: (min(_n(r) for r in data if r["arm"] == arm) / 100, max(_n(r) for r in data if r["arm"] == arm) * 100)
        for arm in arms
    }
    flops = {f"{b:.6g}": float(np.mean([o["flops"] for (a, bb), o in opt.items() if bb == b])) for b in budgets}
    flops["target"] = target
    fits = _nd_fits(data, arms, y)
    out = {
        "fits": {arm: (f.as_dict() if f else None) for arm, f in fits.items()},
        "flops": flops,
        **_nd_figures(fits, fpts, arms, flops, n_range),
        "multiplier_at_optimum": _nd_at_optima(fits, fpts, arms, opt, n_range),
    }
    out["check"] = {
        arm: {
            f"{b:.6g}": {
                "parabola": opt[arm, b]["loss_opt"],
                "bracketed": opt[arm, b]["bracketed"],
                "frontier": out["frontier"][arm][f"{b:.6g}"]["loss"],
                "difference": opt[arm, b]["loss_opt"] - out["frontier"][arm][f"{b:.6g}"]["loss"],
            }
            for b in budgets
            if (arm, b) in opt
        }
        for arm in out["frontier"]
    }
    # back-test: refitted without the largest budget's runs (needs 2+ budgets left: at one budget N and D are tied)
    out["backtest"] = None
    if len(budgets) >= 3:
        held = budgets[-1]
        less = _nd_fits([r for r in data if r["budget"] != held], arms, y)
        bt = {"budget": held, "arms": {}, "gap": {}}
        for arm, f in less.items():
            if f is None:
                continue
            mine = [r for r in data if r["arm"] == arm and r["budget"] == held]
            pred = f.predict([_n(r) for r in mine], [float(r["tokens"]) for r in mine])
            fr = nd_frontier(f, fpts[arm], flops[f"{held:.6g}"], n_range[arm])["loss"]
            bt["arms"][arm] = {
                "runs_rmse": float(np.sqrt(np.mean((pred - np.array([r[y] for r in mine])) ** 2))),
                "frontier": fr,
                "observed": opt[arm, held]["loss_opt"],
                "bracketed": opt[arm, held]["bracketed"],
                "error": fr - opt[arm, held]["loss_opt"],
            }
        for key in out["pairs"]:
            arm, b_arm = key.split(" vs ")
            if arm in bt["arms"] and b_arm in bt["arms"]:
                predicted = bt["arms"][arm]["frontier"] - bt["arms"][b_arm]["frontier"]
                observed = opt[arm, held]["loss_opt"] - opt[b_arm, held]["loss_opt"]
                bt["gap"][key] = {"predicted": predicted, "observed": observed, "error": predicted - observed}
        out["backtest"] = bt
    out["intervals"] = None
    if n_boot > 0 and all(v is not None for v in sigma.values()) and all(f is not None for f in fits.values()):
        rng = np.random.default_rng(seed)
        ordered = sorted(data, key=lambda r: (r["arm"], r["budget"], _n(r), str(r.get("seed")), str(r.get("run"))))
        draws = []
        for _ in range(n_boot):
            noisy = [{**r, y: r[y] + rng.normal(0.0, sigma[r["budget"]])} for r in ordered]
            noisy_fits = _nd_fits(noisy, arms, y, start=fits)
            draws.append(_nd_figures(noisy_fits, fpts, arms, flops, n_range))
            # the same draw's optima: the arm's measured best moves with its runs' noise too
            draws[-1]["at_optimum"] = _nd_at_optima(noisy_fits, fpts, arms, optima(cells(noisy, y)), n_range)
        out["intervals"] = {
            "pairs": {
                key: {k: _interval([d["pairs"].get(key, {}).get(k, float("nan")) for d in draws]) for k in flops}
                for key in out["pairs"]
            },
            "multiplier": {
                arm: {k: _interval([d["multiplier"].get(arm, {}).get(k, float("nan")) for d in draws]) for k in flops}
                for arm in out["multiplier"]
            },
            "multiplier_at_optimum": {
                arm: {k: _interval([d["at_optimum"].get(arm, {}).get(k, float("nan")) for d in draws]) for k in ms}
                for arm, ms in out["multiplier_at_optimum"].items()
            },
            "n_boot": n_boot,
        }
    return out


def to_json(result: dict) -> dict:
    """The analysis as plain JSON (fits as dicts, tuple keys as "arm @ budget", budgets as "%.6g")."""

    def fit(f):
        return f.as_dict() if f is not None else None

    def per_budget(d):
        return {arm: {f"{b:.6g}": v for b, v in per.items()} for arm, per in (d or {}).items()}

    def pairs(d):
        return {key: {**p, "gap": {f"{b:.6g}": v for b, v in p["gap"].items()}} for key, p in (d or {}).items()}

    def intervals(iv):
        if not iv:
            return iv
        return {
            **iv,
            "gap": per_budget(iv["gap"]),
            "multiplier": per_budget(iv["multiplier"]),
            "pairs": pairs(iv.get("pairs")),
        }

    def figures(d):
        out = {k: v for k, v in d.items() if k not in ("fits", "gap", "multiplier", "intervals", "pairs")}
        out["fits"] = {arm: fit(f) for arm, f in d.get("fits", {}).items()}
        out["pairs"] = pairs(d.get("pairs"))
        out["gap"], out["multiplier"] = per_budget(d.get("gap")), per_budget(d.get("multiplier"))
        if "intervals" in d:
            out["intervals"] = intervals(d["intervals"])
        return out

    out = figures({k: v for k, v in result.items() if k not in ("optima", "sensitivity", "budget_noise")})
    out["optima"] = {f"{arm} @ {b:.6g}": o for (arm, b), o in result.get("optima", {}).items()}
    if result.get("budget_noise"):
        out["budget_noise"] = {
            **result["budget_noise"],
            "budgets": {f"{b:.6g}": v for b, v in result["budget_noise"]["budgets"].items()},
        }
    out["sensitivity"] = {model: figures(d) for model, d in result.get("sensitivity", {}).items()}
    return out


def multiplier_checks(rows: list[dict], result: dict, decision: dict, n_boot: int = 300, seed: int = 0) -> list[dict]:
    """The spec's multiplier checks read against its decision: the compute multiplier at a threshold, from runs.

    A check cell is the baseline arm measured at ``budget`` = k × the decision budget ``at``. For each comparison
    against that baseline: the gap of the baseline's optimum there over the compared arm's optimum at ``at``
    (both the bracketed parabola optimum of their cells, :func:`isoflop_optimum`). Above 0 beyond noise, the
    baseline needs more than k times the compute to reach the arm's loss: the multiplier exceeds k on the runs
    alone, whatever the fits' floor; below 0, it is under k; else within noise of k. The interval perturbs both
    cells' means by their budgets' σ over √seeds (the check budget's from :func:`_check_sigma`) and recomputes
    both optima. A check cell not bracketed reads nothing (its optimum is a bound). A compared arm's check cell is
    read against the baseline's at the same budget instead (:func:`check_gaps`). ``curves``: the check as an out-of-sample test of the baseline's curves, each
    one's prediction at the check's compute against its measured optimum (the main model, the separate fit, the
    ends of E's interval, no floor, and the L(N, D) frontier: the curves a multiplier is read on)."""
    y = result["y"]
    checked = _checked_rows(rows, y)
    if not checked or not decision or not result.get("optima"):
        return []
    at = decision_budget(result, decision)
    grid = cells(rows, y)
    sigma_at = _sigma_at(result, at)
    out = []
    for (base, budget), sizes in cells(checked, y, skip=lambda r: False).items():
        if not any(c["baseline"] == base for c in decision.get("comparisons") or []):
            continue  # a compared arm's check cell: read against the baseline's at its budget (check_gaps)
        sigma, source = _check_sigma(checked, budget, result, decision, y)
        check_cell = {(base, budget): sizes}
        base_opt = optima(check_cell)[base, budget]
        curves = _curves_at(result, base, base_opt["flops"], rows)
        for comp in decision.get("comparisons") or []:
            arm = comp["arm"]
            if comp["baseline"] != base or (arm, at) not in result["optima"]:
                continue
            arm_opt = result["optima"][arm, at]
            entry = {
                "name": comp.get("name", arm),
                "arm": arm,
                "baseline": base,
                "at": at,
                "budget": budget,
                "factor": budget / at,
                "sizes": _size_summary(sizes),
                "baseline_optimum": base_opt,
                "arm_optimum": arm_opt["loss_opt"],
                "arm_bracketed": arm_opt["bracketed"],
                "sigma": sigma,
                "sigma_source": source,
                "sigma_at": sigma_at,
                "gap": base_opt["loss_opt"] - arm_opt["loss_opt"],
                "interval": None,
                "curves": [{**c, "miss": c["predicted"] - base_opt["loss_opt"]} for c in curves],
            }
            if sigma is not None and sigma_at is not None and n_boot > 0:
                rng = np.random.default_rng(seed)
                draws = [
                    optima(check_cell, rng, {budget: sigma})[base, budget]["loss_opt"]
                    - optima({(arm, at): grid[arm, at]}, rng, {at: sigma_at})[arm, at]["loss_opt"]
                    for _ in range(n_boot)
                ]
                entry["interval"] = _interval(draws)
            k = entry["factor"]
            entry["reading"] = _check_reading(
                base_opt["bracketed"] and arm_opt["bracketed"],
                entry["interval"],
                f"multiplier above {k:.3g}, measured",
                f"multiplier below {k:.3g}, measured",
                f"within noise of {k:.3g}",
            )
            out.append(entry)
    return out


def decision_budget(result: dict, decision: dict) -> float:
    """The budget a decision reads: its ``at``, else the largest budget."""
    return float(decision.get("at") or max(result["budgets"]))


def _size_summary(sizes: dict) -> dict:
    """A cell's sizes as a check reports them: name -> {n, losses (one per seed), mean}."""
    return {
        name: {"n": c["n"], "losses": c["losses"], "mean": float(np.mean(c["losses"]))} for name, c in sizes.items()
    }


def _check_reading(bracketed: bool, interval, above: str, below: str, within: str) -> str:
    """A check's reading of a gap's interval: ``above`` 0 beyond noise, ``below`` it, or ``within``; nothing without
    both cells bracketed (an optimum that is a bound) or without an interval."""
    if not bracketed:
        return "incomplete: a cell is not bracketed (its optimum is a bound)"
    if interval is None:
        return "no interval (no noise floor)"
    if interval[0] > 0:
        return above
    if interval[1] < 0:
        return below
    return within


def _checked_rows(rows: list[dict], y: str) -> list[dict]:
    return [r for r in rows if r.get("multiplier_check") and r.get(y) is not None and math.isfinite(r[y])]


def _sigma_at(result: dict, budget: float) -> float | None:
    return ((result.get("budget_noise") or {}).get("budgets") or {}).get(budget, {}).get("sigma")


def _check_sigma(checked: list[dict], budget: float, result: dict, decision: dict, y: str) -> tuple[float, str]:
    """σ of one run at a check budget, and where it comes from: a fixed rule's value where it names the budget;
    under ``per_budget`` that budget's seed replicates (every arm's check cells there), but not below the decision
    budget's (a few replicates estimate σ poorly); else the pooled σ."""
    at = decision_budget(result, decision)
    sigma_at = _sigma_at(result, at)
    rule, pooled = decision.get("noise") or DEFAULT_NOISE, (result.get("noise") or {}).get("sigma")
    own = noise_floor([r for r in checked if r["budget"] == budget], y, skip=lambda r: False)
    fixed = (
        [v for b, v in rule.items() if math.isclose(float(b), budget, rel_tol=1e-9)] if isinstance(rule, dict) else []
    )
    if fixed:
        return fixed[0], "spec"
    if rule == "per_budget" and own and (sigma_at is None or own["sigma"] >= sigma_at):
        return own["sigma"], "seeds of this check"
    if rule == "per_budget" and own:
        return (
            sigma_at,
            f"the decision budget's; this budget's check cells ({own['runs']} runs in {own['cells']}) give "
            f"{own['sigma']:.4f}",
        )
    return pooled, "pooled"


def check_gaps(rows: list[dict], result: dict, decision: dict, n_boot: int = 300, seed: int = 0) -> list[dict]:
    """Both arms of a comparison measured at one check budget (a ``multiplier_checks`` entry for each): the
    compared arm's optimum against the baseline's there, measured, beyond the grid and its decision.

    Per comparison and check budget holding both arms' cells: each cell's bracketed parabola optimum, the gap
    (arm − baseline) with an interval that perturbs both cells by the budget's σ over √seeds (as
    :func:`multiplier_checks`), the same gap at the decision budget for reference, and the arm's compute
    multiplier at the check budget on each of the baseline's curves (:func:`_curves_at`'s; the fits end at the
    grid's top, so the baseline's own check cell says how far each curve holds there). A cell not bracketed reads
    nothing."""
    y = result["y"]
    checked = _checked_rows(rows, y)
    if not checked or not decision or not result.get("optima"):
        return []
    at = decision_budget(result, decision)
    by_cell = cells(checked, y, skip=lambda r: False)
    out = []
    for comp in decision.get("comparisons") or []:
        arm, base = comp["arm"], comp["baseline"]
        for budget in sorted(b for a, b in by_cell if a == arm and (base, b) in by_cell):
            sigma, source = _check_sigma(checked, budget, result, decision, y)
            pair = {(a, budget): by_cell[a, budget] for a in (arm, base)}
            opt = optima(pair)
            gap = opt[arm, budget]["loss_opt"] - opt[base, budget]["loss_opt"]
            at_gap = (
                result["optima"][arm, at]["loss_opt"] - result["optima"][base, at]["loss_opt"]
                if (arm, at) in result["optima"] and (base, at) in result["optima"]
                else None
            )
            entry = {
                "name": comp.get("name", arm),
                "arm": arm,
                "baseline": base,
                "budget": budget,
                "at": at,
                "sizes": {a: _size_summary(by_cell[a, budget]) for a in (arm, base)},
                "optimum": {a: opt[a, budget] for a in (arm, base)},
                "sigma": sigma,
                "sigma_source": source,
                "gap": gap,
                "interval": None,
                "gap_at": at_gap,
                "multipliers": [
                    {
                        "fit": label,
                        "E": float(fit.E),
                        "multiplier": compute_multiplier(fit, opt[arm, budget]["loss_opt"], budget),
                    }
                    for label, fit in _baseline_curves(result, base)
                ],
            }
            nd = _nd_curve(rows, result, base)
            if nd:
                m = _nd_multiplier(nd[0], nd[1], opt[arm, budget]["loss_opt"], budget, nd[2])
                entry["multipliers"].append({"fit": "L(N, D) frontier", "E": float(nd[0].E), "multiplier": m})
            if sigma is not None and n_boot > 0:
                rng = np.random.default_rng(seed)
                draws = []
                for _ in range(n_boot):
                    o = optima(pair, rng, {budget: sigma})
                    draws.append(o[arm, budget]["loss_opt"] - o[base, budget]["loss_opt"])
                entry["interval"] = _interval(draws)
            entry["reading"] = _check_reading(
                opt[arm, budget]["bracketed"] and opt[base, budget]["bracketed"],
                entry["interval"],
                f"{arm} higher, beyond noise",
                f"{arm} lower, beyond noise",
                "within noise",
            )
            out.append(entry)
    return out


def _baseline_curves(result: dict, arm: str) -> list[tuple[str, object]]:
    """The curves of ``arm`` the analysis reads multipliers on, named: the main model's (shared E), the separate
    fit's, the fits at the ends of E's interval and with no floor (E = 0), each on the arm's optima."""
    named = [("shared E (the main model)", result.get("fits", {}).get(arm))]
    named.append(("separate E", ((result.get("sensitivity") or {}).get("separate") or {}).get("fits", {}).get(arm)))
    e_iv = ((result.get("intervals") or {}).get("E") or {}).get(arm) or []
    budgets = [b for b in result["budgets"] if (arm, b) in result["optima"]]
    for label, E in [*(("E at its interval's end", e) for e in e_iv), ("no floor (E = 0)", 0.0)]:
        try:
            named.append((label, fit_power_law_at(*_points(result["optima"], arm, budgets), E)))
        except ValueError:  # a floor the arm's losses do not allow
            continue
    return [(label, fit) for label, fit in named if fit is not None]


def _nd_curve(rows: list[dict], result: dict, arm: str):
    """``arm``'s L(N, D) fit as the analysis made it (``nd``), for use at other computes: (fit, flops per token,
    N range, as ``analyse_nd`` takes them from the same runs), or None without it."""
    fit = ((result.get("nd") or {}).get("fits") or {}).get(arm)
    data = [r for r in _nd_rows(rows, result["y"]) if r["arm"] == arm]
    if fit is None or not data:
        return None
    n = [_n(r) for r in data]
    return NDFit(**fit), _flops_per_token(data), (min(n) / 100, max(n) * 100)


def _curves_at(result: dict, arm: str, flops: float, rows: list[dict] | None = None) -> list[dict]:
    """``arm``'s loss at ``flops`` on each curve the analysis reads multipliers on: [{"fit", "E", "predicted"}]; with
    ``rows``, its L(N, D) frontier too (what ``decision.fit: frontier`` reads)."""
    out = [
        {"fit": label, "E": float(fit.E), "predicted": float(fit.predict(flops))}
        for label, fit in _baseline_curves(result, arm)
    ]
    nd = _nd_curve(rows, result, arm) if rows else None
    if nd:
        out.append(
            {"fit": "L(N, D) frontier", "E": float(nd[0].E), "predicted": nd_frontier(*nd[:2], flops, nd[2])["loss"]}
        )
    return out


def default_decision(result: dict) -> dict:
    """The rule a spec without ``decision:`` is judged by (said so in its report): each arm against the baseline at
    the largest budget, margin 0, the default noise rule."""
    base = result["baseline"]
    return {
        "default": True,
        "margin": 0.0,
        "at": max(result["budgets"]),
        "written": "nowhere: the spec has no decision rule; this default was chosen after the runs",
        "comparisons": [{"name": arm, "arm": arm, "baseline": base} for arm in result["arms"][1:]],
        "rule": "Default (no rule in the spec): each arm against the baseline at the largest budget, with the "
        "verdicts of analysis.decide and a margin of 0; a cell not bracketed there: incomplete.",
    }


def decision_multiplier(result: dict, decision: dict, arm: str, at: float) -> tuple[float | None, list | None]:
    """The arm's compute multiplier at ``at`` and its interval on the fit the rule names (``decision.fit``):
    ``optima`` (default), the baseline's power law on the per-budget optima with the shared floor; ``frontier``, the
    baseline's L(N, D) fit on its runs, reaching the arm's measured optimum."""
    if decision.get("fit", "optima") == "frontier":
        nd = result.get("nd") or {}
        label = f"{at:.6g}"
        mult = (nd.get("multiplier_at_optimum") or {}).get(arm, {}).get(label)
        m_ci = ((nd.get("intervals") or {}).get("multiplier_at_optimum") or {}).get(arm, {}).get(label)
        return (None if mult is None or not math.isfinite(mult) else mult), m_ci
    iv = result.get("intervals") or {}

    def at_budget(d: dict):
        return next((v for b, v in d.items() if math.isclose(b, at, rel_tol=1e-9)), None)

    return at_budget(result["multiplier"].get(arm) or {}), at_budget((iv.get("multiplier") or {}).get(arm) or {})


def decide(result: dict, decision: dict, seeds_for=None, unrun=None) -> list[dict]:
    """The spec's ``decision`` rule (written before the runs) applied to the analysis: one verdict per comparison.

    Per comparison (``arm`` against ``baseline``) at the budget ``at`` (default: the largest): the measured gap of
    the best losses with its 95% interval, and the gap at 10× the largest budget on the main (shared-E)
    model with its interval and on the separate fits. Verdicts, in this order:
      - ``incomplete``: a cell of the comparison at ``at`` was not run, is not bracketed (its optimum is a bound)
        or lacks, at one of its sizes, a seed of ``seeds_for(at)`` (the spec's: a verdict waits for every replicate
        it planned; a rule of every study, added 2026-11-29), or ``unrun(arm, at)`` names runs the spec planned
        for the cell that have not finished (a size added to the cell, ``isoflop.extra``: it may move the best);
      - ``better, also at 10×``: the measured interval lies below −margin, the shared-E extrapolation's interval
        below 0, and the separate fits agree on the sign;
      - ``better at the measured budgets``: the measured interval below −margin, the extrapolation unresolved
        or the two models disagree: adopt at this scale, no recommendation beyond it;
      - ``worse``: the measured interval above +margin;
      - ``no practical difference``: the measured interval inside ±margin;
      - ``undecided``: anything else (more seeds, or a larger budget).
    With ``criterion: multiplier`` (the MoE study's rule, for an arm against the analysis' baseline): the arm's
    compute multiplier at ``at`` on the fit ``decision.fit`` names (:func:`decision_multiplier`) with its interval:
    ``recommended`` above ``multiplier_min`` with the interval's lower end above 1; ``no gain`` when the interval
    holds 1; ``worse`` when it lies below 1; else ``undecided``.
    Every verdict carries the noise floor σ of ``at`` it was computed with (the rule's ``noise``).
    """
    margin = float(decision.get("margin", 0.0))
    at = decision_budget(result, decision)
    iv = result.get("intervals") or {}
    sep = (result.get("sensitivity") or {}).get("separate") or {}
    out = []
    for comp in decision.get("comparisons") or []:
        arm, base = comp["arm"], comp["baseline"]
        sign, key = (1, pair_key(arm, base)) if pair_key(arm, base) in result["pairs"] else (-1, pair_key(base, arm))
        sigma = ((result.get("budget_noise") or {}).get("budgets") or {}).get(at, {}).get("sigma")
        entry = {
            "name": comp.get("name", key),
            "arm": arm,
            "baseline": base,
            "budget": at,
            "margin": margin,
            "sigma": sigma,
            "criterion": decision.get("criterion", "gap"),
        }
        cells_ok = [(a, at) in result["optima"] and result["optima"][a, at]["bracketed"] for a in (arm, base)]
        if key not in result["pairs"] or not all(cells_ok):
            missing = [f"{a} @ {at:.3g}" for a, ok in zip((arm, base), cells_ok) if not ok]
            out.append({**entry, "verdict": "incomplete", "why": "not run or not bracketed: " + ", ".join(missing)})
            continue
        want = {s for s in (seeds_for(at) if seeds_for else []) if s is not None}
        short = {a: sorted(want - set(result["optima"][a, at].get("seeds", []))) for a in (arm, base)}
        unseeded = [f"{a} @ {at:.3g} (seed {', '.join(map(str, s))})" for a, s in short.items() if s]
        if unseeded:
            out.append({**entry, "verdict": "incomplete", "why": "a planned seed not run: " + ", ".join(unseeded)})
            continue
        planned = [name for a in (arm, base) for name in (unrun(a, at) if unrun else [])]
        if planned:
            out.append({**entry, "verdict": "incomplete", "why": "a planned run not finished: " + ", ".join(planned)})
            continue

        def signed(x):
            return None if x is None else sign * x

        def signed_iv(ci):
            return None if ci is None else sorted([sign * ci[0], sign * ci[1]])

        p, pi = result["pairs"][key], ((iv.get("pairs") or {}).get(key) or {})
        gap = signed(next((g for b, g in p["gap"].items() if math.isclose(b, at, rel_tol=1e-9)), None))
        gap_ci = signed_iv(
            next((c for b, c in (pi.get("gap") or {}).items() if math.isclose(b, at, rel_tol=1e-9)), None)
        )
        gap10, gap10_ci = signed(p["gap_extrapolated"]), signed_iv(pi.get("gap_extrapolated"))
        gap10_sep = signed((sep.get("pairs") or {}).get(key, {}).get("gap_extrapolated"))
        sep_pi = (((sep.get("intervals") or {}).get("pairs") or {}).get(key) or {}).get("gap_extrapolated")
        entry.update(
            gap=gap,
            gap_interval=gap_ci,
            gap_10x=gap10,
            gap_10x_interval=gap10_ci,
            gap_10x_separate=gap10_sep,
            gap_10x_separate_interval=signed_iv(sep_pi),
        )
        if entry["criterion"] == "multiplier":
            mult, m_ci = decision_multiplier(result, decision, arm, at)
            entry.update(multiplier=mult, multiplier_interval=m_ci, fit=decision.get("fit", "optima"))
            lo = float(decision.get("multiplier_min", 1.0))
            if mult is None or m_ci is None:
                verdict = "undecided"
            elif mult > lo and m_ci[0] > 1:
                verdict = "recommended"
            elif m_ci[0] <= 1 <= m_ci[1]:
                verdict = "no gain"
            elif m_ci[1] < 1:
                verdict = "worse"
            else:
                verdict = "undecided"
            out.append({**entry, "verdict": verdict})
            continue
        if gap_ci is None:
            verdict = "undecided"
        elif gap_ci[1] < -margin:
            agree = gap10_sep is not None and gap10_sep < 0
            verdict = (
                "better, also at 10×" if gap10_ci and gap10_ci[1] < 0 and agree else "better at the measured budgets"
            )
        elif gap_ci[0] > margin:
            verdict = "worse"
        elif -margin <= gap_ci[0] and gap_ci[1] <= margin:
            verdict = "no practical difference"
        else:
            verdict = "undecided"
        out.append({**entry, "verdict": verdict})
    return out
