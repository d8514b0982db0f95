"""Every script starts: imports resolve and ``--help`` exits 0 (an import slip in a script is otherwise
found only when the script runs, e.g. on the GPU machine)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script_help(script):
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()


RUNBOOKS = sorted((REPO / "benchmarks").glob("*.sh"))


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=[r.name for r in RUNBOOKS])
def test_runbook_parses(runbook):
    """A shell slip in a GPU runbook would otherwise cost a device call to find."""
    proc = subprocess.run(["bash", "-n", str(runbook)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_long_context_runbook_names_its_stages(tmp_path):
    runbook = REPO / "benchmarks" / "gpu_1gpu_long_context.sh"
    proc = subprocess.run(
        ["bash", str(runbook)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "STAGE": "bogus", "OUT": str(tmp_path)},
    )
    assert proc.returncode == 2
    assert "got 'bogus'" in proc.stderr and "small, largedata" in proc.stderr
    assert not (tmp_path / "notes.txt").exists()  # refused before any work


def test_zero_to_universal_refuses_a_checkpoint_not_saved_under_deepspeed(tmp_path):
    """One line naming the folder (the conversion's own test is the resume's: tests/training/test_distributed.py)."""
    (tmp_path / "checkpoint-3").mkdir()
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "zero_to_universal.py"), str(tmp_path / "checkpoint-3")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'checkpoint-3'}: no DeepSpeed 'latest' file (not a checkpoint saved under DeepSpeed?)"
    ], proc.stderr
