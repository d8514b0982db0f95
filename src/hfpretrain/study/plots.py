"""Plots of training runs, read from their JSONL logs."""

from __future__ import annotations

import io
import json
from pathlib import Path

from hfpretrain.data.manifest import bits_per_byte


def _log_axes(ax, xlabel: str, ylabel: str, title: str, **legend) -> None:
    """The study plots' common frame: log x, labels, title, a light grid, the legend."""
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(**{"fontsize": 8, **legend})


def _save(fig, out_png: str | Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")  # legends below the axes stay in the picture
    plt.close(fig)
    write_small_png(buffer, out_png)
    return out_png


def write_small_png(source, out_png: str | Path) -> None:
    """A plot as a 256-colour PNG: a third of matplotlib's RGBA size for the same picture (lines and text on a
    white ground), which keeps results/ small enough to clone."""
    from PIL import Image

    with Image.open(source) as image:
        image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            out_png, format="PNG", optimize=True
        )


LOG_NAMES = ("log.jsonl", "log.jsonl.xz", "log.jsonl.gz")  # as written; as kept compressed under results/


def run_log(run_dir: str | Path) -> Path | None:
    """A run folder's JSONL log: ``log.jsonl``, else the compressed copy results/ keeps (``log.jsonl.xz`` or
    ``.gz``); None when there is none."""
    return next((Path(run_dir) / n for n in LOG_NAMES if (Path(run_dir) / n).is_file()), None)


def open_log(path: str | Path):
    """A JSONL log opened for reading as text, decompressed when its name ends in ``.xz`` or ``.gz``."""
    path = Path(path)
    if path.suffix == ".xz":
        import lzma

        return lzma.open(path, "rt", encoding="utf-8")
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def log_problem(log: Path) -> str | None:
    """``FILE:LINE: why`` for the first record the plot cannot read (it would stop there with a traceback)."""
    try:
        with open_log(log) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as err:
        return f"{log}: unreadable ({err})"
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            cut = " (cut short: a run killed while writing it?)" if n == len(lines) else ""
            return f"{log}:{n}: not a JSON record{cut}: {err.msg}"
        if not isinstance(record, dict) or "event" not in record:
            return f'{log}:{n}: not a log record (a JSON object with an "event" key)'
    return None


