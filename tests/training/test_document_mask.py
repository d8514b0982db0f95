"""model.document_mask: each packed document attends to itself only, and counts its positions from its start."""

from __future__ import annotations

import json

import pytest
import torch

from hfpretrain.models.zoo import build_model, load_config
from hfpretrain.training import RecipeError, pretrain
from hfpretrain.data.order import attended_length, collate_blocks, document_positions

from train_utils import TINY_RECIPE

EOS = 7


def test_positions_restart_after_each_end_of_text():
    ids = torch.tensor([[5, 6, EOS, 8, 9, EOS, EOS, 1], [EOS, 2, 3, 4, 5, 6, 7 + 1, 9]])
    assert document_positions(ids, EOS).tolist() == [[0, 1, 2, 0, 1, 2, 0, 0], [0, 0, 1, 2, 3, 4, 5, 6]]
    batch = collate_blocks([row.numpy() for row in ids], eos_id=EOS)
    assert batch["position_ids"].tolist() == document_positions(ids, EOS).tolist()
    assert "position_ids" not in collate_blocks([row.numpy() for row in ids])  # off by default


def test_attended_length_is_the_token_mean_of_its_document_length():
    """Segments as document_positions starts them: row 1 has 3, 3, 1, 1 tokens, row 2 has 1 and 7; per token the
    length of its segment, averaged: (9+9+1+1 + 1+49) / 16."""
    import datasets

    rows = [[5, 6, EOS, 8, 9, EOS, EOS, 1], [EOS, 2, 3, 4, 5, 6, 7 + 1, 9]]
    blocks = datasets.Dataset.from_dict({"input_ids": rows}).with_format("numpy")
    assert attended_length(blocks, EOS) == pytest.approx(70 / 16)
    assert attended_length(blocks, EOS, sample=1) == pytest.approx(20 / 8)  # the first block only
    no_eos = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3, 4]]}).with_format("numpy")
    assert attended_length(no_eos, EOS) == 4  # one document over the whole block


@pytest.mark.parametrize(
    "name,attn",
    [
        ("tiny", "sdpa"),
        ("gpt2_124m", "sdpa"),
        ("tiny", "eager"),
        ("gpt2_124m", "eager"),
        ("tiny", "flex_attention"),
        ("tiny", "flex_attention_fa4"),
    ],
)
def test_a_document_sees_only_itself(name, attn, monkeypatch):
    """With the document positions, the second document's logits equal those of the document alone: no
    attention across the end-of-text, positions (RoPE or learned) from its own start. flex_attention_fa4 is
    flex attention with flash-attention 4's kernels on a GPU (checked against Triton's there by
    benchmarks/bench_doc_attention.py --flex-options '{"BACKEND": "FLASH"}'); on a CPU, flex attention's reference
    ignores the kernel choice, so this checks its wiring (mask and attention) through transformers."""
    if attn == "flex_attention_fa4":  # the package and a GPU, which build_model requires, are not here
        from hfpretrain.models import backend

        monkeypatch.setattr(backend, "_flash_cute_importable", lambda: (True, "flash-attn-4 imports"))
        monkeypatch.setattr(backend, "_cuda_available", lambda: True)
    torch.manual_seed(0)
    small = (
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 16,
            "intermediate_size": 128,
        }
        if name == "tiny"
        else {"n_layer": 2, "n_embd": 64, "n_head": 4}
    )
    model = build_model(load_config(name, {**small, "vocab_size": 64}), attn_implementation=attn).eval()
    first, second = torch.randint(8, 64, (1, 9)), torch.randint(8, 64, (1, 6))
    packed = torch.cat([first, torch.tensor([[EOS]]), second], dim=1)
    with torch.no_grad():
        alone = model(input_ids=second).logits
        masked = model(input_ids=packed, position_ids=document_positions(packed, EOS)).logits[:, 10:]
        unmasked = model(input_ids=packed).logits[:, 10:]
    assert torch.allclose(masked, alone, atol=1e-5)
    assert not torch.allclose(unmasked, alone, atol=1e-3)  # without it the second document sees the first


def test_training_with_document_mask(mini_blocks, tmp_path):
    """A tiny run trains with the mask (its losses differ from the same run without it: the batches carry the
    positions and the model uses them), saves and reloads; sdpa_packed, which takes no mask, is refused at start."""
    from transformers import AutoModelForCausalLM

    def losses(name, *extra):
        out = tmp_path / name
        pretrain(
            TINY_RECIPE,
            [
                f"data.path={mini_blocks}",
                f"training.output_dir={out}",
                "training.max_steps=3",
                "training.logging_steps=1",
                "training.eval_strategy=no",
                *extra,
            ],
        )
        events = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        assert events[0]["plan"]["fast_path"]["attn_implementation"] != "sdpa_packed"
        return [e["loss"] for e in events if e["event"] == "log" and "loss" in e], out

    masked, out = losses(
        "masked",
        "model.document_mask=true",
        "evaluation.per_set=true",
        "training.eval_strategy=steps",
        "training.eval_steps=3",
        "evaluation.eval_tokens=1024",
        "evaluation.final_eval_tokens=2048",
    )
    # MFU and TFLOP/s count attention within documents; the plan keeps the block's count for budgets
    events = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    plan, window = events[0]["plan"], next(e for e in events if e["event"] == "log" and "tflops_per_gpu" in e)
    assert 1 <= plan["attended_length"] < plan["seq_len"]
    assert plan["flops_per_token_attended"] < plan["flops_per_token"]
    assert window["tflops_per_gpu"] == pytest.approx(
        window["tokens_per_s_per_gpu"] * plan["flops_per_token_attended"] / 1e12
    )
    summary = json.loads((out / "summary.json").read_text())["final_eval"]
    assert summary["eval_loss_per_set"] and all(v > 0 for v in summary["eval_loss_per_set"].values())
    plain, _ = losses("plain")
    assert len(masked) == len(plain) == 3 and masked != plain
    AutoModelForCausalLM.from_pretrained(out / "final")
    with pytest.raises((RecipeError, ValueError), match="document_mask=true needs a mask"):
        pretrain(
            TINY_RECIPE,
            [
                f"data.path={mini_blocks}",
                f"training.output_dir={tmp_path / 'x'}",
                "model.document_mask=true",
                "model.attn_implementation=sdpa_packed",
            ],
            dry_run=True,
        )
