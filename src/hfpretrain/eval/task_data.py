"""Local evaluation files -> the Hugging Face layout lm-eval's task YAMLs expect.

Files live under ``$DATA_ROOT/eval/<folder>/`` (see the data mount's SOURCES.md); without ``DATA_ROOT``, under the
embedded data root, which holds a few dozen ARC test and dev questions per task and nothing else.

* ARC (AI2 format ``{"id", "question": {"stem", "choices": [{"text", "label"}, ...]}, "answerKey"}``) ->
  ``allenai/ai2_arc``'s ``{"id", "question", "choices": {"text": [...], "label": [...]}, "answerKey"}``;
  OpenBookQA (the same AI2 format) -> ``allenai/openbookqa``'s, with ``question_stem``. Labels are kept exactly as
  in the file (some ARC rows use "1".."4", a few have 3 or 5 choices): the gold index is
  ``choices.label.index(answerKey)``, through the row's own label list, as lm-eval's ``doc_to_target`` computes.
* HellaSwag, PIQA, WinoGrande: the files already hold the HF datasets' rows (validation splits only, the splits
  lm-eval scores); LAMBADA (OpenAI's, as llm-foundry ships it): ``{"context", "continuation"}`` ->
  ``EleutherAI/lambada_openai``'s ``{"text"}`` = context + " " + continuation.

This module has no dependency on lm-eval and only needs ``datasets`` for ``load_dataset_dict``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hfpretrain import paths


def _ai2(stem_key: str = "question") -> Callable[[dict], dict]:
    """AI2's layout -> the HF datasets' (``question`` for ARC, ``question_stem`` for OpenBookQA)."""

    def to_hf(row: dict) -> dict:
        q = row["question"]
        choices = {"text": [c["text"] for c in q["choices"]], "label": [c["label"] for c in q["choices"]]}
        return {"id": row["id"], stem_key: q["stem"], "choices": choices, "answerKey": row["answerKey"]}

    return to_hf


def _as_is(*fields: str) -> Callable[[dict], dict]:
    """Rows already in the HF dataset's layout, checked for the fields the task reads."""

    def to_hf(row: dict) -> dict:
        missing = [n for n in fields if n not in row]
        if missing:
            raise KeyError(", ".join(missing))
        return row

    return to_hf


def _lambada(row: dict) -> dict:
    return {"text": f"{row['context']} {row['continuation']}"}


@dataclass(frozen=True)
class LocalTask:
    folder: str  # under $DATA_ROOT/eval
    files: dict  # split -> file name
    sizes: dict  # split -> published number of rows
    to_hf: Callable[[dict], dict] = field(repr=False)  # a file's row -> the HF dataset's row
    scored_split: str = "test"  # the split lm-eval's task scores


TASKS: dict[str, LocalTask] = {
    "arc_easy": LocalTask(
        "arc_easy",
        {"train": "ARC-Easy-Train.jsonl", "validation": "ARC-Easy-Dev.jsonl", "test": "ARC-Easy-Test.jsonl"},
        {"train": 2251, "validation": 570, "test": 2376},
        _ai2(),
    ),
    "arc_challenge": LocalTask(
        "arc_challenge",
        {
            "train": "ARC-Challenge-Train.jsonl",
            "validation": "ARC-Challenge-Dev.jsonl",
            "test": "ARC-Challenge-Test.jsonl",
        },
        {"train": 1119, "validation": 299, "test": 1172},
        _ai2(),
    ),
    "openbookqa": LocalTask(
        "openbookqa",
        {"train": "train.jsonl", "validation": "dev.jsonl", "test": "test.jsonl"},
        {"train": 4957, "validation": 500, "test": 500},
        _ai2("question_stem"),
    ),
    "hellaswag": LocalTask(
        "hellaswag",
        {"validation": "hellaswag_validation.jsonl.zst"},
        {"validation": 10042},
        _as_is("activity_label", "ctx_a", "ctx_b", "endings", "label"),
        "validation",
    ),
    "piqa": LocalTask(
        "piqa",
        {"validation": "piqa_validation.jsonl"},
        {"validation": 1838},
        _as_is("goal", "sol1", "sol2", "label"),
        "validation",
    ),
    "winogrande": LocalTask(
        "winogrande",
        {"validation": "winogrande_xl_validation.jsonl"},
        {"validation": 1267},
        _as_is("sentence", "option1", "option2", "answer"),
        "validation",
    ),
    "lambada_openai": LocalTask("lambada", {"test": "lambada_openai_test.jsonl"}, {"test": 5153}, _lambada),
}
# lm-eval's built-in task of the same name reads this Hub dataset (dataset_path, dataset_name of its YAML): the
# source when the local file is missing and the Hub can be reached (hfpretrain.eval.local_tasks.task_sources)
HUB_DATASETS: dict[str, tuple[str, str | None]] = {
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge"),
    "openbookqa": ("allenai/openbookqa", "main"),
    "hellaswag": ("Rowan/hellaswag", None),
    "piqa": ("baber/piqa", None),
    "winogrande": ("allenai/winogrande", "winogrande_xl"),
    "lambada_openai": ("EleutherAI/lambada_openai", "default"),
}
# the reference rule's "Question: X\nAnswer:" fits these (hfpretrain.eval.scoring)
QUESTION_TASKS = ("arc_easy", "arc_challenge", "openbookqa")
# one prompt and N choices, which hfpretrain.eval.scoring scores on the live model during training; WinoGrande's
# partial scoring and LAMBADA's greedy check run through lm-eval only (training.config lists the same names)
IN_TRAINING_TASKS = (*QUESTION_TASKS, "hellaswag", "piqa")
# the published sizes of the scored splits and the others (tests compare)
FULL_SIZES = {name: dict(task.sizes) for name, task in TASKS.items()}


