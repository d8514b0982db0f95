"""A normal run's console shows the project's lines, not optional libraries' import-time noise (issue 39.8).

The commands run in subprocesses with the environment ``make`` gives them (the Makefile's exports over a user's
environment without W&B settings), from a folder outside any git repository, as a user's would.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# lines libraries printed on every command, with their source
NOISE = {
    "_pytree.py": "torch, when transformers imports torchao (its enum registrations)",
    "is an Enum subclass": "torch, when transformers imports torchao (its enum registrations)",
    "Setting accelerator to CPU": "DeepSpeed, imported by accelerate",
    "Running in WANDB offline mode": "transformers, with WANDB_MODE=offline from the Makefile",
    "Custom kwargs can be passed to `--metadata`": "lm-eval, for each load of a local task",
    "Overwriting default num_fewshot": "lm-eval, num_fewshot=0 over the tasks' default",
    "fatal: not a git repository": "git, run by lm-eval for its results' git_hash",
}


def _noise(text: str) -> list[str]:
    return [f"{needle!r} ({source})" for needle, source in NOISE.items() if needle in text]


@pytest.fixture(scope="module")
def make_env() -> dict:
    """The environment the Makefile's targets run with (``make demo``'s commands), for a user who set no W&B
    variable; the offline switches are kept (no network in the tests)."""
    # MAKEFLAGS: under `make test DATA_ROOT=../data` the outer make's command-line variables would reach this make
    # and override the absolute DATA_ROOT the test target passes (a relative path, wrong in the runs' own folders)
    user = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("WANDB_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    r = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(REPO), "--eval=_print_env:\n\t@env -0", "_print_env"],
        env=user,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    env = dict(item.split("=", 1) for item in r.stdout.split("\0") if "=" in item)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, mini_blocks, make_env):
    """One optimizer step of the tiny CPU recipe, run as ``hfpretrain train`` from a folder outside git."""
    cwd = tmp_path_factory.mktemp("user")
    out = cwd / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hfpretrain",
            "train",
            str(REPO / "recipes" / "tiny_cpu.yaml"),
            f"data.path={mini_blocks}",
            f"training.output_dir={out}",
            "training.max_steps=1",
            "evaluation.eval_tokens=1024",
            "evaluation.final_eval_tokens=1024",
        ],
        cwd=cwd,
        env=make_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return r, out, cwd


def test_train_console_shows_the_projects_lines_only(tiny_run):
    r, _, _ = tiny_run
    both = r.stdout + r.stderr
    assert r.returncode == 0, both[-3000:]
    assert not _noise(both), f"{_noise(both)} in:\n{both[-3000:]}"
    assert "hfpretrain: model.precision: bf16 (set in the recipe; training.bf16 is off" in r.stderr  # our own lines
    assert "step 1/1 | done in" in r.stdout


def test_eval_console_has_no_repeated_lm_eval_warnings(tiny_run, make_env):
    pytest.importorskip("lm_eval")
    _, run, cwd = tiny_run
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hfpretrain",
            "eval",
            str(run / "final"),
            "--tasks",
            "arc_easy",
            "--limit",
            "2",
            "--out",
            str(cwd / "eval"),
        ],
        cwd=cwd,
        env=make_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    both = r.stdout + r.stderr
    assert r.returncode == 0, both[-3000:]
    assert not _noise(both), f"{_noise(both)} in:\n{both[-3000:]}"
    assert "| arc_easy | 2 |" in r.stdout


def test_the_filters_drop_their_line_only():
    """hfpretrain's filters on third-party loggers match one known line each; the loggers' other lines pass."""
    import enum

    import hfpretrain  # noqa: F401  (installs the filters)

    def passes(logger: str, msg: str, *args) -> bool:
        record = logging.LogRecord(logger, logging.WARNING, __file__, 1, msg, args, None)
        return bool(logging.getLogger(logger).filter(record))

    pytree = (
        "%s is an Enum subclass and is now natively supported by torch.compile as an opaque value type. "
        "Calling register_constant() on Enum subclasses is deprecated and will be an error in a future release."
    )
    torchao_enum = enum.Enum("KernelPreference", "AUTO")
    torchao_enum.__module__ = "torchao.quantization.quantize_.common.kernel_preference"
    assert not passes("torch.utils._pytree", pytree, torchao_enum)
    assert passes("torch.utils._pytree", pytree, enum.Enum("Mine", "A"))  # another library's registration
    assert passes("torch.utils._pytree", "something else %s", torchao_enum)
    assert not passes("lm_eval.api.task", "arc_easy: Custom kwargs can be passed to `--metadata` in console")
    assert passes("lm_eval.api.task", "arc_easy: another warning")
    import torch

    gpu = torch.cuda.device_count() > 0
    cpu_line = "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."
    assert passes("DeepSpeed", cpu_line) is gpu  # with a GPU torch sees, DeepSpeed's fallback is a real problem
    assert passes("DeepSpeed", "some other DeepSpeed warning")
