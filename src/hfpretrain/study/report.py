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


def verdict(rows: list[dict], fits: dict[str, dict]) -> dict:
    """Which arm wins at the largest compute, and by how much.

    ``predicted``: each fitted arm's L(C_max), C_max = the largest training FLOPs of the study.
    ``observed``: each arm's best final loss among its runs of the largest budget (same budgets
    in every arm, so this compares like with like).
    """
    out: dict = {"arms": list(fits)}
    measured = [r for r in rows if r.get("val_loss") is not None]
    if not measured:
        return out
    c_max = max(r["flops"] for r in measured)
    predicted = {arm: float(f["fit"].predict(c_max)) for arm, f in fits.items() if f["fit"] is not None}
    top = max(r["budget"] for r in measured)
    observed = {}
    for arm in fits:
        losses = [r["val_loss"] for r in measured if r["arm"] == arm and r["budget"] == top]
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


def write_report(spec: StudySpec, rows: list[dict], fits: dict[str, dict], out_md: str | Path,
                 plot_png: str | Path | None = None, n_planned: int | None = None) -> Path:
    out_md = Path(out_md)
    v = verdict(rows, fits)
    lines = [f"# Study: {spec.name}", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    done = len([r for r in rows if r.get("val_loss") is not None])
    lines += [f"{done} finished runs" + (f" of {n_planned} planned" if n_planned else "") +
              f": {len(spec.arms)} arm(s) × {len(spec.sizes)} size(s) × {len(spec.budgets)} {spec.budget_kind} budget(s).",
              ""]

    lines += ["## Spec", "", "```yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False).strip(), "```", ""]

    lines += ["## Results", "",
              "Training FLOPs = FLOPs/token (6·N_matmul + attention term) × training tokens; "
              "val loss = final evaluation loss (nats/token).", ""]
    table = [[r["run"], r["arm"], r["size"], _num(r["params"]), _num(r["non_embedding_params"]), _num(r["steps"]),
              _num(r["tokens"]), f"{r['flops']:.3e}", _num(r["val_loss"])] for r in rows]
    lines += [_table(["run", "arm", "size", "params", "non-emb params", "steps", "tokens", "train FLOPs",
                      "val loss"], table), ""]

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
    def verdict_lines(label: str, where: str, r: dict) -> None:
        lines.append(f"- **{label}** {where}: " +
                     ", ".join(f"{a} {loss:.4f}" for a, loss in sorted(r["losses"].items(), key=lambda kv: kv[1])) + ".")
        if "margin" in r:
            lines.append(f"  **{r['winner']}** wins by {r['margin']:.4f} nats ({100 * r['relative']:.2f}%) over "
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

    if plot_png:
        rel = Path(plot_png)
        try:
            rel = rel.relative_to(out_md.parent)
        except ValueError:
            pass
        lines += ["## Plot", "", f"![validation loss vs training FLOPs]({rel.as_posix()})", ""]

    n_points = min((f["fit"].n for f in fits.values() if f["fit"] is not None), default=0)
    lines += ["## Caveats", "",
              f"- Few points: each fit has 3 free parameters and as few as {n_points} points; α and E trade off "
              "against each other, and an extrapolation beyond the measured compute is a guess.",
              "- One seed per run: no error bars. Differences between arms smaller than the run-to-run noise "
              "(typically ~0.01–0.02 nats at these scales) are not evidence.",
              "- Hyper-parameters (learning rate, schedule, warmup, batch) are the base recipe's for every size "
              "and budget, not tuned per size; short runs are dominated by warmup and the schedule.",
              "- Compute counts training FLOPs only (6·N_matmul + attention), not evaluation; arms that change "
              "the parameter count (e.g. tied vs untied embeddings) differ in params at equal FLOPs/token.",
              "- Final validation loss on a fixed number of validation tokens (evaluation.eval_tokens).", ""]
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text("\n".join(lines))
    return out_md


def analyse(spec: StudySpec, rows: list[dict], out: str | Path, n_planned: int | None = None) -> dict:
    """Everything after the runs: results.csv/json, fits.json, loss_vs_flops.png, report.md in ``out``."""
    import json

    from hfpretrain.study.fit import fit_arms
    from hfpretrain.study.grid import write_results
    from hfpretrain.study.plots import plot_study

    out = Path(out)
    csv_path, json_path = write_results(rows, out)
    fits = fit_arms(rows)
    (out / "fits.json").write_text(json.dumps(
        {arm: {"fit": f["fit"].as_dict() if f["fit"] else None, "on": f["on"],
               "frontier": [r["run"] for r in f["frontier"]]} for arm, f in fits.items()}, indent=2))
    plot = plot_study(rows, fits, out / "loss_vs_flops.png", title=spec.name) if rows else None
    report = write_report(spec, rows, fits, out / "report.md", plot, n_planned)
    return {"results_csv": csv_path, "results_json": json_path, "fits": fits, "plot": plot, "report": report}
