"""Training losses of two runs step by step (their log.jsonl): the largest and mean differences.

    python benchmarks/compare_losses.py runs/fast/log.jsonl runs/plain/log.jsonl
"""
import json
import statistics
import sys


def losses(path):
    events = (json.loads(line) for line in open(path))
    return {e["step"]: e["loss"] for e in events if e.get("event") == "log" and "loss" in e}


a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
diff = [abs(a[s] - b[s]) for s in steps]
rel = [d / abs(b[s]) for d, s in zip(diff, steps)]
worst = max(range(len(steps)), key=diff.__getitem__)
print(f"{len(steps)} common logged steps ({steps[0]}..{steps[-1]}): max |diff| {diff[worst]:.4f} at step "
      f"{steps[worst]} ({a[steps[worst]]:.4f} vs {b[steps[worst]]:.4f}), max relative {max(rel):.2%}, "
      f"mean |diff| {statistics.mean(diff):.4f}, mean signed {statistics.mean(a[s] - b[s] for s in steps):+.4f}")
print(f"last step {steps[-1]}: {a[steps[-1]]:.4f} vs {b[steps[-1]]:.4f}")
