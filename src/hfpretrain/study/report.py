"""The written report of a study: spec, results table, fits, the verdict at the largest compute,
the plot, and the caveats. Markdown, readable as-is or rendered."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from hfpretrain.study.grid import StudySpec


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


def run_table_lines(rows: list[dict]) -> list[str]:
    """Every run with what it was: size, tokens, hyper-parameters, hardware, time and result."""
    def val(r, k, digits=4):
        return _num(r.get(k), digits) if r.get(k) is not None else "–"

    table = [[r["run"], r.get("seed") if r.get("seed") is not None else "–", val(r, "params"),
              val(r, "ratio_params"), f"{r.get('hidden_size') or '–'}×{r.get('layers') or '–'}", val(r, "vocab_size"),
              val(r, "tokens"), (f"{r['tokens'] / r['ratio_params']:.3g}" if r.get("ratio_params") else "–"),
              f"{r['flops']:.3e}", val(r, "learning_rate", 3), val(r, "batch_tokens"), val(r, "warmup_steps"),
              r.get("schedule") or "–", val(r, "passes", 3), r.get("device") or "–",
              (f"{r['wall_time_s'] / 60:.1f}" if r.get("wall_time_s") else "–"), val(r, "val_loss"), val(r, "val_bpb")]
             for r in rows]
    header = ["run", "seed", "params", "N (ratio)", "width×layers", "vocab", "tokens", "D/N", "train FLOPs", "LR",
              "batch tokens", "warmup", "schedule", "passes", "device", "minutes", "val nats", "val bpb"]
    return ["## Runs", "",
            "N (ratio) = non-embedding parameters + the LM head (the N of tokens per parameter, D/N); passes = "
            "reads of the training data; minutes = training wall time (evaluation and checkpoints excluded).", "",
            _table(header, table), ""]


def isoflop_lines(result: dict, plot_png: str | None) -> list[str]:
    """The IsoFLOP analysis: optima per budget, the comparison of arms, and a discussion from the numbers."""
    unit = "bits/byte" if result["y"] == "val_bpb" else "nats/token"
    iv = result.get("intervals") or {}
    lines = ["## IsoFLOP analysis", "",
             f"Loss = final validation {unit}. Per budget and arm, a parabola of loss in ln N through the budget's "
             "sizes (seeds averaged) gives the best size and its loss; a budget whose best size is at the edge of "
             "its sizes is *not bracketed*: its optimum is only bounded. Intervals are 95% parametric-bootstrap "
             f"intervals from the seed noise floor ({result.get('n_boot', 0)} draws).", ""]
    noise = result.get("noise")
    lines.append(f"- Noise floor: σ = {noise['sigma']:.4f} {unit} between seeds ({noise['cells']} cells, "
                 f"{noise['runs']} runs)." if noise else
                 "- Noise floor: unknown (no cell was run with several seeds): differences get no interval.")
    if result["edge"]:
        lines.append(f"- **Not bracketed** (best size at the edge of the grid): {', '.join(result['edge'])}. "
                     "Move those budgets' sizes towards the edge and run again before trusting them.")
    lines.append("")
    table = []
    for (arm, b), o in sorted(result["optima"].items(), key=lambda kv: (kv[0][1], kv[0][0])):
        table.append([f"{b:.3g}", arm, f"{o['n_opt']:.3g}", f"{o['loss_opt']:.4f}", "yes" if o["bracketed"] else "**no**",
                      str(o["points"])])
    lines += [_table(["budget (FLOPs)", "arm", "best N", "best loss", "bracketed", "sizes"], table), ""]
    fit_rows = []
    for arm, f in result["fits"].items():
        if f is None:
            fit_rows.append([arm, "–", "–", "–", "–", "–"])
            continue
        bt = result["backtest"].get(arm)
        fit_rows.append([arm, f"{f.alpha:.4f}{_ci((iv.get('alpha') or {}).get(arm)).replace('+', '')}",
                         f"{f.E:.4f}{_ci((iv.get('E') or {}).get(arm)).replace('+', '')}", f"{f.A:.4g}",
                         f"{result['extrapolated'][arm]:.4f}{_ci((iv.get('extrapolated') or {}).get(arm)).replace('+', '')}",
                         f"{bt['error']:+.4f}" if bt else "–"])
    fixed = [arm for arm, f in result["fits"].items() if f is not None and f.fixed_E]
    lines += [f"Per arm, L*(C) = E + A·C^(−α) on the per-budget optima; extrapolated to "
              f"C = {result['extrapolate_to']:.3g} (10× the largest budget); back-test = the fit without the largest "
              "budget minus that budget's optimum." +
              (f" With fewer than 3 budgets E is fixed at 0 ({', '.join(fixed)}): a pure power law, not a scaling "
               "law with an irreducible loss; its extrapolation is optimistic." if fixed else ""), "",
              _table(["arm", "α", "E", "A", "L* at 10×", "back-test error"], fit_rows), ""]
    base = result["baseline"]
    for arm in result["arms"][1:]:
        rows_ = []
        for b, gap in result["gap"][arm].items():
            m = result["multiplier"][arm][b]
            rows_.append([f"{b:.3g}", f"{gap:+.4f}{_ci(((iv.get('gap') or {}).get(arm) or {}).get(b))}",
                          f"{m:.3g}" + (lambda c: f" [{c[0]:.3g}, {c[1]:.3g}]" if c else "")(
                              ((iv.get("multiplier") or {}).get(arm) or {}).get(b))])
        lines += [f"### {arm} vs {base}", "",
                  f"Gap = best loss of {arm} − best loss of {base} (negative: {arm} is better); compute multiplier = "
                  f"the compute {base} needs (on its fit) to reach {arm}'s loss, ÷ C (> 1: {arm} is worth that much "
                  "more compute).", "", _table(["budget (FLOPs)", "gap", "compute multiplier"], rows_), ""]
    lines += ["## Discussion", "", *discussion_lines(result), ""]
    if plot_png:
        lines += [f"![IsoFLOP curves and per-budget optima]({plot_png})", ""]
    return lines


def discussion_lines(result: dict) -> list[str]:
    """Sentences written from the analysis' numbers: sign and size per budget, trend, confidence, 10×."""
    unit = "bits/byte" if result["y"] == "val_bpb" else "nats"
    iv = result.get("intervals") or {}
    base, out = result["baseline"], []
    if len(result["arms"]) < 2:
        f = result["fits"].get(base)
        if f is not None:
            out.append(f"- One arm: the best loss falls as C^(−{f.alpha:.3f}) towards E = {f.E:.3f} {unit}.")
        return out
    for arm in result["arms"][1:]:
        gaps, cis = result["gap"][arm], ((iv.get("gap") or {}).get(arm) or {})
        verdicts = []
        for b, g in gaps.items():
            ci = cis.get(b)
            if ci is None:
                word = "better" if g < 0 else "worse"
                verdicts.append(f"{word} by {abs(g):.4f} at {b:.2g} (no interval)")
            elif ci[1] < 0:
                verdicts.append(f"better by {-g:.4f} at {b:.2g} (resolved)")
            elif ci[0] > 0:
                verdicts.append(f"worse by {g:.4f} at {b:.2g} (resolved)")
            else:
                verdicts.append(f"within noise at {b:.2g} ({g:+.4f})")
        out.append(f"- **{arm}** vs **{base}**: " + "; ".join(verdicts) + ".")
        trend = result["trend"].get(arm)
        if trend is not None:
            per_decade = 10**trend
            direction = "grows" if per_decade > 1.05 else "shrinks" if per_decade < 0.95 else "stays about constant"
            out.append(f"- Its effective compute multiplier {direction} with scale (×{per_decade:.2f} per decade of "
                       f"compute; {', '.join(f'{m:.2f}' for m in result['multiplier'][arm].values())} at the budgets).")
        cross = result["crossover"].get(arm) or []
        if cross:
            out.append(f"- The fitted curves cross at C ≈ {', '.join(f'{c:.2g}' for c in cross)} FLOPs: beyond that the "
                       "sign of the effect flips.")
        gap10 = result["extrapolated"][arm] - result["extrapolated"][base]
        ci10 = (iv.get("gap_extrapolated") or {}).get(arm)
        if ci10 and ci10[1] < 0:
            rec = f"**recommended** at 10× the largest budget: predicted gap {gap10:+.4f}{_ci(ci10)} {unit}"
        elif ci10 and ci10[0] > 0:
            rec = f"**not recommended** at 10× the largest budget: predicted gap {gap10:+.4f}{_ci(ci10)} {unit}"
        elif ci10:
            rec = f"**undecided** at 10× the largest budget: predicted gap {gap10:+.4f}{_ci(ci10)} {unit} includes 0"
        else:
            rec = (f"predicted gap at 10× the largest budget {gap10:+.4f} {unit}, **without an interval** (no seeds): "
                   "a lean, not a recommendation")
        out.append(f"- {arm}: {rec}.")
        bt = [abs(v["error"]) for v in result["backtest"].values()]
        if bt:
            out.append(f"- Caveat: leaving out the largest budget, the fits missed it by up to {max(bt):.4f} {unit}; "
                       "an extrapolation 10× further is less certain than its interval says (the interval covers "
                       "noise, not a wrong functional form).")
    if result["edge"]:
        out.append("- Caveat: some budgets are not bracketed (above); their optima are bounds.")
    return out


