#!/usr/bin/env python
"""The whole pipeline, small, on CPU (what `make demo` runs). Needs DATA_ROOT."""

import argparse
import logging
import sys

from hfpretrain.demo import run_demo
from hfpretrain.paths import MissingDataError

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="out/demo")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--eval-limit", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    try:
        run_demo(args.out, args.max_steps, args.eval_limit)
    except (MissingDataError, FileNotFoundError) as err:
        sys.exit(f"error: {err}")
