"""The parallel layout (training/layout.py): the ``parallel`` section's degrees chosen by the planner from the shape,
the sequence length, the GPU's memory and the world size, checked, and saved with the run; the memory model's
per-GPU figures under tensor and context parallelism (models/memory.py, models/parallel.py)."""

from __future__ import annotations

import pytest
from forked import script

from train_utils import PRETRAIN_SCRIPT, REPO, TINY_RECIPE, launch_of

RECIPE_1P8B = REPO / "recipes" / "qwen3_1p8b.yaml"
# a GPU recipe planned on this CPU as if on a GPU of a given memory: fp32 (no bf16 here), HF's loss chunked
ON_CPU = ["training.bf16=false", "training.use_cpu=true", "loss.implementation=chunked"]


def _resolve(recipe_path, overrides, machine):
    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.resolve import read_data_facts, resolve

    recipe = load_recipe(recipe_path, overrides)
    return resolve(recipe, read_data_facts(recipe, planning=True), machine)


@pytest.mark.parametrize(
    "gib, extra, engine, why",
    [
        (80, [], "ddp", "data parallel"),
        (30, [], "fsdp2", "FSDP2: under DDP one GPU would need 34.1 GiB"),
        # tp with sequence parallelism (auto): tp 2 beside FSDP2 (whose checkpoints are refused under tp: no saves)
        (14, ["training.save_strategy=no"], "fsdp2+tp2", "tp 2: one layer's weights and activations do not fit"),
        # tp held at 1 (with sequence parallelism tp 2 fits first)
        (
            12,
            ["model.attn_implementation=sdpa", "parallel.tp=1"],
            "fsdp2+cp2",
            "cp 2: one sequence's activations (2048 tokens)",
        ),
    ],
)
def test_auto_layout_follows_the_memory_model(tmp_path, gib, extra, engine, why):
    """The 1.8B recipe on 8 GPUs of decreasing memory: DDP while it fits, then FSDP2 (set in the TrainingArguments
    of a DDP launch), then tensor parallelism, or context parallelism where the attention is torch SDPA."""
    run = _resolve(RECIPE_1P8B, [*ON_CPU, *extra, f"data.path={tmp_path}/none"], launch_of(8, gib))
    layout = run.resolved()["layout"]
    assert layout["engine"] == engine and why in layout["reason"], layout
    assert layout["dp_replicate"] * layout["dp_shard"] * layout["tp"] * layout["cp"] == 8
    assert run.plan["parallel"] == layout
    # a tp or cp group reads one micro-batch: samples per step count the data-parallel ranks only
    dp = 8 // (layout["tp"] * layout["cp"])
    assert (
        run.plan["samples_per_step"] == run.args.per_device_train_batch_size * run.args.gradient_accumulation_steps * dp
    )
    assert bool(run.args.fsdp) == engine.startswith("fsdp2")
    assert run.plan["memory_per_gpu_gib"]["total"] <= gib


def test_tp_over_every_rank_leaves_no_fsdp2():
    """tp 8 takes every rank: nothing left for FSDP2 to shard across, so plain tensor parallelism. Where it is the
    planner's choice depends on transformers' plan: 5.24 shards the embedding (tp 8 at 9 GiB), 5.17 keeps it whole
    on every GPU (12 GiB: tp 4 beside FSDP2 is the fewest GPUs per group that fit, and tp 8 never is)."""
    from hfpretrain.models import load_config
    from hfpretrain.models.parallel import tp_plan

    base = [*ON_CPU, "training.save_strategy=no", "data.path=/tmp/none-tp8"]
    if "model.embed_tokens" in tp_plan(load_config("qwen3_1p8b")):
        layout = _resolve(RECIPE_1P8B, base, launch_of(8, 9)).layout
        assert layout.engine == "ddp+tp8" and "tp 8: one layer's weights and activations" in layout.reason, layout
        assert "no FSDP2: tp 8 takes all 8 ranks" in layout.reason
    else:
        layout = _resolve(RECIPE_1P8B, base, launch_of(8, 12)).layout
        assert layout.engine == "fsdp2+tp4" and layout.sequence_parallel, layout


