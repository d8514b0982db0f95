#!/usr/bin/env python
"""Alias of `hfpretrain show-batches` (src/hfpretrain/cli/show_batches.py): see `python scripts/show_batches.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.show_batches import main

if __name__ == "__main__":
    sys.exit(interruptible("show-batches", main))
