"""Print example training batches from a tokenize_pile.py output, with document boundaries,
source set names and summary statistics.

    python scripts/show_batches.py runs/data/gpt2-1024 --batches 2 --batch-size 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="output folder of tokenize_pile.py")
    p.add_argument("--split", default="train", choices=["train", "validation"])
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument(
        "--max-chars", type=int, default=240, help="shorten each segment to this many characters (0: full text)"
    )
    args = p.parse_args(argv)
    problem = _problem(Path(args.out), args)
    if problem:
        return error(problem)
    from hfpretrain.data.show import render_batches

    try:
        text = render_batches(
            args.out,
            split=args.split,
            num_batches=args.batches,
            batch_size=args.batch_size,
            max_chars=args.max_chars or None,
        )
    except (OSError, ValueError, KeyError) as e:  # a damaged output: one line naming it
        print(
            f"error: {args.out}: cannot read it as a tokenize_pile.py output ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''})",
            file=sys.stderr,
        )
        return 2
    print(text)
    return 0


def _problem(out: Path, args) -> str | None:
    """The first reason the arguments cannot work, checked before loading anything."""
    for flag, value, least in (
        ("--batches", args.batches, 1),
        ("--batch-size", args.batch_size, 1),
        ("--max-chars", args.max_chars, 0),
    ):
        if value < least:
            return f"{flag} must be >= {least}, got {value}"
    manifest = out / "manifest.json"
    if not manifest.is_file():
        return f"{out} is not a tokenize_pile.py output (no manifest.json)"
    try:
        json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        return f"{manifest}: not readable JSON ({e})"
    for part in ("tokenizer", args.split):
        if not (out / part).is_dir():
            return f"{out} is an incomplete tokenize_pile.py output (no {part}/ folder)"
    return None


if __name__ == "__main__":
    sys.exit(main())
