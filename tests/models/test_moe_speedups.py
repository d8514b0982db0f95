"""models/speedups.py's grouped_mm experts: under autocast the grouped matmuls run on the autocast dtype's copy of
their weights (stock: the fp32 master weights, which a compiled model sends to transformers' per-expert fp32
fallback), with the same values up to bf16 rounding and fp32 gradients for the weights; the gather-only forward
gives transformers' values and gradients and compiles as one graph; checkpoints unchanged."""

import json

import pytest
import torch
from transformers.integrations import moe as hf_moe

from hfpretrain.models import build_model, load_config
from hfpretrain.models.speedups import Speedups, apply_speedups

TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "moe_intermediate_size": 32,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}


GLM = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 64,
    "first_k_dense_replace": 1,
}  # layer 0 dense, layer 1 routed experts + a shared one, sigmoid routing


def _model(autocast_experts: bool, gather: bool = False, family: str = "qwen3_moe"):
    torch.manual_seed(0)
    name, fields = ("qwen3_moe_109m_a21m", TINY) if family == "qwen3_moe" else ("glm4_moe_101m_a24m", GLM)
    model = build_model(
        load_config(name, fields, vocab_size=128), attn_implementation="eager", experts_implementation="grouped_mm"
    )
    apply_speedups(
        model,
        Speedups(experts_implementation="grouped_mm", experts_autocast=autocast_experts, experts_gather=gather),
        16,
    )
    return model


@pytest.mark.parametrize("autocast_experts,gather", [(False, False), (True, False), (True, True)])
def test_grouped_matmuls_in_the_autocast_dtype(autocast_experts, gather, monkeypatch, tmp_path):
    seen = []
    real = hf_moe._grouped_mm
    monkeypatch.setattr(
        hf_moe, "_grouped_mm", lambda input, weight, offs: (seen.append(weight.dtype), real(input, weight, offs))[1]
    )
    model = _model(autocast_experts, gather)
    ids = torch.randint(0, 128, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert set(seen) == {torch.bfloat16 if autocast_experts else torch.float32}
    expert = model.model.layers[0].mlp.experts
    assert expert.gate_up_proj.dtype == torch.float32 and expert.gate_up_proj.grad.dtype == torch.float32
    assert expert.gate_up_proj.grad.abs().sum() > 0
    model.save_pretrained(tmp_path)
    assert "grouped_mm_" not in (tmp_path / "config.json").read_text()  # a name only this process knows


def test_the_same_loss_and_gradients_up_to_bf16_rounding():
    ids = torch.randint(0, 128, (2, 16))
    results = []
    for autocast_experts in (False, True):
        model = _model(autocast_experts)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.item(), model.model.layers[1].mlp.experts.down_proj.grad))
    (stock, g0), (ours, g1) = results
    assert ours == pytest.approx(stock, rel=2e-2)
    assert ((g1 - g0).norm() / g0.norm()).item() < 0.05
    json.dumps(ours)


def _loss_and_grads(model, ids):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", ["qwen3_moe", "glm4_moe"])
def test_the_gather_only_forward_gives_transformers_values_and_gradients(family):
    """In fp32, the rows moved by gathers (backward: gathers and a sum over each token's k copies) against
    transformers' indexing (backward: scatter-adds): the same loss and every parameter's gradient."""
    ids = torch.randint(0, 128, (3, 16))
    stock_loss, stock = _loss_and_grads(_model(False, gather=False, family=family), ids)
    ours_loss, ours = _loss_and_grads(_model(False, gather=True, family=family), ids)
    torch.testing.assert_close(ours_loss, stock_loss)
    assert ours.keys() == stock.keys() and any("experts" in n for n in ours)
    for name in stock:
        torch.testing.assert_close(ours[name], stock[name], msg=name)


def test_the_gather_only_forward_compiles_as_one_graph():
    model = _model(True, gather=True)
    ids = torch.randint(0, 128, (2, 16))

    def forward(ids):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model.model(input_ids=ids).last_hidden_state

    forward(ids)  # transformers installs its output-capturing hooks at the first call, under a lock
    out = torch.compile(forward, backend="eager", fullgraph=True)(ids)  # a graph break raises
    out.float().pow(2).mean().backward()
    assert model.model.layers[0].mlp.experts.down_proj.grad.abs().sum() > 0
