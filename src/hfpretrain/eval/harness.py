"""Score a checkpoint with lm-evaluation-harness on the local ARC / OpenBookQA files.

``evaluate_checkpoint`` = ``lm_eval.simple_evaluate(model=HFLM(...), tasks=...,
task_manager=TaskManager(include_path=<hfpretrain task dir>))``, 0-shot, full test sets unless
``limit``; writes lm-eval's own results JSON plus a one-table ``summary.md``.
``scoring="avg_logprob"`` (or ``"both"``) adds the reference report's per-token rule
(see ``hfpretrain.eval.scoring``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import math
from importlib import metadata as _md
from pathlib import Path

from hfpretrain.eval.task_data import QUESTION_TASKS, available_tasks, base_task, resolve_data_root
from hfpretrain.eval.checkpoint import CheckpointNotFoundError, OutputFolderError, check_checkpoint, check_output_folder
from hfpretrain.eval.extras import MissingExtraError, require_lm_eval
from hfpretrain.eval.local_tasks import DEFAULT_TASKS, KNOWN_TASKS, load_tasks, task_manager, task_sources

logger = logging.getLogger(__name__)

SCORINGS = ("lm_eval", "avg_logprob", "both")


__all__ = [
    "CheckpointNotFoundError",
    "MissingExtraError",
    "OutputFolderError",
    "check_checkpoint",
    "evaluate_checkpoint",
    "make_lm",
    "summary_markdown",
    "write_outputs",
]


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _version(pkg: str) -> str:
    try:
        return _md.version(pkg)
    except _md.PackageNotFoundError:
        return "unknown"


@contextlib.contextmanager
def _git_describe_quiet():
    """lm-eval's results record the git commit of the current directory (``git describe --always``, else read
    from ``.git``), and outside a git repository git prints "fatal: not a git repository" on the terminal (lm-eval
    does not capture git's stderr). The same value, read with git's stderr captured."""
    import subprocess

    import lm_eval.evaluator
    from lm_eval.loggers.utils import get_commit_from_path

    def git_commit_hash():
        try:
            run = subprocess.run(["git", "describe", "--always"], capture_output=True, check=True)
            return run.stdout.strip().decode()
        except (subprocess.CalledProcessError, OSError):
            return get_commit_from_path(Path.cwd())

    original = getattr(lm_eval.evaluator, "get_git_commit_hash", None)
    if original is None:  # another lm-eval: leave it alone
        yield
        return
    lm_eval.evaluator.get_git_commit_hash = git_commit_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = original


def make_lm(checkpoint, batch_size=8, dtype="auto", device=None):
    """``HFLM`` for a checkpoint dir (tokenizer from the same dir; pad = eos when missing)."""
    require_lm_eval("scoring a checkpoint")
    from lm_eval.models.huggingface import HFLM

    # absolute: HFLM looks a relative name like "final" up on the Hub as a model id for its results
    path = check_checkpoint(checkpoint).resolve()
    return HFLM(
        pretrained=str(path),
        tokenizer=str(path),
        batch_size=batch_size,
        dtype=dtype,
        device=device or _default_device(),
    )


def evaluate_checkpoint(
    checkpoint,
    tasks=None,
    limit=None,
    batch_size=8,
    dtype="auto",
    device=None,
    out_dir=None,
    data_root=None,
    scoring: str = "lm_eval",
) -> dict:
    """Evaluate ``checkpoint`` 0-shot on ``tasks``; return lm-eval's results dict (+ run info).

    ``tasks`` default: those of arc_easy, arc_challenge, openbookqa whose test file the data root has
    (all three in a full data root; ARC only in the embedded one), one log line naming any left out;
    ``"all"``: likewise of every local task (HellaSwag, PIQA, WinoGrande, LAMBADA too).
    A task named explicitly whose file is missing is lm-eval's built-in one, downloading its Hub dataset, when
    the Hub is allowed and answers (one log line; ``hfpretrain.from_hub`` lists them); else a one-line error.

    The returned dict is ``lm_eval.simple_evaluate``'s (``results``, ``configs``, ``n-samples``,
    ...), with ``hfpretrain`` (lm-eval version, batch size, dtype, device, limit, data root,
    scoring) and, for ``scoring`` in ("avg_logprob", "both"), ``avg_logprob``
    (``{task: {acc, acc_norm, acc_avg_logprob, *_stderr, n}}``) added.  With ``out_dir`` it writes
    ``results.json`` and ``summary.md`` there.
    """
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, not {scoring!r}")
    require_lm_eval("evaluating a checkpoint")  # both scorings run through lm-eval's tasks and HFLM
    # every input and the output folder before any scoring: one-line errors, nothing computed in vain
    check_checkpoint(checkpoint)  # config, whole weights, tokenizer files
    if out_dir is not None:
        check_output_folder(out_dir)
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",") if t]
    if tasks is None or list(tasks) == ["all"]:
        wanted = DEFAULT_TASKS if tasks is None else KNOWN_TASKS
        # none there: all of them, from the Hub when it answers (offline: the error names the first missing file)
        tasks = available_tasks(wanted, data_root) or list(wanted)
        left_out = [t for t in wanted if t not in tasks]
        if left_out:
            logger.warning(
                "evaluating %s: %s not in the data root %s",
                ", ".join(tasks),
                ", ".join(left_out),
                resolve_data_root(data_root),
            )
    tasks = list(tasks)
    if scoring == "avg_logprob" and not any(base_task(t) in QUESTION_TASKS for t in tasks):
        raise ValueError(
            f"--scoring avg_logprob scores question-answer tasks ({', '.join(QUESTION_TASKS)}), none of "
            f"{', '.join(tasks)}: use --scoring lm_eval"
        )
    sources = task_sources(tasks, data_root)  # a missing file: the Hub's copy, or a one-line error
    task_objs = load_tasks(tasks, data_root, sources=sources)
    lm = make_lm(checkpoint, batch_size=batch_size, dtype=dtype, device=device)

    results: dict = {}
    if scoring in ("lm_eval", "both"):
        import lm_eval

        # The Tasks loaded above, not their names: loading each task a second time repeated its load-time
        # warnings, and the local task manager would load the local twin of a task that reads the Hub. 0-shot is
        # set on each Task, so lm-eval does not warn that it overrides the task's default (None) with 0.
        for task in task_objs.values():
            task.set_config(key="num_fewshot", value=0)
        with _git_describe_quiet():
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=[task_objs[t] for t in tasks],
                num_fewshot=0,
                limit=limit,
                task_manager=task_manager(data_root),
                log_samples=False,
            )
    if scoring in ("avg_logprob", "both"):
        from hfpretrain.eval.scoring import apply_limit, score_docs

        asked = [name for name in task_objs if base_task(name) in QUESTION_TASKS]
        if len(asked) < len(task_objs):
            logger.warning(
                "the reference rule scores question-answer tasks only (%s); not %s",
                ", ".join(QUESTION_TASKS),
                ", ".join(n for n in task_objs if n not in asked),
            )
        results["avg_logprob"] = {
            name: score_docs(lm, task_objs[name], apply_limit(task_objs[name].test_docs(), limit), prompt="reference")
            for name in asked
        }
    results["hfpretrain"] = {
        "checkpoint": str(Path(checkpoint).expanduser().resolve()),
        "tasks": tasks,
        "lm_eval_version": _version("lm_eval"),
        "transformers_version": _version("transformers"),
        "torch_version": _version("torch"),
        "batch_size": batch_size,
        "dtype": str(getattr(lm.model, "dtype", dtype)).replace("torch.", ""),
        "requested_dtype": str(dtype),
        "device": str(lm.device),
        "num_fewshot": 0,
        "limit": limit,
        "data_root": str(resolve_data_root(data_root)),
        "from_hub": {t: hub for t, hub in sources.items() if hub is not None},
        "scoring": scoring,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if out_dir is not None:
        # the checkpoint's own eval/ (the default): its model card shows these scores, and an export ships them
        if Path(out_dir).expanduser().resolve() == Path(checkpoint).expanduser().resolve() / "eval":
            from hfpretrain.eval.card import update_scores

            card = update_scores(checkpoint, summary_markdown(results))
            if card is not None:
                results["hfpretrain"]["model_card"] = str(card)
        write_outputs(results, out_dir)
    return results


def _fmt(value, stderr) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if stderr is None or (isinstance(stderr, float) and math.isnan(stderr)) or stderr == "N/A":
        return f"{value:.4f}"
    return f"{value:.4f} ± {stderr:.4f}"


def _other_metrics(r: dict) -> str:
    """lm-eval's metrics besides acc and acc_norm (LAMBADA's perplexity), as "name value ± stderr"."""
    names = [k.split(",")[0] for k in r if "," in k and "_stderr" not in k]
    return (
        "; ".join(
            f"{n} {_fmt(r[f'{n},none'], r.get(f'{n}_stderr,none'))}"
            for n in names
            if n not in ("acc", "acc_norm") and f"{n},none" in r
        )
        or "–"
    )


def summary_markdown(results: dict) -> str:
    """One markdown table: task, docs, lm-eval acc / acc_norm, reference-rule acc (if computed)."""
    info = results.get("hfpretrain", {})
    lm_res = results.get("results", {})
    avg = results.get("avg_logprob", {})
    tasks = info.get("tasks") or sorted(set(lm_res) | set(avg))
    checkpoint = info.get("checkpoint", "?")
    if Path(checkpoint).is_absolute() and Path(checkpoint).is_relative_to(Path.cwd()):
        checkpoint = Path(checkpoint).relative_to(Path.cwd()).as_posix()  # a file to commit names no machine's path
    lines = [
        f"# Evaluation: `{checkpoint}`",
        "",
        f"lm-eval {info.get('lm_eval_version')}, 0-shot, batch size {info.get('batch_size')}, "
        f"dtype {info.get('dtype')}, device {info.get('device')}, limit {info.get('limit')}, "
        f"scoring {info.get('scoring')}, {info.get('date')}.",
        "",
        "| task | docs | acc | acc_norm | acc (avg log-prob/token, reference prompt) | other |",
        "|---|---:|---|---|---|---|",
    ]
    n_samples = results.get("n-samples", {})
    for t in tasks:
        r = lm_res.get(t, {})
        a = avg.get(t, {})
        n = n_samples.get(t, {}).get("effective") or a.get("n", "")
        lines.append(
            f"| {t} | {n} | {_fmt(r.get('acc,none'), r.get('acc_stderr,none'))} | "
            f"{_fmt(r.get('acc_norm,none'), r.get('acc_norm_stderr,none'))} | "
            f"{_fmt(a.get('acc_avg_logprob'), a.get('acc_avg_logprob_stderr'))} | {_other_metrics(r)} |"
        )
    lines += [
        "",
        "acc / acc_norm: lm-eval's metrics (sum of log-probs; sum divided by choice length in characters). "
        "The last column is the reference report's rule (mean log-prob per answer token after "
        '"Question: X\\nAnswer:"), computed by hfpretrain.eval.scoring.',
        "",
    ]
    return "\n".join(lines)


def write_outputs(results: dict, out_dir) -> tuple[Path, Path]:
    require_lm_eval("writing lm-eval results")
    from lm_eval.utils import handle_non_serializable

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump = {k: v for k, v in results.items() if k != "samples"}
    json_path = out / "results.json"
    json_path.write_text(json.dumps(dump, indent=2, default=handle_non_serializable, ensure_ascii=False))
    md_path = out / "summary.md"
    md_path.write_text(summary_markdown(results))
    return json_path, md_path
