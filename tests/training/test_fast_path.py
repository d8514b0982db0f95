"""The shape-aware micro-batch (training/fast_path.py choose_micro_batch): fewer, larger micro-batches for the
same samples per step while the memory estimate fits and the loss implementation stays the same."""

import pytest
from transformers import GPT2Config

from hfpretrain.training.config import ModelSection
from hfpretrain.training.fast_path import ASSUMED_GPU_MEMORY, MICRO_BATCH_MEMORY_SHARE, FastPath, choose_micro_batch
from hfpretrain.training import pretrain

from train_utils import REPO

GIB = 2**30
CONFIG = GPT2Config(vocab_size=50304)


def choose(micro, accum, per_sample_bytes, fused_loss="compiled", requested="auto", seq_len=1024, loss="compiled"):
    fast = FastPath("sdpa_packed", "decoder", "default", loss, {})
    section = (requested, fused_loss)
    split = choose_micro_batch(
        *section,
        fast,
        CONFIG,
        micro,
        accum,
        seq_len,
        lambda m, a, loss: 2 * GIB + m * per_sample_bytes,
        None,
        planning=True,
    )
    return (split.micro_batch, split.accumulation), split.reason


def test_folds_accumulation_while_memory_fits():
    budget = MICRO_BATCH_MEMORY_SHARE * ASSUMED_GPU_MEMORY
    per_sample = int((budget - 2 * GIB) / 100)  # up to 100 samples fit
    assert choose(32, 4, per_sample)[0] == (64, 2)
    assert choose(16, 12, per_sample)[0] == (96, 2)  # 12 = 2 x 6: the largest divisor that fits
    assert choose(32, 4, per_sample // 10)[0] == (128, 1)
    (split, why) = choose(32, 4, per_sample * 2)
    assert split == (32, 4) and f"over {MICRO_BATCH_MEMORY_SHARE:.0%}" in why


def test_any_split_of_the_step_samples():
    """20 x 12 = 240 samples: 24 x 10 is the next split, not only multiples of 20 (40 x 6)."""
    budget = MICRO_BATCH_MEMORY_SHARE * ASSUMED_GPU_MEMORY
    per_sample = int((budget - 2 * GIB) / 26)  # up to 26 samples fit
    (split, why) = choose(20, 12, per_sample)
    assert split == (24, 10) and "30 x 8 would take" in why
    assert choose(20, 12, int((budget - 2 * GIB) / 23))[0] == (20, 12)  # 24 does not fit
    assert choose(20, 12, 1)[0] == (240, 1)


def test_keeps_the_loss_implementation():
    # auto's compiled loss at 32 x 2048 tokens of a 50k vocabulary; at 128 its logits pass 1/5 of an 80 GB GPU
    (split, why) = choose(32, 4, 1, fused_loss="auto", seq_len=2048)
    assert split == (64, 2) and "at 128 the loss would be" in why


def test_recipe_split_kept_when_asked_or_nothing_to_fold():
    assert choose(32, 4, 1, requested="recipe") == ((32, 4), "set in the recipe: 32 x 4")
    assert choose(32, 1, 1)[0] == (32, 1)


def test_dry_run_plans_the_folded_split(mini_blocks):
    """The GPT-2 recipe planned for an 80 GB GPU: same samples per step, fewer micro-batches; recipe keeps it."""
    path = REPO / "recipes" / "gpt2_124m.yaml"
    base = [f"data.path={mini_blocks}", "training.use_cpu=true"]
    plan = pretrain(path, base, dry_run=True)["plan"]
    assert plan["samples_per_step"] == 128 and plan["gradient_accumulation_steps"] < 4
    assert plan["micro_batch"] * plan["gradient_accumulation_steps"] == 128
    kept = pretrain(path, [*base, "batch.micro_batch=recipe"], dry_run=True)["plan"]
    assert (kept["micro_batch"], kept["gradient_accumulation_steps"]) == (32, 4)
    assert kept["memory_per_gpu_gib"]["total"] < plan["memory_per_gpu_gib"]["total"]


def test_folded_split_reaches_deepspeed(mini_blocks):
    """TrainingArguments hands DeepSpeed its batch settings when it is made: the folded split must be in them."""
    pytest.importorskip("deepspeed")
    from hfpretrain.training import load_recipe
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve

    recipe = load_recipe(
        REPO / "recipes" / "gpt2_124m.yaml",
        [
            f"data.path={mini_blocks}",
            "training.use_cpu=true",
            f"training.deepspeed={REPO / 'ds_configs' / 'zero1.json'}",
        ],
    )
    args = resolve(recipe, read_data_facts(recipe, planning=True), Machine.detect(planning=True)).args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) != (32, 4)
    ds = args.hf_deepspeed_config.config
    assert ds["train_micro_batch_size_per_gpu"] == args.per_device_train_batch_size
    assert ds["gradient_accumulation_steps"] == args.gradient_accumulation_steps


