"""The analysis that answers an ablation's questions from an IsoFLOP study's results.

1. **Per budget and arm, the best size and its loss**: a parabola of loss in ln N through the budget's
   sizes (seeds averaged). Its minimum is the optimum when it lies inside the sizes trained; otherwise
   the best size sits at the edge of the grid (``bracketed: false``), the budget's optimum is only bounded,
   and the report says so: the grid should be moved, not the result trusted.
2. **Noise floor**: the pooled standard deviation of runs that differ only in their seed.
3. **Per arm, a power law on the per-budget optima** L*(C) = E + A·C^(−α), E free when there are 3+
   budgets.
4. **The arms compared**: per budget the gap L*(arm) − L*(baseline); the *effective compute multiplier*
   of the arm (the compute the baseline needs, on its fit, to reach the arm's loss, divided by C: > 1
   means the change is worth that much more compute); its trend with compute (slope of ln multiplier vs
   ln C); where the fitted curves cross; and both arms extrapolated to 10× the largest budget.
5. **Uncertainty** by a parametric bootstrap: each cell mean gets Gaussian noise of the measured noise
   floor (σ/√seeds), everything is refitted, and 95% intervals are the 2.5/97.5 percentiles. Without
   seeds there is no noise estimate and no interval (reported as such, never invented).
6. **Back-test**: each arm refitted without its largest budget predicts that budget's optimum.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from hfpretrain.study.fit import fit_power_law

BOOTSTRAP_FIT = dict(grid=40, zooms=10)  # a coarser E search inside the bootstrap loop (hundreds of fits)


def _n(row: dict) -> float:
    return float(row.get("ratio_params") or row["params"])


def cells(rows: list[dict], y: str = "val_loss") -> dict:
    """(arm, budget) -> {size: {"n": N, "flops": mean C, "losses": [...]}} of the rows with a loss."""
    out: dict = defaultdict(dict)
    for r in rows:
        if r.get(y) is None or not math.isfinite(r[y]):
            continue
        cell = out[r["arm"], r["budget"]].setdefault(r["size"], {"n": _n(r), "flops": [], "losses": []})
        cell["flops"].append(r["flops"])
        cell["losses"].append(float(r[y]))
    return out


def noise_floor(rows: list[dict], y: str = "val_loss") -> dict | None:
    """Pooled standard deviation of seed replicates: {"sigma", "cells", "runs"}; None without replicates."""
    ss, dof, n_cells = 0.0, 0, 0
    for sizes in cells(rows, y).values():
        for cell in sizes.values():
            losses = np.asarray(cell["losses"])
            if len(losses) > 1:
                ss += float(((losses - losses.mean()) ** 2).sum())
                dof += len(losses) - 1
                n_cells += 1
    if dof == 0:
        return None
    return {"sigma": math.sqrt(ss / dof), "cells": n_cells, "runs": dof + n_cells}


def isoflop_optimum(n: np.ndarray, loss: np.ndarray) -> dict:
    """Best size and loss of one budget from (N, loss) points: a parabola in ln N."""
    order = np.argsort(n)
    n, loss = np.asarray(n, float)[order], np.asarray(loss, float)[order]
    best = int(np.argmin(loss))
    edge = {"n_opt": float(n[best]), "loss_opt": float(loss[best]), "bracketed": False, "points": len(n)}
    if len(n) < 3:
        return edge
    x = np.log(n)
    c, b, a = np.polyfit(x, loss, 2)
    if c <= 0:
        return edge
    x_opt = -b / (2 * c)
    if not x[0] < x_opt < x[-1]:
        return edge
    return {"n_opt": float(math.exp(x_opt)), "loss_opt": float(a + b * x_opt + c * x_opt**2), "bracketed": True,
            "points": len(n)}


def optima(cell_map: dict, noise: np.random.Generator | None = None, sigma: float = 0.0) -> dict:
    """(arm, budget) -> isoflop_optimum + "flops"; with ``noise``, each cell mean is perturbed (bootstrap)."""
    out = {}
    for (arm, budget), sizes in cell_map.items():
        n = np.array([c["n"] for c in sizes.values()])
        means = np.array([np.mean(c["losses"]) for c in sizes.values()])
        if noise is not None:
            counts = np.array([len(c["losses"]) for c in sizes.values()])
            means = means + noise.normal(0.0, sigma, len(means)) / np.sqrt(counts)
        opt = isoflop_optimum(n, means)
        opt["flops"] = float(np.mean([f for c in sizes.values() for f in c["flops"]]))
        out[arm, budget] = opt
    return out


def _fit(points: list[tuple[float, float]], **kw):
    try:
        return fit_power_law([c for c, _ in points], [loss for _, loss in points], **kw)
    except ValueError:
        return None


def compute_multiplier(baseline_fit, loss: float, flops: float) -> float:
    """C_baseline(loss) / C: how much compute the baseline's fit needs to reach ``loss``."""
    if baseline_fit is None:
        return float("nan")
    if loss <= baseline_fit.E:
        return float("inf")
    return (baseline_fit.A / (loss - baseline_fit.E)) ** (1 / baseline_fit.alpha) / flops


def crossovers(fit_a, fit_b, lo: float, hi: float) -> list[float]:
    """Compute values in [lo, hi] where the two fitted curves cross (sign changes on a log grid)."""
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


