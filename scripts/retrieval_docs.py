#!/usr/bin/env python
"""Alias of `hfpretrain retrieval-docs` (src/hfpretrain/cli/retrieval_docs.py)."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.retrieval_docs import main

if __name__ == "__main__":
    sys.exit(interruptible("retrieval-docs", main))
