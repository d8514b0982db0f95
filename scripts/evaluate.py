#!/usr/bin/env python
"""Alias of `hfpretrain eval` (src/hfpretrain/cli/evaluate.py): see `python scripts/evaluate.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(interruptible("eval", main))