def frontier_lines(spec: StudySpec, rows: list[dict], fits: dict[str, dict], y: str = "val_loss") -> list[str]:
    """Without an IsoFLOP grid: fits on the compute-efficient frontier and the verdict at the largest compute."""
    v = verdict(rows, fits, y)
    lines: list[str] = []
    lines += ["## Fits: L(C) = E + A · C^(−α)", "",
              "Per arm, on the compute-efficient frontier (lowest loss per quarter-decade of compute) "
              "or on every point when the frontier has fewer than 3; R² and RMSE are of log L.", ""]
    fit_rows = []
    for arm, f in fits.items():
        fit = f["fit"]
        if fit is None:
            fit_rows.append([arm, "–", "–", "–", "–", "–", "no fit (fewer than 2 distinct compute values)"])
            continue
        note = f"{f['on']}" + ("; E fixed at 0 (< 3 points)" if fit.fixed_E else "")
        fit_rows.append([arm, f"{fit.alpha:.4f}", f"{fit.E:.4f}", f"{fit.A:.4g}", str(fit.n), f"{fit.r2:.4f}",
                         f"{fit.rmse:.2e}; {note}"])
    lines += [_table(["arm", "α", "E", "A", "points", "R²", "RMSE / fitted on"], fit_rows), ""]

    lines += ["## Verdict at the largest compute", ""]
    unit = "bits/byte" if y == "val_bpb" else "nats"

    def verdict_lines(label: str, where: str, r: dict) -> None:
        lines.append(f"- **{label}** {where}: " +
                     ", ".join(f"{a} {loss:.4f}" for a, loss in sorted(r["losses"].items(), key=lambda kv: kv[1])) + ".")
        if "margin" in r:
            lines.append(f"  **{r['winner']}** wins by {r['margin']:.4f} {unit} ({100 * r['relative']:.2f}%) over "
                         f"{r['runner_up']}.")

    if "predicted" in v:
        verdict_lines("Fitted", f"at C = {v['c_max']:.3e} FLOPs", v["predicted"])
    if "observed" in v:
        o = v["observed"]
        verdict_lines("Observed", f"(best run of the largest budget, {spec.budget_kind} = {_num(v['top_budget'])})", o)
        if "predicted" in v and "margin" in o and v["predicted"]["winner"] != o["winner"]:
            lines.append("- The fitted and the observed winners disagree: the difference is within what these "
                         "few points can resolve.")
    if len(fits) == 1:
        lines.append("- One arm only: nothing to compare (a pure scaling study).")
    lines.append("")
    return lines


