"""The project works from a wheel, without the repository (issue 39.2): built as pip builds it, installed into a
fresh virtual environment, run from a folder outside the repository, `hfpretrain demo` finds its data (the
embedded sample), its recipe (recipes/tiny_cpu.yaml, shipped as package data) and plans its training run. The
wheel's recipes and study specs are the repository's, byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_package_recipes_are_the_repository_recipes():
    """src/hfpretrain/recipes is what the wheel ships as hfpretrain/recipes: in a checkout it must give exactly the
    files of recipes/ (it is a link to it; a copy put in its place that drifts fails here)."""
    from hfpretrain.paths import RECIPES_DIR, recipe_path

    repo = {p.name: p.read_bytes() for p in sorted((REPO / "recipes").glob("*.yaml"))}
    assert repo and {p.name: p.read_bytes() for p in sorted(RECIPES_DIR.glob("*.yaml"))} == repo
    assert recipe_path("tiny_cpu") == RECIPES_DIR / "tiny_cpu.yaml"
    assert recipe_path("recipes/tiny_cpu.yaml").read_bytes() == repo["tiny_cpu.yaml"]


def _base_python() -> str:
    """The interpreter this test's environment was made from (not the project's venv, which holds the editable
    install)."""
    base = getattr(sys, "_base_executable", None)
    if base and Path(base).resolve() != Path(sys.executable).resolve():
        return base
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


@pytest.mark.timeout(300)
def test_a_wheel_runs_the_demo_outside_the_repository(tmp_path):
    # Build from a copy of what the build reads: an in-tree build writes build/ and *.egg-info into the working tree.
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, tree / name)
    shutil.copytree(REPO / "recipes", tree / "recipes")
    shutil.copytree(
        REPO / "src", tree / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    dist = tmp_path / "dist"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(dist),
            ".",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("hfpretrain-*.whl")

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for folder, shipped in (
            (REPO / "recipes", "hfpretrain/recipes"),
            (REPO / "src/hfpretrain/study/specs", "hfpretrain/study/specs"),
        ):
            files = sorted(folder.glob("*.yaml"))
            assert files
            for f in files:
                assert f"{shipped}/{f.name}" in names, f"{f.name} is not in the wheel's {shipped}/"
                assert zf.read(f"{shipped}/{f.name}") == f.read_bytes(), f"the wheel's {shipped}/{f.name} differs"
        assert "hfpretrain/assets/default_data/tokenizers/gpt2/tokenizer.json" in names

    # A fresh environment from the base interpreter. The dependencies (torch, transformers, ...) are this
    # environment's: its site-packages folders go in as plain .pth lines, which Python appends after the new
    # environment's own site-packages and whose own .pth files (the editable install of hfpretrain) it does not
    # read; so `import hfpretrain` must find the wheel's copy, which is checked.
    venv = tmp_path / "venv"
    subprocess.run(
        [_base_python(), "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = [p for p in site.getsitepackages() if Path(p).resolve() != purelib.resolve()]
    (purelib / "_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))

    elsewhere = tmp_path / "elsewhere"  # the user's folder: no recipes/, no src/
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_ROOT", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")

    def run(*argv, timeout=240):
        return subprocess.run(
            [str(a) for a in argv], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout
        )

    where = run(python, "-c", "import hfpretrain, torch; print(hfpretrain.__file__)")
    assert where.returncode == 0, where.stderr[-2000:]
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv), f"hfpretrain imported from {package}, not from the wheel in {venv}"

    helped = run(venv / "bin" / "hfpretrain", "demo", "--help")
    assert helped.returncode == 0 and "--dry-run" in helped.stdout, helped.stderr[-2000:]

    planned = run(venv / "bin" / "hfpretrain", "demo", "--dry-run", "--out", "out/demo")
    assert planned.returncode == 0, planned.stderr[-3000:]
    report = json.loads(planned.stdout)
    assert Path(report["recipe"]) == package / "recipes" / "demo_cpu.yaml"
    assert Path(report["data_root"]) == package / "assets" / "default_data"
    assert all(Path(p).exists() for p in report["inputs"])
    assert report["plan"]["max_steps"] == 400 and report["plan"]["samples_per_step"] == 16
    assert report["plan"]["parameters"]
    assert not (elsewhere / "out").exists()  # a dry run writes nothing

    missing = run(python, "-c", "from hfpretrain.paths import recipe_path; recipe_path('no_such_recipe')")
    assert missing.returncode != 0 and "tiny_cpu" in missing.stderr  # names the shipped recipes
