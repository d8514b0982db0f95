"""The README's commands: the two leading ones are what CI and users run (with no argument: the embedded
data when DATA_ROOT is not set), the install line needs no compiler, the first run by hand runs as written, every
time it states was measured (docs/benchmarks.md) and every page it links to exists. The commands at scale moved
to docs/pipeline.md: every script there and in the recipes' headers exists and parses its documented flags, and
the planner and the first dry run reproduce the documented figures."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

README = (REPO / "README.md").read_text()
PIPELINE = (REPO / "docs" / "pipeline.md").read_text()  # the README's commands at scale, moved there


def _code_blocks(text: str = README) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def _commands(*texts: str) -> list[str]:
    return [c for text in texts or (README, PIPELINE) for block in _code_blocks(text) for c in _commands_of(block)]


def _commands_of(block: str) -> list[str]:
    lines, joined = [], ""
    for line in block.splitlines():
        line = line.split("  #")[0].rstrip() if not line.lstrip().startswith("#") else ""
        joined = joined + " " + line.rstrip("\\").strip() if joined else line.rstrip("\\").strip()
        if not line.endswith("\\"):
            if joined:
                lines.append(joined.strip())
            joined = ""
    return lines


def _script_argv(cmd: str) -> list[str] | None:
    """``scripts/MODULE.py ARGS`` of ``python scripts/MODULE.py ARGS`` or ``hfpretrain COMMAND ARGS`` (its alias), else
    None (``accelerate launch``, ``make``)."""
    from hfpretrain.cli import COMMANDS

    argv = shlex.split(cmd)
    if argv[0] == "hfpretrain" and argv[1] in COMMANDS:
        return [f"scripts/{COMMANDS[argv[1]][0]}.py", *argv[2:]]
    if argv[0] == "python" and argv[1].startswith("scripts/"):
        return argv[1:]
    return None


def test_readme_leads_with_demo_and_test_and_ci_runs_the_test_command():
    first = [line.split("#")[0].strip() for line in _code_blocks()[0].splitlines() if not line.lstrip().startswith("#")]
    assert first == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci" / "run").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "\ndemo:" in makefile and "\ntest:" in makefile and "torch==2.13.0" in makefile
    assert "\t$(BIN)/ruff check src tests scripts benchmarks\n" in makefile  # the linter before the suite
    assert "\t$(BIN)/ruff format --check src tests scripts benchmarks\n" in makefile  # and the formatter


def _make(*args, data_root=None):
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_ROOT", "MAKEFLAGS", "MAKELEVEL")}
    if data_root is not None:
        env["DATA_ROOT"] = str(data_root)
    return subprocess.run(["make", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_make_demo_and_test_need_no_data_root(tmp_path):
    """With no DATA_ROOT, `make demo` / `make test` run on the embedded data (DATA_ROOT removed from their
    environment); a DATA_ROOT given is checked and passed on as before."""
    check = _make("check-data")
    assert check.returncode == 0 and "using the embedded sample data" in check.stdout
    plan = _make("-n", "demo", "test").stdout.splitlines()
    assert "env -u DATA_ROOT .venv/bin/python scripts/demo.py" in plan
    assert any(line.startswith("env -u DATA_ROOT .venv/bin/python -m pytest") for line in plan)
    (tmp_path / "tokenizers").mkdir()
    assert _make("check-data", data_root=tmp_path).returncode == 0
    plan = _make("-n", "demo", data_root=tmp_path).stdout
    assert f'DATA_ROOT="{tmp_path}" .venv/bin/python scripts/demo.py' in plan
    bad = _make("check-data", f"DATA_ROOT={tmp_path / 'nope'}")
    assert bad.returncode == 2 and "has no tokenizers/ folder" in bad.stdout


def _recipe_commands() -> list[str]:
    """The commands in the shipped recipes' header comments (``#   python scripts/... \\``, ``#   hfpretrain ...``, and
    their continued lines)."""
    commands = []
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        block, continued = [], False
        for line in path.read_text().splitlines():
            body = line[1:].strip() if line.startswith("#") else ""
            if continued or body.startswith(("python scripts/", "accelerate launch", "hfpretrain ")):
                block.append(body)
            continued = body.endswith("\\")
        commands += _commands_of("\n".join(block))
    return commands


def _help(script: Path) -> str:
    """``python scripts/X.py --help``: forked (tests/forked.py) for an alias of a command's module, else a process."""
    from forked import script as forked_script

    from hfpretrain.cli import COMMANDS

    if script.stem in {module for module, _ in COMMANDS.values()}:
        return forked_script(script.name, "--help", cwd=REPO, timeout=120).stdout
    return subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=REPO, timeout=120
    ).stdout