def test_written_degrees_are_checked_in_one_line_naming_the_key(mini_blocks, tmp_path):
    from hfpretrain.training.config import RecipeError

    data = [f"data.path={mini_blocks}", f"training.output_dir={tmp_path}/run", "training.save_strategy=no"]
    cases = [
        (1, None, ["parallel.tp=2"], "parallel.tp=2 needs several processes: this launch has 1"),
        (4, None, ["parallel.tp=3"], "parallel.tp=3 does not divide the world size 4"),
        (4, None, ["parallel.tp=2", "parallel.cp=4"], "parallel: tp x cp x dp_shard = 2 x 4 x 1 = 8 does not divide"),
        (4, None, ["parallel.tp=4"], "parallel.tp=4 does not divide the model's 4 attention heads and 2 KV heads"),
        (4, 1, ["parallel.tp=2"], "parallel.tp=2 with ZeRO-1 (DeepSpeed)"),
        (2, None, ["parallel.cp=2", "model.document_mask=true"], "parallel.cp=2 with model.document_mask=true"),
        (2, None, ["parallel.cp=2", "model.attn_implementation=eager"], "runs transformers' own SDPA only"),
        (2, None, ["parallel.tp=2", "model.config=gpt2_124m"], "no tensor-parallel plan for gpt2"),
        (2, 1, ["parallel.dp_shard=2"], "parallel.dp_shard=2 shards with FSDP2, but this launch runs DeepSpeed"),
        (2, 1, ["parallel.cp=2", "model.attn_implementation=sdpa"], "parallel.cp=2 with ZeRO-1 (DeepSpeed)"),
        (2, None, ["parallel.tp=2", "model.precision=fp8"], "model.precision=fp8 with parallel.tp=2"),
        (1, None, ["parallel.sequence_parallel=true"], "parallel.sequence_parallel=true splits a tensor-parallel"),
        (2, None, ["parallel.sequence_parallel=true"], "it needs parallel.tp > 1 (tp 1 here)"),
        (
            4,
            None,
            ["parallel.tp=2", "parallel.cp=2", "model.attn_implementation=sdpa", "parallel.sequence_parallel=true"],
            "parallel.sequence_parallel=true beside parallel.cp=2 has not run",
        ),
        (1, None, ["parallel.async_tp=true"], "parallel.async_tp=true overlaps sequence parallelism's"),
        (
            2,
            None,
            ["parallel.tp=2", "parallel.sequence_parallel=false", "parallel.async_tp=true"],
            "it needs parallel.sequence_parallel (off in this layout",
        ),
        (
            2,
            None,
            ["parallel.tp=2", "parallel.sequence_parallel=true", "parallel.async_tp=true", "model.compile=none"],
            "parallel.async_tp=true is an inductor pass over compiled code",
        ),
        (
            2,
            None,
            [
                "parallel.tp=2",
                "parallel.sequence_parallel=true",
                "parallel.async_tp=true",
                "model.compile_backend=eager",
            ],
            "with model.compile_backend=inductor (here",
        ),
        (1, None, ["parallel.tp_overlap=true"], "parallel.tp_overlap=true orders tensor-parallel collectives"),
        (2, None, ["parallel.tp=2", "parallel.tp_overlap=true", "model.compile=none"], "an inductor pass over"),
    ]
    for world, zero, overrides, message in cases:
        with pytest.raises(RecipeError, match=None) as err:
            _resolve(TINY_RECIPE, [*data, *overrides], launch_of(world, zero=zero))
        assert message in str(err.value) and "\n" not in str(err.value), (overrides, str(err.value))


def test_a_cpu_launch_refuses_tensor_and_context_parallelism(mini_blocks, tmp_path):
    """accelerate builds no ParallelismConfig on a CPU launch (MULTI_CPU): said before any work, not as accelerate's
    ValueError after the model is built."""
    from hfpretrain.training.config import RecipeError

    for key in ("tp", "cp"):
        with pytest.raises(RecipeError, match=f"parallel.{key}=2: accelerate takes a ParallelismConfig .* only on GPU"):
            _resolve(TINY_RECIPE, [f"data.path={mini_blocks}", f"parallel.{key}=2"], launch_of(2, planning=False))


