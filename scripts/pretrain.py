#!/usr/bin/env python
"""Alias of `hfpretrain train` (src/hfpretrain/cli/pretrain.py): see `python scripts/pretrain.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.pretrain import main

if __name__ == "__main__":
    sys.exit(interruptible("train", main))
