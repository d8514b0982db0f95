"""The whole pipeline, small, on CPU (what `make demo` runs). Reads $DATA_ROOT, else the embedded sample data."""

import argparse
import logging
import sys

from hfpretrain.cli import error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="out/demo")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--eval-limit", type=int, default=200)
    parser.add_argument("--override", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="a recipe override for the training step (repeatable)")
    parser.add_argument("--dry-run", action="store_true",
                        help="find the data and the recipe, print the training plan as JSON, run nothing")
    args = parser.parse_args()
    from hfpretrain.eval.extras import MissingExtraError, require_lm_eval

    try:
        if not args.dry_run:
            require_lm_eval("hfpretrain demo")  # its third step: said before the first two, minutes of work
    except MissingExtraError as err:
        return error(err)
    from hfpretrain.demo import run_demo  # imports torch and transformers: after parsing, so --help is instant
    from hfpretrain.paths import MissingDataError

    logging.basicConfig(level=logging.WARNING)
    try:
        run_demo(args.out, args.max_steps, args.eval_limit, args.override, dry_run=args.dry_run)
    except (MissingDataError, FileNotFoundError) as err:
        return error(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
