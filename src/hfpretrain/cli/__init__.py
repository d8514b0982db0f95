"""One entry point: ``hfpretrain COMMAND [ARGS]`` (console script; also ``python -m hfpretrain``).

Each command is a module of this package with its own ``--help``; ``scripts/<module>.py`` are aliases of
the same modules (``accelerate launch scripts/pretrain.py ...`` stays the multi-GPU way). A command's module
is imported only when it runs, so ``hfpretrain --help`` is instant.
"""

from __future__ import annotations

import difflib
import importlib
import sys

# command -> (module, one line for --help)
COMMANDS = {
    "tokenize": ("tokenize_pile", "Pile-format jsonl(.zst) / Hub dataset -> packed Arrow blocks + manifest"),
    "train-tokenizer": ("train_tokenizer", "train a byte-level BPE on jsonl(.zst) files"),
    "train": ("pretrain", "pretrain from a recipe (--dry-run: the plan); multi-GPU: accelerate launch scripts/pretrain.py"),
    "eval": ("evaluate", "lm-eval (ARC-Easy, ARC-Challenge, OpenBookQA) on a checkpoint"),
    "generate": ("generate", "sample from a checkpoint with transformers.pipeline"),
    "export": ("export", "a checkpoint in bf16 with its tokenizer and model card; --push-to-hub REPO_ID"),
    "plan": ("plan", "model sizes, FLOPs, memory and time for a GPU budget"),
    "study": ("study", "a scaling / ablation study: plan, run (resumable), report"),
    "report": ("report", "the report of a run or a study folder"),
    "plot": ("plot", "a run's curves from its log.jsonl"),
    "show-batches": ("show_batches", "decode the first blocks of a tokenized folder"),
    "demo": ("demo", "the whole pipeline, small, on CPU"),
}


def error(message, code: int = 2) -> int:
    """Print ``error: message`` on stderr and return the exit code: 2 for a usage, config or input error
    (nothing was done), 1 for a failure while running."""
    print(f"error: {message}", file=sys.stderr)
    return code


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: hfpretrain COMMAND [ARGS]   (hfpretrain COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {doc}" for name, (_, doc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; commands: {', '.join(COMMANDS)}"
        return error(f"unknown command {name!r}{hint}")
    # the modules parse sys.argv
    sys.argv = [f"hfpretrain {name}", *rest]
    module = importlib.import_module(f"hfpretrain.cli.{COMMANDS[name][0]}")
    return module.main()
