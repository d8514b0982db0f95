import math
from pathlib import Path

import pytest
from forked import script

from hfpretrain.models import PlanRequest, chinchilla_optimal, peak_flops, plan

REPO = Path(__file__).resolve().parents[2]
REFERENCE_HOURS = 46.6  # 8 x B200 at MFU 0.40 (docs/models.md)


def test_peak_flops_table():
    assert peak_flops("H100") == peak_flops("NVIDIA H100 80GB HBM3") == peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA B200", "fp8") == 2 * peak_flops("B200", "bf16")
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp16") == 312e12
    with pytest.raises(ValueError, match="known: B200"):
        peak_flops("TPU v5e")
    with pytest.raises(ValueError, match="no dense bf16"):
        peak_flops("Tesla V100-SXM2-32GB", "bf16")


def test_chinchilla_fits():
    n, d = chinchilla_optimal(1e21, "rule20")
    assert d == pytest.approx(20 * n) and 6 * n * d == pytest.approx(1e21)
    n, d = chinchilla_optimal(5.76e23)  # Chinchilla's own budget: ~40B params under approach 3
    assert 30e9 < n < 50e9 and 6 * n * d == pytest.approx(5.76e23)


def test_reference_case_gives_the_1p8b_117b_plan():
    p = plan(PlanRequest("B200", 8, REFERENCE_HOURS, mfu=0.4, seq_len=2048, micro_batch=8))
    best = p.candidates[0]
    assert best.name == "qwen3_1p8b"
    assert abs(best.params - 1.83e9) / 1.83e9 < 0.01
    assert abs(best.tokens - 117e9) / 117e9 < 0.01
    assert best.fits and best.wall_hours == pytest.approx(REFERENCE_HOURS)
    assert best.steps == pytest.approx(best.tokens / best.global_batch_tokens, abs=1)
    small = plan(PlanRequest("A6000", 1, 24, micro_batch=64))
    assert small.optimal_params < 2e8 and not any(c.name == "qwen3_1p8b" for c in small.candidates)
    big_batch = plan(PlanRequest("A6000", 1, REFERENCE_HOURS, micro_batch=64, shapes=("qwen3_1p8b",)))
    assert not big_batch.candidates[0].fits


def test_script_prints_the_plan():
    """scripts/plan.py forked from this process (tests/forked.py; test_scripts.py starts every script fresh)."""
    proc = script("plan.py", "--gpu", "B200", "--num-gpus", "8", "--hours", REFERENCE_HOURS, "--mfu", "0.4", cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "qwen3_1p8b" in proc.stdout and "117.0B" in proc.stdout


def test_moe_shapes_are_sized_by_active_parameters():
    """N* set to the MoE shape's active count: sized by active parameters it is the nearest shape; sized by its
    total (2.5x larger) the dense scale_311m would be."""
    from hfpretrain.models import count_params, load_config

    moe = count_params(load_config("qwen3_moe_856m_a152m", vocab_size=151669))
    dense = count_params(load_config("scale_311m", vocab_size=151669))
    assert abs(math.log(dense.total / moe.active)) < abs(math.log(moe.total / moe.active))  # the test can fail
    n_star = moe.active
    hours = 120 * n_star**2 / (peak_flops("H100") * 0.4 * 3600)  # rule20: C = 6·N·20N
    p = plan(
        PlanRequest(
            "H100",
            1,
            hours,
            mfu=0.4,
            fit="rule20",
            n_nearest=1,
            micro_batch=1,
            shapes=("qwen3_moe_856m_a152m", "scale_311m"),
        )
    )
    assert p.optimal_params == pytest.approx(n_star)
    best = p.candidates[0]
    assert best.name == "qwen3_moe_856m_a152m"
    assert (best.params, best.active_params) == (moe.total, moe.active)
    assert best.tokens_per_param == pytest.approx(best.tokens / moe.active)
    assert best.tokens_per_param == pytest.approx(20, rel=0.25)  # the FLOPs per token count active weights too
    table = p.table()
    assert "sized by active parameters" in table and "active" in table.splitlines()[3]
    dense_only = plan(PlanRequest("H100", 1, hours, mfu=0.4, fit="rule20", shapes=("scale_311m",))).table()
    assert "active" not in dense_only


def test_tensor_and_context_parallelism_in_the_memory_fit():
    """tp and cp shrink what one GPU holds (models/memory.py) and a tp or cp group shares one micro-batch, so the same
    global batch takes more accumulation; a layout whose tp x cp does not divide the GPUs is one line."""
    base = dict(gpu="A6000", num_gpus=8, hours=REFERENCE_HOURS, micro_batch=16, shapes=("qwen3_1p8b",))
    plain, tp2, cp2 = (plan(PlanRequest(**base, tp=tp, cp=cp)).candidates[0] for tp, cp in ((1, 1), (2, 1), (1, 2)))
    assert tp2.memory_gib < plain.memory_gib and cp2.memory_gib < plain.memory_gib
    assert tp2.grad_accum == 2 * plain.grad_accum == cp2.grad_accum
    with pytest.raises(ValueError, match=r"tp: tp x cp = 3 does not divide num_gpus 8"):
        PlanRequest("B200", 8, 1.0, tp=3)
