"""MoE shapes through the recipe path on a CPU: a tiny Qwen3-MoE trains (transformers' auxiliary loss added in
training only), saves a checkpoint that loads with from_pretrained, and model.experts_implementation is resolved
with its reason and refused on a dense model."""

from __future__ import annotations

import json

import pytest
import torch

from hfpretrain.training import RecipeError

from train_utils import read_log, run_pretrain

TINY_MOE = {"model.config": "qwen3_moe_109m_a21m", "model.overrides.num_hidden_layers": "2",
            "model.overrides.hidden_size": "64", "model.overrides.num_attention_heads": "2",
            "model.overrides.num_key_value_heads": "2", "model.overrides.head_dim": "32",
            "model.overrides.moe_intermediate_size": "32", "model.overrides.num_experts": "4",
            "model.overrides.num_experts_per_tok": "2", "training.max_steps": "3", "training.save_steps": "3",
            "training.logging_steps": "1"}


def test_a_tiny_moe_trains_and_reloads(mini_blocks, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "moe"
    summary = run_pretrain(mini_blocks, out, TINY_MOE)
    assert summary["global_step"] == 3 and summary["plan"]["fast_path"]["experts_implementation"] == "eager"
    params = summary["plan"]["parameters"]
    assert params["active"] < params["total"]  # 2 of 4 experts per token
    losses = [e["loss"] for e in read_log(out) if e.get("event") == "log" and "loss" in e]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    model = AutoModelForCausalLM.from_pretrained(out / "final")
    assert model.config.model_type == "qwen3_moe" and model.config.num_experts == 4


def test_the_aux_loss_is_added_to_the_training_loss(mini_blocks, tmp_path):
    """The trainer computes its own loss from the hidden states, so transformers' load-balancing loss must be added
    by it: a large router_aux_loss_coef raises the first step's training loss (same seed, same weights)."""
    base = {**TINY_MOE, "training.max_steps": "1", "training.save_strategy": "no"}
    first = {}
    for coef in ("0.0", "10.0"):
        run_pretrain(mini_blocks, tmp_path / coef, {**base, "model.overrides.router_aux_loss_coef": coef})
        first[coef] = next(e["loss"] for e in read_log(tmp_path / coef) if e.get("event") == "log" and "loss" in e)
    assert first["10.0"] > first["0.0"] + 1.0  # aux >= 1 at any routing: coefficient 10 adds >= 10 x 1


def test_experts_implementation_checks(mini_blocks, tmp_path):
    with pytest.raises(RecipeError, match="model.experts_implementation=grouped_mm: .* dense model"):
        run_pretrain(mini_blocks, tmp_path / "dense", {"model.experts_implementation": "grouped_mm"})
    with pytest.raises(RecipeError, match="model.experts_implementation='loop' is not one of"):
        run_pretrain(mini_blocks, tmp_path / "bad", {**TINY_MOE, "model.experts_implementation": "loop"})
    assert not (tmp_path / "dense").exists() and not (tmp_path / "bad").exists()


def test_dry_run_prints_the_choice_and_its_reason(mini_blocks, tmp_path):
    from hfpretrain.training import pretrain

    from train_utils import TINY_RECIPE, make_overrides

    plan = pretrain(str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "x", TINY_MOE), dry_run=True)["plan"]
    fast = plan["fast_path"]
    assert fast["experts_implementation"] in ("grouped_mm", "eager")
    assert "experts" in fast["reasons"]["experts_implementation"]
    json.dumps(plan, default=str)
