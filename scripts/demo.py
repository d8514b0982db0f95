#!/usr/bin/env python
"""Alias of `hfpretrain demo` (src/hfpretrain/cli/demo.py): see `python scripts/demo.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.demo import main

if __name__ == "__main__":
    sys.exit(interruptible("demo", main))