def test_dry_run_with_a_loss_this_machine_lacks(mini_blocks):
    """A login node without a GPU plans a liger recipe: the fold keeps the recipe's loss and does not ask for it."""
    path = REPO / "recipes" / "gpt2_124m.yaml"
    plan = pretrain(
        path, [f"data.path={mini_blocks}", "training.use_cpu=true", "loss.implementation=liger"], dry_run=True
    )["plan"]
    assert plan["fast_path"]["fused_loss"] == "liger" and plan["samples_per_step"] == 128
    assert "planned for a GPU of 80 GB" in plan["fast_path"]["reasons"]["micro_batch"]


def test_dry_run_plans_the_bf16_residual_stream(mini_blocks):
    """The plan names the stream's dtype with its reason, and its memory follows it: bf16 for a bf16 recipe planned
    for a GPU, fp32 when the recipe trains without bf16 (no autocast for the hook to act in) or asks for it."""
    path = REPO / "recipes" / "gpt2_124m.yaml"
    base = [f"data.path={mini_blocks}", "training.use_cpu=true", "batch.micro_batch=recipe"]
    plans = {
        name: pretrain(path, [*base, *extra], dry_run=True)["plan"]
        for name, extra in (
            ("auto", []),
            ("f32", ["model.residual_dtype=float32"]),
            ("no_bf16", ["training.bf16=false"]),
        )
    }
    assert plans["auto"]["fast_path"]["residual_dtype"] == "bfloat16"
    assert plans["f32"]["fast_path"]["residual_dtype"] == plans["no_bf16"]["fast_path"]["residual_dtype"] == "float32"
    assert "training.bf16 is off" in plans["no_bf16"]["fast_path"]["reasons"]["residual_dtype"]
    memory = {name: plan["memory_per_gpu_gib"]["total"] for name, plan in plans.items()}
    assert memory["auto"] < memory["f32"]


def test_a_recipe_too_large_for_the_gpu_is_split_smaller():
    """A recipe written for a 141 GB GPU on an 80 GB one (the 1.8B recipe's 20 x 12 on an H100): the largest smaller
    split of its samples that fits, rather than an out-of-memory error; none fits: the recipe's, saying so."""
    budget = MICRO_BATCH_MEMORY_SHARE * ASSUMED_GPU_MEMORY
    per_sample = int((budget - 2 * GIB) / 13)  # up to 13 samples fit
    (split, why) = choose(20, 12, per_sample)
    assert split == (12, 20) and "smaller micro-batches (the recipe's 20 x 12 would take" in why
    assert choose(20, 12, per_sample, requested="recipe")[0] == (20, 12)
    (split, why) = choose(20, 12, int(budget))  # not even one sample fits
    assert split == (20, 12) and "no smaller split fits" in why


def test_a_smaller_split_takes_autos_loss_at_its_size():
    """At 40 x 2048 tokens of Qwen3's 151k vocabulary the logits pass a fifth of an 80 GB GPU (liger); at the
    smaller split that fits they do not, and auto's loss there is the compiled one."""
    from transformers import Qwen3Config

    budget = MICRO_BATCH_MEMORY_SHARE * ASSUMED_GPU_MEMORY
    fast = FastPath("sdpa_packed", "decoder", "default", "liger", {"fused_loss": "liger at 40"})
    section = ("auto", "auto")
    split = choose_micro_batch(
        *section,
        fast,
        Qwen3Config(vocab_size=151936),
        40,
        2,
        2048,
        lambda m, a, loss: m * int(budget / 30),
        None,
        planning=True,
    )
    assert (split.micro_batch, split.accumulation) == (20, 4)
    assert split.fused_loss == "compiled" and "whole" in split.loss_reason


