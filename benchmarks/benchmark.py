#!/usr/bin/env python
"""Throughput benchmark: this project's trainer vs a stock transformers.Trainer on the same shape and data.

python benchmarks/benchmark.py ours  recipes/qwen3_1p8b_1gpu.yaml data.path=... training.max_steps=60 --out ours.json
python benchmarks/benchmark.py stock recipes/qwen3_1p8b_1gpu.yaml data.path=... --micro-batch 12,10,8 --max-steps 60 --out stock.json
python benchmarks/benchmark.py table ours.json stock.json
"""

import argparse
import gc
import json
import logging
import os
import sys

import torch

from hfpretrain.training import pretrain
from stock_trainer import run_stock, summarize_run  # benchmarks/stock_trainer.py, beside this file
from hfpretrain.training.config import load_recipe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["ours", "stock", "table"])
    parser.add_argument("args", nargs="*", help="recipe and overrides (ours/stock), or result files (table)")
    parser.add_argument("--micro-batch", default="8", help="stock: micro-batches to try, largest first (OOM -> next)")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--out", help="write the result JSON here")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    if opts.mode == "table":
        rows = [json.load(open(p)) for p in opts.args]
        print("| trainer | micro-batch | tokens/s | TFLOP/s/GPU | MFU | peak mem GiB | est. GiB |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            est = (r.get("memory_estimate_gib") or {}).get("total")
            print(
                f"| {r['trainer']} | {r.get('micro_batch')} | {r.get('tokens_per_s', 0):,.0f} | "
                f"{r.get('tflops_per_gpu', 0):.1f} | {r.get('mfu', 0):.1%} | {r.get('mem_peak_gib') or 0:.1f} | "
                f"{est or 0:.1f} |"
            )
        if len(rows) == 2:
            print(
                f"\nratio {rows[0]['trainer']} / {rows[1]['trainer']}: "
                f"{rows[0]['tokens_per_s'] / rows[1]['tokens_per_s']:.3f}x tokens/s"
            )
        return 0

    recipe, overrides = opts.args[0], opts.args[1:]
    if opts.mode == "ours":
        pretrain(recipe, overrides)
        if int(os.environ.get("RANK", "0")) != 0:  # rank 0 writes the log and the result
            return 0
        result = summarize_run(load_recipe(recipe, overrides).training["output_dir"])
    else:
        result = None
        for mb in [int(x) for x in opts.micro_batch.split(",")]:
            try:
                result = run_stock(recipe, overrides, mb, opts.max_steps, f"/tmp/stock_mb{mb}")
                break
            except torch.OutOfMemoryError:
                print(f"stock Trainer: micro-batch {mb} does not fit, trying the next", file=sys.stderr)
                gc.collect()
                torch.cuda.empty_cache()
        if result is None:
            print("error: no micro-batch fits", file=sys.stderr)
            return 1
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if opts.out:
        open(opts.out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
