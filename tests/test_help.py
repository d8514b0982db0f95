"""Finding the options (issue 39.9): ``train --help`` lists every recipe key with its type and default,
``hfpretrain --version``, and an option spelt like a recipe key names the override to write instead."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from importlib import metadata
from pathlib import Path

import pytest

from hfpretrain.cli import main

REPO = Path(__file__).resolve().parents[1]
RECIPE = str(REPO / "recipes" / "tiny_cpu.yaml")


def _sections():
    """The recipe's dataclass sections, read here independently of the CLI's code."""
    from hfpretrain.training.config import Recipe

    hints = typing.get_type_hints(Recipe)
    return {f.name: hints[f.name] for f in dataclasses.fields(Recipe) if dataclasses.is_dataclass(hints[f.name])}


@pytest.fixture(scope="module")
def train_help() -> str:
    """`python -m hfpretrain train --help`, as a user runs it."""
    r = subprocess.run(
        [sys.executable, "-m", "hfpretrain", "train", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert not r.stderr, r.stderr[-2000:]
    return r.stdout


def test_train_help_lists_every_key_of_every_section_with_type_and_default(train_help):
    from hfpretrain.training.config import Recipe

    lines = train_help.splitlines()
    assert lines[0].startswith("usage: hfpretrain train")
    sections = _sections()
    assert {"model", "data", "evaluation", "logging", "optimizer"} <= set(sections)
    for name, section in sections.items():
        for field in dataclasses.fields(section):
            key = f"{name}.{field.name}: "
            line = next((line for line in lines if line.strip().startswith(key)), None)
            assert line is not None, f"{key} not in train --help"
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            assert line.strip().endswith(f" = {default!r}"), line
    assert "  model.precision: str = 'bf16'" in lines
    assert "  model.init_from: str | None = None" in lines
    assert "      chunk size of the chunked cross-entropy" in lines  # the field's metadata["help"] in config.py
    assert "  model.compile: str = 'auto'" in lines  # a Literal field reads as its values' type, then its values
    assert "[one of: auto, decoder, layers, model, none]" in " ".join(train_help.split())
    for field in dataclasses.fields(Recipe):  # top-level keys (not a section, not training)
        if field.name not in sections and field.name != "training":
            assert any(line.startswith(f"  {field.name}: ") for line in lines), field.name


def test_train_help_shows_training_arguments_with_their_own_types_and_defaults(train_help):
    from transformers import TrainingArguments

    fields = {f.name: f for f in dataclasses.fields(TrainingArguments)}
    assert "fields of transformers.TrainingArguments" in train_help
    assert f"any of the {sum(f.init and not f.name.startswith('_') for f in fields.values())} fields" in train_help
    for key, type_name in (("learning_rate", "float"), ("max_steps", "int"), ("seed", "int"), ("bf16", "bool")):
        assert f"  training.{key}: {type_name} = {fields[key].default!r}\n" in train_help, key
    assert "The initial learning rate for the optimizer" in train_help  # TrainingArguments' own help


def test_a_new_section_appears_in_help_and_hints_by_itself(monkeypatch):
    """The help and the option hints read the Recipe dataclass: a section added there needs no CLI change."""
    from hfpretrain import cli
    from hfpretrain.training import config

    @dataclasses.dataclass
    class ExtraSection:
        """An extra section. Only for this test."""

        knob: int = dataclasses.field(default=3, metadata={"help": "how far to turn it"})

    fields = [(f.name, f.type, f) for f in dataclasses.fields(config.Recipe)]
    extended = dataclasses.make_dataclass(
        "Recipe", [*fields, ("extra", ExtraSection, dataclasses.field(default_factory=ExtraSection))]
    )
    extended.__module__ = config.__name__  # its annotations resolve in config's namespace
    monkeypatch.setattr(config, "Recipe", extended)
    monkeypatch.setattr(config, "ExtraSection", ExtraSection, raising=False)
    text = cli.recipe_keys_help()
    assert "\nextra: An extra section\n  extra.knob: int = 3\n      how far to turn it" in text
    assert cli.recipe_keys()["knob"] == [("extra.knob", int)]


def _all_fields():
    """``(key, field, type)`` of every recipe field: each section's, and the top level's (sections included)."""
    from hfpretrain.training.config import Recipe

    for name, section in _sections().items():
        hints = typing.get_type_hints(section)
        for field in dataclasses.fields(section):
            yield f"{name}.{field.name}", field, hints[field.name]
    hints = typing.get_type_hints(Recipe)
    for field in dataclasses.fields(Recipe):
        yield field.name, field, hints[field.name]


def test_every_recipe_field_has_help_and_every_choice_default_is_a_choice():
    """Issue 57: the help is on the field (metadata["help"], as in TrainingArguments), the choices in its type."""
    from hfpretrain.training.config import field_choices, recipe_choices

    checked = set()
    for key, field, hint in _all_fields():
        assert isinstance(field.metadata.get("help"), str) and field.metadata["help"].strip(), f"{key}: no help"
        allowed = field_choices(hint)
        if allowed is not None:
            assert typing.get_origin(hint) is typing.Literal or type(None) in typing.get_args(hint), key
            assert all(isinstance(a, str) for a in allowed if a is not None), key
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            assert default in allowed, f"{key}: default {default!r} is not one of {allowed}"
            checked.add(key)
    assert checked == set(recipe_choices())
    assert {"model.compile", "model.attn_implementation", "nan_policy", "context.rope"} <= checked


def test_the_key_help_reads_the_fields_metadata(monkeypatch):
    """Not the source: a field's help changed at run time is what the help prints."""
    from hfpretrain import cli
    from hfpretrain.training import config

    field = config.LossSection.__dataclass_fields__["chunk_tokens"]
    monkeypatch.setattr(field, "metadata", {"help": "a help set at run time"})
    assert "  loss.chunk_tokens: int = 8192\n      a help set at run time\n" in cli.recipe_keys_help()


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag, capsys):
    assert main([flag]) == 0
    assert capsys.readouterr().out == f"hfpretrain {metadata.version('hfpretrain')}\n"


@pytest.mark.parametrize(
    "args, override",
    [
        (["--learning_rate=1e-3"], "training.learning_rate=1e-3"),
        (["--learning-rate", "1e-3"], "training.learning_rate=1e-3"),
        (["--max_steps", "10"], "training.max_steps=10"),
        (["--max_steps", "-1"], "training.max_steps=-1"),
        (["--bf16"], "training.bf16=true"),
        (["--precision=fp8"], "model.precision=fp8"),
        (["--nan-policy", "skip"], "nan_policy=skip"),
        (["data.path=x", "--max_steps", "training.seed=1"], "training.max_steps=VALUE"),
    ],
)
def test_an_option_spelt_like_a_recipe_key_names_the_override(args, override, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", RECIPE, *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert err.rstrip().endswith(f"use {override}"), err


def test_other_unknown_options_keep_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", RECIPE, "--no-such-thing=1"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --no-such-thing=1" in capsys.readouterr().err


def test_the_commands_own_options_still_parse():
    """--dry-run and an abbreviation of it (argparse's) are train's options, not recipe keys."""
    from hfpretrain.cli import RecipeArgumentParser

    parser = RecipeArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--dry-run", action="store_true")
    for argv in (["r.yaml", "--dry-run", "training.max_steps=1"], ["r.yaml", "--dry", "training.max_steps=1"]):
        args = parser.parse_intermixed_args(argv)
        assert args.dry_run and args.overrides == ["training.max_steps=1"]
