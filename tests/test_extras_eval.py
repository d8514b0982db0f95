"""lm-eval is the ``[eval]`` extra, not a core dependency: without it, what needs it stops before any work with one
line naming the extra (exit 2, like the deepspeed / wandb / tensorboard extras of a run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINE = "needs the lm-eval package: pip install 'hfpretrain[eval]'"


def _requirements() -> tuple[list[str], dict[str, list[str]]]:
    from setuptools.config.setupcfg import read_configuration

    options = read_configuration(REPO / "setup.cfg")["options"]
    return options["install_requires"], options["extras_require"]


def test_lm_eval_is_an_extra_and_evaluate_is_not_required():
    core, extras = _requirements()
    names = [r.split(">")[0].split("<")[0].split("=")[0].strip() for r in core]
    assert "lm-eval" not in names and "evaluate" not in names  # evaluate: imported nowhere, lm-eval's own dependency
    for extra in ("eval", "all", "test"):  # test: make test and CI install it
        assert any(r.startswith("lm-eval") for r in extras[extra]), extra


@pytest.mark.parametrize("command", [["eval", "no/such/checkpoint"], ["demo", "--out", "no/such/out"]])
def test_command_without_lm_eval_says_which_extra(command):
    code = (
        "import sys; sys.modules['lm_eval'] = None  # as if not installed\n"
        f"from hfpretrain.cli import main; sys.exit(main({command!r}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [f"error: hfpretrain {command[0]} {LINE}"], r.stderr[-2000:]


def test_library_entry_points_without_lm_eval(monkeypatch):
    from hfpretrain.eval.callback import LmEvalCallback
    from hfpretrain.eval.extras import MissingExtraError
    from hfpretrain.eval.harness import evaluate_checkpoint

    monkeypatch.setitem(sys.modules, "lm_eval", None)
    with pytest.raises(MissingExtraError, match=r"^evaluating a checkpoint needs the lm-eval package"):
        evaluate_checkpoint("no/such/checkpoint")
    # a run with evaluation.lm_eval_task stops at its start (a ValueError: exit 2), not at the first scoring step
    with pytest.raises(ValueError, match=r"^evaluation.lm_eval_task=arc_easy needs the lm-eval package: pip install"):
        LmEvalCallback(None, every_n_steps=10, task="arc_easy")
