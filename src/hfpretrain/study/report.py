"""The written report of a study: spec, results table, fits, the verdict at the largest compute,
the plot, and the caveats. Markdown, readable as-is or rendered."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import yaml

from hfpretrain.study.analysis import is_check, pair_key
from hfpretrain.study.grid import StudySpec, check_settings, study_folder, trained_by


def _num(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e6):
        return f"{int(x):,}"
    return f"{x:.{digits}g}"


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def measure(rows: list[dict]) -> str:
    """What a study compares: bits per byte when every run has it (comparable across tokenizers: a vocabulary
    ablation), else nats per token."""
    return "val_bpb" if rows and all(r.get("val_bpb") is not None for r in rows) else "val_loss"


def verdict(rows: list[dict], fits: dict[str, dict], y: str = "val_loss") -> dict:
    """Which arm wins at the largest compute, and by how much.

    ``predicted``: each fitted arm's L(C_max), C_max = the largest training FLOPs of the study.
    ``observed``: each arm's best final loss among its runs of the largest budget (same budgets
    in every arm, so this compares like with like).
    """
    out: dict = {"arms": list(fits)}
    measured = [r for r in rows if r.get(y) is not None]
    if not measured:
        return out
    c_max = max(r["flops"] for r in measured)
    predicted = {arm: float(f["fit"].predict(c_max)) for arm, f in fits.items() if f["fit"] is not None}
    top = max(r["budget"] for r in measured)
    observed = {}
    for arm in fits:
        losses = [r[y] for r in measured if r["arm"] == arm and r["budget"] == top]
        if losses:
            observed[arm] = min(losses)
    out.update(c_max=c_max, top_budget=top)
    for key, table in (("predicted", predicted), ("observed", observed)):
        if not table:
            continue
        ranked = sorted(table.items(), key=lambda kv: kv[1])
        entry = {"losses": table, "winner": ranked[0][0], "loss": ranked[0][1]}
        if len(ranked) > 1:
            entry["runner_up"] = ranked[1][0]
            entry["margin"] = ranked[1][1] - ranked[0][1]
            entry["relative"] = entry["margin"] / ranked[1][1]
        out[key] = entry
    return out


def _link(path, base: Path) -> str:
    """A markdown link target: relative to the report's folder when the file is inside it."""
    path = Path(path)
    try:
        path = path.relative_to(base)
    except ValueError:
        pass
    return path.as_posix()


def _ci(iv) -> str:
    return f" [{iv[0]:+.4f}, {iv[1]:+.4f}]" if iv else ""


def run_table_lines(rows: list[dict], max_passes: float | None = None) -> list[str]:
    """Every run with what it was: size, tokens, hyper-parameters, hardware, time and result."""

    def val(r, k, digits=4):
        return _num(r.get(k), digits) if r.get(k) is not None else "–"

    def minutes(r, key):
        if not r.get(key):
            return "–"
        return f"{r[key] / 60:.1f}" + ("+" if key == "wall_time_s" and r.get("wall_time_partial") else "")

    def passes(r):
        text = val(r, "passes", 3)
        return f"**{text}**" if max_passes is not None and (r.get("passes") or 0) > max_passes else text

    table = [
        [
            r["run"],
            r.get("seed") if r.get("seed") is not None else "–",
            val(r, "params"),
            val(r, "ratio_params"),
            f"{r.get('hidden_size') or '–'}×{r.get('layers') or '–'}",
            val(r, "vocab_size"),
            val(r, "tokens"),
            (f"{r['tokens'] / r['ratio_params']:.3g}" if r.get("ratio_params") else "–"),
            f"{r['flops']:.3e}",
            val(r, "learning_rate", 3),
            val(r, "batch_tokens"),
            val(r, "warmup_steps"),
            r.get("schedule") or "–",
            passes(r),
            r.get("device") or "–",
            minutes(r, "wall_time_s"),
            minutes(r, "wall_time_all_s"),
            r.get("processes") or "–",
            val(r, "val_loss"),
            val(r, "val_bpb"),
        ]
        for r in rows
    ]
    header = [
        "run",
        "seed",
        "params",
        "N (ratio)",
        "width×layers",
        "vocab",
        "tokens",
        "D/N",
        "train FLOPs",
        "LR",
        "batch tokens",
        "warmup",
        "schedule",
        "passes",
        "device",
        "minutes",
        "minutes (all attempts)",
        "processes",
        "val nats",
        "val bpb",
    ]
    over = [r["run"] for r in rows if max_passes is not None and (r.get("passes") or 0) > max_passes]
    return [
        "## Runs",
        "",
        "N (ratio) = non-embedding parameters + the LM head (the N of tokens per parameter, D/N); passes = "
        "reads of the training data"
        + (f" (bold: more than rules.max_passes = {max_passes:g})" if over else "")
        + "; minutes = training wall time of the processes behind the result, summed over resumes (evaluation "
        "and checkpoints excluded; + : a process was killed before its summary, its part is a lower bound); "
        "minutes (all attempts) adds attempts restarted from scratch; processes = the run's processes "
        "(> 1: preempted and resumed, or restarted).",
        "",
        _table(header, table),
        "",
    ]


def _ci_plain(iv) -> str:
    return _ci(iv).replace("+", "")


def _gap_cells(b, gap, ci, sigma) -> list[str]:
    return [f"{b:.3g}", f"{gap:+.4f}{_ci(ci)}", f"{sigma:.4f}" if sigma is not None else "–"]


def _gap_row(b, gap, ci, sigma, mult, mult_ci) -> list[str]:
    mult_cell = f"{mult:.3g}" + (f" [{mult_ci[0]:.3g}, {mult_ci[1]:.3g}]" if mult_ci else "")
    return _gap_cells(b, gap, ci, sigma) + [mult_cell]


def _sigma(result: dict, b: float):
    return (((result.get("budget_noise") or {}).get("budgets") or {}).get(b) or {}).get("sigma")


NOISE_RULE_TEXT = {
    "per_budget": "σ of each budget, pooled from that budget's seed replicates (a budget without replicates takes "
    "the σ of every replicate)",
    "pooled": "one σ, pooled from every seed replicate of every budget",
    "fixed": "the σ per budget written in the spec",
}


def noise_lines(result: dict, unit: str) -> list[str]:
    """The noise floor per budget, by the spec's rule, and whether that rule was written or the default."""
    bn = result.get("budget_noise") or {}
    if not bn:
        return []
    rule = NOISE_RULE_TEXT.get(bn["rule"], bn["rule"])
    lines = [
        f"- Noise rule: {rule}; every replicate counts (none dropped after the runs)."
        + (
            " The spec's decision rule names no noise floor (`decision.noise`): this is the default, the only rule "
            "before `decision.noise` existed (2026-11-28)."
            if bn.get("default")
            else " Named in the spec's decision rule (`decision.noise`)."
        )
    ]
    per = [
        f"{b:.3g}: σ = {v['sigma']:.4f}"
        + (f" ({v['cells']} cells)" if v.get("cells") else "")
        + ("" if v["source"] in ("seeds of this budget", "spec") else f" ({v['source']})")
        for b, v in bn["budgets"].items()
        if v.get("sigma") is not None
    ]
    if per:
        lines.append(f"- Noise floor per budget ({unit}): " + "; ".join(per) + ".")
    return lines


def _fit_rows(fits: dict, result: dict, figures: dict, iv: dict) -> list[list[str]]:
    rows = []
    for arm, f in fits.items():
        if f is None:
            rows.append([arm, "–", "–", "–", "–", "–"])
            continue
        bt = (figures["backtest"].get("arms") or {}).get(arm)
        rows.append(
            [
                arm,
                f"{f.alpha:.4f}{_ci_plain((iv.get('alpha') or {}).get(arm))}",
                f"{f.E:.4f}{_ci_plain((iv.get('E') or {}).get(arm))}",
                f"{f.A:.4g}",
                f"{figures['extrapolated'][arm]:.4f}{_ci_plain((iv.get('extrapolated') or {}).get(arm))}",
                f"{bt['error']:+.4f}" if bt else "–",
            ]
        )
    return rows


def _curve_misses(result: dict) -> dict[tuple[str, float], tuple[float, float | None]]:
    """(arm, budget) -> (optimum − that arm's shared-E curve there, the budget's σ), for every arm with a fit."""
    out = {}
    for (arm, b), o in result["optima"].items():
        fit = result["fits"].get(arm)
        if fit is not None:
            out[arm, b] = (o["loss_opt"] - float(fit.predict(o["flops"])), _sigma(result, b))
    return out


def flagged_arms(result: dict, arms, budget) -> list[str]:
    """The arms among ``arms`` whose optimum at ``budget`` fails the fit check (``result["flagged"]``): every figure
    read at that budget says so, not only the optima table."""
    return [
        f["arm"]
        for f in result.get("flagged") or []
        if f["arm"] in arms and math.isclose(f["budget"], float(budget), rel_tol=1e-9)
    ]


def _flag_note(result: dict, arms, budget) -> str:
    flagged = flagged_arms(result, arms, budget)
    return f" (fit check flagged: {', '.join(flagged)})" if flagged else ""


def _fit_check_cell(result: dict, arms, budget) -> str:
    flagged = flagged_arms(result, arms, budget)
    return f"**flagged**: {', '.join(flagged)}" if flagged else "passes"


def curve_check_lines(result: dict) -> list[str]:
    """How far the shared-E curves pass from the optima they are fitted to, per budget, against the budget's σ. The
    multipliers are read on these curves, so a multiplier at a budget whose optimum the curve misses by more than σ
    carries that miss; the gap rows read the optima themselves."""
    budgets = sorted({b for _, b in result["optima"]})
    curve = _curve_misses(result)
    parts, flagged = [], 0
    for arm, fit in result["fits"].items():
        if fit is None:
            continue
        misses = []
        for b in budgets:
            if (arm, b) not in curve:
                misses.append("–")
                continue
            miss, sigma = curve[arm, b]
            beyond = sigma is not None and abs(miss) > sigma
            flagged += beyond
            misses.append(f"{miss:+.3f}{'*' if beyond else ''}")
        parts.append(f"{arm} {', '.join(misses)}")
    if not parts:
        return []
    where = ", ".join(f"{b:.2g}" for b in budgets)
    return [
        f"Curve check (optimum − shared-E curve at {where}; * beyond the budget's σ): "
        + "; ".join(parts)
        + "."
        + (
            f" {flagged} optima lie further from their curve than the budget's noise: a multiplier read there "
            "carries the curve's miss (the gaps below are the optima's own)."
            if flagged
            else " Every optimum within its budget's noise of its curve."
        ),
        "",
    ]