def _record(path, n: int, line: str, last: bool = False) -> dict:
    """One JSON record of a log; one that does not parse is a ValueError naming the file and line (it was the JSON
    parser's bare "Unterminated string ..." in a study's report)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        cut = " (cut short: a run killed while writing it?)" if last else ""
        raise ValueError(f"{path}:{n}: not a JSON record{cut}: {err.msg}; remove or repair that line") from None


def read_log(path: str | Path) -> list[dict]:
    with open_log(path) as f:
        lines = f.read().splitlines()
    return [_record(path, n, line, n == len(lines)) for n, line in enumerate(lines, 1) if line.strip()]


def first_record(path: str | Path) -> dict:
    """The first record of a log (its config event), ``{}`` for an empty one."""
    with open_log(path) as f:
        line = f.readline()
    record = _record(path, 1, line, not line.endswith("\n")) if line.strip() else {}
    return record if isinstance(record, dict) else {}


def plot_run(
    log_jsonl: str | Path, out_png: str | Path, title: str | None = None, tokens_per_byte: float | None = None
) -> Path:
    """A run at a glance, from its log.jsonl: training and validation loss (and bits per byte) against tokens
    seen, the learning rate, tokens/s and MFU per logging window, and the gradient norm. ``tokens_per_byte``
    (the data manifest's): bits per byte from the validation loss, rather than the figure the run logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = read_log(log_jsonl)
    config = next((e for e in events if e["event"] == "config"), {})
    tokens_per_step = config.get("plan", {}).get("tokens_per_step", 1)
    logs = [e for e in events if e["event"] == "log" and "loss" in e]
    evals = [e for e in events if e["event"] == "eval" and "eval_loss" in e]

    def series(rows, key):
        return [(e["step"] * tokens_per_step, e[key]) for e in rows if e.get(key) is not None]

    moe = any("expert_load_max_mean" in e for e in logs)  # an MoE run: a third row for the experts' load
    fig, axes = plt.subplots(3 if moe else 2, 2, figsize=(11, 10.5 if moe else 7))
    (loss_ax, lr_ax), (speed_ax, grad_ax) = axes[:2]
    if logs:
        loss_ax.plot(*zip(*series(logs, "loss")), label="train loss", lw=1)
    if evals:
        loss_ax.plot(*zip(*series(evals, "eval_loss")), "o-", label="validation loss")
        # the logged figure only from runs that had the text's bytes (earlier ones logged per byte on disk)
        logged_ok = bool(config.get("plan", {}).get("validation_text_bytes"))
        bpb = (
            [(t, bits_per_byte(loss, tokens_per_byte)) for t, loss in series(evals, "eval_loss")]
            if tokens_per_byte
            else series(evals, "eval_bpb")
            if logged_ok
            else []
        )
        if bpb:
            loss_ax.plot(*zip(*bpb), "s--", label="validation bits per byte")
    loss_ax.set_ylabel("nats/token (bits/byte)")
    lr = series(logs, "learning_rate")
    if lr:
        lr_ax.plot(*zip(*lr))
    lr_ax.set_ylabel("learning rate")
    speed = series(logs, "tokens_per_s")
    if speed:
        speed_ax.plot(*zip(*speed), label="tokens/s")
        mfu = series(logs, "mfu")
        if mfu:
            twin = speed_ax.twinx()
            twin.plot(*zip(*mfu), color="C1", lw=1)
            twin.set_ylabel("MFU", color="C1")
    speed_ax.set_ylabel("tokens/s (training steps only)")
    grad = series(logs, "grad_norm")
    if grad:
        grad_ax.plot(*zip(*grad))
        grad_ax.set_yscale("log")
    grad_ax.set_ylabel("gradient norm (before clipping)")
    if moe:
        _plot_expert_load(axes[2], logs, series)
    for ax in axes.flat:
        ax.set_xlabel("tokens seen")
        ax.grid(alpha=0.3)
    loss_ax.legend(fontsize=8)
    fig.suptitle(title or Path(log_jsonl).parent.name)
    return _save(fig, out_png)


def _plot_expert_load(axes, logs: list[dict], series) -> None:
    """Each MoE layer's most loaded expert against the mean (1 = balanced), and the worst layer's least loaded
    expert with the share of experts that got no token in the window (training/moe.py load_figures)."""
    per_layer, dead_ax = axes
    layers = sorted({int(k.rsplit("/", 1)[1]) for e in logs for k in e if k.startswith("expert_load_max_mean/")})
    for layer in layers:
        per_layer.plot(*zip(*series(logs, f"expert_load_max_mean/{layer}")), lw=0.8, label=f"layer {layer}")
    per_layer.axhline(1.0, color="grey", lw=0.8, ls=":")
    per_layer.set_ylabel("expert load, max / mean per layer")
    if 1 < len(layers) <= 12:
        per_layer.legend(fontsize=6, ncol=2)
    dead_ax.plot(*zip(*series(logs, "expert_load_min_mean")), label="min / mean (worst layer)")
    dead_ax.plot(*zip(*series(logs, "dead_experts")), label="share of experts with no token")
    dead_ax.set_ylabel("least loaded experts")
    dead_ax.legend(fontsize=8)


def _unit(y: str) -> str:
    return "bits per byte" if y == "val_bpb" else "nats/token"


BELOW = dict(loc="upper center", bbox_to_anchor=(0.5, -0.16))  # a legend under the axes never covers a point


def plot_study(
    rows: list[dict],
    fits: dict[str, dict],
    out_png: str | Path,
    title: str | None = None,
    y: str = "val_loss",
    dashed: dict | None = None,
) -> Path:
    """Final validation loss (``y``: val_loss, or val_bpb across tokenizers) against training FLOPs (log x),
    one colour per arm and one marker per model size: every run as a point (frontier points filled, the
    others hollow) and each arm's fitted E + A·C^(−α) curve.

    ``fits`` is the output of ``hfpretrain.study.fit.fit_arms`` (or the IsoFLOP analysis' fits in its shape);
    ``dashed``: arm -> another fit of the same arm, drawn dashed (the sensitivity model).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    flops = [r["flops"] for r in rows if r.get(y) is not None]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    marker = {size: "osD^vP*Xhp<>"[i % 12] for i, size in enumerate(sizes)}
    for i, arm in enumerate(dict.fromkeys(r["arm"] for r in rows)):
        colour = f"C{i}"
        pts = [r for r in rows if r["arm"] == arm and r.get(y) is not None]
        front = {r["run"] for r in fits.get(arm, {}).get("frontier", [])}
        for r in pts:
            filled = r["run"] in front
            ax.scatter(
                r["flops"],
                r[y],
                marker=marker[r["size"]],
                zorder=3 if filled else 2,
                facecolors=colour if filled else "none",
                edgecolors=colour,
                alpha=1.0 if filled else 0.7,
            )
        label = arm
        fit = fits.get(arm, {}).get("fit")
        if fit is not None:
            label = f"{arm}: E={fit.E:.3g}, A={fit.A:.3g}, α={fit.alpha:.3g}"
        if fit is not None and flops:
            xs = np.logspace(np.log10(min(flops)) - 0.1, np.log10(max(flops)) + 0.1, 200)
            ax.plot(xs, fit.predict(xs), color=colour, label=label)
        else:
            ax.plot([], [], "o", color=colour, label=label)
        other = (dashed or {}).get(arm)
        if other is not None and flops:
            ax.plot(
                xs,
                other.predict(xs),
                "--",
                color=colour,
                lw=1,
                label=f"{arm}, separate E: E={other.E:.3g}, A={other.A:.3g}, α={other.alpha:.3g}",
            )
    if len(sizes) > 1:
        for size in sizes:
            ax.scatter([], [], marker=marker[size], facecolors="none", edgecolors="grey", label=size)
    unit = _unit(y)
    _log_axes(
        ax,
        "training FLOPs (6·N_matmul + attention, × tokens)",
        f"final validation loss ({unit})",
        title or "validation loss vs compute (filled: frontier)",
        ncol=2,
        **{**BELOW, "bbox_to_anchor": (0.5, -0.2)},
    )
    return _save(fig, out_png)


def _plot_gap(ax, result: dict, arms: list[str], unit: str) -> None:
    intervals = result.get("intervals") or {}
    base = result["baseline"]
    for i, arm in enumerate(arms, 1):
        gaps = result["gap"][arm]
        cis = (intervals.get("gap") or {}).get(arm) or {}
        xs = [b for b in result["budgets"] if b in gaps]
        ys = [gaps[b] for b in xs]
        # the point comes from the full fit, the interval from the bootstrap's: clamp, never a negative bar
        err = (
            [[max(0.0, y - cis[b][0]) for b, y in zip(xs, ys)], [max(0.0, cis[b][1] - y) for b, y in zip(xs, ys)]]
            if all(cis.get(b) for b in xs)
            else None
        )
        ax.errorbar(xs, ys, yerr=err, fmt="o-", color=f"C{i}", capsize=3, label=f"{arm} − {base}")
        gap10 = result["extrapolated"][arm] - result["extrapolated"][base]
        ci = (intervals.get("gap_extrapolated") or {}).get(arm)
        ax.errorbar(
            [result["extrapolate_to"]],
            [gap10],
            yerr=[[max(0.0, gap10 - ci[0])], [max(0.0, ci[1] - gap10)]] if ci else None,
            fmt="s",
            mfc="none",
            color=f"C{i}",
            capsize=3,
        )
    ax.axhline(0, color="k", lw=0.8)
    _log_axes(
        ax,
        "training FLOPs",
        f"gap in best loss ({unit}; < 0: the arm is better)",
        "the ablation's effect vs compute (95% intervals; □: 10×)",
        **BELOW,
    )


def plot_isoflop(rows: list[dict], result: dict, out_png: str | Path) -> Path:
    """Panels from ``analysis.analyse_isoflop``: loss vs size per budget (IsoFLOP curves, one colour per
    budget, one line style per arm, the optimum starred); per-budget optimum vs compute per arm with the
    fitted law, bootstrap error bars from the noise floor, and the 10× extrapolation; with two arms or more,
    the gap of each arm to the baseline vs compute, with its intervals (the question an ablation asks)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from hfpretrain.study.analysis import cells

    y, arms, budgets = result["y"], result["arms"], result["budgets"]
    unit = _unit(y)
    others = [a for a in arms if a != result.get("baseline") and result.get("gap", {}).get(a)]
    fig, axes = plt.subplots(1, 3 if others else 2, figsize=(18 if others else 12, 4.8))
    left, right = axes[0], axes[1]
    styles = ["-", "--", ":", "-."]
    cell_map = cells(rows, y)
    for j, b in enumerate(budgets):
        for i, arm in enumerate(arms):
            sizes = cell_map.get((arm, b))
            if not sizes:
                continue
            pts = sorted((c["n"], float(np.mean(c["losses"]))) for c in sizes.values())
            left.plot(*zip(*pts), styles[i % 4], marker="o", color=f"C{j}", label=f"{arm}, C={b:.2g}")
            o = result["optima"][arm, b]
            left.plot(o["n_opt"], o["loss_opt"], "*", ms=12, color=f"C{j}", mec="k" if o["bracketed"] else "r")
    _log_axes(
        left,
        "parameters N (non-embedding + LM head)",
        f"final validation loss ({unit})",
        "IsoFLOP curves (★ optimum; red edge: not bracketed)",
        fontsize=7,
        ncol=2,
        **BELOW,
    )

    sigma = (result.get("noise") or {}).get("sigma")
    xs = np.logspace(np.log10(min(budgets)) - 0.2, np.log10(result["extrapolate_to"]), 200)
    for i, arm in enumerate(arms):
        pts = [
            (result["optima"][arm, b]["flops"], result["optima"][arm, b]["loss_opt"])
            for b in budgets
            if (arm, b) in result["optima"]
        ]
        fit = result["fits"].get(arm)
        label = (
            arm if fit is None else f"{arm}: {fit.E:.3g} + {fit.A:.3g}·C^−{fit.alpha:.3g} ({result.get('model', '')})"
        )
        right.errorbar(*zip(*pts), yerr=sigma if sigma else None, fmt="o", color=f"C{i}", capsize=3, label=label)
        if fit is not None:
            right.plot(xs, fit.predict(xs), styles[i % 4], color=f"C{i}")
            right.plot(result["extrapolate_to"], result["extrapolated"][arm], "s", mfc="none", color=f"C{i}")
    _log_axes(
        right,
        "training FLOPs",
        f"best loss at the budget ({unit})",
        "per-budget optimum vs compute (□: 10× extrapolation)",
        **BELOW,
    )
    if others:
        _plot_gap(axes[2], result, others, unit)
    return _save(fig, out_png)
