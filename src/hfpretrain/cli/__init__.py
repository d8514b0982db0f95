"""One entry point: ``hfpretrain COMMAND [ARGS]`` (console script; also ``python -m hfpretrain``).

Each command is a module of this package with its own ``--help``; ``scripts/<module>.py`` are aliases of
the same modules (``accelerate launch scripts/pretrain.py ...`` stays the multi-GPU way). A command's module
is imported only when it runs, so ``hfpretrain --help`` is instant.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

# command -> (module, one line for --help)
COMMANDS = {
    "tokenize": ("tokenize_pile", "Pile-format jsonl(.zst) / Hub dataset -> packed Arrow blocks + manifest"),
    "train-tokenizer": ("train_tokenizer", "train a byte-level BPE on jsonl(.zst) files"),
    "train": (
        "pretrain",
        "pretrain from a recipe (--dry-run: the plan); multi-GPU: accelerate launch scripts/pretrain.py",
    ),
    "eval": ("evaluate", "lm-eval (ARC-Easy, ARC-Challenge, OpenBookQA) on a checkpoint"),
    "generate": ("generate", "sample from a checkpoint with transformers.pipeline"),
    "export": ("export", "a checkpoint in bf16 with its tokenizer and model card; --push-to-hub REPO_ID"),
    "plan": ("plan", "model sizes, FLOPs, memory and time for a GPU budget"),
    "study": ("study", "a scaling / ablation study: plan, run (resumable), report"),
    "report": ("report", "the report of a run or a study folder"),
    "long-context": ("long_context", "loss by position and passkey retrieval of a checkpoint (long context)"),
    "retrieval-docs": ("retrieval_docs", "synthetic retrieval documents for a context-extension phase's mixture"),
    "plot": ("plot", "a run's curves from its log.jsonl"),
    "show-batches": ("show_batches", "decode the first blocks of a tokenized folder"),
    "demo": ("demo", "the whole pipeline, small, on CPU"),
}


def error(message, code: int = 2, once_per_node: bool = False) -> int:
    """Print ``error: message`` on stderr and return the exit code: 2 for a usage, config or input error
    (nothing was done), 1 for a failure while running.

    Under a launch (torchrun and ``accelerate launch`` set ``LOCAL_RANK``, ``RANK`` and ``GROUP_RANK``) every
    process returns the code. ``once_per_node``: the caller knows the message is the same on every process of a node
    (a recipe or data check before any work: one recipe, one file system; a Ctrl-C, which reaches them all): only the
    node's first process prints it, a node after the first naming itself, so that eight processes refusing a key
    make one line, not eight. Anything else can be one rank's own: every rank prints it, naming itself."""
    local, rank, node = (os.environ.get(k) for k in ("LOCAL_RANK", "RANK", "GROUP_RANK"))
    if once_per_node:
        if local not in (None, "0"):
            return code
        if node not in (None, "0"):
            message = f"node {node}: {message}"
    elif rank is not None and os.environ.get("WORLD_SIZE", "1") != "1":
        message = f"rank {rank}: {message}"
    print(f"error: {message}", file=sys.stderr)
    return code


def os_error_line(e: OSError) -> str:
    """``FILE: reason`` for an OSError that stopped a command while it ran (disk full, a file vanished)."""
    return f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}"


def version() -> str:
    """The installed package's version (its metadata), else the source tree's ``__version__``."""
    from importlib import metadata

    try:
        return metadata.version("hfpretrain")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        from hfpretrain import __version__

        return __version__


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: hfpretrain COMMAND [ARGS]   (hfpretrain COMMAND --help for its options)",
        "       hfpretrain --version",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {doc}" for name, (_, doc) in COMMANDS.items()]
    return "\n".join(lines)


# TrainingArguments fields that `train --help` shows with their type and default (all of them are recipe keys)
COMMON_TRAINING_KEYS = (
    "max_steps",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_grad_norm",
    "bf16",
    "eval_steps",
    "save_steps",
    "save_total_limit",
    "seed",
    "resume_from_checkpoint",
)
TRAINING_ARGUMENTS_DOCS = "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments"


