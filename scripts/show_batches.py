#!/usr/bin/env python
"""Print example training batches from a tokenize_pile.py output, with document boundaries,
source set names and summary statistics.

    python scripts/show_batches.py runs/data/gpt2-1024 --batches 2 --batch-size 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="output folder of tokenize_pile.py")
    p.add_argument("--split", default="train", choices=["train", "validation"])
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-chars", type=int, default=240, help="shorten each segment to this many characters (0: full text)")
    args = p.parse_args(argv)
    if not (Path(args.out) / "manifest.json").is_file():
        sys.exit(f"error: {args.out} is not a tokenize_pile.py output (no manifest.json)")
    from hfpretrain.data.show import render_batches

    print(render_batches(args.out, split=args.split, num_batches=args.batches, batch_size=args.batch_size,
                         max_chars=args.max_chars or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