def test_a_smaller_split_is_sized_with_the_loss_it_will_run():
    """The memory estimate at each smaller size counts the loss auto picks there (the compiled head's logits
    cost more than liger's chunks): 20 would fit with liger, not with the compiled loss auto takes at 20."""
    from transformers import Qwen3Config

    budget = MICRO_BATCH_MEMORY_SHARE * ASSUMED_GPU_MEMORY
    per_sample = int(budget / 30)
    fast = FastPath("sdpa_packed", "decoder", "default", "liger", {})
    section = ("auto", "auto")

    def memory(micro, accum, loss):
        return (micro + (15 if loss == "compiled" else 0)) * per_sample

    split = choose_micro_batch(*section, fast, Qwen3Config(vocab_size=151936), 40, 2, 2048, memory, None, planning=True)
    assert (split.micro_batch, split.accumulation) == (10, 8) and split.fused_loss == "compiled"


def test_a_model_that_fits_no_split_of_this_gpu_is_refused():
    """On a GPU, a model whose estimate at micro-batch 1 is over the GPU's whole memory (an MoE's experts, all of
    them with their optimizer states) stops with one line before anything is loaded or written; a dry run on a
    machine without a GPU plans for an assumed one and says so instead."""
    from hfpretrain.training import RecipeError

    fast = FastPath("sdpa_packed", "decoder", "default", "compiled", {})
    section = ("auto", "compiled")
    with pytest.raises(
        RecipeError,
        match=r"does not fit the GPU: even micro-batch 1 x 1024 tokens would take "
        r"~90\.0 GiB per GPU, over its 80 GiB",
    ):
        choose_micro_batch(*section, fast, CONFIG, 8, 1, 1024, lambda m, a, loss: 88 * GIB + m * 2 * GIB, 80 * GIB)
    # between the share and the whole GPU: runs at the recipe's split, the reason says none fits
    split = choose_micro_batch(*section, fast, CONFIG, 8, 1, 1024, lambda m, a, loss: 75 * GIB + m * GIB, 80 * GIB)
    assert (split.micro_batch, split.accumulation) == (8, 1) and "no smaller split fits" in split.reason


def test_a_dry_run_plans_the_micro_batch_for_context_gpu():
    """context.gpu names the card a long-context phase must fit: a dry run without a GPU sizes the micro-batch for
    its memory (here 180 GB: a B200 folds all the accumulation that 80 GB could not), as the phase's fit check does."""
    per_sample = int((MICRO_BATCH_MEMORY_SHARE * ASSUMED_GPU_MEMORY - 2 * GIB) / 40)  # 40 samples fit 80 GB

    def split(target_gpu):
        fast = FastPath("sdpa_packed", "decoder", "default", "compiled", {})
        section = ("auto", "compiled")
        chosen = choose_micro_batch(
            *section,
            fast,
            CONFIG,
            16,
            8,
            1024,
            lambda m, a, loss: 2 * GIB + m * per_sample,
            None,
            planning=True,
            target_gpu=target_gpu,
        )
        return (chosen.micro_batch, chosen.accumulation), chosen.reason

    assert split(None)[0] == (32, 4)
    chosen, reason = split("B200")
    assert chosen == (64, 2) and "B200's memory (context.gpu)" in reason


@pytest.mark.parametrize(
    "model_type,planning,want", [("qwen3", True, "flex_attention"), ("qwen3", False, "sdpa"), ("gpt2", True, "sdpa")]
)
def test_the_document_mask_takes_flex_attention_on_a_gpu(model_type, planning, want):
    """model.document_mask with attn auto: flex attention's block mask where a GPU trains (a dry run plans for one)
    and transformers has it for the model (not GPT-2); else SDPA's dense mask (on a CPU flex attention has no
    backward); sdpa_packed (no mask) never."""
    from transformers import AutoConfig

    from hfpretrain.training.fast_path import choose_fast_path

    fast = choose_fast_path(
        ModelSection(document_mask=True),
        AutoConfig.for_model(model_type),
        4,
        256,
        cuda=False,
        gpu_memory=None,
        planning=planning,
    )
    assert fast.attn_implementation == want, fast.reasons["attn_implementation"]
    assert "document_mask" in fast.reasons["attn_implementation"]


def test_per_layer_compile_of_an_moe_says_what_it_costs():
    """Measured on an H200 (docs/benchmarks.md): per-layer compile ran qwen3_moe_856m_a152m at 64% of the tokens/s
    of the decoder compiled whole, with 18% more memory; a recipe that asks for it is told, a dense one not."""
    from hfpretrain.models.zoo import load_config
    from hfpretrain.training.fast_path import choose_fast_path

    moe = choose_fast_path(
        ModelSection(compile="layers"),
        load_config("qwen3_moe_109m_a21m"),
        4,
        256,
        cuda=False,
        gpu_memory=None,
        planning=True,
    )
    assert moe.compile == "layers" and "64% of the tokens/s" in moe.reasons["compile"]
    dense = choose_fast_path(
        ModelSection(compile="layers"), load_config("tiny"), 4, 256, cuda=False, gpu_memory=None, planning=True
    )
    assert dense.reasons["compile"] == "set in the recipe"


