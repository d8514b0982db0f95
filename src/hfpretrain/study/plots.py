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
