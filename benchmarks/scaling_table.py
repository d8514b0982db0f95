"""Tokens/s, MFU, peak memory and scaling efficiency of the multi-GPU runs in a folder of benchmark JSONs
(benchmarks/benchmark.py ours --out DIR/NAME.json; efficiency = tokens/s per GPU / tokens/s of one GPU at the same
sequence length: cp2_32k against one_gpu_32k, or one_gpu_32k_ckpt where the plain one did not fit)."""

import json
import re
import sys
from pathlib import Path

runs = {p.stem: json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("*.json"))}


def one_gpu(name: str) -> dict | None:
    length = re.search(r"_\d+k", name)
    base = "one_gpu" + (length.group(0) if length else "")
    return runs.get(base) or runs.get(base + "_ckpt")


for name, r in runs.items():
    gpus = round(r["tokens_per_s"] / r["tokens_per_s_per_gpu"])
    line = f"{name:12s} {gpus} GPU {r['tokens_per_s']:>10,.0f} tok/s  MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB"
    one = one_gpu(name)
    if one and not name.startswith("one_gpu"):
        line += f"  scaling efficiency {r['tokens_per_s_per_gpu'] / one['tokens_per_s']:.1%}"
    print(line)
