"""The documented commands (docs/data.md) run on the mini corpus, and the example-batch rendering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from forked import script

from hfpretrain.data.show import render_batches

REPO = Path(__file__).resolve().parents[2]


def _run(args, **kw):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, **kw)


def test_documented_cli_on_mini_corpus(tmp_path, data_root):
    mix = data_root / "pretrain" / "mix"
    out = tmp_path / "gpt2-256"
    # as in docs/data.md "Quick start" (mini corpus, --max-docs for speed)
    cmd = [
        "scripts/tokenize_pile.py",
        "--input",
        str(mix / "mini_train.jsonl.zst"),
        "--val-input",
        str(mix / "mini_val.jsonl.zst"),
        "--tokenizer",
        str(data_root / "tokenizers" / "gpt2"),
        "--seq-len",
        "256",
        "--out",
        str(out),
        "--num-proc",
        "2",
        "--max-docs",
        "400",
        "--val-docs",
        "50",
        "-q",
    ]
    r = _run(cmd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["seq_len"] == 256 and m["train"]["documents"] == 400 and m["validation"]["documents"] == 50
    assert m["train"]["tokens"] == m["train"]["blocks"] * 256 + m["train"]["dropped_tail_tokens"]
    created = m["created"]
    # the commands after the first forked from this process (tests/forked.py): the first ran the script fresh, and
    # test_scripts.py starts show_batches.py fresh
    r = script("tokenize_pile.py", *cmd[1:], cwd=REPO)  # second run reuses the finished output
    assert r.returncode == 0 and json.loads((out / "manifest.json").read_text())["created"] == created

    r = script("show_batches.py", out, "--batches", "1", "--batch-size", "3", cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "=== batch 0: input_ids shape (3, 256)" in r.stdout and "<|endoftext|>" in r.stdout
    assert "=== summary (train) ===" in r.stdout


def test_cli_errors_are_one_line(tmp_path, data_root):
    r = _run(
        [
            "scripts/tokenize_pile.py",
            "--input",
            str(tmp_path / "nope.jsonl.zst"),
            "--tokenizer",
            str(data_root / "tokenizers" / "gpt2"),
            "--seq-len",
            "64",
            "--out",
            str(tmp_path / "o"),
            "--on-bad",
            "fail",
            "-q",
        ]
    )
    assert r.returncode == 2  # a data error (exit 1 is for runtime failures)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "nope.jsonl.zst:0: missing_file" in last
    assert not (tmp_path / "o").exists()


def test_render_batches_shows_boundaries_sets_and_stats(mini_blocks):
    text = render_batches(mini_blocks, split="train", num_batches=2, batch_size=4)
    m = json.loads((mini_blocks / "manifest.json").read_text())
    assert "=== batch 0: input_ids shape (4, 128)" in text and "=== batch 1:" in text
    assert text.count("--- block ") == 8
    assert "<|endoftext|>" in text and "(cont.)" in text
    assert any(f"[{name}" in text for name in m["sets"])
    assert f"{m['train']['blocks']:,} blocks x 128" in text
    assert "tokens per set" in text
    val = render_batches(mini_blocks, split="validation", num_batches=1, batch_size=2, max_chars=None)
    assert "=== summary (validation) ===" in val
