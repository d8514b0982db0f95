#!/usr/bin/env python
"""Alias of `hfpretrain long-context` (src/hfpretrain/cli/long_context.py)."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.long_context import main

if __name__ == "__main__":
    sys.exit(interruptible("long-context", main))