def _check_scripts_and_flags(commands: list[str]) -> None:
    from hfpretrain.cli import COMMANDS

    helps: dict[str, set[str]] = {}
    for cmd in commands:
        argv = shlex.split(cmd)
        assert argv[0] != "hfpretrain" or argv[1] in COMMANDS, cmd
        if script_argv := _script_argv(cmd):  # `hfpretrain COMMAND ARGS` is `python scripts/MODULE.py ARGS`
            name, args = script_argv[0], script_argv[1:]
            assert (REPO / name).is_file(), cmd
            if name not in helps:  # the flags its --help names, whole (--facts is not --max-facts)
                helps[name] = set(re.findall(r"--[\w-]+", _help(REPO / name)))
            for flag in [a.split("=")[0] for a in args if a.startswith("--")]:
                assert flag in helps[name], f"{flag} of `{cmd}` is not in {name} --help"
        if argv[0] == "accelerate":
            config = argv[argv.index("--config_file") + 1]
            assert (REPO / config).is_file(), cmd
            assert any(a.startswith("recipes/") for a in argv), cmd
        for recipe in [a for a in argv if a.startswith("recipes/") and a.endswith(".yaml")]:
            assert (REPO / recipe).is_file(), cmd


def test_documented_scripts_exist_and_accept_their_flags():
    commands = _commands()
    assert sum(_script_argv(c) is not None for c in commands) >= 8  # the pipeline's blocks were read
    _check_scripts_and_flags(commands)


def test_the_recipes_commands_name_scripts_and_flags_that_exist():
    """A recipe's header says how to make its data and run it; a renamed flag there fails here, not for a user."""
    commands = _recipe_commands()
    assert len(commands) >= 15 and any("--statement-share" in c for c in commands), commands  # continued lines read
    _check_scripts_and_flags(commands)


def test_first_training_command_plans_before_the_data_exists():
    """The README's first training command (a dry run of the 1.8B recipe) runs as written on a fresh clone,
    where its data folder does not exist yet, and gives the documented figures with the assumptions stated."""
    cmd = next(
        c for c in _commands(PIPELINE) if (_script_argv(c) or [""])[0] == "scripts/pretrain.py" and "--dry-run" in c
    )
    documented = re.search(
        re.escape(cmd.split(" --")[0]) + r" --dry-run[^#\n]*#\s*([\d,]+) tokens/step, ([\d.]+)B tokens", PIPELINE
    )
    from forked import script

    argv = _script_argv(cmd)  # forked: test_cli.py runs scripts/pretrain.py --dry-run in a fresh interpreter
    out = script(Path(argv[0]).name, *argv[1:], cwd=REPO, env={"DATA_ROOT": None, "WANDB_MODE": "offline"}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout)["plan"]  # stdout is the JSON alone (transformers prints on import: to stderr)
    assert f"{plan['tokens_per_step']:,}" == documented.group(1)
    assert f"{plan['total_tokens'] / 1e9:.1f}" == documented.group(2)
    # and the plan's headline in three lines on stderr, read from the same plan
    assert (
        f"\nbatch: 8 x micro-batch {plan['micro_batch']} x {plan['gradient_accumulation_steps']} accumulation = "
        f"{plan['samples_per_step']} sequences of 2,048 tokens ({plan['tokens_per_step']:,} tokens) per step\n"
    ) in out.stderr
    assert "\nmodel: 1.83B parameters (1.21B without the embeddings); layout zero1 on 8 processes\n" in out.stderr
    assert f"\nrun: {plan['max_steps']:,} steps = 117B tokens (1 pass over the data), " in out.stderr
    data = json.loads(out.stdout)["recipe"]["data"]["path"]
    if not (REPO / data / "manifest.json").is_file():
        assert "no manifest.json" in plan["assumed"]["why"] and "dry run without data" in out.stderr


def test_documented_plan_reproduces_the_reference_case():
    from forked import script

    cmd = next(c for c in _commands(PIPELINE) if (_script_argv(c) or [""])[0] == "scripts/plan.py")
    argv = _script_argv(cmd)  # forked: test_planner.py runs scripts/plan.py in a fresh interpreter
    out = script(Path(argv[0]).name, *argv[1:], cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("qwen3_1p8b"))
    assert "1.83B" in row and "117.0B" in row


def test_a_first_run_by_hand_runs_as_written(tmp_path):
    """The README's first-run block, each command as written and in order, in a fresh folder (the repository's
    recipes/ and src/ linked in; the embedded data, no DATA_ROOT): every step finds what the one before made."""
    block = README.split("## A first run by hand", 1)[1]
    cmds = _commands_of(re.search(r"```bash\n(.*?)```", block, flags=re.S).group(1))
    assert [c.split()[1] for c in cmds] == ["tokenize", "train", "eval", "generate", "plot"]
    for name in ("recipes", "src"):
        (tmp_path / name).symlink_to(REPO / name)
    from forked import cli

    for cmd in cmds:  # each in a process of its own, forked from this one (tests/forked.py)
        argv = shlex.split(cmd)
        assert argv[0] == "hfpretrain", cmd
        out = cli(*argv[1:], cwd=tmp_path, env={"DATA_ROOT": None, "WANDB_MODE": "disabled"}, timeout=600)
        assert out.returncode == 0, f"{cmd}\n{out.stderr[-2000:]}"
        assert "never reaches" not in out.stderr, f"{cmd}: its warmup outlasts the run (issue 39.5)"
    assert (tmp_path / "out/first/run/final/model.safetensors").is_file()
    assert (tmp_path / "out/first/run/final/eval/results.json").is_file()
    from PIL import Image

    with Image.open(tmp_path / "out/first/run/curves.png") as plot:  # the small encoding (study/plots.py)
        assert plot.mode == "P" and plot.width > 400, (plot.mode, plot.size)