def write_report(spec: StudySpec, rows: list[dict], fits: dict[str, dict], out_md: str | Path,
                 plot_png: str | Path | None = None, n_planned: int | None = None, isoflop: dict | None = None,
                 isoflop_png: str | None = None, best_report: str | Path | None = None, y: str | None = None) -> Path:
    out_md = Path(out_md)
    lines = [f"# Study: {spec.name}", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    done = len([r for r in rows if r.get("val_loss") is not None])
    lines += [f"{done} finished runs" + (f" of {n_planned} planned" if n_planned else "") +
              f": {len(spec.arms)} arm(s) × {len(spec.sizes)} size(s) × {len(spec.budgets)} {spec.budget_kind} budget(s).",
              ""]

    lines += ["## Spec", "", "```yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False).strip(), "```", ""]

    lines += run_table_lines(rows)
    if isoflop and isoflop.get("optima"):
        lines += isoflop_lines(isoflop, isoflop_png)
    else:
        lines += frontier_lines(spec, rows, fits, y or measure(rows))
    if plot_png:
        lines += ["## Plot", "", f"![validation loss vs training FLOPs]({_link(plot_png, out_md.parent)})", ""]

    n_points = min((f["fit"].n for f in fits.values() if f["fit"] is not None), default=0)
    caveats = [f"- Few points: each fit has 3 free parameters and as few as {n_points} points; α and E trade off "
               "against each other, and an extrapolation beyond the measured compute is a guess."]
    if not spec.seeds:
        caveats.append("- One seed per run: no error bars. Differences between arms smaller than the run-to-run "
                       "noise (typically ~0.01–0.02 nats at these scales) are not evidence.")
    if spec.rules == type(spec.rules)():
        caveats.append("- Hyper-parameters (learning rate, warmup, batch) are the base recipe's for every size and "
                       "budget (no `rules`), not tuned per size; short runs are dominated by warmup and the schedule.")
    if spec.workers > 1:
        caveats.append(f"- Runs were trained {spec.workers} at a time on one machine (`workers`): the tokens/s and "
                       "wall times in the run table are those of a shared GPU, not of a run alone.")
    caveats += ["- Compute counts training FLOPs only (6·N_matmul + attention), not evaluation; arms that change "
                "the parameter count (e.g. tied vs untied embeddings) differ in params at equal FLOPs/token.",
                "- Final validation loss on the final evaluation set (evaluation.final_eval_tokens; default: every "
                "validation block)."]
    lines += ["## Caveats", "", *caveats, ""]
    if best_report:
        link = _link(best_report, out_md.parent)
        lines += ["## The best model", "",
                  f"The best configuration, trained once more with periodic evaluation: its curves, lm-eval scores and "
                  f"generations are in [{link}]({link}).", ""]
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text("\n".join(lines))
    return out_md


def analyse(spec: StudySpec, rows: list[dict], out: str | Path, n_planned: int | None = None,
            best_report: str | Path | None = None) -> dict:
    """Everything after the runs: spec.yaml, results.csv/json, fits.json, analysis.json, the plots and
    report.md in ``out``. ``best_report``: the best model's run report, linked from the study's."""
    import json

    from hfpretrain.study.fit import fit_arms
    from hfpretrain.study.grid import write_results
    from hfpretrain.study.plots import plot_study

    out = Path(out)
    from hfpretrain.study.analysis import analyse_isoflop, to_json
    from hfpretrain.study.plots import plot_isoflop

    out.mkdir(parents=True, exist_ok=True)
    # the spec as run (with --workers and command-line overrides): scripts/report.py STUDY_DIR reads it back
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    csv_path, json_path = write_results(rows, out)
    y = measure(rows)
    fits = fit_arms(rows, y=y)
    isoflop, isoflop_png = None, None
    if spec.budget_kind == "flops" and rows:
        isoflop = analyse_isoflop(rows, y=y)
        (out / "analysis.json").write_text(json.dumps(to_json(isoflop), indent=2, default=str))
        if isoflop.get("optima"):
            isoflop_png = plot_isoflop(rows, isoflop, out / "isoflop.png").name
    (out / "fits.json").write_text(json.dumps(
        {arm: {"fit": f["fit"].as_dict() if f["fit"] else None, "of": y, "on": f["on"],
               "frontier": [r["run"] for r in f["frontier"]]} for arm, f in fits.items()}, indent=2))
    plot = plot_study(rows, fits, out / "loss_vs_flops.png", title=spec.name, y=y) if rows else None
    report = write_report(spec, rows, fits, out / "report.md", plot, n_planned, isoflop, isoflop_png, best_report, y)
    return {"results_csv": csv_path, "results_json": json_path, "fits": fits, "plot": plot, "report": report,
            "isoflop": isoflop}