def isoflop_lines(result: dict, plot_png: str | None, verdicts: list[dict] | None = None) -> list[str]:
    """The IsoFLOP analysis: optima per budget, both fit models, the comparison of arms, and a discussion written
    from ``verdicts`` (the Decision's; None: the default rule's)."""
    unit = "bits/byte" if result["y"] == "val_bpb" else "nats/token"
    iv = result.get("intervals") or {}
    lines = [
        "## IsoFLOP analysis",
        "",
        f"Loss = final validation {unit}. Per budget and arm, the sizes' losses are averaged over seeds; a cell "
        "is *bracketed* only when its best measured size is an inner one, and its optimum is then the minimum "
        "of the parabola in ln N through that size and its two neighbours. A cell whose best size is at the "
        "edge of its sizes is *not bracketed*: its optimum is only bounded (the best measured mean). Fit check: "
        "the parabola through all of a cell's sizes, whose largest miss of a size's mean is compared with the "
        "budget's noise floor. Intervals are 95% parametric-bootstrap "
        f"intervals from each budget's seed noise floor ({result.get('n_boot', 0)} draws).",
        "",
    ]
    noise, outliers = result.get("noise"), result.get("outliers") or {}
    lines.append(
        f"- Seed noise pooled over every budget, for reference: σ = {noise['sigma']:.4f} {unit} "
        f"({noise['cells']} cells, {noise['runs']} runs)."
        if noise
        else "- Noise floor: unknown (no cell was run with several seeds): differences get no interval."
    )
    lines += noise_lines(result, unit)
    if outliers.get("runs"):
        named = ", ".join(f"{name} ({d:+.3f})" for name, d in outliers["runs"].items())
        lines.append(
            f"- Seed pairs that disagree (a run more than {outliers['k']:g} robust σ = "
            f"{outliers['k'] * outliers['robust_sigma']:.3f} from its siblings' mean): {named}. Named, not "
            "dropped: they stay in the noise floor and in their cell means."
        )
    if result["edge"]:
        lines.append(
            f"- **Not bracketed** (best measured size at the edge of the grid): {', '.join(result['edge'])}. "
            "Those optima are bounds, not measurements."
        )
    else:
        lines.append("- Every cell bracketed (its best measured size an inner one).")
    flagged = result.get("flagged") or []
    if flagged:
        lines.append(
            "- **Fit check failed** (the parabola through all sizes misses a size's mean by more than the "
            "budget's noise floor σ: the loss is not parabolic in ln N over the window, so the optimum "
            "above comes from the three sizes around the best only): "
            + ", ".join(f"{f['cell']} (miss {f['misfit']:.3f} > σ {f['sigma']:.3f})" for f in flagged)
            + "."
        )
    lines.append("")
    table = []
    for (arm, b), o in sorted(result["optima"].items(), key=lambda kv: (kv[0][1], kv[0][0])):
        flag = any(f["arm"] == arm and f["budget"] == b for f in flagged)
        misfit = "–" if o.get("misfit") is None else f"{o['misfit']:.4f}" + (" **flagged**" if flag else "")
        best = o.get("best_measured") or {}
        table.append(
            [
                f"{b:.3g}",
                arm,
                f"{best.get('n', o['n_opt']):.3g}",
                f"{best.get('loss', o['loss_opt']):.4f}",
                f"{o['n_opt']:.3g}" if o["bracketed"] else "–",
                f"{o['loss_opt']:.4f}" if o["bracketed"] else f"≤ {o['loss_opt']:.4f} (bound)",
                "yes" if o["bracketed"] else "**no**",
                str(o["points"]),
                misfit,
            ]
        )
    lines += [
        _table(
            [
                "budget (FLOPs)",
                "arm",
                "best measured N",
                "its mean loss",
                "optimum N",
                "optimum loss",
                "bracketed",
                "sizes in the fit",
                "all-size parabola's largest miss",
            ],
            table,
        ),
        "",
    ]

    lines += nd_lines(result, unit)
    sep = (result.get("sensitivity") or {}).get("separate")
    why = (
        "both are scored in {unit} of the same validation text, so the irreducible part belongs to the text, "
        "not to the tokenizer"
        if result.get("shared_unit", True)
        else "**but here the arms have other vocabularies and not every run has bits per byte: their nats per token "
        "are not one unit, so neither this fit nor the gaps below compare like with like** (data manifests "
        "with the validation text's bytes give bits per byte)"
    ).format(unit=unit)
    on_frontier = any(v.get("fit") == "frontier" for v in verdicts or [])
    readers = (
        "the comparisons below read their compute multipliers (the decision rule reads the L(N, D) frontier "
        "instead, `decision.fit`; these curves are its check)"
        if on_frontier
        else "the comparisons below and a decision rule read their compute multipliers"
    )
    lines += [
        "### Power laws on the per-budget optima (the model of the comparisons' multipliers)",
        "",
        "L*_arm(C) = E + A_arm·C^(−α_arm) on the per-budget optima (a bound where a cell is not bracketed). "
        f"**Main model, on which {readers}: one E "
        f"shared by the arms** ({why}). Sensitivity check: a separate E per arm. Extrapolated to "
        f"C = {result['extrapolate_to']:.3g} (10× the largest budget); back-test error = the model fitted "
        "without the largest budget, minus that budget's optimum.",
        "",
        "Shared E (main):",
        "",
        _table(["arm", "α", "E", "A", "L* at 10×", "back-test error"], _fit_rows(result["fits"], result, result, iv)),
        "",
        *curve_check_lines(result),
    ]
    if sep:
        lines += [
            "Separate E per arm (sensitivity):",
            "",
            _table(
                ["arm", "α", "E", "A", "L* at 10×", "back-test error"],
                _fit_rows(sep["fits"], result, sep, sep.get("intervals") or {}),
            ),
            "",
        ]
    base = result["baseline"]
    for arm in result["arms"][1:]:
        rows_ = [
            _gap_row(
                b,
                gap,
                ((iv.get("gap") or {}).get(arm) or {}).get(b),
                _sigma(result, b),
                result["multiplier"][arm][b],
                ((iv.get("multiplier") or {}).get(arm) or {}).get(b),
            )
            for b, gap in result["gap"][arm].items()
        ]
        rows_ = [row + [_fit_check_cell(result, (arm, base), b)] for row, b in zip(rows_, result["gap"][arm])]
        lines += [
            f"### {arm} vs {base}",
            "",
            f"Gap = best loss of {arm} − best loss of {base} (negative: {arm} is better), with its interval from "
            "the budget's noise floor σ (beside it); compute multiplier (shared-E fit) = the compute "
            f"{base} needs to reach {arm}'s loss, ÷ C (> 1: {arm} is worth that much more compute).",
            "",
            _table(["budget (FLOPs)", "gap", "σ of the budget", "compute multiplier", "fit check"], rows_),
            "",
        ]
        brow = []
        for label, fig, ivm in (
            ("shared E (main)", result, iv),
            ("separate E", sep, (sep or {}).get("intervals") or {}),
        ):
            if not fig:
                continue
            bt = (fig["backtest"].get("gap") or {}).get(arm)
            ext = fig["extrapolated"][arm] - fig["extrapolated"][base]
            cross = fig["crossover"].get(arm) or []
            brow.append(
                [
                    label,
                    f"{bt['predicted']:+.4f}{_ci((ivm.get('backtest_gap') or {}).get(arm))}" if bt else "–",
                    f"{bt['observed']:+.4f}" if bt else "–",
                    f"{bt['error']:+.4f}" if bt else "–",
                    f"{ext:+.4f}{_ci((ivm.get('gap_extrapolated') or {}).get(arm))}"
                    if math.isfinite(ext)
                    else "– (no fit)",
                    ", ".join(f"{c:.2g}" for c in cross) or ("none" if math.isfinite(ext) else "–"),
                ]
            )
        held = next(iter((result["backtest"].get("gap") or {}).values()), {}).get("budget")
        lines += [
            f"Back-test of the gap: each model fitted on the budgets below {held:.3g} predicts the gap at "
            f"{held:.3g}; the gap at 10× and where the fitted curves cross (searched from the smallest budget, "
            f"{result['crossover_range'][0]:.3g}, to 10× the largest, {result['crossover_range'][1]:.3g}: never "
            "below the data)."
            if held
            else "Gap at 10× and crossings (no back-test: fewer than 3 budgets).",
            "",
            _table(
                ["model", "predicted gap at the top budget", "measured", "error", "gap at 10×", "crossing (FLOPs)"],
                brow,
            ),
            "",
        ]
    lines += _pair_lines(result, iv, sep)
    lines += ["## Discussion", "", *discussion_lines(result, verdicts), ""]
    if plot_png:
        lines += [f"![IsoFLOP curves and per-budget optima]({plot_png})", ""]
    return lines


def _ivs(ci) -> str:
    return f" [{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else ""


def nd_lines(result: dict, unit: str) -> list[str]:
    """The frontier: L(N, D) per arm on every run, its frontier beside the parabola optima (the check), the
    gaps and multipliers on it, and its extrapolation, labelled as such, beside its back-test."""
    nd = result.get("nd") or {}
    if not nd or not nd.get("fits"):
        return []
    budgets = [k for k in nd["flops"] if k != "target"]
    bt = nd.get("backtest") or {}
    sig = {f"{b:.6g}": v.get("sigma") for b, v in ((result.get("budget_noise") or {}).get("budgets") or {}).items()}
    lines = [
        "### The frontier: L(N, D) per arm on every run",
        "",
        "L(N, D) = E + A·N^(−α) + B·D^(−β) (N: non-embedding parameters + LM head, D: training tokens), fitted "
        "per arm on every run of the grid (least squares of log L, scipy); its compute-optimal frontier L*(C) "
        "= min over N of L(N, C / FLOPs-per-token(N)). RMSE: its miss of the runs, to set beside the noise "
        "floor; back-test: refitted without the largest budget's runs, it predicts them."
        + (
            ""
            if bt
            else " **No back-test**: without the largest budget the runs are of fewer than two "
            "budgets, where N and D are tied and the fit has nothing to separate them."
        ),
        "",
    ]
    table = []
    for arm, f in nd["fits"].items():
        if f is None:
            table.append([arm, "–", "–", "–", "–", "–", "–", "–", "–"])
            continue
        b_arm = (bt.get("arms") or {}).get(arm)
        table.append(
            [
                arm,
                f"{f['E']:.4f}",
                f"{f['A']:.4g}",
                f"{f['alpha']:.4f}",
                f"{f['B']:.4g}",
                f"{f['beta']:.4f}",
                str(f["n"]),
                f"{f['rmse']:.4f}",
                f"{b_arm['runs_rmse']:.4f}" if b_arm else "–",
            ]
        )
    lines += [
        _table(["arm", "E", "A", "α", "B", "β", "runs", f"RMSE ({unit})", "back-test RMSE on the held runs"], table),
        "",
    ]
    check = []
    for arm, per in nd.get("check", {}).items():
        for b, c in per.items():
            check.append(
                [
                    b,
                    arm,
                    f"{c['frontier']:.4f}",
                    f"{c['parabola']:.4f}" + ("" if c["bracketed"] else " (bound)"),
                    f"{c['difference']:+.4f}",
                    f"{sig[b]:.4f}" if sig.get(b) is not None else "–",
                ]
            )
    # each cell against its own budget's noise floor; a bound (cell not bracketed) is only contradicted by a
    # frontier above it: its true optimum lies lower
    misses = [
        f"{arm} @ {float(b):.3g} ({c['difference']:+.4f}, σ {sig[b]:.4f})"
        for arm, per in nd.get("check", {}).items()
        for b, c in per.items()
        if (c["bracketed"] or c["difference"] < 0) and sig.get(b) is not None and abs(c["difference"]) > sig[b]
    ]
    lines += [
        "Check, per budget: the frontier against the parabola optimum of the cell (difference = parabola − frontier).",
        "",
        _table(
            ["budget (FLOPs)", "arm", "L(N, D) frontier", "parabola optimum", "difference", "σ of the budget"],
            sorted(check, key=lambda r: (float(r[0]), r[1])),
        ),
        "",
    ]
    if misses:
        lines += [
            f"The frontier misses the parabola optimum by more than that budget's noise floor ({unit}) at "
            f"{', '.join(misses)}: the L(N, D) form does not describe these runs to within their noise there, and "
            "every figure drawn from it below (above all beyond the measured budgets) carries that.",
            "",
        ]
    iv = nd.get("intervals") or {}
    target = nd["flops"]["target"]
    rows = []
    for key, gaps in nd.get("pairs", {}).items():
        ci = (iv.get("pairs") or {}).get(key) or {}
        g_bt = (bt.get("gap") or {}).get(key)
        rows.append(
            [
                key,
                *[f"{gaps[b]:+.4f}{_ivs(ci.get(b))}" for b in budgets],
                f"{gaps['target']:+.4f}{_ivs(ci.get('target'))}",
                f"{g_bt['error']:+.4f}" if g_bt else "– (no back-test)",
            ]
        )
    for arm, mult in nd.get("multiplier", {}).items():
        ci = (iv.get("multiplier") or {}).get(arm) or {}

        def m(k):
            c = ci.get(k)
            # an interval wider than x10 (the baseline's frontier nearly flat there) gives no multiplier to read
            wide = k == "target" and c and c[0] > 0 and c[1] / c[0] > 10
            return (
                f"{mult[k]:.3g}" + (f" [{c[0]:.3g}, {c[1]:.3g}]" if c else "") + (" (not determined)" if wide else "")
            )

        rows.append([f"compute multiplier of {arm} vs {result['baseline']}", *[m(b) for b in budgets], m("target"), ""])
    if rows:
        lines += [
            f"Gaps on the frontier (arm − other, {unit}; 95% intervals from {iv.get('n_boot', 0)} bootstrap "
            "draws of the runs with their budget's σ: they cover seed noise, not a wrong form), and the "
            f"**extrapolation to {target:.3g}** (10× the largest budget: no run there) beside the back-test "
            "error of the gap at the largest budget (the fit without it, minus the measured gap of the optima).",
            "",
            _table(
                [
                    "comparison",
                    *[f"{float(b):.3g}" for b in budgets],
                    f"{target:.3g} (extrapolation)",
                    "back-test error of the gap",
                ],
                rows,
            ),
            "",
        ]
    return lines


