"""Training losses of two runs step by step (their log.jsonl): the largest and mean differences.

    python benchmarks/compare_losses.py runs/fast/log.jsonl runs/plain/log.jsonl [--plot curves.png]

Either log may be compressed (``log.jsonl.xz`` / ``.gz``, as results/ keeps them).
"""

import json
import statistics
import sys


def opened(path):  # results/ keeps its logs as log.jsonl.xz (or .gz)
    if path.endswith(".xz"):
        import lzma

        return lzma.open(path, "rt")
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt")
    return open(path)


def losses(path):
    events = (json.loads(line) for line in opened(path) if line.strip())
    return {e["step"]: e["loss"] for e in events if e.get("event") == "log" and "loss" in e}


a, b = losses(sys.argv[1]), losses(sys.argv[2])
plot = sys.argv[sys.argv.index("--plot") + 1] if "--plot" in sys.argv else None
steps = sorted(set(a) & set(b))
diff = [abs(a[s] - b[s]) for s in steps]
rel = [d / abs(b[s]) for d, s in zip(diff, steps)]
worst = max(range(len(steps)), key=diff.__getitem__)
print(
    f"{len(steps)} common logged steps ({steps[0]}..{steps[-1]}): max |diff| {diff[worst]:.4f} at step "
    f"{steps[worst]} ({a[steps[worst]]:.4f} vs {b[steps[worst]]:.4f}), max relative {max(rel):.2%}, "
    f"mean |diff| {statistics.mean(diff):.4f}, mean signed {statistics.mean(a[s] - b[s] for s in steps):+.4f}"
)
print(f"last step {steps[-1]}: {a[steps[-1]]:.4f} vs {b[steps[-1]]:.4f}")
if plot:  # both curves, and the relative difference under them
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, height_ratios=[3, 1])
    top.plot(steps, [a[s] for s in steps], label=sys.argv[1])
    top.plot(steps, [b[s] for s in steps], "--", label=sys.argv[2])
    top.set_ylabel("training loss (nats/token)")
    top.legend(fontsize=7)
    bottom.plot(steps, [100 * (a[s] - b[s]) / b[s] for s in steps])
    bottom.axhline(0, color="grey", lw=0.5)
    bottom.set_ylabel("difference (%)")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(plot, dpi=110)
    print(f"plot: {plot}")
