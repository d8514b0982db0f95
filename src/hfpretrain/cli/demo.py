"""The whole pipeline, small, on CPU (what `make demo` runs). Reads $DATA_ROOT, else the embedded sample data."""

import argparse
import logging
import sys

from hfpretrain.cli import error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="out/demo")
    parser.add_argument("--max-steps", type=int, default=None, help="default: recipes/demo_cpu.yaml's (400)")
    parser.add_argument("--eval-limit", type=int, default=200)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a recipe override for the training step (repeatable)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="find the data and the recipe, print the training plan as JSON, run nothing",
    )
    args = parser.parse_args()
    if args.max_steps is not None and args.max_steps < 1:
        return error(f"--max-steps {args.max_steps}: must be >= 1")
    if args.eval_limit < 1:
        return error(f"--eval-limit {args.eval_limit}: must be >= 1 (questions per task)")
    from hfpretrain.outdir import output_problem

    problem = (
        None if args.dry_run else output_problem(args.out, makes="demo")
    )  # before minutes of work that could not be saved
    if problem:
        return error(f"--out {args.out}: {problem}")
    from hfpretrain.eval.extras import MissingExtraError, require_lm_eval

    try:
        if not args.dry_run:
            require_lm_eval("hfpretrain demo")  # its third step: said before the first two, minutes of work
    except MissingExtraError as err:
        return error(err)
    from hfpretrain.data import DataError
    from hfpretrain.demo import run_demo  # imports torch and transformers: after parsing, so --help is instant
    from hfpretrain.paths import MissingDataError

    logging.basicConfig(level=logging.WARNING)
    try:
        run_demo(args.out, args.max_steps, args.eval_limit, args.override, dry_run=args.dry_run)
    except (MissingDataError, FileNotFoundError, ValueError, DataError) as err:  # ValueError: a bad --override
        return error(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
