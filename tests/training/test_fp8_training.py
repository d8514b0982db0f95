"""model.precision=fp8 in a real (emulated: no float8 GPU here) CPU run: it trains, and its checkpoint is a
plain one that loads where torchao cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("torchao.float8", reason="torchao is in the [fp8] and [test] extras")

from train_utils import REPO, run_pretrain  # noqa: E402


def test_an_emulated_fp8_run_saves_a_plain_checkpoint(mini_blocks, tmp_path):
    out = tmp_path / "run"
    summary = run_pretrain(
        mini_blocks, out, {"model.precision": "fp8", "model.fp8_emulate": "true", "training.max_steps": "3"}
    )
    assert summary["fp8_modules"] == 14 and summary["plan"]["precision"] == "fp8"
    assert all(
        torch.isfinite(torch.tensor(e["loss"]))
        for e in (json.loads(line) for line in (out / "log.jsonl").read_text().splitlines())
        if "loss" in e
    )
    # loads where torchao cannot be imported: the weights are ordinary tensors under ordinary names
    code = (
        "import sys; sys.modules['torchao'] = None\n"
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(out / 'final')!r})\n"
        "assert type(m.model.layers[0].mlp.up_proj).__name__ == 'Linear'\n"
        "print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