def _install_commands() -> list[str]:
    block = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    return [c for b in _code_blocks(block) for c in _commands_of(b)]


def _extras() -> dict[str, str]:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return dict(cfg["options.extras_require"])


def test_the_install_line_needs_no_compiler_and_the_gpu_extras_exist():
    """Issue 39.3: the one install line works on a CPU machine (no extra that compiles at install: flash-attn
    needs torch at build time and a CUDA toolchain); flash-attn is its own step, with --no-build-isolation."""
    cmds = [c for c in _install_commands() if c.startswith("pip install")]
    extras = _extras()
    # issue 59: a CPU machine's torch is the CPU build, from PyTorch's index beside PyPI (never instead of it),
    # in the range setup.cfg requires
    cpu_torch = cmds.pop(0)
    assert cpu_torch.startswith('pip install "torch>=2.11,<2.14" --extra-index-url') and "/whl/cpu" in cpu_torch
    assert "--index-url" not in cpu_torch.replace("--extra-index-url", "")
    assert "torch>=2.11,<2.14" in (REPO / "setup.cfg").read_text()
    first = cmds[0]
    named = re.findall(r"\.\[([\w,-]+)\]", first)
    assert first.startswith("pip install -e") and named, first
    for extra in (e for group in named for e in group.split(",")):
        assert extra in extras, f"{first}: no extra {extra} in setup.cfg"
        assert "flash-attn" not in extras[extra], f"{first}: {extra} brings flash-attn, which compiles"
    assert "flash" not in first
    for cmd in cmds[1:]:
        for extra in (e for group in re.findall(r"\.\[([\w,-]+)\]", cmd) for e in group.split(",")):
            assert extra in extras, f"{cmd}: no extra {extra} in setup.cfg"
        if "flash" in cmd:
            assert "--no-build-isolation" in cmd, cmd
    assert any("flash" in c for c in cmds[1:]), "the GPU step names flash-attn and how to build it"


def test_the_readme_states_no_timings():
    """House rule: no timings in the README (each one went stale and was re-recorded there commit after commit);
    it points at docs/benchmarks.md's CPU table, which holds them with their date, commit and machine."""
    assert not re.findall(r"\b\d+(?:\.\d+)? ?(?:min|minutes|seconds)\b", README), "a duration in the README"
    assert "docs/benchmarks.md#on-a-cpu-the-demo-and-the-readmes-first-run" in README


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_links_resolve():
    """Every relative link of the README names a file of the repository, and an anchor a heading of that file."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 8
    for link in local:
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"{link}: no such heading"
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{page.name}" in README, f"the README does not link docs/{page.name}"


def _results_pages() -> list[Path]:
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "benchmarks").glob("*.md")),
        *sorted((REPO / "results").rglob("README.md")),
    ]


def test_links_into_results_resolve():
    """Every link into results/ from the README, docs/, benchmarks/*.md and results' own READMEs names a file or
    folder that is there (a log kept compressed is linked by its .xz name), and so does every `results/...` path
    the pages, the code and the tests spell out (no wildcards)."""
    checked = 0
    for page in _results_pages():
        text = page.read_text()
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in link or link.startswith(("#", "mailto:")):
                continue
            target = (page.parent / link.partition("#")[0]).resolve()
            if target.is_relative_to(REPO / "results"):
                assert target.exists(), f"{page.relative_to(REPO)}: {link}"
                checked += 1
        for span in re.findall(r"`(results/[^`\s*?{}<>$]+)`", text):
            assert (REPO / span).exists(), f"{page.relative_to(REPO)}: {span}"
            checked += 1
    for folder in ("src", "tests", "benchmarks", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix not in (".py", ".sh", ".yaml", ".json") or path.stat().st_size > 1_000_000:
                continue
            for ref in re.findall(r"(?<![\w/$.])results/[\w.+@/-]*[\w/]", path.read_text(errors="ignore")):
                assert (REPO / ref).exists(), f"{path.relative_to(REPO)}: {ref}"
                checked += 1
    assert checked >= 100


def test_the_install_page_names_every_extra_and_what_test_installs():
    """docs/install.md's table of extras: a row for each extra of setup.cfg (the `eval` row was missing), and the
    `test` row names each package that extra installs."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    extras = dict(cfg["options.extras_require"])
    page = (REPO / "docs" / "install.md").read_text()
    rows = {
        name: line
        for line in page.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([\w-]+)`", line.split(" | ")[0])
    }
    assert set(extras) <= set(rows), set(extras) - set(rows)
    for requirement in extras["test"].split(";"):
        package = re.match(r"\s*([\w-]+)", requirement).group(1)
        assert package.lower() in rows["test"].lower(), package