def _summaries(opt: dict, arms: list[str], budgets: list[float], extrapolate_to: float, fit_kw: dict) -> dict:
    """Fits, gaps, multipliers and the extrapolation from one set of per-budget optima."""
    fits = {arm: _fit([(opt[arm, b]["flops"], opt[arm, b]["loss_opt"]) for b in budgets if (arm, b) in opt], **fit_kw)
            for arm in arms}
    base = arms[0]
    out = {"fits": fits, "gap": {}, "multiplier": {}, "extrapolated": {}, "trend": {}}
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
        finite = [(opt[arm, b]["flops"], m) for b, m in mults.items() if math.isfinite(m) and m > 0]
        if len(finite) >= 2:
            lc, lm = np.log([c for c, _ in finite]), np.log([m for _, m in finite])
            out["trend"][arm] = float(np.polyfit(lc, lm, 1)[0])  # d ln(multiplier) / d ln C
    return out


def _interval(values: list[float]) -> list[float] | None:
    v = np.asarray([x for x in values if math.isfinite(x)])
    return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if len(v) >= 10 else None


def analyse_isoflop(rows: list[dict], y: str = "val_loss", n_boot: int = 300, seed: int = 0,
                    extrapolate_factor: float = 10.0) -> dict:
    """Everything the report needs (see the module docstring). The first arm is the baseline."""
    cell_map = cells(rows, y)
    arms = list(dict.fromkeys(r["arm"] for r in rows if (r["arm"], r["budget"]) in cell_map))
    budgets = sorted({b for _, b in cell_map})
    if not arms or not budgets:
        return {"arms": arms, "budgets": budgets, "optima": {}}
    opt = optima(cell_map)
    c_max = max(o["flops"] for o in opt.values())
    target = extrapolate_factor * c_max
    point = _summaries(opt, arms, budgets, target, {})
    noise = noise_floor(rows, y)
    result = {
        "y": y, "arms": arms, "baseline": arms[0], "budgets": budgets, "optima": opt, "noise": noise,
        "fits": point["fits"], "gap": point["gap"], "multiplier": point["multiplier"], "trend": point["trend"],
        "extrapolate_to": target, "extrapolated": point["extrapolated"],
        "edge": sorted(f"{arm} @ {b:.3g}" for (arm, b), o in opt.items() if not o["bracketed"]),
        "crossover": {arm: crossovers(point["fits"][arms[0]], point["fits"][arm], min(budgets) / 100, target * 10)
                      for arm in arms[1:]},
    }
    # back-test: leave the largest budget out, predict it
    result["backtest"] = {}
    if len(budgets) >= 3:
        for arm in arms:
            held = budgets[-1]
            if (arm, held) not in opt:
                continue
            f = _fit([(opt[arm, b]["flops"], opt[arm, b]["loss_opt"]) for b in budgets[:-1] if (arm, b) in opt])
            if f is not None:
                predicted = float(f.predict(opt[arm, held]["flops"]))
                result["backtest"][arm] = {"budget": held, "predicted": predicted, "observed": opt[arm, held]["loss_opt"],
                                           "error": predicted - opt[arm, held]["loss_opt"]}
    # uncertainty
    result["intervals"] = None
    if noise is not None and n_boot > 0:
        rng = np.random.default_rng(seed)
        draws = [_summaries(optima(cell_map, rng, noise["sigma"]), arms, budgets, target, BOOTSTRAP_FIT)
                 for _ in range(n_boot)]
        iv: dict = {"alpha": {}, "E": {}, "extrapolated": {}, "gap": {}, "multiplier": {}, "gap_extrapolated": {}}
        for arm in arms:
            iv["alpha"][arm] = _interval([d["fits"][arm].alpha for d in draws if d["fits"][arm] is not None])
            iv["E"][arm] = _interval([d["fits"][arm].E for d in draws if d["fits"][arm] is not None])
            iv["extrapolated"][arm] = _interval([d["extrapolated"][arm] for d in draws])
            if arm == arms[0]:
                continue
            iv["gap"][arm] = {b: _interval([d["gap"][arm].get(b, float("nan")) for d in draws]) for b in point["gap"][arm]}
            iv["multiplier"][arm] = {b: _interval([d["multiplier"][arm].get(b, float("nan")) for d in draws])
                                     for b in point["multiplier"][arm]}
            iv["gap_extrapolated"][arm] = _interval([d["extrapolated"][arm] - d["extrapolated"][arms[0]] for d in draws])
        result["intervals"] = iv
        result["n_boot"] = n_boot
    return result


def to_json(result: dict) -> dict:
    """The analysis as plain JSON (fits as dicts, tuple keys as "arm @ budget")."""
    def fit(f):
        return f.as_dict() if f is not None else None

    out = {k: v for k, v in result.items() if k not in ("optima", "fits")}
    out["optima"] = {f"{arm} @ {b:.6g}": o for (arm, b), o in result.get("optima", {}).items()}
    out["fits"] = {arm: fit(f) for arm, f in result.get("fits", {}).items()}
    for key in ("gap", "multiplier"):
        out[key] = {arm: {f"{b:.6g}": v for b, v in d.items()} for arm, d in result.get(key, {}).items()}
    if result.get("intervals"):
        iv = dict(result["intervals"])
        for key in ("gap", "multiplier"):
            iv[key] = {arm: {f"{b:.6g}": v for b, v in d.items()} for arm, d in iv[key].items()}
        out["intervals"] = iv
    return out
