#!/usr/bin/env python
"""Alias of `hfpretrain plot` (src/hfpretrain/cli/plot.py): see `python scripts/plot.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.plot import main

if __name__ == "__main__":
    sys.exit(interruptible("plot", main))
