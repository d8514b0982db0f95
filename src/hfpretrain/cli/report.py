"""Write the report of a run or of a study, generated from its folder (see docs/study.md).

    python scripts/report.py RUN_DIR [--eval-limit 200] [--no-eval] [--no-generate]
    python scripts/report.py STUDY_DIR [--best RUN_DIR]     # re-analyse a study from its run folders; --best adds
                                                            # the best model's report (else STUDY_DIR/best*/report.md)
    python scripts/report.py --homework [--out results/homework.md]   # the course assignment's deliverables in one
                                                            # document, from the committed results (study/homework.py)

A run folder (summary.json, recipe.yaml, log.jsonl, final/) gets RUN_DIR/report.md: data and example batches,
model and hyper-parameters, hardware and time, curves, validation nats and bits per byte, lm-eval scores,
generations, the commands that reproduce it. A study folder (spec.yaml, runs/) gets its report.md rebuilt
from the finished runs, with the best model's report linked when --best names its run.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("folder", nargs="?", help="a run folder or a study folder (not with --homework)")
    p.add_argument(
        "--homework",
        action="store_true",
        help="write the homework report from the committed results (run from the repository root)",
    )
    p.add_argument("--out", default="results/homework.md", help="--homework: where to write it")
    p.add_argument("--best", help="study: the run folder of the best configuration, trained with periodic evaluation")
    p.add_argument("--eval-limit", type=float, default=None, help="lm-eval: first N questions per task")
    p.add_argument(
        "--no-eval", action="store_true", help="leave lm-eval out (unless the checkpoint was scored already)"
    )
    p.add_argument("--no-generate", action="store_true", help="leave generations out")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.homework:
        from hfpretrain.study.homework import write_homework

        try:
            print(write_homework(".", args.out))
        except (FileNotFoundError, ValueError, KeyError, StopIteration) as err:
            return error(f"--homework needs the committed results (run from the repository root): {err!r}")
        return 0
    if not args.folder:
        return error("name a run folder or a study folder, or pass --homework")
    from hfpretrain.eval.extras import MissingExtraError
    from hfpretrain.study.run_report import DEFAULT_PROMPTS, write_run_report

    folder = Path(args.folder)
    limit = None if args.eval_limit is None else int(args.eval_limit)
    prompts = None if args.no_generate else DEFAULT_PROMPTS
    try:
        if (folder / "spec.yaml").is_file():
            from hfpretrain.study.grid import collect, folder_runs, load_spec
            from hfpretrain.study.report import analyse

            spec = load_spec(folder / "spec.yaml")
            # the run folders alone (no dry run): a committed study re-analyses without its tokenized data
            rows = collect(folder_runs(spec, folder))
            best = (
                [write_run_report(args.best, eval_limit=limit, run_eval=not args.no_eval, prompts=prompts)]
                if args.best
                else sorted(folder.glob("best*/report.md"))
            )
            report = analyse(spec, rows, folder, best_report=best)["report"]
        elif (folder / "summary.json").is_file():
            report = write_run_report(folder, eval_limit=limit, run_eval=not args.no_eval, prompts=prompts)
        else:
            return error(f"{folder} is neither a run folder (summary.json) nor a study folder (spec.yaml)")
    except MissingExtraError as err:
        return error(f"{err} (or --no-eval)")
    except (FileNotFoundError, ValueError) as err:
        return error(err)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
