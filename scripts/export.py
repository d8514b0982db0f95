#!/usr/bin/env python
"""Alias of `hfpretrain export` (src/hfpretrain/cli/export.py): see `python scripts/export.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.export import main

if __name__ == "__main__":
    sys.exit(interruptible("export", main))