def _pair_lines(result: dict, iv: dict, sep: dict | None) -> list[str]:
    """The comparisons between two arms that are not the baseline (a vocabulary study's size effect: 8k vs 32k,
    both trained on the corpus), per budget, as the sections above give each arm against the baseline."""
    lines = []
    sep_iv = ((sep or {}).get("intervals") or {}).get("pairs") or {}
    for key, p in result.get("pairs", {}).items():
        arm, other = key.split(" vs ")
        if result["baseline"] in (arm, other):
            continue
        pair_iv = (iv.get("pairs") or {}).get(key) or {}
        gap_ci = pair_iv.get("gap") or {}
        rows_ = [
            _gap_cells(b, g, gap_ci.get(b), _sigma(result, b)) + [_fit_check_cell(result, (arm, other), b)]
            for b, g in p["gap"].items()
        ]
        tenx = []
        for label, fig, ci in (
            ("shared E", p, pair_iv.get("gap_extrapolated")),
            ("separate E", ((sep or {}).get("pairs") or {}).get(key), (sep_iv.get(key) or {}).get("gap_extrapolated")),
        ):
            if fig and math.isfinite(fig.get("gap_extrapolated", float("nan"))):
                tenx.append(f"{label} {fig['gap_extrapolated']:+.4f}{_ci(ci)}")
        cross = ", ".join(f"{c:.2g}" for c in p.get("crossover") or []) or "none"
        lines += [
            f"### {key}",
            "",
            f"Gap = best loss of {arm} − best loss of {other} (negative: {arm} is better), with its interval "
            "from the budget's noise floor σ (beside it).",
            "",
            _table(["budget (FLOPs)", "gap", "σ of the budget", "fit check"], rows_),
            "",
            f"Gap at 10× the largest budget: {'; '.join(tenx) or '– (no fit)'}; the shared-E curves cross at: {cross}.",
            "",
        ]
    return lines


VERDICT_MEANING = {
    "incomplete": "no verdict at this budget: a cell is not run, not bracketed (its optimum is a bound) or short of "
    "a planned seed or size; nothing is recommended at or beyond it (move the sizes, or run what is missing, and "
    "run again)",
    "better, also at 10×": "adopt, also for larger models (the extrapolation's interval is below 0 and the separate "
    "fits agree)",
    "better at the measured budgets": "adopt at this scale; no recommendation beyond the largest budget",
    "worse": "do not adopt: the measured interval is above the margin",
    "no practical difference": "the measured interval lies within the margin",
    "undecided": "the measured interval straddles the margin: more seeds or a larger budget",
    "recommended": "adopt at this budget (multiplier above the rule's minimum, its interval above 1)",
    "no gain": "the multiplier's interval holds 1: no gain shown at this budget",
}


FIT_TEXT = {"frontier": "the baseline's L(N, D) frontier", "optima": "the shared-E power law on the optima"}
# the multiplier checks' name of the curve each fit reads (analysis.multiplier_checks' ``curves``)
CHECK_CURVE = {"frontier": "L(N, D) frontier", "optima": "shared E (the main model)"}


def verdict_sentence(v: dict, unit: str) -> str:
    """One verdict of ``analysis.decide`` in words: the Decision and the Discussion both print this line, so the
    two cannot say different things."""
    figure = ""
    if v.get("multiplier") is not None:
        ci = v.get("multiplier_interval")
        figure = (
            f" (compute multiplier {v['multiplier']:.3g}"
            + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")
            + (
                f", seed noise only, on {FIT_TEXT.get(v.get('fit'), 'the fit')}"
                + (f" ({v['curve_misses']})" if v.get("curve_misses") else "")
                + f"; {v['measured']}"
                if v.get("measured")
                else ""
            )
            + ")"
        )
    elif v.get("gap") is not None:
        figure = f" (gap {v['gap']:+.4f}{_ci(v.get('gap_interval'))} {unit})"
    elif v["verdict"] == "incomplete":
        figure = f" ({v['why']})"
    return (
        f"- **{v['name']}** ({v['arm']} vs {v['baseline']}) at {v['budget']:.3g}{figure}: "
        f"**{v['verdict']}**: {VERDICT_MEANING.get(v['verdict'], '')}."
    )


def study_verdicts(
    spec: StudySpec | None, result: dict | None, rows: list[dict] | None = None
) -> tuple[dict, list[dict]]:
    """(rule, verdicts): the spec's decision rule, or the default one, applied once; the report's Decision and
    Discussion are both written from these verdicts. With ``rows``, a size the spec adds to a decision cell
    (``isoflop.extra``) must have finished in every planned seed before the cell gives a verdict."""
    from hfpretrain.study.analysis import decide, default_decision
    from hfpretrain.study.design import extra_sizes

    if not result or not result.get("optima"):
        return (spec.decision if spec else {}) or {}, []
    rule = (spec.decision if spec else None) or default_decision(result)

    def unrun(arm: str, budget: float) -> list[str]:
        done = {
            (r.get("size"), r.get("seed"))
            for r in rows or []
            if r.get("arm") == arm
            and r.get("val_loss") is not None
            and r.get("budget") is not None
            and math.isclose(r["budget"], budget, rel_tol=1e-9)
        }
        return [  # a study without seeds (seed None) plans one run per size, whatever seed its recipe has
            f"{arm}/{size} @ {budget:.3g}" + (f" seed {seed}" if seed is not None else "")
            for size in extra_sizes(spec.isoflop, arm, budget)
            for seed in spec.seeds_for(budget)
            if not any(s == size and seed in (None, sd) for s, sd in done)
        ]

    planned = unrun if spec is not None and spec.isoflop is not None and rows is not None else None
    verdicts = decide(result, rule, spec.seeds_for if spec else None, planned)
    for v in verdicts:  # the multiplier checks of the same comparison answer thresholds without a fit: said with it
        checks = sorted(
            (
                c
                for c in result.get("multiplier_checks") or []
                if c["arm"] == v["arm"] and c["baseline"] == v["baseline"] and c.get("interval")
            ),
            key=lambda c: c["factor"],
        )
        if v.get("multiplier") is not None and checks:
            v["measured"] = "without a fit, " + "; ".join(
                f"{c['baseline']} trained on {c['factor']:.2g}× the budget ends {c['gap']:+.4f} "
                f"[{c['interval'][0]:+.4f}, {c['interval'][1]:+.4f}] against {v['arm']}'s optimum: {c['reading']}"
                f"{interim(c)}"
                for c in checks
            )
            # the curve the figure is read on, against the checks' measured optima (out of sample)
            misses = [
                (c["budget"], m["miss"] / c["sigma"])
                for c in checks
                for m in c.get("curves") or []
                if m["fit"] == CHECK_CURVE.get(v.get("fit")) and c.get("sigma")
            ]
            if misses:
                v["curve_misses"] = "its curve against the checks' measured optima: " + ", ".join(
                    f"{z:+.1f}σ at {b:.3g}" for b, z in misses
                )
    return rule, verdicts


def _ci_short(ci) -> str:
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


def trend_sentence(result: dict, arm: str, n_budgets: int, bound: list[float]) -> str:
    """The multiplier's trend with compute, never without what it rests on: its bootstrap interval and the slope
    at other floors (the ends of E's interval, no floor, the baseline's own floor of the separate-E fit). A direction is
    claimed only when the interval and every floor reading agree on it; otherwise the sentence says it is not
    established. Without an interval (no seed replicates) no direction is claimed."""
    base = result["baseline"]
    per_decade = 10 ** result["trend"][arm]
    ci = ((result.get("intervals") or {}).get("trend") or {}).get(arm)
    ci = [10**v for v in ci] if ci else None
    fit = (result.get("fits") or {}).get(base)
    floors = [(f["E"], 10 ** f["trend"]) for f in (result.get("trend_floor") or {}).get(arm) or []]
    sep = (result.get("sensitivity") or {}).get("separate") or {}
    sep_trend, sep_fit = (sep.get("trend") or {}).get(arm), (sep.get("fits") or {}).get(base)
    readings = [per_decade, *(v for _, v in floors)]
    caveat = _curve_caveat(result, (base, arm))
    said = []
    if fit is not None and fit.fixed_E:
        said.append(f"E is held at {fit.E:.3g} (too few budgets to fit it), so no other floor is tried")
    elif floors:
        ends, bare = [(e, v) for e, v in floors if e != 0.0], [v for e, v in floors if e == 0.0]
        if ends:
            said.append(
                " and ".join(f"×{v:.2f} at E = {e:.3f}" for e, v in ends)
                + f" ({base}'s curve refitted at the ends of E's interval)"
            )
        if bare:
            said.append(f"×{bare[0]:.2f} with no floor (E = 0, a pure power law)")
    if sep_trend is not None and sep_fit is not None and not sep_fit.fixed_E:
        readings.append(10**sep_trend)
        said.append(f"×{10**sep_trend:.2f} at E = {sep_fit.E:.3f} ({base}'s own floor, the separate-E fit)")
    lo, hi = min(readings + (ci or [])), max(readings + (ci or []))
    if ci is None:
        verdict = "no interval (no seed replicates): no direction is claimed"
    elif lo > 1:
        verdict = "it rises, in the interval and at every floor above"
    elif hi < 1:
        verdict = "it falls, in the interval and at every floor above"
    elif 0.95 <= lo and hi <= 1.05:
        verdict = "it stays within ±5% per decade, in the interval and at every floor above"
    else:
        verdict = "its direction is not established: the interval or a floor reading is on the other side of ×1"
    flagged = [b for b in result["multiplier"][arm] if flagged_arms(result, (arm, base), b)]
    if caveat and not verdict.startswith(("its direction", "no interval")):
        # a direction read on curves that miss their own optima beyond noise is the curves', not the runs'
        verdict = f"its direction is not established: on those curves {verdict}, but they miss their optima"
    elif caveat:
        verdict = f"on those curves {verdict}"
    return (
        f"- Its compute multiplier (shared-E fit on the per-budget optima) at the {n_budgets} measured budgets: "
        f"{', '.join(f'{m:.2f}' for m in result['multiplier'][arm].values())}"
        + (f" (at {', '.join(f'{b:.2g}' for b in bound)} a bound)" if bound else "")
        + (
            f" (at {', '.join(f'{float(b):.2g}' for b in flagged)} through optima the fit check flags)"
            if flagged
            else ""
        )
        + f"; a line in ln C through them: ×{per_decade:.2f} per decade"
        + (f" [×{ci[0]:.2f}, ×{ci[1]:.2f}] (seed noise, E refitted in each draw)" if ci else "")
        + (". The slope depends on the floor E, which the budgets do not pin down: " + "; ".join(said) if said else "")
        + (f". {caveat}" if caveat else "")
        + f". So {verdict}"
        + (" (two points: a slope and no check of it)" if n_budgets < 3 else "")
        + "; other fits of the floor than these are not covered."
    )


