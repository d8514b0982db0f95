"""hfpretrain export: bf16 weights that load and generate unchanged; a push that cannot reach the Hub keeps
the export and says so in one line."""

from __future__ import annotations

import json

import pytest
import torch

from hfpretrain.cli.export import main


def test_export_in_bf16_loads_and_generates(tiny_checkpoint, tmp_path, capsys):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, pipeline

    out = tmp_path / "export"
    assert main([str(tiny_checkpoint), "--out", str(out)]) == 0
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    size = lambda d: (d / "model.safetensors").stat().st_size  # noqa: E731
    assert size(out) < 0.6 * size(tiny_checkpoint)  # half of fp32, plus the header
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    original = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    for (name, a), (_, b) in zip(original.state_dict().items(), exported.state_dict().items()):
        assert torch.equal(a.to(torch.bfloat16).float(), b), name  # the same weights, rounded once
    text = pipeline("text-generation", model=str(out))("Hello", max_new_tokens=5, do_sample=False)[0]["generated_text"]
    assert text.startswith("Hello")


def test_push_without_the_hub_keeps_the_export(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "export"
    assert main([str(tiny_checkpoint), "--out", str(out), "--push-to-hub", "someone/tiny"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: --push-to-hub someone/tiny: ")
    err = errors[0]
    assert f"the export is in {out}" in err and (out / "model.safetensors").is_file()


@pytest.mark.parametrize("args, message", [
    (["--dtype", "int8"], "--dtype int8: one of bfloat16, float16, float32"),
    (["--out", "{ckpt}"], "is the checkpoint itself"),
])
def test_bad_arguments_are_one_line(tiny_checkpoint, tmp_path, capsys, args, message):
    args = [a.replace("{ckpt}", str(tiny_checkpoint)) for a in args]
    base = [str(tiny_checkpoint)] + ([] if "--out" in args else ["--out", str(tmp_path / "e")])
    assert main(base + args) == 2
    assert message in capsys.readouterr().err
