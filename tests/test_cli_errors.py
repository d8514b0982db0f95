"""Every CLI answers ordinary bad input with one ``error:`` line, never a traceback (issue #20, item 9).

Exit codes: 2 for usage, configuration and data errors (the command did nothing), 1 for runtime failures.
Each case runs the script as a user would, in a process of its own (forked from this one: tests/forked.py, so
no case pays for a fresh interpreter's imports), on inputs that fail before any training or tokenizing. Also checked: the error line names the
file, flag or key at fault, and nothing is left behind where the output would have gone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from forked import script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def d(tmp_path_factory, gpt2_tokenizer, data_root):
    """A folder of bad inputs, and the few good ones the cases need."""
    from hfpretrain.data import tokenize_corpus

    root = tmp_path_factory.mktemp("cli_errors")
    (root / "empty.jsonl").write_text("")
    (root / "small.jsonl").write_text(
        "".join(
            json.dumps({"text": f"a small document number {i} " * 10, "meta": {"pile_set_name": "S"}}) + "\n"
            for i in range(20)
        )
    )
    (root / "afile").write_text("not a folder\n")
    (root / "bad.yaml").write_text("model:\n  config: tiny\n  overrides: [1, 2\n")
    (root / "list.yaml").write_text("- model\n- data\n")
    (root / "spec_empty.yaml").write_text("")
    (root / "spec_untokenized.yaml").write_text(
        f"recipe: {REPO / 'recipes' / 'tiny_cpu.yaml'}\nsizes: [tiny]\nsteps: [2]\n"
        f"overrides: [data.path={root / 'not_tokenized'}]\n"
    )
    (root / "blend_epochs.json").write_text(json.dumps({"sources": [{"paths": ["small.jsonl"], "epochs": "two"}]}))
    (root / "blend_items.json").write_text(json.dumps({"sources": ["small.jsonl"]}))
    (root / "blend_paths.json").write_text(json.dumps({"sources": [{"paths": 5}]}))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"text": f"row {i} " * 20} for i in range(50)]), root / "whole.parquet")
    (root / "cut.parquet").write_bytes((root / "whole.parquet").read_bytes()[:300])
    tokenize_corpus([str(root / "small.jsonl")], root / "data", gpt2_tokenizer, seq_len=16, val_docs=4)
    (root / "incomplete").mkdir()
    _checkpoints(root, gpt2_tokenizer)
    (root / "incomplete" / "manifest.json").write_text(json.dumps({"format": "hfpretrain.tokenized"}))
    _runs(root)
    # a folder nobody may write in: root ignores permission bits, but not sysfs
    if os.geteuid() == 0:
        ro = Path("/sys/hfpretrain-test")
    else:
        (root / "ro").mkdir()
        (root / "ro").chmod(0o555)
        ro = root / "ro"
    return {"d": str(root), "tok": str(gpt2_tokenizer), "ro": str(ro), "data": str(root / "data")}


def _checkpoints(root: Path, tokenizer: Path) -> None:
    """ckpt: a tiny model with its tokenizer; notok: without tokenizer files; trunc: weights cut short."""
    import shutil

    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50304,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
    )
    model.save_pretrained(root / "notok")
    for name in ("ckpt", "trunc"):
        shutil.copytree(root / "notok", root / name)
        for f in Path(tokenizer).iterdir():
            shutil.copy(f, root / name / f.name)
    weights = root / "trunc" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    shutil.copytree(root / "ckpt", root / "run" / "final")  # a run folder: its model is in final/


def _runs(root: Path) -> None:
    """Run folders for plot and report: nolog (no log.jsonl), badlog (a line cut short in the middle), noevent (a
    JSON line that is not a log record), goodlog (a readable log)."""
    good = json.dumps({"event": "log", "step": 1, "loss": 9.5, "learning_rate": 1e-3}) + "\n"
    for name, text in (
        ("nolog", None),
        ("badlog", good + '{"event": "log", "step": 2, "lo\n' + good),
        ("noevent", good + '{"step": 2, "loss": 9.1}\n'),
        ("goodlog", good),
    ):
        (root / name).mkdir()
        if text is not None:
            (root / name / "log.jsonl").write_text(text)


TOK = ["--tokenizer", "{tok}", "--seq-len", "16"]
CASES = {
    # tokenize_pile.py
    "tokenize-empty-file": (
        ["tokenize_pile.py", "--input", "{d}/empty.jsonl", *TOK, "--out", "{d}/o"],
        2,
        ["{d}/empty.jsonl", "empty_file"],
    ),
    # an explicit --val-docs of every document (without it, a small input holds out 10%: tests/test_faults.py)
    "tokenize-all-val-docs": (
        ["tokenize_pile.py", "--input", "{d}/small.jsonl", *TOK, "--val-docs", "10000", "--out", "{d}/o"],
        2,
        ["--val-docs", "only 20"],
    ),
    "tokenize-out-is-file": (
        ["tokenize_pile.py", "--input", "{d}/small.jsonl", *TOK, "--val-docs", "2", "--out", "{d}/afile"],
        2,
        ["{d}/afile", "is a file"],
    ),
    "tokenize-out-under-file": (
        ["tokenize_pile.py", "--input", "{d}/small.jsonl", *TOK, "--val-docs", "2", "--out", "{d}/afile/sub"],
        2,
        ["{d}/afile is a file"],
    ),
    "tokenize-out-not-writable": (
        ["tokenize_pile.py", "--input", "{d}/small.jsonl", *TOK, "--val-docs", "2", "--out", "{ro}/o"],
        2,
        ["{ro}/o", "cannot write in"],
    ),
    "tokenize-blend-epochs": (
        ["tokenize_pile.py", "--blend", "{d}/blend_epochs.json", *TOK, "--out", "{d}/o"],
        2,
        ["blend_epochs.json", "sources[0].epochs", '"two"'],
    ),
    "tokenize-blend-items": (
        ["tokenize_pile.py", "--blend", "{d}/blend_items.json", *TOK, "--out", "{d}/o"],
        2,
        ["blend_items.json", "sources[0] must be an object"],
    ),
    "tokenize-blend-paths": (
        ["tokenize_pile.py", "--blend", "{d}/blend_paths.json", *TOK, "--out", "{d}/o"],
        2,
        ["blend_paths.json", "sources[0].paths"],
    ),
    "tokenize-truncated-parquet": (
        [
            "tokenize_pile.py",
            "--input",
            "{d}/cut.parquet",
            "{d}/small.jsonl",
            *TOK,
            "--val-docs",
            "2",
            "--out",
            "{d}/o",
        ],
        2,
        ["{d}/cut.parquet", "unreadable_file"],
    ),
    "tokenize-missing-input": (
        [
            "tokenize_pile.py",
            "--input",
            "{d}/small.jsonl",
            "{d}/nope-*.jsonl.zst",
            *TOK,
            "--val-docs",
            "2",
            "--out",
            "{d}/o",
        ],
        2,
        ["nope-*.jsonl.zst", "--allow-missing"],
    ),
    "tokenize-bad-fraction": (
        ["tokenize_pile.py", "--input", "{d}/small.jsonl", *TOK, "--max-bad-fraction", "2", "--out", "{d}/o"],
        2,
        ["max_bad_fraction"],
    ),
    # train_tokenizer.py
    "train-tokenizer-empty-file": (
        ["train_tokenizer.py", "--input", "{d}/empty.jsonl", "--vocab-size", "300", "--out", "{d}/o"],
        2,
        ["{d}/empty.jsonl"],
    ),
    "train-tokenizer-out-not-writable": (
        ["train_tokenizer.py", "--input", "{d}/small.jsonl", "--vocab-size", "300", "--out", "{ro}/tok"],
        2,
        ["{ro}/tok", "cannot write in"],
    ),
    # pretrain.py
    "pretrain-no-recipe": (["pretrain.py", "{d}/nope.yaml"], 2, ["recipe {d}/nope.yaml does not exist", "tiny_cpu"]),
    "pretrain-yaml-syntax": (["pretrain.py", "{d}/bad.yaml", "--dry-run"], 2, ["{d}/bad.yaml:4", "YAML syntax error"]),
    "pretrain-recipe-not-mapping": (["pretrain.py", "{d}/list.yaml", "--dry-run"], 2, ["{d}/list.yaml", "mapping"]),
    "pretrain-override-yaml": (
        ["pretrain.py", "recipes/tiny_cpu.yaml", "--dry-run", "training.max_steps=[1,"],
        2,
        ["training.max_steps=[1,"],
    ),
    "pretrain-no-tokenizer": (
        ["pretrain.py", "recipes/tiny_cpu.yaml", "--dry-run", "data.path={d}/incomplete"],
        2,
        ["{d}/incomplete/tokenizer", "does not exist"],
    ),
    "pretrain-output-dir-is-file": (
        ["pretrain.py", "recipes/tiny_cpu.yaml", "data.path={data}", "training.output_dir={d}/afile"],
        2,
        ["training.output_dir={d}/afile", "is a file"],
    ),
    "pretrain-output-dir-not-writable": (
        ["pretrain.py", "recipes/tiny_cpu.yaml", "data.path={data}", "training.output_dir={ro}/run"],
        2,
        ["training.output_dir", "cannot write in"],
    ),
    # plan.py
    "plan-unknown-gpu": (["plan.py", "--gpu", "Z100", "--hours", "1"], 2, ["unknown GPU 'Z100'"]),
    "plan-negative-hours": (["plan.py", "--gpu", "H100", "--hours", "-1"], 2, ["hours", "-1"]),
    "plan-zero-gpus": (["plan.py", "--gpu", "H100", "--hours", "1", "--num-gpus", "0"], 2, ["num_gpus"]),
    "plan-negative-micro-batch": (
        ["plan.py", "--gpu", "H100", "--hours", "1", "--micro-batch", "-3"],
        2,
        ["--micro-batch", "-3"],
    ),
    "plan-mfu-above-one": (["plan.py", "--gpu", "H100", "--hours", "1", "--mfu", "2"], 2, ["mfu"]),
    "plan-unknown-layout": (
        ["plan.py", "--gpu", "H200", "--layout", "zero3", "--shape", "qwen3_1p8b"],
        2,
        ["layout", "zero3"],
    ),
    "plan-nodes-not-dividing": (
        ["plan.py", "--gpu", "B200", "--num-gpus", "8", "--nodes", "3", "--layout", "fsdp2", "--shape", "qwen3_1p8b"],
        2,
        ["nodes: 3 nodes do not divide 8 GPUs"],
    ),
    "plan-tp-not-dividing-heads": (
        ["plan.py", "--gpu", "B200", "--num-gpus", "16", "--tp", "16", "--layout", "fsdp2", "--shape", "qwen3_1p8b"],
        2,
        ["tp=16 does not divide"],
    ),
    # study.py
    "study-no-spec": (["study.py", "{d}/nope.yaml", "--plan"], 2, ["study spec {d}/nope.yaml does not exist"]),
    "study-yaml-syntax": (["study.py", "{d}/bad.yaml", "--list"], 2, ["{d}/bad.yaml:4", "YAML syntax error"]),
    "study-empty-spec": (["study.py", "{d}/spec_empty.yaml", "--list"], 2, ["{d}/spec_empty.yaml", "empty file"]),
    # a plan on assumed figures names other runs: a report on it left finished runs out without a word
    "study-untokenized-report": (
        ["study.py", "{d}/spec_untokenized.yaml", "--out", "{d}/o", "--report-only"],
        2,
        ["data.path {d}/not_tokenized has no manifest.json", "need it tokenized first"],
    ),
    "study-untokenized-train": (
        ["study.py", "{d}/spec_untokenized.yaml", "--out", "{d}/o"],
        2,
        ["data.path {d}/not_tokenized has no manifest.json", "--plan shows a plan on assumed figures"],
    ),
    # generate.py, evaluate.py: inputs and the output folder checked before any work
    "generate-no-tokenizer": (
        ["generate.py", "--model", "{d}/notok", "--prompt", "hi"],
        2,
        ["{d}/notok has no tokenizer files"],
    ),  # was exit 0 with an empty completion
    "generate-truncated-weights": (
        ["generate.py", "--model", "{d}/trunc", "--prompt", "hi"],
        2,
        ["{d}/trunc/model.safetensors is truncated"],
    ),
    "generate-top-p": (["generate.py", "--model", "{d}/ckpt", "--prompt", "hi", "--top-p", "0"], 2, ["--top-p"]),
    # the checkpoint as eval takes it (positional) or as --model, once
    "generate-positional": (["generate.py", "{d}/ckpt", "--prompt", "hi", "--top-p", "0"], 2, ["--top-p"]),
    "generate-run-folder": (
        ["generate.py", "{d}/run", "--prompt", "hi"],
        2,
        ["not a checkpoint: {d}/run has no config.json: the run's model is {d}/run/final"],
    ),
    "generate-two-checkpoints": (
        ["generate.py", "{d}/ckpt", "--model", "{d}/ckpt", "--prompt", "hi"],
        2,
        ["give the checkpoint once"],
    ),
    "generate-max-new-tokens": (
        ["generate.py", "--model", "{d}/ckpt", "--prompt", "hi", "--max-new-tokens", "0"],
        2,
        ["--max-new-tokens"],
    ),
    "evaluate-no-tokenizer": (
        ["evaluate.py", "{d}/notok", "--limit", "2", "--out", "{d}/o"],
        2,
        ["{d}/notok has no tokenizer files"],
    ),  # was a bare AssertionError
    "evaluate-truncated-weights": (
        ["evaluate.py", "{d}/trunc", "--limit", "2", "--out", "{d}/o"],
        2,
        ["{d}/trunc/model.safetensors is truncated"],
    ),
    "evaluate-out-not-writable": (
        ["evaluate.py", "{d}/ckpt", "--limit", "2", "--out", "{ro}/eval"],
        2,
        ["--out {ro}/eval", "cannot write in"],
    ),  # was found after all the scoring
    "evaluate-out-is-file": (
        ["evaluate.py", "{d}/ckpt", "--limit", "2", "--out", "{d}/afile"],
        2,
        ["{d}/afile is a file"],
    ),
    "evaluate-limit": (["evaluate.py", "{d}/ckpt", "--limit", "-2", "--out", "{d}/o"], 2, ["--limit"]),
    "evaluate-batch-size": (["evaluate.py", "{d}/ckpt", "--batch-size", "many", "--out", "{d}/o"], 2, ["--batch-size"]),
    "evaluate-task-file-offline": (
        ["evaluate.py", "{d}/ckpt", "--tasks", "openbookqa", "--data-root", "{d}", "--out", "{d}/o"],
        2,
        ["{d}/eval/openbookqa/test.jsonl", "Hub dataset allenai/openbookqa"],
    ),
    # export.py
    "export-missing-checkpoint": (["export.py", "{d}/nope", "--out", "{d}/o"], 2, ["checkpoint not found: {d}/nope"]),
    "export-out-is-file": (["export.py", "{d}/ckpt", "--out", "{d}/afile"], 2, ["{d}/afile is a file"]),
    "export-bad-dtype": (
        ["export.py", "{d}/ckpt", "--out", "{d}/o", "--dtype", "int7"],
        2,
        ["--dtype int7", "bfloat16"],
    ),
    "export-truncated-weights": (
        ["export.py", "{d}/trunc", "--out", "{d}/o"],
        2,
        ["{d}/trunc/model.safetensors is truncated"],
    ),
    # plot.py
    "plot-missing-run": (["plot.py", "{d}/nope"], 2, ["{d}/nope/log.jsonl does not exist"]),
    "plot-no-log": (["plot.py", "{d}/nolog"], 2, ["{d}/nolog/log.jsonl does not exist"]),
    "plot-corrupt-line": (["plot.py", "{d}/badlog"], 2, ["{d}/badlog/log.jsonl:2: not a JSON record"]),  # a traceback
    "plot-not-a-record": (["plot.py", "{d}/noevent"], 2, ["{d}/noevent/log.jsonl:2: not a log record"]),  # a KeyError
    "plot-out-not-writable": (
        ["plot.py", "{d}/goodlog", "--out", "{ro}/curves.png"],
        2,
        ["--out {ro}/curves.png", "cannot write in"],
    ),  # a PermissionError after the plotting
    # report.py
    "report-missing-run": (["report.py", "{d}/nope"], 2, ["{d}/nope is neither a run folder"]),
    "report-not-a-run": (["report.py", "{d}/nolog"], 2, ["{d}/nolog is neither a run folder (summary.json)"]),
    # show_batches.py
    "show-batches-not-an-output": (["show_batches.py", "{d}/afile"], 2, ["{d}/afile", "not a tokenize_pile.py output"]),
    "show-batches-incomplete": (["show_batches.py", "{d}/incomplete"], 2, ["{d}/incomplete", "tokenizer/"]),
    "show-batches-zero-batches": (["show_batches.py", "{data}", "--batches", "0"], 2, ["--batches"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_error_line(case, d):
    argv, code, needles = CASES[case]
    argv = [a.format(**d) for a in argv]
    out = Path(d["d"]) / "o"
    r = script(argv[0], *argv[1:], cwd=REPO)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == code, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and r.stderr.strip().splitlines()[-1] == errors[0], r.stderr[-3000:]
    for needle in needles:
        assert needle.format(**d) in errors[0], errors[0]
    assert not out.exists() and not list(Path(d["d"]).glob("o.tmp-*"))  # nothing written where the output goes
    assert not list(Path(d["d"]).glob("*/curves.png"))


@pytest.mark.parametrize(
    "env, once, expected",
    [
        ({}, True, "error: no such key\n"),
        ({"LOCAL_RANK": "0", "RANK": "0", "GROUP_RANK": "0", "WORLD_SIZE": "8"}, True, "error: no such key\n"),
        ({"LOCAL_RANK": "3", "RANK": "3", "GROUP_RANK": "0", "WORLD_SIZE": "8"}, True, ""),  # said by local rank 0
        ({"LOCAL_RANK": "0", "RANK": "4", "GROUP_RANK": "1", "WORLD_SIZE": "8"}, True, "error: node 1: no such key\n"),
        ({"LOCAL_RANK": "3", "RANK": "7", "GROUP_RANK": "1", "WORLD_SIZE": "8"}, False, "error: rank 7: no such key\n"),
        ({"LOCAL_RANK": "0", "RANK": "0", "GROUP_RANK": "0", "WORLD_SIZE": "1"}, False, "error: no such key\n"),
        ({}, False, "error: no such key\n"),
    ],
)
def test_a_launch_says_a_shared_error_once_per_node_and_its_own_per_rank(monkeypatch, capsys, env, once, expected):
    """once_per_node (a recipe or data check before any work, a Ctrl-C): one line per node; anything else (it can
    be one rank's own, e.g. raised while training) from every rank that has it, naming the rank."""
    from hfpretrain.cli import error

    for key in ("LOCAL_RANK", "RANK", "GROUP_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert error("no such key", 2, once_per_node=once) == 2
    assert capsys.readouterr().err == expected