class MissingEvalDataError(paths.MissingDataError):
    """One-line error: which evaluation file is missing and where it was looked for."""


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """``data_root`` if given, else ``$DATA_ROOT``, else the embedded data root (see ``hfpretrain.paths``)."""
    try:
        return paths.data_root(data_root)
    except paths.MissingDataError as err:
        raise MissingEvalDataError(
            f"{err}; or pass data_root / --data-root / --metadata '{{\"data_root\": ...}}'"
        ) from None


def local_task(task: str) -> LocalTask:
    base = base_task(task)
    if base not in TASKS:
        raise KeyError(f"unknown local task {task!r}; known: {sorted(TASKS)}")
    return TASKS[base]


def split_path(task: str, split: str | None = None, data_root: str | os.PathLike | None = None) -> Path | None:
    """The file of ``split`` (default: the scored one); None for a split the task has no file for."""
    spec = local_task(task)
    name = spec.files.get(split or spec.scored_split)
    return None if name is None else resolve_data_root(data_root) / "eval" / spec.folder / name


def has_split(task: str, split: str | None = None, data_root=None) -> bool:
    path = split_path(task, split, data_root)
    return path is not None and path.is_file()


def base_task(task: str) -> str:
    """``arc_easy`` for ``arc_easy`` and for variants such as ``arc_easy_local``."""
    for name in TASKS:
        if task == name or task.startswith(name + "_"):
            return name
    return task


def hub_dataset(task: str) -> str:
    """``allenai/ai2_arc (ARC-Easy)``: the Hub dataset lm-eval's built-in ``task`` reads."""
    path, name = HUB_DATASETS[base_task(task)]
    return path if name is None else f"{path} ({name})"


def hub_offline() -> str | None:
    """The variable that keeps the Hub out, else None: ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or (which
    huggingface_hub reads as the first) ``TRANSFORMERS_OFFLINE`` set true."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return var
    return None


def missing_error(task: str, split: str, path: Path | None, hub_why: str | None = None) -> MissingEvalDataError:
    """``hub_why``: why lm-eval's built-in task (the Hub dataset) cannot stand in, said in the same line."""
    if path is None:
        msg = f"{task} has no {split} split here; its files: {local_task(task).files}"
    else:
        msg = f"missing evaluation file for {task} ({split}): {path}"
        if path.is_relative_to(paths.EMBEDDED_DATA_ROOT):
            msg += " (the embedded data holds ARC test and dev questions only: set DATA_ROOT to a full data root)"
    if hub_why:
        msg += f"; lm-eval's built-in {base_task(task)} would read Hub dataset {hub_dataset(task)}, but {hub_why}"
    return MissingEvalDataError(msg)


def missing_file(task: str, data_root=None, splits=None) -> tuple[str, Path | None] | None:
    """The first ``(split, path)`` of ``splits`` (default: the scored one) without its file, or None."""
    for split in splits or (local_task(task).scored_split,):
        if not has_split(task, split, data_root):
            return split, split_path(task, split, data_root)
    return None


def check_files(tasks, data_root=None, splits=None) -> None:
    """Raise MissingEvalDataError (one line) if a needed file is absent (default: each task's scored split)."""
    for task in tasks:
        if gap := missing_file(task, data_root, splits):
            raise missing_error(task, *gap)


def available_tasks(tasks, data_root=None) -> list[str]:
    """The tasks of ``tasks`` whose scored split's file exists (the embedded data root has ARC only)."""
    return [t for t in tasks if has_split(t, None, data_root)]


def _lines(path: Path):
    if path.suffix == ".zst":
        import zstandard

        return zstandard.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_split(task: str, split: str, data_root=None) -> list[dict]:
    path = split_path(task, split, data_root)
    if path is None or not path.is_file():
        raise missing_error(task, split, path)
    to_hf, rows = local_task(task).to_hf, []
    with _lines(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(to_hf(json.loads(line)))
                except (KeyError, TypeError, json.JSONDecodeError) as err:
                    raise ValueError(f"{path}:{n}: not a {base_task(task)} row ({type(err).__name__}: {err})") from None
    return rows


def gold_index(doc: dict) -> int:
    """Index of the answer in the row's own label list (handles "1".."4" and 3/5 choices)."""
    return doc["choices"]["label"].index(doc["answerKey"].strip())


def load_dataset_dict(task: str, data_root=None, splits=("train", "validation", "test")):
    """A ``datasets.DatasetDict`` with the HF layout, read from the local files."""
    import datasets

    scored = local_task(task).scored_split
    out = {
        split: datasets.Dataset.from_list(read_split(task, split, data_root))
        for split in {*splits, scored}
        if split == scored or has_split(task, split, data_root)
    }
    # A slim data root may lack train/dev, and HellaSwag, PIQA and WinoGrande have no train file at all; lm-eval
    # still reads the training split to build its few-shot sampler, so an absent split is an empty one
    # (zero-shot runs; few-shot has no pool).
    return datasets.DatasetDict({split: out.get(split, out[scored].select([])) for split in splits})
