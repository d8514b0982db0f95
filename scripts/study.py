#!/usr/bin/env python
"""Alias of `hfpretrain study` (src/hfpretrain/cli/study.py): see `python scripts/study.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.study import main

if __name__ == "__main__":
    sys.exit(interruptible("study", main))