def _curve_caveat(result: dict, arms: tuple[str, ...]) -> str:
    """The trend is read on the shared-E curves: where they miss the optima of ``arms`` by more than twice the
    budget's σ (the curve check stars one σ; a slope through 8 optima meets a few of those by chance), the sentence
    says so, with the largest miss in σ."""
    mine = [(abs(miss), sigma) for (arm, _), (miss, sigma) in _curve_misses(result).items() if arm in arms]
    total, beyond = len(mine), [miss / sigma for miss, sigma in mine if sigma and miss > 2 * sigma]
    if not beyond:
        return ""
    return (
        f"The curves it is read on miss {len(beyond)} of these {total} optima by more than twice their budget's σ (at "
        f"most {max(beyond):.2f}σ; the report's curve check)"
    )


def discussion_lines(result: dict, verdicts: list[dict] | None = None) -> list[str]:
    """The verdicts (the same objects as the Decision's, see ``verdict_sentence``), then what the numbers describe:
    gaps per budget, the multiplier across the measured budgets, and every figure beyond them labelled an
    extrapolation with its back-test; none of those recommends anything."""
    unit = "bits/byte" if result["y"] == "val_bpb" else "nats"
    iv = result.get("intervals") or {}
    sep = (result.get("sensitivity") or {}).get("separate")
    base, out = result["baseline"], []
    if verdicts is None:
        verdicts = study_verdicts(None, result)[1]
    if len(result["arms"]) < 2:
        f = result["fits"].get(base)
        if f is not None:
            out.append(f"- One arm: the best loss falls as C^(−{f.alpha:.3f}) towards E = {f.E:.3f} {unit}.")
        return out
    out += [
        "The decision (the verdicts of the Decision section, word for word):",
        "",
        *[verdict_sentence(v, unit) for v in verdicts],
        "",
        "What the numbers describe (no recommendation):",
        "",
    ]

    def word(g, ci):
        if ci is None:
            return f"{'lower' if g < 0 else 'higher'} by {abs(g):.4f} (no interval)"
        if ci[1] < 0:
            return f"lower by {-g:.4f} (interval below 0)"
        if ci[0] > 0:
            return f"higher by {g:.4f} (interval above 0)"
        return f"within noise ({g:+.4f})"

    edge = set(result.get("edge") or [])
    for arm in result["arms"][1:]:
        gaps, cis = result["gap"][arm], ((iv.get("gap") or {}).get(arm) or {})
        bound = [b for b in gaps if f"{arm} @ {b:.3g}" in edge or f"{base} @ {b:.3g}" in edge]
        said = [
            f"{word(g, cis.get(b))} at {b:.2g}"
            + (" (a bound: not bracketed)" if b in bound else "")
            + _flag_note(result, (arm, base), b)
            for b, g in gaps.items()
        ]
        out.append(f"- {arm} − {base}, best loss per budget: " + "; ".join(said) + ".")
        if any(v.get("fit") == "frontier" and v["arm"] == arm for v in verdicts):
            # the rule reads the L(N, D) fit: its multipliers at every budget first, then the power law's trend
            at_opt = ((result.get("nd") or {}).get("multiplier_at_optimum") or {}).get(arm) or {}
            nd_iv = (((result.get("nd") or {}).get("intervals") or {}).get("multiplier_at_optimum") or {}).get(arm, {})
            out.append(
                f"- Its compute multiplier on {base}'s L(N, D) fit (the rule's), at each budget's measured optimum: "
                + "; ".join(
                    f"{m:.2f}{_ci_short(nd_iv.get(b))} at {float(b):.2g}{_flag_note(result, (arm, base), b)}"
                    for b, m in at_opt.items()
                )
                + "."
            )
        if result["trend"].get(arm) is not None:
            out.append(trend_sentence(result, arm, len(gaps), bound))
        gap10 = result["extrapolated"][arm] - result["extrapolated"][base]
        if not math.isfinite(gap10):  # an arm with fewer than 2 budgets has no fit: nothing to extrapolate
            out.append(
                f"- {arm}: no fit (its finished runs cover fewer than 2 budgets): no crossing and no extrapolation."
            )
            continue
        lo, hi = result["crossover_range"]
        cross = result["crossover"].get(arm) or []
        top = max(result["budgets"])
        out.append(
            f"- Shared-E fits: the curves cross at C ≈ {', '.join(f'{c:.2g}' for c in cross)} FLOPs"
            + (" (beyond the largest budget: an extrapolation)" if any(c > top for c in cross) else "")
            + "."
            if cross
            else f"- Shared-E fits: the curves do not cross between {lo:.2g} and {hi:.2g} FLOPs."
        )
        ci10 = (iv.get("gap_extrapolated") or {}).get(arm)
        bt = (result.get("backtest") or {}).get("gap", {}).get(arm)
        out.append(
            f"- Extrapolation to {result['extrapolate_to']:.2g} (10× the largest budget; no run there), "
            f"shared-E fit: gap {gap10:+.4f}{_ci(ci10)} {unit}"
            + (
                f"; the same fit without {bt['budget']:.2g} missed the gap there by {bt['error']:+.4f}"
                if bt
                else "; no back-test (fewer than 3 budgets)"
            )
            + "."
        )
        if sep:
            s10 = sep["extrapolated"][arm] - sep["extrapolated"][base]
            s_ci = ((sep.get("intervals") or {}).get("gap_extrapolated") or {}).get(arm)
            s_bt = (sep.get("backtest") or {}).get("gap", {}).get(arm)
            agree = (s10 < 0) == (gap10 < 0)
            out.append(
                f"- Extrapolation, separate E per arm: gap {s10:+.4f}{_ci(s_ci)} {unit}"
                + (f" (back-test error {s_bt['error']:+.4f})" if s_bt else "")
                + (
                    (
                        ": the same sign at its point estimate; its interval holds 0."
                        if s_ci and s_ci[0] <= 0 <= s_ci[1]
                        else ": the same sign."
                    )
                    if agree
                    else ": the opposite sign: beyond the measured budgets the sign depends on the fit's form."
                )
            )
    # the comparisons between two arms, neither the baseline (a decision may name them: the vocabulary
    # study's 8k against 32k): their gaps, crossing and extrapolation on the shared-E fits
    for key, p in (result.get("pairs") or {}).items():
        arm, other = key.split(" vs ")
        if other == base:
            continue
        cis = ((iv.get("pairs") or {}).get(key) or {}).get("gap") or {}
        said = [
            f"{word(g, cis.get(b))} at {float(b):.2g}{_flag_note(result, (arm, other), b)}" for b, g in p["gap"].items()
        ]
        cross = p.get("crossover") or []
        out.append(
            f"- {arm} − {other}, best loss per budget: "
            + "; ".join(said)
            + ". Shared-E fits: "
            + (
                f"the curves cross at C ≈ {', '.join(f'{c:.2g}' for c in cross)} FLOPs"
                + (
                    " (beyond the largest budget: an extrapolation)"
                    if any(c > max(result["budgets"]) for c in cross)
                    else ""
                )
                if cross
                else "the curves do not cross in the searched range"
            )
            + (
                f"; extrapolation to {result['extrapolate_to']:.2g}: gap {p['gap_extrapolated']:+.4f}"
                f"{_ci(((iv.get('pairs') or {}).get(key) or {}).get('gap_extrapolated'))} {unit}"
                if p.get("gap_extrapolated") is not None and math.isfinite(p["gap_extrapolated"])
                else ""
            )
            + "."
        )
    nd = result.get("nd") or {}
    for key, gaps in (nd.get("pairs") or {}).items():
        arm, other = key.split(" vs ")
        if other != base:
            continue
        ci = (((nd.get("intervals") or {}).get("pairs") or {}).get(key) or {}).get("target")
        bt = ((nd.get("backtest") or {}).get("gap") or {}).get(key)
        out.append(
            f"- Extrapolation, L(N, D) frontier (fitted on every run): {key} at {nd['flops']['target']:.2g}: "
            f"{gaps['target']:+.4f}{_ci(ci)} {unit}"
            + (f"; back-test error of the gap {bt['error']:+.4f}" if bt else "; no back-test")
            + "."
        )
    out.append(
        "- Intervals cover seed noise only, not a wrong functional form: beyond the largest budget every "
        "figure above is a guess of the fits' form."
    )
    if result["edge"]:
        out.append(f"- Not bracketed: {', '.join(result['edge'])}; their optima are bounds.")
    return out


def decision_lines(
    spec: StudySpec,
    result: dict | None,
    rule: dict | None = None,
    verdicts: list[dict] | None = None,
    other_noise: tuple[str, list[dict], dict] | None = None,
) -> list[str]:
    """The spec's decision rule, as written before the runs (or the default, said so), and its verdicts; with
    ``other_noise`` = (rule, verdicts, analysis), the verdicts and gaps under the other noise rule, labelled a
    sensitivity."""
    if rule is None:
        rule, verdicts = study_verdicts(spec, result)
    if not rule:
        return []
    head = (
        f"The rule, from the spec (written {rule.get('written', 'before the runs')}):"
        if not rule.get("default")
        else "**The spec has no decision rule**: the default below, chosen after the runs, is applied:"
    )
    lines = ["## Decision", "", head, "", *[f"> {line}" for line in str(rule.get("rule", "")).strip().splitlines()], ""]
    if rule.get("amended"):
        lines += [f"Amended (`decision.amended`): {str(rule['amended']).strip()}", ""]
    if not result or not result.get("optima"):
        return lines + ["No results yet: nothing to decide.", ""]
    unit = "bits/byte" if result["y"] == "val_bpb" else "nats"
    table = []
    for v in verdicts:
        sigma = f"{v['sigma']:.4f}" if v.get("sigma") is not None else "–"
        mult = "–"
        if v.get("multiplier") is not None:
            m_ci = v.get("multiplier_interval")
            mult = f"{v['multiplier']:.3g}" + (f" [{m_ci[0]:.3g}, {m_ci[1]:.3g}]" if m_ci else "")
        if v["verdict"] == "incomplete":
            table.append(
                [
                    v["name"],
                    f"{v['arm']} vs {v['baseline']}",
                    f"{v['budget']:.3g}",
                    sigma,
                    "–",
                    "–",
                    "–",
                    "–",
                    f"**incomplete** ({v['why']})",
                ]
            )
            continue
        table.append(
            [
                v["name"],
                f"{v['arm']} vs {v['baseline']}",
                f"{v['budget']:.3g}",
                sigma,
                f"{v['gap']:+.4f}{_ci(v['gap_interval'])}",
                mult,
                f"{v['gap_10x']:+.4f}{_ci(v['gap_10x_interval'])}",
                f"{v['gap_10x_separate']:+.4f}{_ci(v.get('gap_10x_separate_interval'))}"
                if v["gap_10x_separate"] is not None
                else "–",
                f"**{v['verdict']}**",
            ]
        )
    bn = result.get("budget_noise") or {}
    noise = (
        "Noise floor σ of the budget: "
        + NOISE_RULE_TEXT.get(bn.get("rule"), "–")
        + (
            "; the spec names no noise rule (`decision.noise`): the default, the only rule before `decision.noise` "
            "existed (2026-11-28)."
            if bn.get("default")
            else "; the spec's rule (`decision.noise`)."
        )
    )
    margin = (
        f"Margin: ±{float(rule.get('margin', 0)):g} {unit}."
        if rule.get("criterion", "gap") == "gap"
        else f"Criterion: the compute multiplier, above {float(rule.get('multiplier_min', 1)):g} with its interval above 1."
        + _multiplier_curve_text(result, verdicts, rule)
    )
    return lines + [
        _table(
            [
                "comparison",
                "arms",
                "budget",
                "σ of the budget",
                f"gap ({unit})",
                "compute multiplier",
                "gap at 10× (shared E; extrapolation)",
                "gap at 10× (separate E; extrapolation)",
                "verdict",
            ],
            table,
        ),
        "",
        f"{margin} {noise}",
        "",
        *[verdict_sentence(v, unit) for v in verdicts],
        "",
        *multiplier_check_lines(result, unit),
        *check_gap_lines(result, unit),
        *_other_noise_lines(other_noise, verdicts, unit),
    ]


