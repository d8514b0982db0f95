"""Several ``scripts/pretrain.py`` runs, one after another, in the processes of one launch: what
``tests/training/test_distributed.py`` launches where several of its checks use the same launch layout (a fresh
launch of two processes costs ~20 s of imports and start on the CPU machine, the run a few seconds).

    accelerate launch --config_file accelerate_configs/cpu_2proc_fsdp2.yaml tests/training/pretrain_runs.py RUNS.json

RUNS.json is a list of command lines (a recipe and its overrides: what follows ``scripts/pretrain.py``). Each runs
as ``scripts/pretrain.py`` runs it (``hfpretrain.cli.pretrain.main``), in the same process group: only the last one
closes it. Around each run every rank prints ``==== run N start`` and ``==== run N exit CODE`` on stdout and stderr
(``run_output`` below cuts a launch's output by them); the first run that fails ends the launch with its code."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path


def run_output(proc: subprocess.CompletedProcess, n: int) -> subprocess.CompletedProcess:
    """Run ``n``'s part of a launch's output, and its exit code (the launch's, not 0, if it never ended)."""

    def part(text: str) -> str:
        start = text.find(f"==== run {n} start")
        ends = [m.end() for m in re.finditer(rf"==== run {n} exit -?\d+", text)]
        return text[start : ends[-1]] if start >= 0 and ends else text[max(start, 0) :]

    codes = [int(c) for c in re.findall(rf"==== run {n} exit (-?\d+)", proc.stderr)]
    code = max(codes, key=abs) if codes else (proc.returncode or 1)
    return subprocess.CompletedProcess(proc.args, code, part(proc.stdout), part(proc.stderr))


def main() -> int:
    import hfpretrain.training as training
    from hfpretrain.cli import interruptible
    from hfpretrain.cli.pretrain import main as pretrain_main

    runs = json.loads(Path(sys.argv[1]).read_text())
    close = training.shutdown_distributed  # what pretrain's main calls at its end: the last run's only
    for n, argv in enumerate(runs):
        for stream in (sys.stdout, sys.stderr):
            print(f"==== run {n} start", file=stream, flush=True)
        training.shutdown_distributed = close if n == len(runs) - 1 else (lambda: None)
        sys.argv = ["scripts/pretrain.py", *map(str, argv)]
        code = interruptible("train", pretrain_main)
        for stream in (sys.stdout, sys.stderr):
            print(f"==== run {n} exit {code}", file=stream, flush=True)
        if code:
            close()
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
