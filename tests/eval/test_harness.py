"""lm-eval offline on the tiny checkpoint: Python API, CLI with --include_path, script, scoring."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from forked import run_forked, script

from hfpretrain.eval import evaluate_checkpoint
from hfpretrain.eval.harness import CheckpointNotFoundError
from hfpretrain.eval.task_data import FULL_SIZES
from hfpretrain.eval.local_tasks import TASK_DIR
from hfpretrain.paths import using_embedded_data

REPO = Path(__file__).resolve().parents[2]
# The embedded sample data (no DATA_ROOT) has 48 test questions of each ARC task and no OpenBookQA.
EMBEDDED = using_embedded_data()
TASKS = ("arc_easy", "arc_challenge") if EMBEDDED else ("arc_easy", "arc_challenge", "openbookqa")
TEST_SIZES = {"arc_easy": 48, "arc_challenge": 48} if EMBEDDED else {t: FULL_SIZES[t]["test"] for t in TASKS}


def _env(data_root):
    return {**os.environ, "DATA_ROOT": str(data_root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def evaluated(tiny_checkpoint, data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_out")
    res = evaluate_checkpoint(
        tiny_checkpoint,
        tasks=TASKS,
        limit=8,
        batch_size=8,
        dtype="float32",
        device="cpu",
        out_dir=out,
        data_root=data_root,
        scoring="both",
    )
    return res, out


def test_evaluate_checkpoint_runs_each_task(evaluated):
    res, _ = evaluated
    for t in TASKS:
        r = res["results"][t]
        for m in ("acc,none", "acc_norm,none", "acc_stderr,none", "acc_norm_stderr,none"):
            assert isinstance(r[m], float)
        assert 0.0 <= r["acc,none"] <= 1.0
        assert res["n-samples"][t] == {"original": TEST_SIZES[t], "effective": 8}
        assert res["configs"][t]["num_fewshot"] == 0
    info = res["hfpretrain"]
    import lm_eval  # noqa: F401
    from importlib.metadata import version

    assert info["lm_eval_version"] == version("lm_eval")
    assert info["batch_size"] == 8 and info["dtype"] == "float32" and info["limit"] == 8
    assert info["from_hub"] == {}  # every file local: no task read from the Hub


def test_task_from_the_hub_is_scored_by_its_builtin_task(tiny_checkpoint, data_root, monkeypatch):
    """A task whose file is missing (online) reaches simple_evaluate as lm-eval's own Task object, not by name
    through the local task manager (which would load the local twin and fail on the missing file); results.json
    says which. lm-eval's built-in task is stood in for by the local one (no network in the tests)."""
    from hfpretrain.eval import harness

    hub = "allenai/ai2_arc (ARC-Easy)"
    monkeypatch.setattr(harness, "task_sources", lambda tasks, data_root=None: {"arc_easy": hub})
    given = {}
    real = harness.load_tasks

    def load_tasks(tasks, data_root=None, sources=None):
        given["sources"] = sources
        return real(tasks, data_root, sources={t: None for t in tasks})

    monkeypatch.setattr(harness, "load_tasks", load_tasks)
    res = evaluate_checkpoint(
        tiny_checkpoint,
        tasks=["arc_easy"],
        limit=2,
        batch_size=8,
        dtype="float32",
        device="cpu",
        data_root=data_root,
        scoring="lm_eval",
    )
    assert given["sources"] == {"arc_easy": hub} and res["hfpretrain"]["from_hub"] == {"arc_easy": hub}
    assert res["n-samples"]["arc_easy"]["effective"] == 2 and 0.0 <= res["results"]["arc_easy"]["acc,none"] <= 1.0


def test_outputs_written(evaluated):
    res, out = evaluated
    data = json.loads((out / "results.json").read_text())
    assert set(TASKS) <= set(data["results"]) and data["hfpretrain"]["lm_eval_version"]
    assert set(data["avg_logprob"]) == set(TASKS)
    md = (out / "summary.md").read_text()
    assert md.count("\n| ") == 1 + len(TASKS)  # header + one row per task (one table)
    assert "lm-eval " + data["hfpretrain"]["lm_eval_version"] in md and "batch size 8" in md and "dtype float32" in md


