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
    p.add_argument("run", help="a run folder (holds log.jsonl, or log.jsonl.xz / .gz)")
    p.add_argument("--out", help="PNG to write (default: RUN/curves.png)")
    args = p.parse_args(argv)
    # after parsing: study.plots imports the data package (numpy, pyarrow): 0.2 s more on --help
    from hfpretrain.study.plots import log_problem, plot_run, run_log

    log = run_log(args.run)  # log.jsonl, or the log.jsonl.xz / .gz that results/ keeps
    if log is None:
        return error(f"{Path(args.run) / 'log.jsonl'} does not exist: not a run folder")

    problem = log_problem(log)
    if problem:
        return error(problem)
    out = Path(args.out or Path(args.run) / "curves.png")
    from hfpretrain.outdir import nesting_problem, writable_problem

    problem = (
        "a folder, not a PNG file"
        if out.is_dir()
        else (nesting_problem(out.parent, "eval") or writable_problem(out.parent))
    )
    if not problem and out.suffix:  # matplotlib picks the format from it, and refused others after the plotting
        from matplotlib.backend_bases import FigureCanvasBase

        formats = FigureCanvasBase.get_supported_filetypes()
        if out.suffix[1:].lower() not in formats:
            problem = f"matplotlib writes no {out.suffix} files (its formats: {', '.join(sorted(formats))})"
    if problem:
        return error(f"--out {out}: {problem}")
    print(plot_run(log, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
