#!/usr/bin/env python
"""Alias of `hfpretrain train-tokenizer` (src/hfpretrain/cli/train_tokenizer.py): see `python scripts/train_tokenizer.py --help`."""

import sys

from hfpretrain.cli import interruptible
from hfpretrain.cli.train_tokenizer import main

if __name__ == "__main__":
    sys.exit(interruptible("train-tokenizer", main))
