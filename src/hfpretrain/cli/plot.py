"""Plot a run from its log.jsonl: loss (train, validation, bits per byte), learning rate, tokens/s and MFU,
gradient norm, against tokens seen.

    python scripts/plot.py RUN_DIR [--out RUN_DIR/curves.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a run folder (holds log.jsonl)")
    p.add_argument("--out", help="PNG to write (default: RUN/curves.png)")
    args = p.parse_args(argv)
    log = Path(args.run) / "log.jsonl"
    if not log.is_file():
        return error(f"{log} does not exist: not a run folder")
    from hfpretrain.study.plots import plot_run

    print(plot_run(log, args.out or Path(args.run) / "curves.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
