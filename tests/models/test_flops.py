import pytest
import torch

from hfpretrain.models import FORMULA, build_model, flops_per_token, load_config, peak_flops

from counted_flops import counted_flops_per_token

B, S, V = 2, 256, 512
SMALL = {
    "qwen3": (
        "tiny",
        {
            "num_hidden_layers": 2,
            "hidden_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "intermediate_size": 384,
            "vocab_size": V,
        },
    ),
    "llama": (
        "llama3_2p2b",
        {
            "num_hidden_layers": 2,
            "hidden_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "intermediate_size": 352,
            "vocab_size": V,
        },
    ),
    "llama2": (
        "llama2_1p36b",
        {
            "num_hidden_layers": 2,
            "hidden_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 32,
            "intermediate_size": 352,
            "vocab_size": V,
        },
    ),
    "gpt2": (
        "gpt2_1p29b",
        {"n_layer": 2, "n_embd": 128, "n_head": 4, "n_inner": 512, "vocab_size": V, "n_positions": S},
    ),
}


@pytest.mark.parametrize("family", sorted(SMALL))
def test_formula_matches_flop_counter(family):
    name, overrides = SMALL[family]
    cfg = load_config(name, overrides)
    torch.manual_seed(0)
    model = build_model(cfg, attn_implementation="eager")  # dense attention matmuls, as FlopCounterMode sees them
    ids = torch.randint(0, V, (B, S))
    measured = counted_flops_per_token(model, ids)
    est = flops_per_token(cfg, S)
    assert est.attention > 0.1 * est.total  # the attention term matters at this shape: the test can fail
    assert abs(est.total - measured) / measured < 0.05, (est.total, measured)
    assert est.causal == pytest.approx(est.total - est.attention / 2)
    assert est.formula == FORMULA


def test_reference_qwen3_flops_per_token():
    cfg = load_config("qwen3_1p8b")
    f = flops_per_token(cfg, 2048)
    # N_matmul = all non-embedding matmul weights + untied LM head = 1.829B - 0.311B input embedding - norms
    assert f.matmul_params == 24 * (2 * 2048 * 2048 + 2 * 2048 * 1024 + 3 * 2048 * 6144) + 151680 * 2048
    assert f.total == 6 * f.matmul_params + 12 * 24 * 2048 * 2048
    assert f.causal == 6 * f.matmul_params + 6 * 24 * 2048 * 2048


def test_tied_lm_head_is_a_matmul():
    tied = flops_per_token(load_config("tiny", vocab_size=1000), 128)
    untied = flops_per_token(load_config("tiny", {"tie_word_embeddings": False}, vocab_size=1000), 128)
    assert tied.matmul_params == untied.matmul_params  # input embedding never counts, LM head always does


def test_mfu_is_achieved_over_peak():
    """The MFU every log reports (ThroughputCallback): model FLOPs/s per GPU over the GPU's dense bf16 peak."""
    from hfpretrain.training.callbacks import ThroughputCallback

    peak = peak_flops("NVIDIA H100 80GB HBM3")
    figures = ThroughputCallback(1, 10e9, peak, world_size=2).figures(tokens=80_000, seconds=1.0)
    assert figures["mfu"] == pytest.approx(40_000 * 10e9 / 989e12)
