"""Local AI2-format ARC / OpenBookQA files -> the Hugging Face layout lm-eval's tasks expect.

Files live under ``$DATA_ROOT/eval/`` (see SOURCES.md section 1); without ``DATA_ROOT``, under the
embedded data root, which holds a few dozen ARC test and dev questions per task and no OpenBookQA.  The AI2 layout is
``{"id", "question": {"stem", "choices": [{"text", "label"}, ...]}, "answerKey"}``; the HF
layout (``allenai/ai2_arc``, ``allenai/openbookqa``) that lm-eval's built-in task YAMLs
template over is

* ARC:  ``{"id", "question", "choices": {"text": [...], "label": [...]}, "answerKey"}``
* OBQA: ``{"id", "question_stem", "choices": {"text": [...], "label": [...]}, "answerKey"}``

Labels are kept exactly as in the file (some ARC rows use "1".."4", a few have 3 or 5
choices): the gold index is ``choices.label.index(answerKey)``, i.e. through the row's own
label list, which is what lm-eval's ``doc_to_target`` computes.

This module has no dependency on lm-eval and only needs ``datasets`` for ``load_dataset_dict``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hfpretrain import paths

# task name -> (subdirectory of $DATA_ROOT/eval, {split: file name})
TASK_FILES: dict[str, tuple[str, dict[str, str]]] = {
    "arc_easy": (
        "arc_easy",
        {"train": "ARC-Easy-Train.jsonl", "validation": "ARC-Easy-Dev.jsonl", "test": "ARC-Easy-Test.jsonl"},
    ),
    "arc_challenge": (
        "arc_challenge",
        {
            "train": "ARC-Challenge-Train.jsonl",
            "validation": "ARC-Challenge-Dev.jsonl",
            "test": "ARC-Challenge-Test.jsonl",
        },
    ),
    "openbookqa": ("openbookqa", {"train": "train.jsonl", "validation": "dev.jsonl", "test": "test.jsonl"}),
}

# Published split sizes (test sets are what lm-eval scores for these tasks).
FULL_SIZES = {
    "arc_easy": {"train": 2251, "validation": 570, "test": 2376},
    "arc_challenge": {"train": 1119, "validation": 299, "test": 1172},
    "openbookqa": {"train": 4957, "validation": 500, "test": 500},
}


class MissingEvalDataError(paths.MissingDataError):
    """One-line error: which evaluation file is missing and where it was looked for."""


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """``data_root`` if given, else ``$DATA_ROOT``, else the embedded data root (see ``hfpretrain.paths``)."""
    try:
        return paths.data_root(data_root)
    except paths.MissingDataError as err:
        raise MissingEvalDataError(f"{err}; or pass data_root / --data-root / --metadata '{{\"data_root\": ...}}'") from None


def split_path(task: str, split: str, data_root: str | os.PathLike | None = None) -> Path:
    base = base_task(task)
    if base not in TASK_FILES:
        raise KeyError(f"unknown local task {task!r}; known: {sorted(TASK_FILES)}")
    sub, files = TASK_FILES[base]
    return resolve_data_root(data_root) / "eval" / sub / files[split]


def base_task(task: str) -> str:
    """``arc_easy`` for ``arc_easy`` and for variants such as ``arc_easy_local``."""
    for name in TASK_FILES:
        if task == name or task.startswith(name + "_"):
            return name
    return task


def _missing(task: str, split: str, path: Path) -> MissingEvalDataError:
    msg = f"missing evaluation file for {task} ({split}): {path}"
    if path.is_relative_to(paths.EMBEDDED_DATA_ROOT):
        msg += " (the embedded data holds ARC test and dev questions only: set DATA_ROOT to a full data root)"
    return MissingEvalDataError(msg)


def check_files(tasks, data_root=None, splits=("test",)) -> None:
    """Raise MissingEvalDataError (one line) if a needed file is absent."""
    for task in tasks:
        for split in splits:
            path = split_path(task, split, data_root)
            if not path.is_file():
                raise _missing(task, split, path)


def available_tasks(tasks, data_root=None, split: str = "test") -> list[str]:
    """The tasks of ``tasks`` whose ``split`` file exists (the embedded data root has no OpenBookQA)."""
    return [t for t in tasks if split_path(t, split, data_root).is_file()]


def to_hf(row: dict, task: str) -> dict:
    """One AI2-layout row -> the HF layout of the corresponding lm-eval dataset."""
    q = row["question"]
    choices = {"text": [c["text"] for c in q["choices"]], "label": [c["label"] for c in q["choices"]]}
    if base_task(task) == "openbookqa":
        out = {"id": row["id"], "question_stem": q["stem"], "choices": choices, "answerKey": row["answerKey"]}
    else:
        out = {"id": row["id"], "question": q["stem"], "choices": choices, "answerKey": row["answerKey"]}
    return out


def read_split(task: str, split: str, data_root=None) -> list[dict]:
    path = split_path(task, split, data_root)
    if not path.is_file():
        raise _missing(task, split, path)
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(to_hf(json.loads(line), task))
                except (KeyError, TypeError, json.JSONDecodeError) as err:
                    raise ValueError(f"{path}:{n}: not an AI2-format row ({err})") from None
    return rows


def gold_index(doc: dict) -> int:
    """Index of the answer in the row's own label list (handles "1".."4" and 3/5 choices)."""
    return doc["choices"]["label"].index(doc["answerKey"].strip())


def load_dataset_dict(task: str, data_root=None, splits=("train", "validation", "test")):
    """A ``datasets.DatasetDict`` with the HF layout, read from the local AI2 files."""
    import datasets

    out = {split: datasets.Dataset.from_list(read_split(task, split, data_root))
           for split in splits if split == "test" or split_path(task, split, data_root).is_file()}
    # A slim data root may lack train/dev; lm-eval still reads the training split to build its
    # few-shot sampler, so an absent split is an empty one (zero-shot runs; few-shot has no pool).
    return datasets.DatasetDict({split: out.get(split, out["test"].select([])) for split in splits})
