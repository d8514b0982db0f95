"""Tokens/s, MFU, peak memory and scaling efficiency of the multi-GPU runs in a folder of benchmark JSONs
(benchmarks/benchmark.py ours --out DIR/NAME.json; efficiency = tokens/s per GPU / one_gpu's tokens/s)."""

import json
import sys
from pathlib import Path

runs = {p.stem: json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("*.json"))}
one = runs.get("one_gpu")
for name, r in runs.items():
    gpus = round(r["tokens_per_s"] / r["tokens_per_s_per_gpu"])
    line = f"{name:12s} {gpus} GPU {r['tokens_per_s']:>10,.0f} tok/s  MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB"
    if one and name != "one_gpu":
        line += f"  scaling efficiency {r['tokens_per_s_per_gpu'] / one['tokens_per_s']:.1%}"
    print(line)
