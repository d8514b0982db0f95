"""Generation through transformers.pipeline: conditional, unconditional, seeded, script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hfpretrain.eval import generate
from hfpretrain.eval.generation import CheckpointNotFoundError

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "generate.py")


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint)), AutoTokenizer.from_pretrained(
        str(tiny_checkpoint)
    )


def test_conditional_many_prompts(loaded):
    prompts = ["Question: What do plants need?\nAnswer:", "Rocks are"]
    out = generate(loaded, prompts, max_new_tokens=6, seed=3)
    assert [r["prompt"] for r in out] == prompts
    for r in out:
        assert r["completion"] and r["text"] == r["prompt"] + r["completion"] and not r["unconditional"]


def test_unconditional_starts_from_end_of_text(loaded):
    out = generate(loaded, None, max_new_tokens=6, seed=0, num_samples=2)
    assert len(out) == 2 and all(r["unconditional"] and r["prompt"] == "" and r["completion"] for r in out)
    assert generate(loaded, [], max_new_tokens=4, seed=0)[0]["unconditional"]


def test_reproducible_with_seed(tiny_checkpoint, loaded):
    kw = dict(max_new_tokens=10, temperature=1.0, top_p=0.95, top_k=40, repetition_penalty=1.1)
    a = generate(loaded, ["The sun", "Animals"], seed=7, **kw)
    b = generate(str(tiny_checkpoint), ["The sun", "Animals"], seed=7, **kw)
    assert a == b
    runs = {generate(loaded, "The sun", seed=s, **kw)[0]["completion"] for s in range(4)}
    assert len(runs) > 1  # sampling actually depends on the seed


def test_greedy_when_temperature_zero(loaded):
    a = generate(loaded, "Rocks are", max_new_tokens=6, temperature=0, seed=1)
    b = generate(loaded, "Rocks are", max_new_tokens=6, temperature=0, seed=2)
    assert a[0]["completion"] == b[0]["completion"]


def test_a_checkpoint_saved_with_use_cache_off_generates_with_the_cache(tiny_checkpoint, tmp_path):
    """Checkpoints trained before 2026-11-25 say use_cache: false in generation_config.json: `hfpretrain generate`
    fed the whole sequence again at every new token (2.5x slower on 200 tokens)."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    old = tmp_path / "old"
    shutil.copytree(tiny_checkpoint, old)
    config = GenerationConfig.from_pretrained(old)
    config.use_cache = False
    config.save_pretrained(old)
    model = AutoModelForCausalLM.from_pretrained(old)
    lengths = []
    model.register_forward_pre_hook(
        lambda _, args, kwargs: lengths.append(kwargs["input_ids"].shape[-1]), with_kwargs=True
    )
    generate((model, AutoTokenizer.from_pretrained(old)), "Rocks are made of", max_new_tokens=5, temperature=0)
    assert len(lengths) == 5 and lengths[0] > 1 and lengths[1:] == [1, 1, 1, 1], lengths  # one new token a step


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointNotFoundError):
        generate(tmp_path / "nope", "hi")


def test_a_folder_is_checked_once_and_other_models_are_refused(tiny_checkpoint, monkeypatch):
    from hfpretrain.eval import generation

    calls = []
    monkeypatch.setattr(generation, "check_checkpoint", lambda path: calls.append(path) or Path(path))
    generate(str(tiny_checkpoint), "Rocks are", max_new_tokens=2)
    assert calls == [str(tiny_checkpoint)]  # the weights' header is read once, not once more after the import
    with pytest.raises(TypeError, match="a checkpoint folder, a \\(model, tokenizer\\) pair or a text-generation"):
        generate(object(), "hi")


def _run(args, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=180)


def test_script_json_prompt_file_and_errors(tiny_checkpoint, tmp_path):
    pf = tmp_path / "prompts.txt"
    pf.write_text("The sun\nRocks are\n")
    p = _run(
        [
            "--model",
            str(tiny_checkpoint),
            "--prompt",
            "Question: Why?\\nAnswer:",
            "--prompt-file",
            str(pf),
            "--max-new-tokens",
            "5",
            "--seed",
            "1",
            "--json",
        ],
        tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(p.stdout)
    assert [d["prompt"] for d in data] == ["Question: Why?\nAnswer:", "The sun", "Rocks are"]
    p = _run(["--model", str(tmp_path / "nope"), "--prompt", "x"], tmp_path)
    assert p.returncode != 0 and p.stderr.strip().count("\n") == 0 and "checkpoint not found" in p.stderr
    p = _run(["--model", str(tiny_checkpoint), "--prompt-file", str(tmp_path / "missing.txt")], tmp_path)
    assert p.returncode != 0 and p.stderr.strip().count("\n") == 0 and "cannot read prompt file" in p.stderr