def test_auto_experts_take_sonicmoe_only_where_it_was_measured_and_loads():
    """auto on a GPU takes sonicmoe where what was measured holds (one process, bf16 with kernels.experts_autocast,
    Qwen3-MoE's experts, the local copy of the kernel: 1.07-1.15x grouped_mm on one H200) and it loads, else
    grouped_mm with the reason sonicmoe was passed over; a plan for another machine assumes grouped_mm. This CPU
    machine has no local copy: a run flagged as on a GPU falls back, saying so."""
    from hfpretrain.models.zoo import load_config
    from hfpretrain.training.fast_path import choose_experts

    moe = load_config("qwen3_moe_109m_a21m")
    assert choose_experts("auto", moe, gpu=False)[0] == "eager"
    for kwargs, words in (
        ({}, "not sonicmoe: no local sonic_moe package"),
        ({"load": False}, "sonicmoe where it loads on the machine that runs the plan"),
        ({"bf16": False}, "not sonicmoe: it runs under bf16 autocast, and training.bf16 is off"),
        ({"experts_autocast": False}, "not sonicmoe: kernels.experts_autocast is off"),
        ({"world_size": 2}, "not sonicmoe: measured on one GPU only"),
    ):
        experts, why = choose_experts("auto", moe, gpu=True, **kwargs)
        assert experts == "grouped_mm" and words in why, (kwargs, why)
    glm = load_config("glm4_moe_837m_a177m")
    assert "checked on qwen3_moe experts only" in choose_experts("auto", glm, gpu=True)[1]
    assert choose_experts("grouped_mm", moe, gpu=True) == ("grouped_mm", "set in the recipe")


def test_sonicmoe_set_in_the_recipe_is_refused_where_it_would_stop_mid_run():
    """Its kernels take 16-bit weights and inputs: without bf16 autocast, or without kernels.experts_autocast (the
    weights' bf16 copy), the run used to raise in the first forward, after its output folder was written. Refused
    at start in one line, on any machine (a plan too), before the kernel is loaded; what was not measured is said
    beside it."""
    from hfpretrain.models.zoo import load_config
    from hfpretrain.training.config import RecipeError
    from hfpretrain.training.fast_path import choose_experts

    moe, glm = load_config("qwen3_moe_109m_a21m"), load_config("glm4_moe_837m_a177m")
    for kwargs, words in (
        ({"bf16": False}, "its kernels take 16-bit inputs, and training.bf16 is off"),
        ({"experts_autocast": False}, "kernels.experts_autocast is off"),
    ):
        for load in (False, True):  # before loading the kernel (which can fetch it from the Hub)
            with pytest.raises(RecipeError, match=rf"^model.experts_implementation=sonicmoe: {words}.*grouped_mm"):
                choose_experts("sonicmoe", moe, gpu=True, load=load, **kwargs)
    assert choose_experts("sonicmoe", moe, gpu=True, load=False) == ("sonicmoe", "set in the recipe")
    assert choose_experts("sonicmoe", glm, gpu=True, load=False, world_size=4) == (
        "sonicmoe",
        "set in the recipe; measured on one GPU only; checked on qwen3_moe experts only",
    )
    with pytest.raises(RecipeError, match="^model.experts_implementation=sonicmoe: sonic-moe needs a CUDA GPU"):
        choose_experts("sonicmoe", moe, gpu=True, load=True)  # this CPU machine: no kernel


def test_fp8_on_an_moe_says_its_experts_stay_bf16():
    """float8 converts nn.Linear layers only: an MoE's routed experts (most of its FLOPs) are 3-D parameters run by
    grouped matmuls, which stay bf16; the reason says so, where a user reads that the run is fp8."""
    from hfpretrain.models.zoo import load_config
    from hfpretrain.training.fast_path import choose_precision

    for name, noted in (("qwen3_moe_587m_a103m", True), ("qwen3_103m", False)):
        precision, why = choose_precision(ModelSection(precision="fp8"), load_config(name))
        assert precision == "fp8" and ("experts' grouped matmuls stay bf16" in why) == noted, (name, why)
    assert "experts" not in choose_precision(ModelSection(precision="bf16"), load_config("qwen3_moe_587m_a103m"))[1]
