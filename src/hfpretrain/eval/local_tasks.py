"""The project's lm-eval task directory: offline twins of arc_easy, arc_challenge, openbookqa, hellaswag, piqa,
winogrande and lambada_openai.

The YAMLs in ``hfpretrain/eval/tasks/`` keep lm-eval's task names, prompts, choices, targets and
metrics and read the local files through a ``custom_dataset`` loader; the data root comes
from TaskManager metadata ``data_root`` or ``$DATA_ROOT``. Passing this directory as
``--include_path`` (CLI) or ``TaskManager(include_path=...)`` overrides the built-in tasks of the
same names, so no YAML rendering or temp directory is needed.

A task whose local file is missing falls back to lm-eval's built-in task of the same name, which downloads its
Hub dataset (``task_data.HUB_DATASETS``), when the Hub is allowed (neither ``HF_HUB_OFFLINE`` nor
``HF_DATASETS_OFFLINE``) and answers; otherwise the one-line error names the file and the Hub dataset.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hfpretrain.eval.extras import require_lm_eval
from hfpretrain.eval.task_data import (
    HUB_DATASETS,
    TASKS,
    hub_dataset,
    hub_offline,
    missing_error,
    missing_file,
    resolve_data_root,
)

logger = logging.getLogger(__name__)

TASK_DIR = Path(__file__).resolve().parent / "tasks"
DEFAULT_TASKS = ("arc_easy", "arc_challenge", "openbookqa")
KNOWN_TASKS = tuple(TASKS)


def task_manager(data_root=None, include_defaults: bool = False):
    """A ``lm_eval.tasks.TaskManager`` that knows the local tasks (and, optionally, lm-eval's)."""
    require_lm_eval("the local lm-eval tasks")
    from lm_eval.tasks import TaskManager

    root = resolve_data_root(data_root)
    return TaskManager(include_path=str(TASK_DIR), include_defaults=include_defaults, metadata={"data_root": str(root)})


def _hub_problem(task: str) -> str | None:
    """Why lm-eval's built-in ``task`` cannot download its dataset now, or None. One metadata request, so that
    an unreachable Hub is one line here rather than a traceback from inside lm-eval's download."""
    if var := hub_offline():
        return f"{var}={os.environ[var]} (unset it, with network access, to download it)"
    from huggingface_hub import HfApi

    try:
        HfApi().dataset_info(HUB_DATASETS[task][0], timeout=10)
    except Exception as err:  # connection, DNS, HTTP status: all mean "not now"
        return f"the Hub did not answer ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return None


def task_sources(tasks, data_root=None, splits=None) -> dict:
    """``{task: None}`` for a task read from its local files, ``{task: "allenai/ai2_arc (ARC-Easy)"}`` for one
    that lm-eval's built-in task downloads instead (said in one log line). Checks before any loading: a missing
    file that the Hub cannot replace is a one-line ``MissingEvalDataError`` naming both."""
    tasks = list(tasks)
    unknown = [t for t in tasks if t not in KNOWN_TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; local tasks are {list(KNOWN_TASKS)}")
    sources = {}
    for task in tasks:
        gap = missing_file(task, data_root, splits)
        if gap is not None:
            if why := _hub_problem(task):
                raise missing_error(task, *gap, hub_why=why)
            logger.warning(
                "%s: no local file %s; using lm-eval's built-in task, which downloads Hub dataset %s",
                task,
                gap[1],
                hub_dataset(task),
            )
        sources[task] = None if gap is None else hub_dataset(task)
    return sources


def load_tasks(tasks=DEFAULT_TASKS, data_root=None, splits=None, sources: dict | None = None) -> dict:
    """``{name: lm_eval Task}``: the local tasks, and lm-eval's built-in ones where the local file of ``splits``
    (default: each task's scored split) is missing and the Hub can be reached (``task_sources``; pass its result
    as ``sources`` to skip the check)."""
    if sources is None:
        sources = task_sources(tasks, data_root, splits)
    local = [t for t in tasks if sources[t] is None]
    loaded = task_manager(data_root).load(local)["tasks"] if local else {}
    if len(local) < len(sources):
        from lm_eval.tasks import TaskManager

        loaded.update(TaskManager().load([t for t in tasks if sources[t] is not None])["tasks"])
    return {t: loaded[t] for t in tasks}
