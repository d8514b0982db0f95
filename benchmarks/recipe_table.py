#!/usr/bin/env python
"""One row per run: what changed, bits per byte on the whole validation set, steady tokens/s, MFU, training
FLOPs, wall time (the Trainer's, compile and periodic evaluations included) and the training time at the steady
tokens/s (tokens / steady tokens/s: comparable across runs whose compile hit or missed a warm cache), read back from each run's ``log.jsonl`` and ``summary.json`` (issue 16's table).

    python benchmarks/recipe_table.py "classic=runs/gpt2_124m" "+ 8k BPE=runs/row_bpe8k" ... > table.md
"""

import json
import sys
from pathlib import Path

from stock_trainer import summarize_run  # benchmarks/stock_trainer.py, beside this file


def row(label: str, run: Path) -> str:
    s = summarize_run(run)
    summary = json.loads((run / "summary.json").read_text())
    plan, final = summary["plan"], summary["final_eval"]
    return (
        f"| {label} | {final['eval_bpb']:.3f} | {final['eval_loss']:.3f} | {s['tokens_per_s']:,.0f} | "
        f"{s['mfu']:.1%} | {plan['total_flops']:.4g} | {plan['max_steps']:,} | {plan['total_tokens'] / 1e6:.0f}M | "
        f"{summary['train']['epoch']:.1f} | {summary['end_to_end']['wall_s']:.1f} | "
        f"{plan['total_tokens'] / s['tokens_per_s']:.1f} |"
    )


def main(argv: list[str]) -> int:
    print(
        "| run | bits per byte | nats/token | tokens/s | MFU | training FLOPs | steps | tokens | passes | wall time (s) | at steady tokens/s (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for item in argv:
        label, _, path = item.rpartition("=")
        print(row(label, Path(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
