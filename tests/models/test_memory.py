from dataclasses import replace

import pytest
import torch

from hfpretrain.models import TrainingLayout, build_model, count_params, estimate_memory, load_config
from hfpretrain.models.memory import GIB

B, S, V = 2, 256, 512
SHAPES = {
    "tiny": {
        "num_hidden_layers": 3,
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 384,
        "vocab_size": V,
    },
    "llama3_2p2b": {
        "num_hidden_layers": 3,
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 384,
        "vocab_size": V,
    },
    "gpt2_1p29b": {"n_layer": 3, "n_embd": 128, "n_head": 4, "n_inner": 512, "vocab_size": V},
}


def measure_saved_activations(model, input_ids, autocast_dtype=None) -> int:
    """Bytes of the distinct tensors autograd saves during one forward with labels (parameters excluded):
    the CPU check of :func:`estimate_memory`'s activation model (on a GPU, benchmarks/check_memory.py
    compares ``torch.cuda.max_memory_allocated()`` instead)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            storages[s.data_ptr()] = s.nbytes()
        return t

    device = input_ids.device.type
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if autocast_dtype is not None:
            with torch.autocast(device, dtype=autocast_dtype):
                out = model(input_ids=input_ids, labels=input_ids)
        else:
            out = model(input_ids=input_ids, labels=input_ids)
    del out
    return sum(storages.values())


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_activation_model_matches_saved_tensors_under_autocast(name, attn):
    cfg = load_config(name, SHAPES[name])
    torch.manual_seed(0)
    model = build_model(cfg, attn_implementation=attn)
    measured = measure_saved_activations(model, torch.randint(0, V, (B, S)), torch.bfloat16)
    est = estimate_memory(cfg, TrainingLayout(B, S, attn_implementation=attn))
    saved = est.activations - est.logits + B * S * 4 * V  # autograd keeps fp32 log-probs; 12V is the peak
    assert abs(saved - measured) / measured < 0.10, (saved, measured)


def test_eager_costs_more_and_checkpointing_less():
    cfg = load_config("qwen3_1p8b")
    sdpa = estimate_memory(cfg, TrainingLayout(4, 2048, attn_implementation="sdpa"))
    eager = estimate_memory(cfg, TrainingLayout(4, 2048, attn_implementation="eager"))
    ckpt = estimate_memory(cfg, TrainingLayout(4, 2048, attn_implementation="sdpa", grad_checkpointing=True))
    assert eager.activations > sdpa.activations > ckpt.activations
    assert sdpa.logits == 4 * 2048 * 12 * 151680


def test_states_and_zero1_sharding():
    cfg = load_config("qwen3_1p8b")
    one = estimate_memory(cfg, TrainingLayout(1, 2048))
    n = count_params(cfg).total
    assert abs(n - 1.83e9) / 1.83e9 < 0.01
    assert one.weights == 4 * n and one.grads == 4 * n and one.optimizer == 8 * n
    z1 = estimate_memory(cfg, TrainingLayout(1, 2048, n_gpus=8, zero_stage=1))
    assert z1.optimizer == 8 * n // 8 and z1.grads == 4 * n and z1.weights == 4 * n
    z3 = estimate_memory(cfg, TrainingLayout(1, 2048, n_gpus=8, zero_stage=3))
    assert z3.weights == 4 * n // 8
    assert one.total >= one.weights + one.optimizer + one.activations
    assert 0 < one.gib()["total"] == pytest.approx(one.total / GIB, abs=1e-3)
    with pytest.raises(ValueError):
        estimate_memory(cfg, TrainingLayout(1, 2048, zero_stage=4))


# Peaks measured with torch.cuda.max_memory_allocated (docs/benchmarks.md, 2026-11-22), seq 2048, bf16
# autocast, fused AdamW: (config, micro-batch, loss, liger_min_chunk_tokens, compile, measured GiB).
# One H200: the 1.8B recipe and the small baseline; one H100: the scaling study's smallest shapes,
# where the loss's chunk of logits is most of the memory.
MEASURED_PEAKS = [
    ("qwen3_1p8b", 16, "liger", 0, "layers", 81.9),
    ("qwen3_1p8b", 20, "liger", 0, "layers", 96.2),
    ("scale_146m", 32, "liger", 0, "decoder", 39.28),
    ("qwen3_1p8b", 16, "chunked", 0, "decoder", 103.1),
    ("scale_146m", 32, "liger", 1024, "decoder", 39.4),
    ("scale_7m", 8, "liger", 0, "decoder", 2.8),
    ("scale_7m", 8, "liger", 1024, "decoder", 3.0),
    ("scale_7m", 8, "liger", 4096, "decoder", 3.9),
    ("scale_7m", 8, "chunked", 0, "decoder", 18.9),
    ("scale_27m", 8, "liger", 0, "decoder", 5.5),
    # one H200, head + loss compiled whole (benchmarks/gpu_1gpu_scale_table.sh)
    ("scale_12m", 16, "compiled", 0, "decoder", 14.0),
    ("scale_53m", 16, "compiled", 0, "decoder", 20.9),
    ("scale_146m", 16, "compiled", 0, "decoder", 31.4),
    ("qwen3_1p8b", 20, "compiled", 0, "layers", 105.8),
]  # benchmarks/gpu_1gpu_1p8b_loss.sh


@pytest.mark.parametrize("name,micro,loss,liger_min,compile_mode,measured", MEASURED_PEAKS)
def test_compiled_estimate_within_15_percent_of_measured(name, micro, loss, liger_min, compile_mode, measured):
    from hfpretrain.training.loss import loss_chunk_tokens

    cfg = load_config(name, {}, vocab_size=151680)
    chunk = loss_chunk_tokens(loss, micro * 2048, cfg.vocab_size, cfg.hidden_size, 8192, liger_min)
    layout = TrainingLayout(micro, 2048, fused_loss_chunk=chunk, compile="decoder", fused_loss=loss)
    est = estimate_memory(cfg, layout).total / GIB
    assert abs(est / measured - 1) <= 0.15, (est, measured)
    # the eager model overestimates compiled runs: compile is what the numbers depend on
    assert estimate_memory(cfg, replace(layout, compile="none")).total / GIB > est


# Per-GPU peaks on 2 x H200 (docs/benchmarks.md § two H200s): Qwen3 1.8B, micro-batch 20, liger, compile=layers.
# (zero_stage, measured GiB): DeepSpeed ZeRO-1, and FSDP2, which the plan counts as stage 3.
H200X2_PEAKS = [(1, 83.2), (3, 79.1)]


@pytest.mark.parametrize("zero_stage,measured", H200X2_PEAKS)
def test_sharded_estimate_within_15_percent_of_2_h200(zero_stage, measured):
    from hfpretrain.training.loss import loss_chunk_tokens

    cfg = load_config("qwen3_1p8b", {}, vocab_size=151680)
    chunk = loss_chunk_tokens("liger", 20 * 2048, cfg.vocab_size, cfg.hidden_size, 8192)
    est = (
        estimate_memory(
            cfg,
            TrainingLayout(
                20, 2048, n_gpus=2, zero_stage=zero_stage, fused_loss_chunk=chunk, compile="decoder", fused_loss="liger"
            ),
        ).total
        / GIB
    )
    assert abs(est / measured - 1) <= 0.15, (est, measured)


# Per-GPU peaks of the first context-parallel runs on 2 x H200 (results/gpu_2gpu_2026-11-29): Qwen3 1.8B beside
# FSDP2, micro-batch 1, compile=layers, head + loss compiled whole, bf16 residual stream: (seq_len, measured GiB).
# The estimate runs 12% low at both.
CP_PEAKS = [(32768, 48.4), (65536, 84.1)]


def test_tensor_parallel_estimate_within_10_percent_of_2_h200():
    """tp 2 over 2 x H200 (results/gpu_2gpu_2026-11-29b/call3/tp.json): the 1.8B shape at 20 x 2,048 per tp group, compiled
    layers, each rank's share of the head's rows: 62.4 GiB. The estimate follows the installed transformers' plan:
    60.1 on the GPU machine's 5.17 (the embedding whole), 58.4 under 5.24's (split over the vocabulary)."""
    cfg = load_config("qwen3_1p8b", {}, vocab_size=151680)
    layout = TrainingLayout(20, 2048, n_gpus=2, compile="layers", fused_loss="compiled", residual_bytes=2, tp=2)
    est = estimate_memory(cfg, layout).total / GIB
    assert abs(est / 62.4 - 1) <= 0.10, est


@pytest.mark.parametrize("seq_len,measured", CP_PEAKS)
def test_context_parallel_estimate_within_15_percent_of_2_h200(seq_len, measured):
    cfg = load_config("qwen3_1p8b", {}, vocab_size=151680)
    layout = TrainingLayout(
        1, seq_len, n_gpus=2, zero_stage=3, compile="layers", fused_loss="compiled", residual_bytes=2, cp=2
    )
    est = estimate_memory(cfg, layout).total / GIB
    assert abs(est / measured - 1) <= 0.15, (est, measured)


# One H200, GPT-2 124M (vocab padded to 50,304), seq 1024, head + loss compiled whole, sdpa_packed
# (benchmarks/gpu_1gpu_fast_path.sh): (micro-batch, measured GiB).
@pytest.mark.parametrize("micro,measured", [(32, 15.6), (64, 29.1), (8, 5.1)])
def test_gpt2_compiled_loss_estimate_within_15_percent(micro, measured):
    cfg = load_config("gpt2_124m", {}, vocab_size=50257)
    est = estimate_memory(
        cfg, TrainingLayout(micro, 1024, compile="decoder", fused_loss="compiled", attn_implementation="sdpa_packed")
    )
    assert abs(est.total / GIB / measured - 1) <= 0.15, (est.total / GIB, measured)


def test_bf16_residual_stream_saves_what_the_model_says():
    """model.residual_dtype=bfloat16 (models/residual.py): GPT-2's LayerNorms save bf16 inputs, 2 bytes per
    element of the stream instead of 4; the estimate (residual_bytes=2) follows the measured saved tensors."""
    from hfpretrain.models.residual import cast_residual_stream

    cfg = load_config("gpt2_1p29b", SHAPES["gpt2_1p29b"])
    torch.manual_seed(0)
    model = build_model(cfg, attn_implementation="sdpa")
    ids = torch.randint(0, V, (B, S))
    fp32 = measure_saved_activations(model, ids, torch.bfloat16)
    cast_residual_stream(model, "bfloat16")
    bf16 = measure_saved_activations(model, ids, torch.bfloat16)
    est = {r: estimate_memory(cfg, TrainingLayout(B, S, residual_bytes=r)).activations for r in (4, 2)}
    assert bf16 < fp32
    assert abs((est[4] - est[2]) - (fp32 - bf16)) / (fp32 - bf16) < 0.25, (est, fp32, bf16)


# One H200, Qwen3 1.8B at 20 x 2048, compile=layers, the bf16 stream and fused head, no accumulation
# (benchmarks/gpu_1gpu_fp8.sh, docs/benchmarks.md § FP8): bf16 104.0 GiB, fp8 83.0 GiB measured.
def test_float8_estimate_follows_the_measured_saving_and_stays_above_it():
    cfg = load_config("qwen3_1p8b", {})
    layout = TrainingLayout(
        20, 2048, compile="decoder", fused_loss="compiled", attn_implementation="sdpa_packed", residual_bytes=2
    )
    bf16, fp8 = (estimate_memory(cfg, replace(layout, float8=f)).total / GIB for f in (False, True))
    assert abs(bf16 / 104.0 - 1) <= 0.05, bf16
    assert 83.0 <= fp8 < bf16 and fp8 / 83.0 - 1 <= 0.10, fp8  # on the safe side: it plans the micro-batch
    # per token and layer: the two normalised projection inputs and the down input, 1 byte instead of 2
    d, ff = cfg.hidden_size, cfg.intermediate_size
    per_layer = {f: estimate_memory(cfg, replace(layout, float8=f)).activations_per_layer for f in (False, True)}
    assert per_layer[False] - per_layer[True] == 20 * 2048 * (2 * d + ff)
    # float8 changes nothing uncompiled (torchao's autograd keeps the bf16 inputs)
    eager = replace(layout, compile="none")
    assert estimate_memory(cfg, eager).total == estimate_memory(cfg, replace(eager, float8=True)).total


# The same H200 shape with 6 accumulation steps (gradients held), fp8 at the recipe's 20 and folded to 24
# (docs/benchmarks.md, seventh session): (micro-batch, accumulation, float8, measured GiB).
@pytest.mark.parametrize(
    "micro,accum,float8,measured", [(20, 6, False, 110.2), (20, 6, True, 89.2), (24, 5, True, 101.1)]
)
def test_estimate_plans_the_fp8_fold_safely(micro, accum, float8, measured):
    cfg = load_config("qwen3_1p8b", {})
    est = (
        estimate_memory(
            cfg,
            TrainingLayout(
                micro,
                2048,
                compile="decoder",
                fused_loss="compiled",
                grad_accum=accum,
                attn_implementation="sdpa_packed",
                residual_bytes=2,
                float8=float8,
            ),
        ).total
        / GIB
    )
    if float8:  # over the peak, by at most 10%: the fold it plans cannot run out of memory on the estimate's error
        assert measured <= est <= 1.10 * measured, est
    else:
        assert abs(est / measured - 1) <= 0.05, est