@pytest.mark.full_data("HellaSwag, PIQA, WinoGrande, LAMBADA")
def test_more_tasks_through_lm_eval(tiny_checkpoint, data_root, tmp_path):
    """The four tasks beside ARC and OpenBookQA, 4 documents each, through lm-eval; the reference rule (question
    tasks only) leaves them out, and LAMBADA's perplexity lands in the summary's last column."""
    more = ("hellaswag", "piqa", "winogrande", "lambada_openai")
    res = evaluate_checkpoint(
        tiny_checkpoint,
        tasks=more,
        limit=4,
        batch_size=8,
        dtype="float32",
        device="cpu",
        out_dir=tmp_path,
        data_root=data_root,
        scoring="both",
    )
    for t in more:
        assert 0.0 <= res["results"][t]["acc,none"] <= 1.0
        assert res["n-samples"][t]["effective"] == 4
    assert res["results"]["lambada_openai"]["perplexity,none"] > 1
    assert res["avg_logprob"] == {}
    md = (tmp_path / "summary.md").read_text()
    assert "| lambada_openai | 4 |" in md and "perplexity " in md


def test_reference_rule_alone_on_tasks_it_cannot_score(tiny_checkpoint, data_root):
    with pytest.raises(ValueError, match="--scoring avg_logprob scores question-answer tasks .* none of piqa"):
        evaluate_checkpoint(tiny_checkpoint, tasks=["piqa"], data_root=data_root, scoring="avg_logprob")


def test_avg_logprob_scoring_consistent_with_lm_eval(evaluated):
    """Same HFLM log-likelihoods: on ARC (same prompt) our acc/acc_norm equal lm-eval's."""
    res, _ = evaluated
    for t in ("arc_easy", "arc_challenge"):
        ours, theirs = res["avg_logprob"][t], res["results"][t]
        assert ours["n"] == 8
        assert ours["acc"] == pytest.approx(theirs["acc,none"])
        assert ours["acc_norm"] == pytest.approx(theirs["acc_norm,none"])
    for t in TASKS:
        assert 0.0 <= res["avg_logprob"][t]["acc_avg_logprob"] <= 1.0


def test_per_token_average_rule(tiny_checkpoint, data_root):
    """acc_avg_logprob picks argmax(sum_logprob / n_answer_tokens) with HFLM's tokenization (on OpenBookQA,
    whose lm-eval prompt differs from the reference one; on ARC-Easy with the embedded data)."""
    from lm_eval.models.huggingface import HFLM

    from hfpretrain.eval.local_tasks import load_tasks
    from hfpretrain.eval.scoring import continuation_token_count, reference_context, score_docs

    lm = HFLM(pretrained=str(tiny_checkpoint), tokenizer=str(tiny_checkpoint), device="cpu", batch_size=4)
    name = "arc_easy" if EMBEDDED else "openbookqa"
    task = load_tasks([name], data_root)[name]
    doc = task.test_docs()[0]
    ctx = reference_context(doc)
    assert ctx == f"Question: {doc['question' if EMBEDDED else 'question_stem']}\nAnswer:"
    import torch

    model, tok = lm.model, lm.tokenizer
    sums, ntoks = [], []
    for choice in doc["choices"]["text"]:
        c_ids = tok(ctx)["input_ids"]
        full = tok(ctx + " " + choice)["input_ids"]
        n = len(full) - len(c_ids)
        assert n == continuation_token_count(lm, ctx, " " + choice)
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([full])).logits[0].float(), -1)
        sums.append(sum(logp[i - 1, full[i]].item() for i in range(len(c_ids), len(full))))
        ntoks.append(n)
    pred = max(range(len(sums)), key=lambda i: sums[i] / ntoks[i])
    res = score_docs(lm, task, [doc], prompt="reference")
    assert res["acc_avg_logprob"] == float(pred == task.doc_to_target(doc))
    pred_sum = max(range(len(sums)), key=lambda i: sums[i])
    assert res["acc"] == float(pred_sum == task.doc_to_target(doc))


