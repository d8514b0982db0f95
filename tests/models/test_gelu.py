"""GELU's tanh approximation as a sigmoid (models/gelu.py): the same values and gradients as transformers'
modules, no tanh left in a compiled GPT-2's graph, checkpoints and SiLU models unchanged. GPT-2's MLP with the
bias gradient summed in the GELU's backward (fuse_bias_gelu): the same values and gradients, eager and compiled (the
kernel itself: tests/kernels/test_gelu_bias.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers.activations import AccurateGELUActivation, FastGELUActivation, GELUTanh, NewGELUActivation

from hfpretrain.models import build_model, load_config
from hfpretrain.models.gelu import LinearGELU, SigmoidGELU, fuse_bias_gelu, use_sigmoid_gelu

from compiled_graph import dynamo_graph_code

GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 512}


def _gpt2():
    torch.manual_seed(0)
    model = build_model(load_config("gpt2_124m", GPT2, vocab_size=512), attn_implementation="sdpa")
    with torch.no_grad():  # GPT-2 starts with zero biases: make them count
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.1)
    return model


def test_same_values_and_gradients_as_transformers():
    x = torch.cat([torch.linspace(-12, 12, 2001), torch.randn(4000) * 3, torch.tensor([0.0, -0.0, 40.0, -40.0])])
    for reference in (
        NewGELUActivation(),
        GELUTanh(),
        GELUTanh(use_gelu_tanh_python=True),
        FastGELUActivation(),
        AccurateGELUActivation(),
        nn.GELU(approximate="tanh"),
    ):
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


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_mlp_equals_gpt2s(compiled, tmp_path):
    """fuse_bias_gelu: each GPT-2 MLP's c_fc + GELU as one LinearGELU with the same parameters; the model's logits,
    loss and every gradient as before (fp32 on a CPU: the same arithmetic, another order), its checkpoint
    transformers' GPT-2."""
    model = _gpt2()
    reference = copy.deepcopy(model)
    keys = set(model.state_dict())
    weight = model.transformer.h[0].mlp.c_fc.weight
    assert fuse_bias_gelu(model) == GPT2["n_layer"]
    mlp = model.transformer.h[0].mlp
    assert isinstance(mlp.c_fc, LinearGELU) and isinstance(mlp.act, nn.Identity) and mlp.c_fc.weight is weight
    assert set(model.state_dict()) == keys and fuse_bias_gelu(model) == 0  # done once
    ids = torch.randint(0, 512, (2, 16))
    run = torch.compile(model, backend="inductor") if compiled else model
    out, want = run(input_ids=ids, labels=ids), reference(input_ids=ids, labels=ids)
    torch.testing.assert_close(out.logits, want.logits, rtol=1e-5, atol=1e-5)
    out.loss.backward()
    want.loss.backward()
    grads = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path)
    assert isinstance(loaded.transformer.h[0].mlp.act, NewGELUActivation)
    torch.testing.assert_close(loaded(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_fused_mlp_only_where_it_applies():
    qwen3 = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    assert fuse_bias_gelu(qwen3) == 0  # SiLU, no biases
    model = _gpt2()
    model.transformer.h[0].mlp.act = nn.GELU()  # the erf GELU: another function
    assert fuse_bias_gelu(model) == GPT2["n_layer"] - 1


def test_bias_gelu_under_bf16_autocast():
    """Under autocast the fused MLP computes what the stock one does (the same bf16 addmm, then GELU), and its
    gradients agree with the stock ones within bf16 rounding and keep the parameters' dtype."""
    model = _gpt2()
    mlp, stock = model.transformer.h[0].mlp, copy.deepcopy(model.transformer.h[0].mlp)
    stock.act = SigmoidGELU()  # as compiled models run it
    fuse_bias_gelu(mlp)
    x = torch.randn(2, 16, GPT2["n_embd"], requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = mlp(x), stock(x2)
        fused_act, stock_h = mlp.c_fc(x), stock.c_fc(x2)
    assert got.dtype == want.dtype == torch.bfloat16
    # c_fc + GELU: the stock bf16 addmm, then GELU in fp32 rounded once (as inductor computes it): bit for bit
    torch.testing.assert_close(fused_act, SigmoidGELU()(stock_h.float()).bfloat16(), rtol=0, atol=0)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)  # eagerly the stock GELU rounds each bf16 op
    dout = torch.randn_like(got, dtype=torch.float32)
    got.float().mul(dout).sum().backward()
    want.float().mul(dout).sum().backward()
    assert mlp.c_fc.bias.grad.dtype == torch.float32 and mlp.c_fc.weight.grad.dtype == torch.float32
    for a, b in (
        (x.grad, x2.grad),
        (mlp.c_fc.weight.grad, stock.c_fc.weight.grad),
        (mlp.c_fc.bias.grad, stock.c_fc.bias.grad),
    ):
        assert ((a - b).abs().max() / b.abs().max()).item() < 2e-2  # bf16 rounding of the gradients
