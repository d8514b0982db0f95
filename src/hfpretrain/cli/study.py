"""Run a scaling / ablation study: every run of the grid (resumable), the fits, the plot, report.md.

    python scripts/study.py src/hfpretrain/study/specs/cpu_tiny.yaml [--out DIR]
    python scripts/study.py SPEC.yaml --out DIR --report-only     # re-analyse the finished runs
    python scripts/study.py SPEC.yaml --list                      # the runs it would do, and which are done
    python scripts/study.py SPEC.yaml --plan                      # sizes, tokens, LR, warmup, passes, GPU time; checks
    python scripts/study.py SPEC.yaml --workers 3                 # 3 runs at a time on each GPU (small models)
    python scripts/study.py SPEC.yaml --runs 'moe/*__c2.50e+16__*'  # only these runs now (the rest later)

Outputs in DIR (default: the spec's ``out``): runs/<arm>/<size>__<budget>/ (ordinary run folders),
results.csv, results.json, fits.json, loss_vs_flops.png, report.md. See docs/study.md.
"""

import argparse
import fnmatch
import logging
import sys
from pathlib import Path

from hfpretrain.cli import error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="study spec YAML (src/hfpretrain/study/specs/*.yaml)")
    parser.add_argument("--out", help="study folder (default: the spec's out)")
    parser.add_argument("--report-only", action="store_true", help="train nothing: analyse the finished runs")
    parser.add_argument("--list", action="store_true", help="print the runs and their state, do nothing")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print every run's size, tokens, hyper-parameters and GPU time, check the design, do nothing",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="runs trained at a time on each visible GPU (on a CPU "
        "machine: in all; default: the spec's workers, else 1); logs in DIR/logs/worker<i>.log",
    )
    parser.add_argument(
        "--runs",
        metavar="PATTERN",
        action="append",
        help="train (and --list, --plan) only the runs whose names, as --list prints them, match this shell "
        "pattern; repeatable. The order is the plan's (budgets ascending): this puts a costly budget first, or "
        "splits a study over machines. The report still reads every finished run",
    )
    parser.add_argument("overrides", nargs="*", help="extra recipe overrides for every run, e.g. data.path=...")
    args = parser.parse_intermixed_args()  # options may come after the spec and before the overrides
    # after parsing, so --help is instant; the spec is checked before the report's and the Trainer's imports
    from hfpretrain.study.grid import (
        checked_plan,
        collect,
        load_spec,
        plan_study,
        run_study,
        run_study_workers,
        visible_gpus,
    )

    try:
        spec = load_spec(args.spec)
    except (FileNotFoundError, ValueError) as err:
        return error(err)
    from hfpretrain.outdir import output_problem
    from hfpretrain.study.design import check_plan, format_plan
    from hfpretrain.study.report import analyse
    from hfpretrain.training.machine import launched_processes
    from hfpretrain.training.config import RecipeError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        spec.overrides += args.overrides
        out = Path(args.out or spec.out)
        planned = plan_study(spec, out)
        untokenized = next((p.assumed for _, p in planned if p.assumed), None)
        if untokenized and not args.plan:
            # the sizes of an isoflop window and every run's steps follow from the data's size and vocabulary: a
            # plan on assumed figures names other runs, and a report on it would leave finished ones out
            raise ValueError(
                f"{untokenized}: the study's runs follow from its data's size and vocabulary, so --list, "
                "--report-only and training need it tokenized first (--plan shows a plan on assumed figures)"
            )
        runs = [run for run, _ in planned]
        chosen = planned
        if args.runs:
            chosen = [(r, p) for r, p in planned if any(fnmatch.fnmatchcase(r.name, pat) for pat in args.runs)]
            if not chosen:
                raise ValueError(
                    f"--runs {' '.join(args.runs)}: no run of the study matches (--list prints their names)"
                )
        if args.list:
            for run, _ in chosen:
                print(f"{'done' if run.done else 'todo'}  {run.name}")
            return 0
        if args.plan:
            errors, warnings = check_plan([p for _, p in chosen], spec.rules)
            print(format_plan([p for _, p in chosen], errors, warnings))
            return 2 if errors else 0
        problem = None if args.report_only else output_problem(out, makes="study")
        if problem:  # before the first run, not after it
            raise ValueError(f"--out {out}: {problem}")
        if args.workers is not None:
            if args.workers < 1:
                raise ValueError(f"--workers {args.workers}: needs a whole number ≥ 1")
            spec.workers = args.workers  # recorded in the study's spec.yaml (the report says runs shared the GPU)
        # a process per run at a time on every GPU; not under a multi-process launch (its ranks train each run
        # together)
        several = spec.workers > 1 or (len(visible_gpus()) > 1 and launched_processes() == 1)
        if not args.report_only:
            chosen = checked_plan(spec, out, planned=chosen)  # the plan's errors stop it before any training
            if several:
                run_study_workers(spec, out, spec.workers, planned=chosen)
            else:
                run_study(spec, out, planned=chosen)
        rows = collect(runs)  # every finished run, chosen or not
    except (RecipeError, FileNotFoundError, ValueError, RuntimeError) as err:
        return error(err)
    result = analyse(spec, rows, out, n_planned=len(runs))
    print(f"{len(rows)}/{len(runs)} runs finished; report: {result['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
