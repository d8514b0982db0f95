"""models/sonic.py on a CPU: the adapter's layouts against transformers' eager experts loop, through a pure-torch
model of sonic-moe's ``moe_general_routing_inputs`` contract (its shapes, stride order, sorted int32 token indices and
the gate/up layouts, as its docs and its reference GEMM, ``gemm_gated_ref``, state them). The kernels themselves run on
a GPU only: benchmarks/gpu_sonic_check.py compares them with grouped_mm_gather_autocast there."""

import enum

import pytest
import torch
import torch.nn.functional as F

from hfpretrain.models import build_model, load_config
from hfpretrain.models import sonic

TINY = {
    "num_hidden_layers": 1,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "moe_intermediate_size": 48,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}


class _ActivationType(enum.Enum):
    SWIGLU = "swiglu"
    GEGLU = "geglu"


class SonicReference:
    """sonic-moe's functional entry point as its contract states it, in torch (fp32 accumulation, bf16 results as the
    kernels store them), differentiable through autograd. ``concat_layout=False``: gate/up rows interleaved."""

    activation_type = _ActivationType
    calls: list = []

    @classmethod
    def moe_general_routing_inputs(
        cls,
        x,
        router_scores,
        token_indices,
        expert_indices,
        w1,
        b1,
        w2,
        b2,
        E,
        stream_id,
        activation_type,
        is_inference_mode_enabled=False,
        concat_layout=False,
    ):
        two_i, h, e = w1.shape
        assert (h, e) == (x.shape[1], E) and w2.shape == (h, two_i // 2, E)
        # stride order (2, 0, 1): experts outermost, the hidden dimension contiguous
        assert w1.stride(1) == 1 and w1.stride(2) >= w1.stride(0) and w2.stride(1) == 1 and w2.stride(2) >= w2.stride(0)
        assert token_indices.dtype == expert_indices.dtype == torch.int32
        assert bool((token_indices[1:] >= token_indices[:-1]).all()), "token indices must be sorted"
        assert router_scores.dtype == torch.float32 and x.is_contiguous()
        cls.calls.append(
            dict(concat_layout=concat_layout, activation=activation_type, inference=is_inference_mode_enabled)
        )
        out = torch.zeros(x.shape, dtype=torch.float32)
        for expert in range(E):
            chosen = expert_indices == expert
            rows = token_indices[chosen].long()
            pre = x[rows].float() @ w1[:, :, expert].float().T
            gate, up = pre.chunk(2, dim=-1) if concat_layout else (pre[:, 0::2], pre[:, 1::2])
            act = F.silu(gate) if activation_type.value == "swiglu" else F.gelu(gate, approximate="tanh")
            y = (act * up).to(x.dtype).float() @ w2[:, :, expert].float().T
            out = out.index_add(0, rows, y * router_scores[chosen, None])
        return out.to(x.dtype), torch.bincount(expert_indices.long(), minlength=E).int()


def _experts():
    torch.manual_seed(0)
    model = build_model(
        load_config("qwen3_moe_109m_a21m", TINY, vocab_size=128),
        attn_implementation="eager",
        experts_implementation="eager",
    )
    experts = model.model.layers[0].mlp.experts
    with torch.no_grad():
        for w in (experts.gate_up_proj, experts.down_proj):
            w.normal_(0, 0.1)
    return experts


def _routing(tokens=40, k=2, e=4):
    torch.manual_seed(1)
    idx = torch.stack([torch.randperm(e)[:k] for _ in range(tokens)])
    weights = torch.rand(tokens, k).softmax(-1).requires_grad_()
    hidden = torch.randn(tokens, TINY["hidden_size"]).requires_grad_()
    return hidden, idx, weights


def _run(forward, experts, hidden, idx, weights):
    for p in (experts.gate_up_proj, experts.down_proj, hidden, weights):
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = forward(hidden, idx, weights)
    assert out.dtype == torch.float32
    (out.float() * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out.detach(), experts.gate_up_proj.grad, experts.down_proj.grad, hidden.grad, weights.grad]


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_layouts_match_transformers_eager_loop():
    experts = _experts()
    hidden, idx, weights = _routing()
    reference = _run(experts.forward, experts, hidden, idx, weights)  # transformers' loop (eager: its own)
    ours = _run(
        lambda *a: sonic.sonic_experts_forward(experts, *a, kernel=SonicReference), experts, hidden, idx, weights
    )
    assert SonicReference.calls[-1]["concat_layout"] is True and SonicReference.calls[-1]["inference"] is False
    for name, a, b in zip(("out", "d gate_up_proj", "d down_proj", "d hidden", "d routing weights"), ours, reference):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert _rel(a, b) < 2e-2, (name, _rel(a, b))  # bf16 rounding


def test_a_wrong_gate_up_order_is_caught():
    """The negative control: the same call with the interleaved layout (sonic-moe's default) is far off, so the test
    above would see a gate/up mix-up."""
    experts = _experts()
    hidden, idx, weights = _routing()
    reference = _run(experts.forward, experts, hidden, idx, weights)
    experts.is_concatenated = False
    wrong = _run(
        lambda *a: sonic.sonic_experts_forward(experts, *a, kernel=SonicReference), experts, hidden, idx, weights
    )
    assert _rel(wrong[0], reference[0]) > 0.3


def test_refuses_fp32_without_autocast_and_ungated_experts():
    experts = _experts()
    hidden, idx, weights = _routing()
    with pytest.raises(ValueError, match="16-bit"):
        sonic.sonic_experts_forward(experts, hidden, idx, weights, kernel=SonicReference)
    experts.has_gate = False
    with pytest.raises(ValueError, match="gated"):
        sonic.sonic_experts(experts, hidden, idx, weights, kernel=SonicReference)


def test_registered_and_loader_says_what_is_missing():
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    assert {"sonicmoe_autocast", "sonicmoe_autocast_traced"} <= set(ALL_EXPERTS_FUNCTIONS)
    if not torch.cuda.is_available():  # checked before any package: the kernels are Hopper's
        with pytest.raises(ImportError, match="sonic-moe needs a CUDA GPU"):
            sonic.load_sonicmoe()
        from hfpretrain.training.fast_path import sonicmoe_missing

        assert sonicmoe_missing() == "sonic-moe needs a CUDA GPU (Hopper or newer); none is available"


def test_recipe_sonicmoe_runs_the_autocast_function(monkeypatch):
    """``model.experts_implementation: sonicmoe`` with ``kernels.experts_autocast`` (the default): apply_speedups
    loads the kernel and sets sonicmoe_autocast_traced, whose loss and gradients are transformers' eager loop's."""
    from hfpretrain.models.speedups import Speedups, apply_speedups

    monkeypatch.setattr(sonic, "_SONICMOE", SonicReference)
    ids = torch.randint(0, 128, (2, 16))
    results = []
    for impl in ("eager", "sonicmoe"):
        torch.manual_seed(0)
        model = build_model(
            load_config("qwen3_moe_109m_a21m", TINY, vocab_size=128),
            attn_implementation="eager",
            experts_implementation=impl,
        )
        done = apply_speedups(model, Speedups(experts_implementation=impl), 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.item(), model.model.layers[0].mlp.experts.gate_up_proj.grad.clone(), done))
    assert model.config._experts_implementation == "sonicmoe_autocast_traced" and results[1][2].experts_autocast
    assert abs(results[0][0] - results[1][0]) < 1e-2
    assert _rel(results[1][1], results[0][1]) < 3e-2
