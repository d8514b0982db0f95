"""Plots of training runs, read from their JSONL logs."""

from __future__ import annotations

import json
from pathlib import Path


def read_log(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_run(log_jsonl: str | Path, out_png: str | Path, title: str | None = None) -> Path:
    """Train loss per logging window and validation loss against tokens seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = read_log(log_jsonl)
    config = next((e for e in events if e["event"] == "config"), {})
    tokens_per_step = config.get("plan", {}).get("tokens_per_step", 1)
    train = [(e["step"] * tokens_per_step, e["loss"]) for e in events if e["event"] == "log" and "loss" in e]
    val = [(e["step"] * tokens_per_step, e["eval_loss"]) for e in events if e["event"] == "eval" and "eval_loss" in e]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label="train loss")
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title or Path(log_jsonl).parent.name)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png


def plot_study(rows: list[dict], fits: dict[str, dict], out_png: str | Path, title: str | None = None) -> Path:
    """Final validation loss against training FLOPs (log x), one colour per arm and one marker per
    model size: every run as a point (frontier points filled, the others hollow) and each arm's
    fitted E + A·C^(−α) curve.

    ``fits`` is the output of ``hfpretrain.study.fit.fit_arms``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    flops = [r["flops"] for r in rows if r.get("val_loss") is not None]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    marker = {size: "osD^vP*Xhp<>"[i % 12] for i, size in enumerate(sizes)}
    for i, arm in enumerate(dict.fromkeys(r["arm"] for r in rows)):
        colour = f"C{i}"
        pts = [r for r in rows if r["arm"] == arm and r.get("val_loss") is not None]
        front = {r["run"] for r in fits.get(arm, {}).get("frontier", [])}
        for r in pts:
            filled = r["run"] in front
            ax.scatter(r["flops"], r["val_loss"], marker=marker[r["size"]], zorder=3 if filled else 2,
                       facecolors=colour if filled else "none", edgecolors=colour, alpha=1.0 if filled else 0.7)
        label = arm
        fit = fits.get(arm, {}).get("fit")
        if fit is not None:
            label = f"{arm}: E={fit.E:.3g}, A={fit.A:.3g}, α={fit.alpha:.3g}"
        if fit is not None and flops:
            xs = np.logspace(np.log10(min(flops)) - 0.1, np.log10(max(flops)) + 0.1, 200)
            ax.plot(xs, fit.predict(xs), color=colour, label=label)
        else:
            ax.plot([], [], "o", color=colour, label=label)
    if len(sizes) > 1:
        for size in sizes:
            ax.scatter([], [], marker=marker[size], facecolors="none", edgecolors="grey", label=size)
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs (6·N_matmul + attention, × tokens)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title(title or "validation loss vs compute (filled: frontier)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png
