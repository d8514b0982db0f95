"""The checks evaluation and generation make before any work: is the checkpoint folder usable (config,
weights, tokenizer), and can the output folder be written. One place for both (``harness.py`` and
``generation.py`` used to check only that ``config.json`` existed: a checkpoint without tokenizer files then
generated an empty completion with exit 0 or died in lm-eval on a bare AssertionError, and a read-only
output folder was found after all the scoring).
"""

from __future__ import annotations

from pathlib import Path

from hfpretrain.integrity import json_problem, tokenizer_problem, weights_problem
from hfpretrain.outdir import output_problem


class CheckpointNotFoundError(FileNotFoundError):
    """One-line error for a missing / incomplete checkpoint directory."""


class OutputFolderError(ValueError):
    """One-line error for an output folder that cannot be created or written."""


def check_checkpoint(checkpoint, tokenizer: bool = True) -> Path:
    """The checkpoint folder, after checking that it holds a readable ``config.json``, whole weights
    (the safetensors header against the file size) and, with ``tokenizer``, tokenizer files."""
    path = Path(checkpoint).expanduser()
    if not path.is_dir():
        raise CheckpointNotFoundError(f"checkpoint not found: {path} (expected a save_pretrained directory)")
    if not (path / "config.json").is_file():
        # a run folder holds its model in final/ (and checkpoint-N/): name the one a user most likely meant
        hint = f": the run's model is {path / 'final'}" if (path / "final" / "config.json").is_file() else ""
        raise CheckpointNotFoundError(f"not a checkpoint: {path} has no config.json{hint}")
    for problem in (
        json_problem(path / "config.json"),
        weights_problem(path),
        tokenizer_problem(path) if tokenizer else None,
    ):
        if problem:
            raise CheckpointNotFoundError(f"unusable checkpoint: {problem}")
    return path


def check_output_folder(out_dir, flag: str = "--out", makes: str = "eval") -> Path:
    problem = output_problem(out_dir, makes=makes)
    if problem:
        raise OutputFolderError(f"{flag} {out_dir}: {problem}")
    return Path(out_dir)


__all__ = ["CheckpointNotFoundError", "OutputFolderError", "check_checkpoint", "check_output_folder"]
