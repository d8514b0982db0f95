"""The ``hfpretrain`` entry point: commands dispatch to the same modules as scripts/*.py, errors exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hfpretrain.cli import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]


def test_every_command_has_a_module_and_its_script_alias():
    import importlib.util

    for name, (module, _) in COMMANDS.items():
        assert importlib.util.find_spec(f"hfpretrain.cli.{module}") is not None, name
        assert f"from hfpretrain.cli.{module} import main" in (REPO / "scripts" / f"{module}.py").read_text()


def test_help_and_unknown_commands(capsys):
    assert main(["--help"]) == 0 and "show-batches" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["trian"]) == 2
    assert "did you mean 'train'?" in capsys.readouterr().err


def test_a_command_runs_with_its_own_errors(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'log.jsonl'} does not exist: not a run folder"


@pytest.mark.parametrize("entry", [["-m", "hfpretrain"], [str(REPO / "scripts" / "pretrain.py")]])
def test_train_dry_run_prints_one_json_document(entry):
    """`python -m hfpretrain train` and the script alias: the plan as clean JSON on stdout."""
    out = subprocess.run(
        [
            sys.executable,
            *entry,
            *(["train"] if entry[0] == "-m" else []),
            str(REPO / "recipes" / "tiny_cpu.yaml"),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["recipe"]["model"]["config"] == "tiny"


@pytest.mark.parametrize("name", ["recipes/tiny_cpu.yaml", "tiny_cpu"])
def test_train_finds_a_shipped_recipe_outside_the_repository(tmp_path, name):
    """The README's `hfpretrain train recipes/tiny_cpu.yaml` from an installed wheel, where no recipes/ folder is
    beside the user: "recipe recipes/tiny_cpu.yaml does not exist". The shipped recipe of that name is taken, as
    the demo takes it, and one line says so; a name that is neither is one line naming the shipped ones."""
    from forked import cli

    # forked (tests/forked.py): the fresh `python -m hfpretrain train ... --dry-run` is the test above; the lookup is
    # the working folder's, the child's own
    out = cli("train", name, "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["recipe"]["model"]["config"] == "tiny"
    assert "the shipped recipe" in out.stderr and "tiny_cpu.yaml" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "hfpretrain", "train", "tiny_cpuu", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(
        "error: recipe tiny_cpuu does not exist"
    ), out.stderr[-2000:]


def test_every_command_help_is_complete_without_torch():
    """`--help` of every command, and importing its module, loads neither torch nor transformers (seconds
    each): the heavy imports come after parsing. One subprocess for all, since each is what a user runs.
    `train --help` is the exception: it lists every recipe key with its type and default, read from the recipe's
    dataclasses and TrainingArguments (tests/test_help.py); importing its module stays light."""
    code = (
        "import contextlib, io, sys\n"
        "from hfpretrain.cli import COMMANDS, main\n"
        "for name, (module, _) in COMMANDS.items():\n"
        "    __import__(f'hfpretrain.cli.{module}')\n"
        "    if name == 'train':\n"
        "        continue\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        try:\n"
        "            main([name, '--help'])\n"
        "        except SystemExit as e:\n"
        "            assert e.code == 0, (name, e.code)\n"
        "    assert out.getvalue().startswith('usage: '), (name, out.getvalue())\n"
        "assert main(['--version']) == 0\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'lm_eval', 'datasets') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
