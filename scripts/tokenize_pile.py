#!/usr/bin/env python
"""Alias of `hfpretrain tokenize` (src/hfpretrain/cli/tokenize_pile.py): see `python scripts/tokenize_pile.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.tokenize_pile import main

if __name__ == "__main__":
    sys.exit(interruptible("tokenize", main))
