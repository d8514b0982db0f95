#!/usr/bin/env python
"""Alias of `hfpretrain report` (src/hfpretrain/cli/report.py): see `python scripts/report.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.report import main

if __name__ == "__main__":
    sys.exit(interruptible("report", main))
