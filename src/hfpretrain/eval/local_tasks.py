"""The project's lm-eval task directory: offline twins of arc_easy, arc_challenge, openbookqa, hellaswag, piqa,
winogrande and lambada_openai.

The YAMLs in ``hfpretrain/eval/tasks/`` keep lm-eval's task names, prompts, choices, targets and
metrics and read the local files through a ``custom_dataset`` loader; the data root comes
from TaskManager metadata ``data_root`` or ``$DATA_ROOT``. Passing this directory as
``--include_path`` (CLI) or ``TaskManager(include_path=...)`` overrides the built-in tasks of the
same names, so no YAML rendering or temp directory is needed.
"""

from __future__ import annotations

from pathlib import Path

from hfpretrain.eval.extras import require_lm_eval
from hfpretrain.eval.task_data import TASKS, check_files, resolve_data_root

TASK_DIR = Path(__file__).resolve().parent / "tasks"
DEFAULT_TASKS = ("arc_easy", "arc_challenge", "openbookqa")
KNOWN_TASKS = tuple(TASKS)


def task_manager(data_root=None, include_defaults: bool = False):
    """A ``lm_eval.tasks.TaskManager`` that knows the local tasks (and, optionally, lm-eval's)."""
    require_lm_eval("the local lm-eval tasks")
    from lm_eval.tasks import TaskManager

    root = resolve_data_root(data_root)
    return TaskManager(
        include_path=str(TASK_DIR), include_defaults=include_defaults, metadata={"data_root": str(root)}
    )


def load_tasks(tasks=DEFAULT_TASKS, data_root=None, splits=None) -> dict:
    """``{name: lm_eval Task}`` for the local tasks (checks the files of ``splits``, default each task's scored
    split, first: one-line error if absent)."""
    tasks = list(tasks)
    unknown = [t for t in tasks if t not in KNOWN_TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; local tasks are {list(KNOWN_TASKS)}")
    check_files(tasks, data_root, splits=splits)
    return task_manager(data_root).load(tasks)["tasks"]