def _multiplier_curve_text(result: dict, verdicts: list[dict], rule: dict) -> str:
    """Which fit of the baseline a multiplier verdict reads (the rule's ``fit``), and what the other fits read."""
    base = result.get("baseline")
    base_fit = (result.get("fits") or {}).get(base)
    if base_fit is None:
        return ""
    separate = (result.get("sensitivity") or {}).get("separate") or {}
    own = (separate.get("fits") or {}).get(base)
    nd = result.get("nd") or {}
    nd_fit = (nd.get("fits") or {}).get(base)

    def at_budget(by_budget: dict, budget: float):
        return next((x for b, x in by_budget.items() if math.isclose(b, budget)), None)

    def reading(v: dict, mults: dict, intervals: dict) -> str | None:
        m, ci = at_budget(mults.get(v["arm"]) or {}, v["budget"]), at_budget(intervals.get(v["arm"]) or {}, v["budget"])
        if m is None or not math.isfinite(m):
            return None
        return f"{v['name']} {m:.3g}" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")

    readings = {"shared": [], "own": [], "frontier": []}
    nd_iv = (nd.get("intervals") or {}).get("multiplier_at_optimum") or {}
    by_budget = {arm: {float(b): x for b, x in d.items()} for arm, d in (nd.get("multiplier_at_optimum") or {}).items()}
    iv_by_budget = {arm: {float(b): x for b, x in d.items()} for arm, d in nd_iv.items()}
    for v in verdicts:
        if v.get("multiplier") is None:
            continue
        readings["shared"].append(
            reading(v, result.get("multiplier") or {}, (result.get("intervals") or {}).get("multiplier") or {})
        )
        if own is not None:
            readings["own"].append(
                reading(v, separate.get("multiplier") or {}, (separate.get("intervals") or {}).get("multiplier") or {})
            )
        readings["frontier"].append(reading(v, by_budget, iv_by_budget))
    texts = {
        "shared": f"{base}'s power law on the per-budget optima, one floor E shared by the arms (E = {base_fit.E:.3f})",
        "own": f"{base}'s own power law on its optima (E = {own.E:.3f})" if own is not None else None,
        "frontier": f"{base}'s L(N, D) fit on its runs (E = {nd_fit['E']:.3f}), the compute on its frontier that "
        "reaches the arm's measured optimum"
        if nd_fit
        else None,
    }
    read = "frontier" if rule.get("fit") == "frontier" else "shared"
    misses = ""
    if read == "frontier":  # how far the fit read passes from the decision cells' optima: its own check, said here
        sigmas = (result.get("budget_noise") or {}).get("budgets") or {}
        for v in verdicts[:1]:
            label, sigma = f"{v['budget']:.6g}", (sigmas.get(v["budget"]) or {}).get("sigma")
            diffs = [
                f"{arm} {c[label]['difference']:+.4f}"
                for arm in (v["baseline"], v["arm"])
                if label in (c := (nd.get("check") or {}).get(arm) or {})
            ]
            if diffs and sigma is not None:
                misses = (
                    f" (its frontier against the parabola optima at {v['budget']:.3g}, optimum − frontier: "
                    f"{', '.join(diffs)}; σ {sigma:.4f})"
                )
    others = [
        f"on {texts[k]}: {', '.join(x for x in readings[k] if x)}"
        for k in ("frontier", "shared", "own")
        if k != read and texts[k] and any(readings[k])
    ]
    return (
        f" It is read on {texts[read]}"
        + (" (`decision.fit`)" + misses if read == "frontier" else "")
        + ("; " + "; ".join(others) + " (the same seed-noise bootstrap)." if others else ".")
    )


def _size_means(sizes: dict) -> tuple[str, str]:
    """A check cell's sizes as ``L5 1.1780 (1.1772 / 1.1787), ...`` (mean, then each seed), and its best size."""
    means = ", ".join(
        f"{name} {v['mean']:.4f} ({' / '.join(f'{x:.4f}' for x in v['losses'])})" for name, v in sizes.items()
    )
    return means, min(sizes, key=lambda name: sizes[name]["mean"])


def with_planned_runs(checks: list[dict], spec) -> list[dict]:
    """Each check with the runs its spec entries plan (``planned``) beside those it read (``ran``): a cell read
    before all of them ran is *interim*, which every place that prints its reading says."""
    for c in checks:
        c["planned"] = sum(
            len(entry["sizes"]) * len(entry["seeds"])
            for entry in spec.multiplier_checks
            if entry["arm"] == c["baseline"] and math.isclose(float(entry["budget"]), c["budget"], rel_tol=1e-6)
        )
        c["ran"] = sum(len(size["losses"]) for size in c["sizes"].values())
    return checks


def interim(check: dict) -> str:
    """ " (interim: R of the P runs planned for it)" for a check read before all its runs ran; "" otherwise."""
    planned, ran = check.get("planned"), check.get("ran")
    return (
        f" (interim: {ran} of the {planned} runs planned for it)"
        if planned and ran is not None and ran < planned
        else ""
    )


def _check_fit(opt: dict, sigma: float | None) -> str:
    """A check cell's fit check, as the grid's cells get theirs: its all-size parabola's largest miss against σ."""
    if opt.get("misfit") is None or sigma is None:
        return ""
    return f"; fit check {'**flagged**' if opt['misfit'] > sigma else 'passes'}: miss {opt['misfit']:.4f}"


def multiplier_check_lines(result: dict, unit: str) -> list[str]:
    """The spec's multiplier checks beside the rule: the baseline measured at k × the decision budget, so that
    the multiplier's threshold is read from runs where the fit extrapolates (``analysis.multiplier_checks``)."""
    checks = result.get("multiplier_checks") or []
    if not checks:
        return []
    table, sentences = [], []
    for c in checks:
        opt = c["baseline_optimum"]
        means, best = _size_means(c["sizes"])
        table.append(
            [
                f"{c['baseline']} @ {c['budget']:.3g} ({c['factor']:.3g}× {c['at']:.3g})",
                means,
                f"{opt['loss_opt']:.4f} ({best}{', bracketed' if opt['bracketed'] else ', not bracketed'}"
                + _check_fit(opt, c.get("sigma"))
                + ")",
                f"{c['arm']} @ {c['at']:.3g}: {c['arm_optimum']:.4f}",
                f"{c['gap']:+.4f}{_ci(c['interval'])}",
                f"{c['sigma']:.4f}: {c['sigma_source']}" if c.get("sigma") is not None else "–",
                f"**{c['reading']}**{interim(c)}",
            ]
        )
        if c["reading"].startswith("multiplier above"):
            sentences.append(
                f"- {c['name']}: {c['baseline']} trained on {c['factor']:.3g}× the decision budget ends "
                f"{c['gap']:.4f} {unit} above {c['arm']}'s optimum at {c['at']:.3g}{_ci(c['interval'])}: "
                f"{c['baseline']} needs more than {c['factor']:.3g}× the compute to reach it, on the runs alone "
                "(no fit, no floor)."
            )
        elif c["reading"].startswith("multiplier below"):
            sentences.append(
                f"- {c['name']}: {c['baseline']} on {c['factor']:.3g}× the decision budget ends {-c['gap']:.4f} "
                f"{unit} below {c['arm']}'s optimum at {c['at']:.3g}: the multiplier is under {c['factor']:.3g}."
            )
        elif c["reading"].startswith("within noise"):
            sentences.append(
                f"- {c['name']}{interim(c)}: {c['baseline']} on {c['factor']:.3g}× the decision budget ends "
                f"{c['gap']:+.4f} {unit} against {c['arm']}'s optimum at {c['at']:.3g}{_ci(c['interval'])}: within "
                f"noise, so these runs cannot tell whether the multiplier is above or below {c['factor']:.3g}."
            )
    curve_lines = []
    for c in checks:
        if not c.get("curves") or c.get("sigma") is None:
            continue
        rows = [
            [
                curve["fit"],
                f"{curve['E']:.3f}",
                f"{curve['predicted']:.4f}",
                f"{curve['miss']:+.4f}" + (" *" if abs(curve["miss"]) > c["sigma"] else ""),
            ]
            for curve in c["curves"]
        ]
        curve_lines += [
            f"The same runs test, out of sample, the {c['baseline']} curves the multipliers are read on (the fits end "
            f"at {c['at']:.3g}): each curve's loss at {c['budget']:.3g} against the measured optimum "
            f"{c['baseline_optimum']['loss_opt']:.4f} (* beyond the check's σ, {c['sigma']:.4f}). A curve that misses "
            "it reads the multiplier off a curve the runs do not follow.",
            "",
            _table(["curve", "E", f"predicted ({unit})", "predicted − measured"], rows),
            "",
        ]
    return [
        "Beside the rule, measured (spec `multiplier_checks`; their runs are in no cell or fit): the baseline's "
        "cell at a multiple k of the decision budget, against the compared arm's optimum at that budget. Its "
        "optimum above the arm's beyond noise means the multiplier exceeds k whatever the fits' form; the "
        "interval perturbs both cells by their budgets' σ over √seeds. The rule's verdict above is unchanged by it.",
        "",
        _table(
            [
                "check cell",
                f"size means ({unit}; seeds)",
                "its optimum (best size)",
                "compared optimum",
                f"gap ({unit})",
                "σ of the check",
                "reading",
            ],
            table,
        ),
        "",
        *sentences,
        *([""] if sentences else []),
        *curve_lines,
    ]


def check_gap_lines(result: dict, unit: str) -> list[str]:
    """Both arms of a comparison measured at a check budget beyond the grid (``analysis.check_gaps``): their
    optima there, the gap with its interval, and the arm's multiplier there on each of the baseline's curves."""
    gaps = result.get("check_gaps") or []
    if not gaps:
        return []
    lines = []
    for g in gaps:
        arm, base, b = g["arm"], g["baseline"], g["budget"]
        rows = []
        for a in (arm, base):
            opt = g["optimum"][a]
            means, best = _size_means(g["sizes"][a])
            rows.append(
                [
                    f"{a} @ {b:.3g}",
                    means,
                    f"{opt['loss_opt']:.4f} ({best}, {'bracketed' if opt['bracketed'] else 'not bracketed'}"
                    + _check_fit(opt, g.get("sigma"))
                    + ")",
                ]
            )
        at_gap = f"; at the decision budget {g['at']:.3g}: {g['gap_at']:+.4f}" if g.get("gap_at") is not None else ""
        mults = "; ".join(f"{m['fit']} (E = {m['E']:.3f}) {m['multiplier']:.3g}" for m in g["multipliers"])
        sigma = f"σ = {g['sigma']:.4f}: {g['sigma_source']}" if g.get("sigma") is not None else "no σ"
        lines += [
            f"Both arms measured at {b:.3g} (spec `multiplier_checks`, beyond the grid; in no cell, fit or verdict): "
            + (f"{g['name']}, " if g["name"] != arm else "")
            + f"{arm} against {base}.",
            "",
            _table(["check cell", f"size means ({unit}; seeds)", "its optimum (best size)"], rows),
            "",
            f"- Gap {arm} − {base} at {b:.3g}: **{g['gap']:+.4f}{_ci(g['interval'])}** {unit}, "
            f"**{g['reading']}** ({sigma}){at_gap}.",
            f"- {arm}'s compute multiplier at {b:.3g} on {base}'s curves (fitted up to {max(result['budgets']):.3g}; "
            f"the baseline's check above scores each one at this budget): {mults}.",
            "",
        ]
    return lines


