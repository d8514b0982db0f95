#!/usr/bin/env python
"""Benchmark tokenize_corpus against the classic run_clm.py recipe (see docs/data.md).

    python benchmarks/bench_tokenize.py --input $DATA_ROOT/pretrain/mix/mini_train.jsonl.zst \
        $DATA_ROOT/pretrain/mix/train-00000.jsonl.zst --tokenizer $DATA_ROOT/tokenizers/gpt2 --num-proc 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", nargs="+", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--num-proc", type=int, default=2)
    p.add_argument(
        "--encoder",
        choices=["auto", "hf", "tiktoken"],
        default="auto",
        help="our tokenizer backend (default auto: tiktoken where exact); the classic recipe uses HF",
    )
    p.add_argument("--workdir", default=None, help="keep outputs here (default: a temporary folder, removed)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    import datasets

    datasets.disable_progress_bars()
    from hfpretrain.data import DataError
    from classic_tokenize import format_result, run_benchmark  # benchmarks/classic_tokenize.py

    try:
        r = run_benchmark(
            args.input,
            args.tokenizer,
            seq_len=args.seq_len,
            num_proc=args.num_proc,
            workdir=args.workdir,
            encoder=args.encoder,
        )
    except DataError as e:
        sys.exit(f"error: {e}")
    print(format_result(r))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(r, fh, indent=2)
    return 0 if r["same_token_stream"] else 1


if __name__ == "__main__":
    sys.exit(main())
