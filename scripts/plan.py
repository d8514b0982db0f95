#!/usr/bin/env python
"""Alias of `hfpretrain plan` (src/hfpretrain/cli/plan.py): see `python scripts/plan.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.plan import main

if __name__ == "__main__":
    sys.exit(interruptible("plan", main))
