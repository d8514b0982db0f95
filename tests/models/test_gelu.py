"""GELU's tanh approximation as a sigmoid (models/gelu.py): the same values and gradients as transformers'
modules, no tanh left in a compiled GPT-2's graph, checkpoints and SiLU models unchanged."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers.activations import AccurateGELUActivation, FastGELUActivation, GELUTanh, NewGELUActivation

from hfpretrain.models import build_model, load_config
from hfpretrain.models.gelu import SigmoidGELU, use_sigmoid_gelu

from compiled_graph import dynamo_graph_code

GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 512}


def _gpt2():
    torch.manual_seed(0)
    return build_model(load_config("gpt2_124m", GPT2, vocab_size=512), attn_implementation="sdpa")


def test_same_values_and_gradients_as_transformers():
    x = torch.cat([torch.linspace(-12, 12, 2001), torch.randn(4000) * 3, torch.tensor([0.0, -0.0, 40.0, -40.0])])
    for reference in (NewGELUActivation(), GELUTanh(), GELUTanh(use_gelu_tanh_python=True), FastGELUActivation(),
                      AccurateGELUActivation(), nn.GELU(approximate="tanh")):
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = SigmoidGELU()(a), reference(b)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=3e-6)  # fp32 rounding
    # Eagerly in bf16 each op rounds, in either form: the sigmoid's is as close to the exact function as
    # transformers' (compiled, both compute in fp32 and round once).
    low, exact = x.bfloat16(), NewGELUActivation()(x.bfloat16().float())
    got, want = SigmoidGELU()(low), NewGELUActivation()(low)
    assert got.dtype == torch.bfloat16
    assert (got.float() - exact).abs().max() <= 1.25 * (want.float() - exact).abs().max()


def test_a_compiled_gpt2_computes_no_tanh():
    """The reason for the swap: the graph inductor compiles has a sigmoid where it had a tanh."""
    def graph_code(model) -> str:
        return dynamo_graph_code(model.transformer, input_ids=torch.randint(0, 512, (2, 16)))

    model = _gpt2()
    assert "tanh" in graph_code(model) and "sigmoid" not in graph_code(model)
    assert use_sigmoid_gelu(model) == GPT2["n_layer"]
    code = graph_code(model)
    assert "tanh" not in code and "sigmoid" in code


def test_logits_and_checkpoints_unchanged(tmp_path):
    model = _gpt2()
    reference = copy.deepcopy(model)
    keys = set(model.state_dict())
    assert use_sigmoid_gelu(model) == 2 and set(model.state_dict()) == keys
    ids = torch.randint(0, 512, (2, 16))
    torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=1e-5)
    model.save_pretrained(tmp_path)  # the config still says gelu_new: from_pretrained builds transformers' module
    loaded = type(model).from_pretrained(tmp_path)
    assert isinstance(loaded.transformer.h[0].mlp.act, NewGELUActivation)
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=1e-5)
    qwen3 = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    assert use_sigmoid_gelu(qwen3) == 0  # SiLU: nothing to replace
    exact = nn.Sequential(nn.GELU(), nn.GELU(approximate="tanh"))
    assert use_sigmoid_gelu(exact) == 1 and type(exact[0]) is nn.GELU  # the erf GELU is another function: kept