def test_lm_eval_cli_offline_with_include_path(tiny_checkpoint, data_root, tmp_path):
    """``python -m lm_eval`` (its ``__main__`` run as ``-m`` runs it, in a process forked from this one: tests/forked.py,
    without a fresh interpreter's imports) with our task folder on --include_path, offline."""
    import runpy

    argv = [
        "--model",
        "hf",
        "--model_args",
        f"pretrained={tiny_checkpoint},dtype=float32",
        "--tasks",
        ",".join(TASKS),
        "--include_path",
        str(TASK_DIR),
        "--device",
        "cpu",
        "--batch_size",
        "8",
        "--limit",
        "2",
        "--output_path",
        str(tmp_path),
    ]

    def lm_eval():
        sys.argv = ["lm_eval", *argv]
        runpy.run_module("lm_eval", run_name="__main__", alter_sys=True)

    env = {"DATA_ROOT": str(data_root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # _env's, in the child
    p = run_forked(lm_eval, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    files = list(tmp_path.rglob("results_*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    for t in TASKS:
        assert "acc,none" in data["results"][t] and "acc_norm_stderr,none" in data["results"][t]
        assert data["n-samples"][t]["effective"] == 2
        assert data["configs"][t]["metadata"]["config_source"].startswith(str(TASK_DIR))


def test_missing_checkpoint_api(tmp_path, data_root):
    with pytest.raises(CheckpointNotFoundError) as err:
        evaluate_checkpoint(tmp_path / "nope", data_root=data_root)
    assert "\n" not in str(err.value)


def test_script_errors_are_one_line(tiny_checkpoint, data_root, tmp_path):
    script = str(REPO / "scripts" / "evaluate.py")
    p = subprocess.run(
        [sys.executable, script, str(tmp_path / "nope")],
        env=_env(data_root),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0
    assert p.stderr.strip().count("\n") == 0 and "checkpoint not found" in p.stderr
    (tmp_path / "eval").mkdir()
    p = subprocess.run(
        [sys.executable, script, str(tiny_checkpoint)], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert p.returncode != 0
    assert p.stderr.strip().count("\n") == 0 and "ARC-Easy-Test.jsonl" in p.stderr


def test_script_runs(tiny_checkpoint, data_root, tmp_path):
    """Forked from this process (tests/forked.py); the errors above run the script in a fresh interpreter."""
    p = script(
        "evaluate.py",
        tiny_checkpoint,
        "--tasks",
        "arc_easy",
        "--limit",
        "3",
        "--out",
        tmp_path / "o",
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--scoring",
        "both",
        env={"DATA_ROOT": data_root},
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| arc_easy | 3 |" in p.stdout
    assert (tmp_path / "o" / "results.json").is_file() and (tmp_path / "o" / "summary.md").is_file()


def test_tasks_all_scores_every_task_the_data_root_has(tiny_checkpoint, data_root, tmp_path):
    """--tasks all: each of the seven local tasks whose file is there (here ARC-Easy and PIQA), the rest named
    in a warning."""
    root = tmp_path / "data"
    (root / "eval" / "arc_easy").mkdir(parents=True)
    (root / "eval" / "piqa").mkdir()
    shutil.copy(data_root / "eval" / "arc_easy" / "ARC-Easy-Test.jsonl", root / "eval" / "arc_easy")
    (root / "eval" / "piqa" / "piqa_validation.jsonl").write_text(
        "".join(
            json.dumps(
                {"goal": f"To dry a towel number {i},", "sol1": "hang it in the sun.", "sol2": "soak it.", "label": 0}
            )
            + "\n"
            for i in range(3)
        )
    )
    res = evaluate_checkpoint(
        tiny_checkpoint, tasks="all", limit=2, dtype="float32", device="cpu", data_root=root, scoring="lm_eval"
    )
    assert res["hfpretrain"]["tasks"] == ["arc_easy", "piqa"] and set(res["results"]) == {"arc_easy", "piqa"}


def test_the_summary_names_a_checkpoint_under_the_working_directory_relatively(tmp_path, monkeypatch):
    """summary.md is committed beside a run's results: its title names the checkpoint relative to the working
    directory (the repository), not by the machine's absolute path; one outside it keeps its path."""
    from hfpretrain.eval.harness import summary_markdown

    monkeypatch.chdir(tmp_path)
    inside = {"hfpretrain": {"checkpoint": str(tmp_path / "runs" / "x" / "final"), "tasks": []}}
    assert summary_markdown(inside).splitlines()[0] == "# Evaluation: `runs/x/final`"
    outside = {"hfpretrain": {"checkpoint": "/elsewhere/final", "tasks": []}}
    assert summary_markdown(outside).splitlines()[0] == "# Evaluation: `/elsewhere/final`"