def _fixed(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def per_set_lines(rows: list[dict], y: str) -> list[str]:
    """Bits per byte per validation set of the runs scored per set (``evaluation.per_set``). Runs of two or more
    arms at the same size, budget, seed and setting are compared, each later arm against the first: for each such
    pair of arms, the values of the group where the first arm scores lowest side by side, then one table of every
    group's differences (a column per group, by budget; a multiplier check's marked), so that nine comparisons read
    as one table. Runs no other arm matches share one table of values."""
    scored = [r for r in rows if r.get("val_bpb_per_set")]
    if not scored:
        return []
    groups: dict = {}
    for r in scored:
        groups.setdefault((r["size"], r["budget"], r.get("seed"), r.get("setting"), r.get("lr_factor")), []).append(r)

    def label(key, long=False):
        size, budget, seed, setting, factor = key
        if long:
            what = f"{size} at {budget:.3g}, seed {seed}" + (f", setting {setting}" if setting else "")
            return what + (f", learning rate ×{factor:g}" if factor else "")
        check = any(r.get("multiplier_check") for r in groups[key])
        return (
            f"{size} {budget:.3g} s{seed}"
            + (f" {setting}" if setting else "")
            + (f" lr×{factor:g}" if factor else "")
            + (" (check)" if check else "")
        )

    def value_table(runs):  # each arm's value, then each later arm's difference against the first's
        arms = [r["arm"] for r in runs]
        sets = sorted(
            {k for r in runs for k in r["val_bpb_per_set"]}, key=lambda k: runs[0]["val_bpb_per_set"].get(k, 0)
        )

        def row(name, v):
            return [name, *(_fixed(x) for x in v), *(_signed(None if None in (x, v[0]) else x - v[0]) for x in v[1:])]

        table = [row(k, [r["val_bpb_per_set"].get(k) for r in runs]) for k in sets]
        table.append(row("all (overall)", [r.get(y) for r in runs]))
        return _table(["set", *arms, *(f"{a} − {arms[0]}" for a in arms[1:])], table)

    lines = ["## Per validation set", ""]
    order = {k: i for i, k in enumerate(groups)}
    compared = sorted((k for k, v in groups.items() if len(v) > 1), key=lambda k: (k[1], order[k]))
    by_arms: dict = {}  # (first arm, a later arm) -> the groups where both ran: one table of differences
    for key in compared:
        for other in groups[key][1:]:
            by_arms.setdefault((groups[key][0]["arm"], other["arm"]), []).append(key)
    for (base, other), keys in by_arms.items():
        pairs = {k: {r["arm"]: r for r in groups[k]} for k in keys}
        shown = min(keys, key=lambda k: _or_inf(pairs[k][base].get(y)))  # the base arm's best run and its twin
        lines += [
            f"{label(shown, True)}, the {base} arm's lowest of these (bits per byte of each set's text; "
            f"`{'`, `'.join(r['run'] for r in groups[shown])}`):",
            "",
            value_table(groups[shown]),
            "",
        ]
        values = pairs[shown][base]["val_bpb_per_set"]
        sets = sorted({n for k in keys for n in pairs[k][base]["val_bpb_per_set"]}, key=lambda n: values.get(n, 0))

        def gap(k, name, key="val_bpb_per_set"):
            a, b = pairs[k][base], pairs[k][other]
            a, b = (a.get(name), b.get(name)) if key is None else (a[key].get(name), b[key].get(name))
            return None if None in (a, b) else b - a

        table = [[name, *(_signed(gap(k, name)) for k in keys)] for name in sets]
        table.append(["all (overall)", *(_signed(gap(k, y, None)) for k in keys)])
        lower = [sum(1 for name in sets if (gap(k, name) or 0) < 0) for k in keys]
        table.append([f"sets where {other} is lower", *(f"{n} of {len(sets)}" for n in lower)])
        counts = sorted({n: lower.count(n) for n in lower}.items(), reverse=True)
        lines += [
            f"{other} − {base} per set, every size, budget and seed both ran scored per set "
            f"(sN: seed N; bits per byte, negative: {other} lower):",
            "",
            _table(["set", *(label(k) for k in keys)], table),
            "",
            f"{other} is lower than {base} on "
            + ", ".join(f"{n} of {len(sets)} sets in {c} of {len(keys)}" for n, c in counts)
            + (" comparisons." if len(keys) > 1 else " comparison."),
            "",
        ]
    alone = [k for k in groups if k not in compared]
    if alone:  # no other arm ran it: its values, one column per run
        runs = [groups[k][0] for k in alone]
        values = runs[0]["val_bpb_per_set"]
        names = sorted({n for r in runs for n in r["val_bpb_per_set"]}, key=lambda n: values.get(n, 0))
        table = [[n, *(_fixed(r["val_bpb_per_set"].get(n)) for r in runs)] for n in names]
        table.append(["all (overall)", *(_fixed(r.get(y)) for r in runs)])
        lines += [
            "Scored per set with no other arm's run beside it (bits per byte of each set's text):",
            "",
            _table(["set", *(f"`{r['run']}`" for r in runs)], table),
            "",
        ]
    return lines


def _or_inf(x) -> float:
    return math.inf if x is None else x


def _signed(x) -> str:
    return "–" if x is None else f"{x:+.4f}"


def _other_noise_lines(other_noise: tuple[str, list[dict], dict] | None, verdicts: list[dict], unit: str) -> list[str]:
    """The verdicts the other noise rule would give, and its gaps' intervals at every budget: a sensitivity, not the
    rule (the spec names its rule)."""
    if not other_noise:
        return []
    name, alt, analysis = other_noise
    same = [a["verdict"] == v["verdict"] for a, v in zip(alt, verdicts)]
    base, iv = analysis.get("baseline"), analysis.get("intervals") or {}
    compared = {pair_key(arm, base): (g, (iv.get("gap") or {}).get(arm) or {}) for arm, g in analysis["gap"].items()}
    for key, pair in (analysis.get("pairs") or {}).items():  # the other arms against each other
        compared.setdefault(key, (pair["gap"], ((iv.get("pairs") or {}).get(key) or {}).get("gap") or {}))
    gaps = [
        f"{key}: " + ", ".join(f"{b:.2g} {g:+.4f}{_ci(cis.get(b))}" for b, g in by_budget.items())
        for key, (by_budget, cis) in compared.items()
    ]
    checks = [
        f"{c['baseline']} @ {c['budget']:.3g} against {c['arm']} @ {c['at']:.3g}: {c['gap']:+.4f}{_ci(c['interval'])}, "
        f"{c['reading']}{interim(c)}"
        for c in analysis.get("multiplier_checks") or []
    ] + [
        f"{g['arm']} against {g['baseline']}, both @ {g['budget']:.3g}: {g['gap']:+.4f}{_ci(g['interval'])}, "
        f"{g['reading']}"
        for g in analysis.get("check_gaps") or []
    ]
    return [
        f"Sensitivity, not the rule: the noise floor by `{name}` instead, {NOISE_RULE_TEXT[name]}. The verdicts "
        + ("would be the same:" if all(same) else "would read:"),
        "",
        *[verdict_sentence(a, unit).replace("- **", "- (sensitivity) **", 1) for a in alt],
        "",
        *([f"Under that noise floor the gaps ({unit}) at every budget: " + "; ".join(gaps) + ".", ""] if gaps else []),
        *([f"Under it the multiplier check reads: {'; '.join(checks)}.", ""] if checks else []),
        *_flag_lines_under(analysis),
    ]


def _flag_lines_under(analysis: dict) -> list[str]:
    """The fit checks under the other noise floor: a σ inflated by one disagreeing pair lets a cell's all-size
    parabola pass the rule's check that a tighter floor would flag (and the reverse)."""
    flags = [f"{f['cell']} (miss {f['misfit']:.4f} > σ {f['sigma']:.4f})" for f in analysis.get("flagged") or []]
    return [f"Under it the fit check flags: {', '.join(flags) if flags else 'no cell'}.", ""]


def _budget_sigmas(spec: StudySpec, rows: list[dict], y: str, isoflop: dict | None):
    """``sigma(budget)``: the noise floor σ of one run at a budget (the decision's), from the analysis or the grid's
    replicates (None where there is none); computed once for every check."""
    from hfpretrain.study.analysis import budget_noise

    grid_rows = [r for r in rows if not is_check(r)]
    noise = (isoflop or {}).get("budget_noise") or budget_noise(grid_rows, y, (spec.decision or {}).get("noise"))
    # at a multiplier check's budget: the σ that check's reading used (analysis._check_sigma)
    checked = {c["budget"]: c.get("sigma") for c in (isoflop or {}).get("multiplier_checks") or []}

    def sigma(budget: float) -> float | None:
        return next(
            (v.get("sigma") for b, v in noise["budgets"].items() if math.isclose(float(b), budget, rel_tol=1e-9)),
            next((v for b, v in checked.items() if math.isclose(float(b), budget, rel_tol=1e-9)), None),
        )

    return sigma


def lr_check_lines(spec: StudySpec, rows: list[dict], y: str, isoflop: dict | None = None) -> list[str]:
    """The learning-rate checks beside the rule's run of the same size, budget and seed: is the rule's LR within
    the checked factors of each arm's best, beyond the budget's noise (2√2·σ, as the setting checks)?"""
    checks = [r for r in rows if r.get("lr_factor") is not None and r.get(y) is not None]
    if not checks:
        return []
    table, sigma_at = [], _budget_sigmas(spec, rows, y, isoflop)
    for arm, budget, seed in dict.fromkeys((r["arm"], r["budget"], r.get("seed")) for r in checks):
        mine = [r for r in checks if (r["arm"], r["budget"], r.get("seed")) == (arm, budget, seed)]
        ref = grid_run_of(mine[0], rows, y)
        by_factor = {r["lr_factor"]: r for r in mine} | ({1.0: ref} if ref else {})
        best = min(by_factor, key=lambda f: by_factor[f][y])
        sigma = sigma_at(budget)
        if best == 1.0:
            verdict = "the rule's"
        elif ref is None or sigma is None:
            verdict = f"×{best:g} (no grid run or σ to judge it by)"
        elif ref[y] - by_factor[best][y] > 2 * math.sqrt(2) * sigma:
            verdict = f"**×{best:g}**, beyond 2√2·σ = {2 * math.sqrt(2) * sigma:.4f}"
        else:
            verdict = f"×{best:g} by {ref[y] - by_factor[best][y]:.4f}, within 2√2·σ = {2 * math.sqrt(2) * sigma:.4f}"
        table.append(
            [
                arm,
                mine[0]["size"],
                f"{budget:.3g}",
                "–" if seed is None else str(seed),
                *[f"×{f:g}: {by_factor[f][y]:.4f} (LR {by_factor[f]['learning_rate']:.3g})" for f in sorted(by_factor)],
                verdict,
            ]
        )
    width = max(len(t) for t in table)
    header = ["arm", "size", "budget", "seed", *[f"LR factor {i + 1}" for i in range(width - 5)], "best"]
    return [
        "## Learning-rate checks",
        "",
        "Each arm's central size at a checked budget, with each checked seed, at the rule's learning rate times each "
        f"factor (spec lr_checks); {y}. A factor better than the rule's by more than 2√2·σ (σ: the budget's noise "
        "floor of one run) means that arm's grid ran at a learning rate off its optimum and its gap carries that; "
        "within it, a one-seed check cannot tell.",
        "",
        _table(header, [t[:-1] + [""] * (width - len(t)) + t[-1:] for t in table]),
        "",
    ]


def expert_load(out_dir) -> dict | None:
    """The experts' load in a run's last logging window, as training/moe.py logs it in an MoE run's log.jsonl:
    ``{"max_mean"}`` (the worst layer's most loaded expert against the mean) and ``{"dead"}`` (the share of
    (layer, expert) pairs that got no token); None for a run whose log has none (a dense run, no log)."""
    from hfpretrain.study.plots import read_log, run_log

    log = run_log(out_dir) if out_dir else None
    last = None
    for event in read_log(log) if log is not None else []:
        if event.get("expert_load_max_mean") is not None:
            last = event
    return {"max_mean": last["expert_load_max_mean"], "dead": last.get("dead_experts")} if last else None


def grid_run_of(check: dict, rows: list[dict], y: str) -> dict | None:
    """The grid run a learning-rate or setting check is set beside: same arm, size, budget and seed, with a result
    (at a multiplier check's budget, that check's run)."""
    return next(
        (
            g
            for g in rows
            if g.get("lr_factor") is None
            and g.get("setting") is None
            and (g["arm"], g["size"], g.get("seed")) == (check["arm"], check["size"], check.get("seed"))
            and math.isclose(g["budget"], check["budget"], rel_tol=1e-9)
            and g.get(y) is not None
        ),
        None,
    )


def _grid_value(ref: dict | None, override: str) -> str:
    """The value the grid run ``ref`` trained with for the override's key, from the recipe its log's config event
    holds (a rule, a size or the recipe may have set it, not only the spec's overrides); "–" when not readable."""
    from hfpretrain.study.plots import first_record, run_log

    log = run_log(ref["out_dir"]) if ref and ref.get("out_dir") else None
    value = first_record(log).get("recipe", {}) if log else None
    for part in override.split("=", 1)[0].split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "–" if value is None else str(value)


def setting_check_lines(spec: StudySpec, rows: list[dict], y: str, isoflop: dict | None = None) -> list[str]:
    """The setting checks beside the grid's run of the same arm, size, budget and seed: the difference against
    the budget's noise floor σ, the experts' load of both runs where they logged it, and what that says."""
    checks = [r for r in rows if r.get("setting") is not None and r.get(y) is not None]
    named = check_settings(spec)
    if not checks:
        if not named:
            return []
        planned = "; ".join(
            f"{name} on {', '.join(s['arms'])} at {entry['budget']:.3g}"
            for entry in spec.setting_checks
            for name, s in entry["settings"].items()
        )
        return ["## Setting checks", "", f"None finished yet (spec setting_checks: {planned}).", ""]
    unit = "bits/byte" if y == "val_bpb" else "nats"
    sigma_at = _budget_sigmas(spec, rows, y, isoflop)
    arms, order = list(spec.arms), list(named)
    checks.sort(
        key=lambda r: (
            arms.index(r["arm"]) if r["arm"] in arms else len(arms),
            order.index(r["setting"]) if r["setting"] in order else len(order),
            str(r["setting"]),
        )
    )
    table, sentences, loads = [], [], False
    for r in checks:
        ref = grid_run_of(r, rows, y)
        sigma = sigma_at(r["budget"])
        setting = named.get(r["setting"])
        overrides = (
            ", ".join(f"`{o}` (grid: {_grid_value(ref, o)})" for o in setting["overrides"])
            if setting
            else "– (not in the spec)"
        )
        load = [expert_load(r.get("out_dir")), expert_load(ref.get("out_dir")) if ref else None]
        loads = loads or any(load)
        diff = r[y] - ref[y] if ref else None
        table.append(
            [
                r["arm"],
                r["size"],
                f"{r['budget']:.3g}",
                "–" if r.get("seed") is None else str(r["seed"]),
                r["setting"],
                overrides,
                f"{r[y]:.4f}",
                f"{ref[y]:.4f}" if ref else "–",
                f"{diff:+.4f}" if diff is not None else "–",
                f"{sigma:.4f}" if sigma is not None else "–",
                " / ".join(f"{x['max_mean']:.2f}" if x else "–" for x in load),
                " / ".join(f"{100 * x['dead']:.1f}%" if x and x.get("dead") is not None else "–" for x in load),
            ]
        )
        same = [c for c in checks if (c["setting"], c["arm"], c["budget"]) == (r["setting"], r["arm"], r["budget"])]
        seed = f", seed {r.get('seed')}" if len(same) > 1 else ""  # a setting checked with several seeds
        what = f"**{r['setting']}** ({r['arm']} {r['size']} at {r['budget']:.3g}{seed})"
        if diff is None:
            sentences.append(f"- {what}: its grid run (same arm, size, budget and seed) has no result: no comparison.")
        elif sigma is None:
            sentences.append(f"- {what}: {diff:+.4f} {unit}, and no σ at this budget (no seed pairs): not judged.")
        elif abs(diff) <= 2 * math.sqrt(2) * sigma:  # a difference of two runs: σ·√2; two of those: ~95%
            sentences.append(
                f"- {what}: {diff:+.4f} {unit}, within 2√2·σ = {2 * math.sqrt(2) * sigma:.4f}: no effect this "
                "one-seed check can tell from noise."
            )
        elif diff < 0:
            sentences.append(
                f"- {what}: better by {-diff:.4f} {unit}, beyond 2√2·σ = {2 * math.sqrt(2) * sigma:.4f}: the grid "
                "ran at a worse setting."
            )
        else:
            sentences.append(
                f"- {what}: worse by {diff:.4f} {unit}, beyond 2√2·σ = {2 * math.sqrt(2) * sigma:.4f}: the grid's "
                "setting is the better of the two."
            )
    note = (
        "Experts' load: the last logging window of each run's log (max/mean: the worst layer's most loaded expert "
        "against the mean; dead: the share of the layers' experts that got no token); – where a run logged none."
        if loads
        else "Experts' load: not available: none of these runs (nor their grid runs) logged it (a dense arm, or "
        "logs not kept)."
    )
    return [
        "## Setting checks",
        "",
        "Each named setting (spec setting_checks: recipe overrides after the arm's and the rules') on its arms' "
        f"central size at a checked budget and seed, against the grid's run of the same arm, size, budget and seed; "
        f"{y}. Not part of the cells, the fits or the decision. σ: the budget's noise floor of one run (the "
        "decision's); a difference of two runs carries √2·σ, so a check is judged against 2√2·σ (about 95%).",
        "",
        _table(
            [
                "arm",
                "size",
                "budget",
                "seed",
                "setting",
                "overrides",
                f"check ({unit})",
                f"grid run ({unit})",
                "check − grid",
                "σ of the budget",
                "experts max/mean: check / grid",
                "dead experts: check / grid",
            ],
            table,
        ),
        "",
        note,
        "",
        *sentences,
        "",
    ]


def data_lines(spec: StudySpec, rows: list[dict]) -> list[str]:
    """What the runs read: the spec's description of the text, then per data folder what the runs' lineage
    recorded (tokenizer hash, training tokens per set, validation text)."""
    from hfpretrain.study.plots import read_log, run_log

    lines = ["## Data", ""]
    if spec.data:
        lines += [spec.data.strip(), ""]
    scored = [r for r in rows if r.get("val_loss") is not None]
    per_set = sum(1 for r in scored if r.get("val_bpb_per_set"))
    if scored:  # from the runs, not the spec's text: per-set scores exist only where evaluation.per_set was on
        lines += [
            f"Per-set scores (`evaluation.per_set`): in {per_set} of {len(scored)} runs (results.json)."
            if per_set
            else f"Per-set scores (`evaluation.per_set`): **off in all {len(scored)} runs**: every figure of this "
            "report is of the whole validation text; none is per validation set.",
            "",
        ]
    seen: dict = {}
    for r in rows:
        log = run_log(r["out_dir"])
        if r["arm"] in seen or log is None:
            continue
        config = next((e for e in read_log(log) if e.get("event") == "config"), {})
        v = (config.get("lineage") or {}).get("validation") or {}
        summary = Path(r["out_dir"]) / "summary.json"  # its plan carries corrections (study/corrections.py)
        plan = json.loads(summary.read_text())["plan"] if summary.is_file() else config.get("plan") or {}
        seen[r["arm"]] = (v, plan, (config.get("recipe") or {}).get("data", {}).get("path"))
    if not seen:
        return lines
    table = []
    for arm, (v, plan, path) in seen.items():
        per_set = v.get("tokens_per_set") or {}
        table.append(
            [
                arm,
                f"`{path}`",
                f"{(v.get('tokenizer_sha256') or '')[:12]}",
                _num(v.get("train_tokens")),
                _num(plan.get("validation_text_bytes")),
                f"{plan['validation_tokens_per_byte']:.4f}" if plan.get("validation_text_bytes") else "–",
                ", ".join(
                    f"{k} {100 * n / sum(per_set.values()):.0f}%"
                    for k, n in sorted(per_set.items(), key=lambda kv: -kv[1])
                )
                or "–",
            ]
        )
    return lines + [
        _table(
            [
                "arm",
                "data folder",
                "tokenizer sha256",
                "training tokens",
                "validation text bytes",
                "validation tokens per byte",
                "training tokens per set",
            ],
            table,
        ),
        "",
    ]


def trained_elsewhere(spec: StudySpec, rows: list[dict]) -> Counter:
    """Runs another study trained (copied in), counted by that study's folder: they ran under its ``workers``.
    A run trained under this spec sits in spec.out, or in the folder it is read from (a study run with --out)."""
    return Counter(
        study
        for r in rows
        if r.get("out_dir")
        and (study := trained_by(r["out_dir"])) not in (None, os.path.normpath(spec.out), study_folder(r["out_dir"]))
    )


def hardware_lines(spec: StudySpec, rows: list[dict], elsewhere: Counter) -> list[str]:
    devices = sorted({r.get("device") or "?" for r in rows})
    total = sum(r.get("wall_time_s") or 0 for r in rows)
    every = sum(r.get("wall_time_all_s") or 0 for r in rows)
    resumed = sum(1 for r in rows if (r.get("processes") or 1) > 1)
    return [
        "## Hardware and time",
        "",
        f"- Devices: {', '.join(devices)}; the spec's `workers`: {spec.workers} run(s) at a time on each GPU, "
        "unless a call set `--workers` (the study's README says what ran)"
        + ("; per-run times are of a shared GPU" if spec.workers > 1 else "")
        + "".join(
            f"; {n} run(s) trained by another study ({study}), as many at a time as its spec says"
            for study, n in sorted(elsewhere.items())
        )
        + ".",
        f"- Training wall time summed over the runs: {total / 60:.1f} minutes ({every / 60:.1f} with the attempts "
        f"restarted from scratch); {resumed} run(s) ran in more than one process (preempted and resumed, or "
        "restarted): their times are summed over the processes (the run table's minutes).",
        "",
    ]


def reproduce_lines(spec: StudySpec) -> list[str]:
    if not spec.reproduce:
        return []
    return [
        "## Reproduce",
        "",
        "Paths are relative to the repository root; `DATA_ROOT` is the data root (pretrain/mix, tokenizers, eval).",
        "",
        "```bash",
        *spec.reproduce,
        "```",
        "",
    ]


def frontier_lines(spec: StudySpec, rows: list[dict], fits: dict[str, dict], y: str = "val_loss") -> list[str]:
    """Without an IsoFLOP grid: fits on the compute-efficient frontier and the verdict at the largest compute."""
    v = verdict(rows, fits, y)
    lines: list[str] = []
    lines += [
        "## Fits: L(C) = E + A · C^(−α)",
        "",
        "Per arm, on the compute-efficient frontier (lowest loss per quarter-decade of compute) "
        "or on every point when the frontier has fewer than 3; R² and RMSE are of log L.",
        "",
    ]
    fit_rows = []
    for arm, f in fits.items():
        fit = f["fit"]
        if fit is None:
            fit_rows.append([arm, "–", "–", "–", "–", "–", "no fit (fewer than 2 distinct compute values)"])
            continue
        note = f"{f['on']}" + ("; E fixed at 0 (< 3 points)" if fit.fixed_E else "")
        fit_rows.append(
            [
                arm,
                f"{fit.alpha:.4f}",
                f"{fit.E:.4f}",
                f"{fit.A:.4g}",
                str(fit.n),
                f"{fit.r2:.4f}",
                f"{fit.rmse:.2e}; {note}",
            ]
        )
    lines += [_table(["arm", "α", "E", "A", "points", "R²", "RMSE / fitted on"], fit_rows), ""]

    lines += ["## Verdict at the largest compute", ""]
    unit = "bits/byte" if y == "val_bpb" else "nats"

    def verdict_lines(label: str, where: str, r: dict) -> None:
        lines.append(
            f"- **{label}** {where}: "
            + ", ".join(f"{a} {loss:.4f}" for a, loss in sorted(r["losses"].items(), key=lambda kv: kv[1]))
            + "."
        )
        if "margin" in r:
            lines.append(
                f"  **{r['winner']}** wins by {r['margin']:.4f} {unit} ({100 * r['relative']:.2f}%) over "
                f"{r['runner_up']}."
            )

    if "predicted" in v:
        verdict_lines("Fitted", f"at C = {v['c_max']:.3e} FLOPs", v["predicted"])
    if "observed" in v:
        o = v["observed"]
        verdict_lines("Observed", f"(best run of the largest budget, {spec.budget_kind} = {_num(v['top_budget'])})", o)
        if "predicted" in v and "margin" in o and v["predicted"]["winner"] != o["winner"]:
            lines.append(
                "- The fitted and the observed winners disagree: the difference is within what these "
                "few points can resolve."
            )
    if len(fits) == 1:
        lines.append("- One arm only: nothing to compare (a pure scaling study).")
    lines.append("")
    return lines


def off_ladder_lines(spec: StudySpec, rows: list[dict], result: dict, rule: dict, verdicts: list[dict]) -> list[str]:
    """Sizes in no IsoFLOP window (``window: false``) enter their cells and fits as every size does, but their
    shapes are off the ladder's rule, which N-only fits assume: the same analysis without them, as a sensitivity
    (optima that move, and each multiplier verdict's figure)."""
    from hfpretrain.study.analysis import analyse_isoflop, decision_multiplier

    y = result.get("y")
    off = {s.name for s in spec.sizes if not s.window} & {r.get("size") for r in rows if r.get(y) is not None}
    if not off or not result.get("optima"):
        return []
    rest = [r for r in rows if r.get("size") not in off]
    sub = analyse_isoflop(
        rest, y=y, n_boot=0, noise_rule=(spec.decision or {}).get("noise"), frontier=result.get("nd") is not None
    )
    moved = [
        f"{arm} @ {b:.3g} {o['loss_opt']:.4f} → {sub['optima'][arm, b]['loss_opt']:.4f} "
        f"(N {o['n_opt']:.3g} → {sub['optima'][arm, b]['n_opt']:.3g})"
        for (arm, b), o in result["optima"].items()
        if (arm, b) in sub["optima"] and abs(sub["optima"][arm, b]["n_opt"] / o["n_opt"] - 1) > 1e-6
    ]
    figures = []
    for v in verdicts:
        if v.get("multiplier") is not None:
            m = decision_multiplier(sub, rule, v["arm"], v["budget"])[0]
            figures.append(
                f"{v['name']}'s multiplier at {v['budget']:.3g} {v['multiplier']:.3g} → " + (f"{m:.3g}" if m else "–")
            )
    return [
        f"Sensitivity, not the rule: without the sizes in no window ({', '.join(sorted(off))}, shapes off the ladder's "
        "rule that enter their cells and fits as every size does): "
        + ("; ".join(moved) if moved else "no optimum moves")
        + (f"; {'; '.join(figures)}" if figures else "")
        + ".",
        "",
    ]


def write_report(
    spec: StudySpec,
    rows: list[dict],
    fits: dict[str, dict],
    out_md: str | Path,
    plot_png: str | Path | None = None,
    n_planned: int | None = None,
    isoflop: dict | None = None,
    isoflop_png: str | None = None,
    best_report: str | Path | None = None,
    y: str | None = None,
    isoflop_other_noise: tuple[str, dict] | None = None,
) -> Path:
    """``isoflop_other_noise`` = (rule, analysis): the same analysis under the noise rule the spec did not name,
    whose verdicts the Decision gives as a sensitivity."""
    out_md = Path(out_md)
    lines = [f"# Study: {spec.name}", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    done = len([r for r in rows if r.get("val_loss") is not None])
    sizes_run = len({r.get("size") for r in rows if r.get("val_loss") is not None})
    lines += [
        f"{done} finished runs"
        + (f" of {n_planned} planned" if n_planned else "")
        + f": {len(spec.arms)} arm(s), {sizes_run} of the spec's {len(spec.sizes)} size(s), "
        f"{len(spec.budgets)} {spec.budget_kind} budget(s).",
        "",
        "Generated from the run folders by `python scripts/report.py STUDY_DIR`: every number, table and "
        "figure below comes from the committed runs (results.csv, analysis.json, fits.json are written by the "
        "same command).",
        "",
    ]

    lines += data_lines(spec, rows)
    elsewhere = trained_elsewhere(spec, rows)  # reads each run's recipe: once
    lines += hardware_lines(spec, rows, elsewhere)
    rule, verdicts = study_verdicts(spec, isoflop, rows)
    other = None
    if isoflop_other_noise and verdicts:
        other = (isoflop_other_noise[0], study_verdicts(spec, isoflop_other_noise[1], rows)[1], isoflop_other_noise[1])
    lines += decision_lines(spec, isoflop, rule, verdicts, other)
    if isoflop and verdicts:
        lines += off_ladder_lines(spec, rows, isoflop, rule, verdicts)
    lines += ["## Spec", "", "```yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False).strip(), "```", ""]

    lines += run_table_lines(rows, spec.rules.max_passes)
    lines += lr_check_lines(spec, rows, y or measure(rows), isoflop)
    lines += setting_check_lines(spec, rows, y or measure(rows), isoflop)
    lines += per_set_lines(rows, y or measure(rows))
    if isoflop and isoflop.get("optima"):
        lines += isoflop_lines(isoflop, isoflop_png, verdicts)
    else:
        lines += frontier_lines(spec, [r for r in rows if not is_check(r)], fits, y or measure(rows))
    if plot_png:
        lines += ["## Plot", "", f"![validation loss vs training FLOPs]({_link(plot_png, out_md.parent)})", ""]

    n_points = min((f["fit"].n for f in fits.values() if f["fit"] is not None), default=0)
    caveats = [
        f"- Few points: each fit has 3 free parameters per arm (2 per arm and a shared E in the main "
        f"IsoFLOP model) and as few as {n_points} points per arm; α and E trade off against each other, and an "
        "extrapolation beyond the measured compute is a guess."
    ]
    if not spec.seeds:
        caveats.append(
            "- One seed per run: no error bars. Differences between arms smaller than the run-to-run "
            "noise (typically ~0.01–0.02 nats at these scales) are not evidence."
        )
    if spec.rules == type(spec.rules)():
        caveats.append(
            "- Hyper-parameters (learning rate, warmup, batch) are the base recipe's for every size and "
            "budget (no `rules`), not tuned per size; short runs are dominated by warmup and the schedule."
        )
    if spec.workers > 1:
        caveats.append(
            f"- Runs were trained several at a time on each GPU (the spec's `workers`: {spec.workers}, unless a call "
            "set `--workers`: the study's README says what ran"
            + ("; those another study trained, as many as its spec says" if elsewhere else "")
            + "): the tokens/s and wall times in the run table are those of a shared GPU, not of a run alone."
        )
    caveats += [
        "- Compute counts training FLOPs only (6·N_matmul + attention), not evaluation; arms that change "
        "the parameter count (e.g. tied vs untied embeddings) differ in params at equal FLOPs/token.",
        "- Final validation loss on the final evaluation set (evaluation.final_eval_tokens; default: every "
        "validation block).",
    ]
    lines += ["## Caveats", "", *caveats, ""]
    lines += reproduce_lines(spec)
    bests = [best_report] if isinstance(best_report, (str, Path)) else list(best_report or [])
    if bests:
        links = [_link(b, out_md.parent) for b in bests]
        lines += [
            "## The best model",
            "",
            "The best configuration" + ("s" if len(links) > 1 else "") + ", trained once more with periodic "
            "evaluation (curves, lm-eval scores, generations): "
            + ", ".join(f"[{link}]({link})" for link in links)
            + ".",
            "",
        ]
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text("\n".join(lines))
    return out_md


def fits_for_plot(isoflop: dict) -> dict[str, dict]:
    """The IsoFLOP analysis' main fits in ``fit_arms``' shape, so that fits.json and loss_vs_flops.png show the
    fits the report discusses (a frontier fit of its own gave other exponents: α 0.631 against 0.541)."""
    return {
        arm: {"fit": f, "frontier": [], "on": f"per-budget optima, {isoflop['model']} model"}
        for arm, f in isoflop["fits"].items()
    }


def analyse(
    spec: StudySpec,
    rows: list[dict],
    out: str | Path,
    n_planned: int | None = None,
    best_report: str | Path | None = None,
    n_boot: int | None = None,
) -> dict:
    """Everything after the runs: spec.yaml, results.csv/json, fits.json, analysis.json, the plots and
    report.md in ``out``. ``best_report``: the best model's run report, linked from the study's. ``n_boot``: the
    bootstrap's draws (default: the spec's ``bootstrap``)."""
    import json

    from hfpretrain.study.analysis import NOISE_RULES, analyse_isoflop, check_gaps, multiplier_checks, to_json
    from hfpretrain.study.fit import fit_arms
    from hfpretrain.study.grid import write_results
    from hfpretrain.study.plots import plot_isoflop, plot_study

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # the spec as run (with --workers and command-line overrides): scripts/report.py STUDY_DIR reads it back
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    csv_path, json_path = write_results(rows, out)
    y = measure(rows)
    grid_rows = [r for r in rows if not is_check(r)]  # the LR and setting checks: their own tables only
    fits = fit_arms(grid_rows, y=y)
    isoflop, isoflop_png, extra, other_noise = None, None, None, None
    if spec.budget_kind == "flops" and rows:
        n_boot = spec.bootstrap["draws"] if n_boot is None else n_boot
        isoflop = analyse_isoflop(
            rows,
            y=y,
            n_boot=n_boot,
            noise_rule=(spec.decision or {}).get("noise"),
            nd_boot=spec.bootstrap["frontier_draws"],
        )
        if spec.multiplier_checks:
            isoflop["multiplier_checks"] = with_planned_runs(
                multiplier_checks(rows, isoflop, spec.decision, n_boot), spec
            )
            isoflop["check_gaps"] = check_gaps(rows, isoflop, spec.decision, n_boot)
        (out / "analysis.json").write_text(json.dumps(to_json(isoflop), indent=2, default=str) + "\n")
        applied = (isoflop.get("budget_noise") or {}).get("rule")
        if isoflop.get("optima") and applied in NOISE_RULES and spec.decision:
            name = next(r for r in NOISE_RULES if r != applied)
            frontier = spec.decision.get("fit") == "frontier"  # its verdicts read the L(N, D) fits then
            other_noise = (
                name,
                analyse_isoflop(
                    rows,
                    y=y,
                    n_boot=n_boot,
                    noise_rule=name,
                    frontier=frontier,
                    nd_boot=spec.bootstrap["frontier_draws"],
                ),
            )
            if spec.multiplier_checks:
                other_decision = {**spec.decision, "noise": name}
                other_noise[1]["multiplier_checks"] = with_planned_runs(
                    multiplier_checks(rows, other_noise[1], other_decision, n_boot), spec
                )
                other_noise[1]["check_gaps"] = check_gaps(rows, other_noise[1], other_decision, n_boot)
        if isoflop.get("optima"):
            isoflop_png = plot_isoflop(rows, isoflop, out / "isoflop.png").name
            fits = fits_for_plot(isoflop)
            extra = {
                arm: f for arm, f in (isoflop.get("sensitivity", {}).get("separate", {}).get("fits") or {}).items()
            }
    fits_json = {
        arm: {
            "fit": f["fit"].as_dict() if f["fit"] else None,
            "of": y,
            "on": f["on"],
            "frontier": [r["run"] for r in f["frontier"]],
        }
        for arm, f in fits.items()
    }
    if extra:
        fits_json = {
            "model": isoflop["model"],
            "arms": fits_json,
            "sensitivity": {"separate": {arm: f.as_dict() if f else None for arm, f in extra.items()}},
        }
    (out / "fits.json").write_text(json.dumps(fits_json, indent=2) + "\n")
    plot = plot_study(grid_rows, fits, out / "loss_vs_flops.png", title=spec.name, y=y, dashed=extra) if rows else None
    report = write_report(
        spec, rows, fits, out / "report.md", plot, n_planned, isoflop, isoflop_png, best_report, y, other_noise
    )
    return {
        "results_csv": csv_path,
        "results_json": json_path,
        "fits": fits,
        "plot": plot,
        "report": report,
        "isoflop": isoflop,
    }