def test_the_layout_is_saved_with_the_run_and_a_bad_one_is_exit_2(mini_blocks, tmp_path):
    """The dry run's document (what resolved.yaml holds): the recipe's parallel section as written and the layout
    with its reason; a layout that cannot run: one error line, exit 2, nothing written."""
    import json

    out = tmp_path / "run"
    args = [
        TINY_RECIPE,
        f"data.path={mini_blocks}",
        f"training.output_dir={out}",
        "--dry-run",
        "--world-size",
        "4",
        "parallel.dp_shard=2",
    ]
    # scripts/pretrain.py in a forked child (tests/forked.py): the script's own start is test_cli.py's
    proc = script(PRETRAIN_SCRIPT.name, *args, cwd=REPO, env={"DS_ACCELERATOR": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["recipe"]["parallel"] == {
        "dp_shard": "2",
        "tp": "auto",
        "cp": "auto",
        "sequence_parallel": None,
        "async_tp": None,
        "tp_overlap": None,
        "timeout_s": 1800.0,
    }
    layout = doc["resolved"]["layout"]
    assert (layout["engine"], layout["dp_replicate"], layout["dp_shard"]) == ("fsdp2", 2, 2)
    assert "FSDP2 over 2 ranks (parallel.dp_shard)" in layout["reason"] and "parallel layout: fsdp2" in proc.stderr
    proc = script(PRETRAIN_SCRIPT.name, *args[:-1], "parallel.tp=3", cwd=REPO, env={"DS_ACCELERATOR": "cpu"})
    assert (
        proc.returncode == 2
        and proc.stderr.strip().splitlines()[-1] == "error: parallel.tp=3 does not divide the world size 4"
    ), proc.stderr[-2000:]
    assert not out.exists()


def test_tensor_and_context_parallelism_come_with_fsdp2(mini_blocks):
    """accelerate composes tp and cp with FSDP2 only: tp 2 on 4 ranks shards the 2 data-parallel ranks with FSDP2;
    tp over every rank needs none; cp always brings the FSDP2 plugin."""
    data = [f"data.path={mini_blocks}", "training.save_strategy=no"]
    for world, overrides, engine, shard in (
        (4, ["parallel.tp=2"], "fsdp2+tp2", 2),
        (2, ["parallel.tp=2"], "ddp+tp2", 1),
        (2, ["parallel.cp=2"], "fsdp2+cp2", 1),
    ):
        layout = _resolve(TINY_RECIPE, [*data, *overrides], launch_of(world)).layout
        assert (layout.engine, layout.dp_shard, layout.dp_replicate) == (engine, shard, 1), layout
        assert not layout.sequence_parallel, layout  # auto: only where tp does not fit without it


def test_sequence_parallel_needs_positions_that_split():
    from hfpretrain.training.config import RecipeError
    from hfpretrain.training.layout import check_sequence_parallel, wants_sequence_parallel

    with pytest.raises(RecipeError, match=r"^parallel.sequence_parallel: the sequence \(4097 tokens\) does not split"):
        check_sequence_parallel(True, 2, 1, 4097)
    check_sequence_parallel(None, 2, 1, 4097)  # auto does not take it there: plain tp has no such constraint
    check_sequence_parallel(False, 2, 1, 4097)
    assert not wants_sequence_parallel(None, 1, 1) and not wants_sequence_parallel(None, 2, 2)
    assert wants_sequence_parallel(None, 2, 1) and not wants_sequence_parallel(False, 2, 1)


def test_auto_takes_sequence_parallelism_only_where_tp_needs_it(tmp_path):
    """Measured on two H200s, sequence parallelism saved 4-8 GiB and cost 1-2% of the tokens/s: auto takes it where
    tp does not fit a GPU without it (the 1.8B recipe on 8 GPUs of 14 GiB), not where it fits (80 GiB, tp 2)."""
    base = [*ON_CPU, "training.save_strategy=no", f"data.path={tmp_path}/none"]
    tight = _resolve(RECIPE_1P8B, base, launch_of(8, 14)).layout
    assert tight.tp == 2 and tight.sequence_parallel and "tp does not fit without it" in tight.reason, tight
    roomy = _resolve(RECIPE_1P8B, [*base, "parallel.tp=2"], launch_of(8, 80)).layout
    assert roomy.tp == 2 and not roomy.sequence_parallel, roomy
    asked = _resolve(RECIPE_1P8B, [*base, "parallel.tp=2", "parallel.sequence_parallel=true"], launch_of(8, 80))
    assert asked.layout.sequence_parallel and "(parallel.sequence_parallel)" in asked.layout.reason
    assert not asked.layout.async_tp and asked.resolved()["layout"]["async_tp"] is False  # auto: off (within noise)
    overlapped = [*base, "parallel.tp=2", "parallel.sequence_parallel=true", "parallel.async_tp=true"]
    assert _resolve(RECIPE_1P8B, overlapped, launch_of(8, 80)).layout.async_tp
    # the memory estimate the plan reports is the layout's
    assert (
        asked.plan["memory_per_gpu_gib"]["total"]
        < _resolve(RECIPE_1P8B, [*base, "parallel.tp=2"], launch_of(8, 80)).plan["memory_per_gpu_gib"]["total"]
    )


def test_memory_per_gpu_under_tensor_and_context_parallelism():
    """tp: the plan's sharded weights / tp (norms whole), a layer's heads and MLP width / tp; cp: every
    per-token term at seq_len / cp tokens."""
    from hfpretrain.models import count_params, load_config
    from hfpretrain.models.memory import TrainingLayout, estimate_memory
    from hfpretrain.models.parallel import params_per_gpu

    config = load_config("qwen3_1p8b")
    total = count_params(config).total
    half = params_per_gpu(config, 2)
    # transformers' plan shards every linear, the LM head and, in 5.24 (embedding_rowwise), the embedding: the norms
    # (and in 5.17 the embedding) stay whole
    from hfpretrain.models.parallel import tp_plan

    sharded_embedding = "model.embed_tokens" in tp_plan(config)
    whole = sum(
        p.numel()
        for n, p in __import__("hfpretrain.models.params", fromlist=["meta_model"])
        .meta_model(config)
        .named_parameters()
        if "norm" in n or (n == "model.embed_tokens.weight" and not sharded_embedding)
    )
    assert half == (total - whole) // 2 + whole
    one, tp2, cp2 = (
        estimate_memory(config, TrainingLayout(1, 4096, tp=tp, cp=cp)) for tp, cp in ((1, 1), (2, 1), (1, 2))
    )
    assert tp2.weights == 4 * half and cp2.weights == one.weights
    assert 0.5 * one.activations_per_layer < tp2.activations_per_layer < 0.8 * one.activations_per_layer
    assert cp2.activations_per_layer == one.activations_per_layer // 2 and cp2.logits < one.logits
    # sequence parallelism: the residual stream's own part of each layer, the final norm and the head's input /tp
    from hfpretrain.models.memory import stream_bytes_per_token_per_layer

    sp = estimate_memory(config, TrainingLayout(1, 4096, tp=2, sequence_parallel=True))
    stream = stream_bytes_per_token_per_layer(config, compiled=False)
    assert sp.activations_per_layer == tp2.activations_per_layer - stream // 2 * 4096
    # one row: plain tp runs the head over all its positions on every rank, sequence parallelism over half
    assert sp.activations < tp2.activations and sp.logits < tp2.logits
    # ZeRO/FSDP shard a tp slice over the n_gpus / tp ranks that hold it
    z3 = estimate_memory(config, TrainingLayout(1, 4096, n_gpus=8, zero_stage=3, tp=2))
    assert z3.weights == 4 * half // 4


def test_muon_is_refused_where_the_planner_needs_fsdp2(tmp_path):
    """check_launch refuses Muon under a FSDP launch; the same holds when the planner chose FSDP2 itself."""
    from hfpretrain.training.config import RecipeError

    with pytest.raises(RecipeError, match="optimizer.name=muon is not supported under FSDP, which the layout needs"):
        _resolve(RECIPE_1P8B, [*ON_CPU, "optimizer.name=muon", f"data.path={tmp_path}/none"], launch_of(8, 30))


def test_elastic_resume_splits_the_global_batch_over_data_parallel_ranks(reference_run, mini_blocks, tmp_path):
    """A checkpoint of 4 samples per step on 1 process, resumed on 4 processes with tp 2: 2 data-parallel ranks
    take 2 samples each (a tp group reads one micro-batch); on 6 with tp 2 the 3 ranks cannot split 4."""
    from hfpretrain.training.config import RecipeError, load_recipe
    from hfpretrain.training.resolve import read_data_facts, resolve
    from hfpretrain.training.resume import elastic_batch
    from train_utils import REFERENCE, make_overrides

    recipe = load_recipe(
        TINY_RECIPE,
        make_overrides(mini_blocks, tmp_path / "x", REFERENCE) + ["parallel.tp=2", "training.save_strategy=no"],
    )
    facts, ckpt = read_data_facts(recipe, planning=True), str(reference_run / "checkpoint-5")
    assert elastic_batch(ckpt, resolve(recipe, facts, launch_of(4))) == [
        "training.per_device_train_batch_size=2",
        "training.gradient_accumulation_steps=1",
    ]
    with pytest.raises(RecipeError, match=r"6 processes \(3 data-parallel ranks\) cannot split that global batch"):
        elastic_batch(ckpt, resolve(recipe, facts, launch_of(6)))


def test_tp_beside_fsdp2_needs_a_transformers_that_shards_at_load(tmp_path, monkeypatch):
    """transformers 5.17 loads a (dp_shard, tp) model with tp only, and accelerate then leaves its data-parallel
    ranks unsynchronised (test_parallel.py): such a launch stops at start in one line; a plan for another machine
    (a dry run) does not, the machine that runs it may have a newer transformers."""
    import hfpretrain.training.layout as layout
    from hfpretrain.training.config import RecipeError

    monkeypatch.setattr(layout, "fsdp_beside_tp_supported", lambda: False)
    base = [*ON_CPU, "training.save_strategy=no", f"data.path={tmp_path}/none"]
    planned = _resolve(RECIPE_1P8B, [*base, "parallel.tp=2"], launch_of(8, 80)).layout
    assert planned.engine == "fsdp2+tp2" and "would refuse tp beside other ranks at launch" in planned.reason
    with pytest.raises(RecipeError, match=r"^parallel.tp=2 on 8 ranks needs a transformers that shards") as err:
        _resolve(RECIPE_1P8B, [*base, "parallel.tp=2"], launch_of(8, 80, planning=False))
    assert "set parallel.tp=1 (FSDP2 alone)" in str(err.value) and "\n" not in str(err.value)
