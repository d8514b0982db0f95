#!/usr/bin/env python
"""Alias of `hfpretrain generate` (src/hfpretrain/cli/generate.py): see `python scripts/generate.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.generate import main

if __name__ == "__main__":
    sys.exit(interruptible("generate", main))