def _type_name(hint) -> str:
    """``int``, ``str | None``, ``list``: a type as a user writes it."""
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, getattr(types, "UnionType", None)):
        return " | ".join(_type_name(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is typing.Literal:  # a choice: the type of its values (the help lists them)
        return " | ".join(dict.fromkeys(type(arg).__name__ for arg in typing.get_args(hint)))
    if hint is type(None):
        return "None"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _default(field) -> str:
    import dataclasses
    import enum

    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    return repr(value.value if isinstance(value, enum.Enum) else value)


def _first_sentences(text: str, enough: int = 60) -> str:
    """The first sentences of a help text, up to the one that makes it ``enough`` characters long."""
    taken = ""
    for sentence in " ".join(text.split()).split(". "):
        taken = f"{taken}. {sentence}" if taken else sentence
        if len(taken) >= enough:
            break
    return taken.rstrip(".")


def recipe_sections() -> tuple[dict, list]:
    """The recipe's keys, read from the dataclasses of ``training/config.py``: ``{section: [(field, hint)]}`` for
    each dataclass section (a new section appears by itself) and ``[(field, hint)]`` for the top-level keys;
    ``training`` holds TrainingArguments' fields."""
    import dataclasses
    import typing

    from hfpretrain.training import config

    hints = typing.get_type_hints(config.Recipe)
    sections: dict = {}
    top: list = []
    for field in dataclasses.fields(config.Recipe):
        hint = hints[field.name]
        if field.name == "training":  # a dict checked against TrainingArguments' own fields
            args = config.TrainingArguments
            arg_hints = typing.get_type_hints(args)
            sections["training"] = [
                (f, arg_hints.get(f.name)) for f in dataclasses.fields(args) if f.init and not f.name.startswith("_")
            ]
        elif dataclasses.is_dataclass(hint):
            section_hints = typing.get_type_hints(hint)
            sections[field.name] = [(f, section_hints[f.name]) for f in dataclasses.fields(hint)]
        else:
            top.append((field, hint))
    return sections, top


def recipe_keys() -> dict[str, list[tuple[str, object]]]:
    """``{key: [(section.key, type), ...]}`` for every recipe key (a top-level key is its own full name)."""
    sections, top = recipe_sections()
    keys: dict[str, list[tuple[str, object]]] = {}
    for name, fields in sections.items():
        for field, hint in fields:
            keys.setdefault(field.name, []).append((f"{name}.{field.name}", hint))
    for field, hint in top:
        keys.setdefault(field.name, []).append((field.name, hint))
    return keys


def recipe_keys_help() -> str:
    """Every recipe key with its type, default and help (its field's ``metadata["help"]``, and for a ``Literal``
    type its values), for ``train --help``; of TrainingArguments' fields the common ones, with the type, default and
    help that TrainingArguments itself gives."""
    import shutil
    import textwrap
    import typing

    from hfpretrain.training import config

    sections, top = recipe_sections()
    hints = typing.get_type_hints(config.Recipe)
    width = max(60, min(120, shutil.get_terminal_size((100, 24)).columns - 2))

    def entry(key: str, field, hint, text: str) -> list[str]:
        allowed = config.field_choices(hint)  # a Literal type's values
        if allowed:
            text = f"{text} [one of: {', '.join(str(a) for a in sorted(allowed, key=str))}]".strip()
        lines = [f"  {key}: {_type_name(hint)} = {_default(field)}"]
        if text:
            lines += textwrap.wrap(
                text, width, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
            )
        return lines

    out = textwrap.wrap(
        "recipe keys: the sections and keys of a recipe YAML; override any on the command line as "
        "section.key=value (e.g. training.max_steps=100 model.compile=none). Each as key: type = "
        "default, then what it does.",
        width,
    )
    for name, fields in sections.items():
        out.append("")
        if name == "training":
            out += textwrap.wrap(
                f"training: any of the {len(fields)} fields of transformers.TrainingArguments "
                f"({TRAINING_ARGUMENTS_DOCS}). The common ones, with TrainingArguments' defaults "
                "(a recipe sets its own):",
                width,
            )
            by_name = {f.name: (f, hint) for f, hint in fields}
            for key in COMMON_TRAINING_KEYS:
                if key in by_name:
                    field, hint = by_name[key]
                    out += entry(f"training.{key}", field, hint, _first_sentences(field.metadata.get("help", "")))
            continue
        section_cls = hints[name]
        doc = section_cls.__doc__ or ""
        intro = "" if doc.startswith(f"{section_cls.__name__}(") else " ".join(doc.split()).split(". ")[0]
        out.append(f"{name}:" + (f" {intro.rstrip('.')}" if intro else ""))
        for field, hint in fields:
            out += entry(f"{name}.{field.name}", field, hint, field.metadata.get("help", ""))
    if top:
        out += ["", "top level (outside any section):"]
        for field, hint in top:
            out += entry(field.name, field, hint, field.metadata.get("help", ""))
    return "\n".join(out)


class RecipeArgumentParser(argparse.ArgumentParser):
    """``train``'s parser: ``--help`` ends with every recipe key (``recipe_keys_help``), and an option that is a
    recipe key (``--learning_rate=1e-3``, ``--max-steps 10``) is one error line naming the override to write
    (``training.learning_rate=1e-3``), exit 2. Both read the recipe's dataclasses (torch) only when needed."""

    def format_help(self) -> str:
        return f"{super().format_help()}\n{recipe_keys_help()}\n"

    def parse_known_args(self, args=None, namespace=None):
        self._refuse_recipe_options(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def _refuse_recipe_options(self, args: list[str]) -> None:
        import re

        for i, arg in enumerate(args):
            if arg == "--":
                return
            if not arg.startswith("--"):
                continue
            name, eq, value = arg[2:].partition("=")
            if any(option.startswith(f"--{name}") for option in self._option_string_actions):
                continue  # this command's own option, or an abbreviation of one that argparse resolves
            keys = recipe_keys().get(name.replace("-", "_"))
            if not keys:
                continue  # argparse's own error
            given = arg
            if not eq:
                after = args[i + 1] if i + 1 < len(args) else None
                if after is not None and not after.startswith("--") and not re.match(r"[A-Za-z_][\w.]*=", after):
                    value, given = after, f"{arg} {after}"
                else:  # a bare flag: true for a bool key (as HfArgumentParser reads --bf16)
                    value = "true" if all(hint is bool for _, hint in keys) else "VALUE"
            overrides = " or ".join(f"{key}={value}" for key, _ in keys)
            sys.exit(
                error(
                    f"{given} is not an option: recipe keys are overrides written section.key=value, "
                    f"without dashes: use {overrides}"
                )
            )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"hfpretrain {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; commands: {', '.join(COMMANDS)}"
        return error(f"unknown command {name!r}{hint}")
    # the modules parse sys.argv
    sys.argv = [f"hfpretrain {name}", *rest]
    return interruptible(name, lambda: importlib.import_module(f"hfpretrain.cli.{COMMANDS[name][0]}").main())


def interruptible(name: str, main) -> int:
    """``main()``, a Ctrl-C in it one line and exit 130 (each command removes its partial output on the way out; no
    traceback): for ``hfpretrain COMMAND`` and the ``scripts/*.py`` aliases alike."""
    try:
        return main()
    except KeyboardInterrupt:
        return error(f"{name}: interrupted (Ctrl-C) before it finished", 130, once_per_node=True)
