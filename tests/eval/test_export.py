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


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dtype", "int8"], "--dtype int8: one of bfloat16, float16, float32"),
        (["--out", "{ckpt}"], "is the checkpoint itself"),
    ],
)
def test_bad_arguments_are_one_line(tiny_checkpoint, tmp_path, capsys, args, message):
    args = [a.replace("{ckpt}", str(tiny_checkpoint)) for a in args]
    base = [str(tiny_checkpoint)] + ([] if "--out" in args else ["--out", str(tmp_path / "e")])
    assert main(base + args) == 2
    assert message in capsys.readouterr().err


def _err(capsys) -> str:
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_export_never_overwrites_a_users_folder(tiny_checkpoint, tmp_path, capsys):
    """Issue 36.3: a folder with the user's config.json / README.md was written over."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    (out / "README.md").write_text("my notes")
    assert main([str(tiny_checkpoint), "--out", str(out)]) == 2
    line = _err(capsys)
    assert str(out) in line and "--force" in line
    assert (out / "config.json").read_text() == '{"mine": true}' and (out / "README.md").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json"]  # nothing added either
    assert main([str(tiny_checkpoint), "--out", str(out), "--force"]) == 0  # asked for: written into
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"


def test_export_refuses_the_working_directory(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    (tmp_path / "code.py").write_text("print('mine')")
    monkeypatch.chdir(tmp_path)
    assert main([str(tiny_checkpoint), "--out", "."]) == 2
    assert "working directory" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]


def test_export_again_replaces_an_export_of_the_same_checkpoint_only(tiny_checkpoint, tmp_path, capsys):
    import shutil

    out = tmp_path / "export"
    assert main([str(tiny_checkpoint), "--out", str(out)]) == 0
    assert main([str(tiny_checkpoint), "--out", str(out), "--dtype", "float32"]) == 0  # the same checkpoint again
    other = tmp_path / "other"
    shutil.copytree(tiny_checkpoint, other)
    assert main([str(other), "--out", str(out)]) == 2
    assert "an export of another checkpoint" in _err(capsys)


def test_export_carries_no_local_paths_and_a_card_header(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    """Issue 39.10: lineage.json held this machine's absolute paths; the card had no license / datasets."""
    import shutil

    from huggingface_hub import ModelCard

    ckpt = tmp_path / "home" / "alice" / "runs" / "r1" / "final"
    shutil.copytree(tiny_checkpoint, ckpt)
    data = tmp_path / "home" / "alice" / "data" / "c4_gpt2"
    data.mkdir(parents=True)
    (data / "manifest.json").write_text(
        json.dumps(
            {
                "inputs": [
                    {"path": "allenai/c4?name=en", "kind": "hub"},
                    {"path": str(tmp_path / "x.jsonl"), "kind": "jsonl"},
                ]
            }
        )
    )
    lineage = {
        "format": "hfpretrain.lineage/1",
        "tokenizer": {"path": str(data / "tokenizer"), "sha256": "ab"},
        "sources": {"data": {"name": "data", "path": str(data), "fingerprint": "f1"}},
        "validation": {"name": "validation", "path": str(data), "fingerprint": "f1"},
    }
    (ckpt / "lineage.json").write_text(json.dumps(lineage))
    (ckpt / "README.md").write_text(
        f"---\nlibrary_name: transformers\n---\n\n# r1\n\n| training data | `{data}` |\n\n"
        f"```yaml\ndata:\n  path: {data}\ntraining:\n  output_dir: {ckpt.parent}\n```\n"
    )
    out = tmp_path / "export"
    assert main([str(ckpt), "--out", str(out), "--license", "apache-2.0"]) == 0
    exported = (out / "lineage.json").read_text()
    assert str(tmp_path) not in exported and json.loads(exported)["sources"]["data"]["path"] == "c4_gpt2"
    assert json.loads(exported)["sources"]["data"]["fingerprint"] == "f1"  # what identifies the data stays
    card = ModelCard((out / "README.md").read_text())
    assert card.data.license == "apache-2.0" and card.data.datasets == ["allenai/c4"]
    assert str(tmp_path / "home") not in card.text and "`c4_gpt2`" in card.text and "path: c4_gpt2" in card.text


def test_push_failure_names_the_installed_cli(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "export"
    assert main([str(tiny_checkpoint), "--out", str(out), "--push-to-hub", "someone/tiny"]) == 1
    line = _err(capsys)
    assert f"hf upload someone/tiny {out}" in line and "huggingface-cli" not in line


def test_export_generates_with_the_kv_cache(tiny_checkpoint, tmp_path):
    """A checkpoint trained before 2026-11-25 has use_cache: false in generation_config.json (made from the
    training config): its export's generate() ran without the KV cache (2.5x slower). The export turns it on."""
    import shutil

    from transformers import AutoModelForCausalLM, GenerationConfig

    old = tmp_path / "old"
    shutil.copytree(tiny_checkpoint, old)
    generation = GenerationConfig.from_pretrained(old)
    generation.use_cache = False
    generation.save_pretrained(old)
    assert main([str(old), "--out", str(tmp_path / "export")]) == 0
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export")
    generated = exported.generate(
        torch.tensor([[1, 2, 3]]), max_new_tokens=3, do_sample=False, return_dict_in_generate=True
    )
    assert generated.past_key_values is not None  # None when generate() runs without the cache
