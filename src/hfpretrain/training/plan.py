"""The figures of a resolved run (``--dry-run``'s ``plan``, logged and saved with every run): parameters, FLOPs,
tokens, the memory estimate per GPU, the expected time. resolve() (training/resolve.py) calls these with its
final choices; nothing here reads the environment or changes what it is given."""

from __future__ import annotations

import logging
from dataclasses import asdict

from hfpretrain.data.manifest import tokens_per_byte
from hfpretrain.models import TrainingLayout, count_params, estimate_memory, flops_per_token
from hfpretrain.models.hardware import peak_flops
from hfpretrain.models.memory import GIB

from .arguments import activation_checkpointing
from .config import Recipe
from .fast_path import FastPath
from .loss import loss_chunk_tokens
from .machine import Machine

logger = logging.getLogger("hfpretrain")

MAX_PASSES_WITHOUT_WARNING = 4  # beyond ~4 passes repeated tokens are worth much less (Muennighoff et al. 2023)


def run_memory(
    recipe: Recipe,
    config,
    fields: dict,
    seq_len: int,
    fast: FastPath,
    world: int,
    zero: int,
    micro_batch: int,
    accumulation: int,
    loss: str | None = None,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
):
    """The memory estimate per GPU (models/memory.py) of this run at ``micro_batch x accumulation`` (with the
    ``loss`` implementation given, else the fast path's), under tensor and context parallelism of degrees ``tp`` and
    ``cp``; ``fields``: the TrainingArguments' keyword arguments."""
    loss = loss or fast.fused_loss
    checkpointed, checkpointing = activation_checkpointing(fields)
    return estimate_memory(
        config,
        TrainingLayout(
            micro_batch,
            seq_len,
            n_gpus=world,
            zero_stage=zero,
            grad_checkpointing=checkpointed,
            checkpoint_every_n_layers=int(checkpointing.get("every_n_layers", 1)),
            checkpoint_offload=bool(checkpointing.get("offload", False)),
            document_mask=recipe.model.document_mask,
            attn_implementation=fast.attn_implementation,
            grad_accum=accumulation,
            compile=fast.compile,
            fused_loss=loss,
            fused_loss_chunk=loss_chunk_tokens(
                loss,
                micro_batch * seq_len,
                config.vocab_size,
                config.hidden_size,
                recipe.loss.chunk_tokens,
                recipe.loss.liger_min_chunk_tokens,
            ),
            residual_bytes=2 if fast.residual_dtype == "bfloat16" else 4,
            experts_implementation=fast.experts_implementation or "grouped_mm",
            float8=fast.precision == "fp8",
            tp=tp,
            cp=cp,
            sequence_parallel=sequence_parallel,
        ),
    )  # choose_precision gives fp8 only to a model torchao converts


def detect_peak(device: str, dtype: str) -> float | None:
    """Peak FLOP/s of ``device`` for ``dtype``; None on a CPU or an unknown GPU (``logging.peak_flops`` sets one)."""
    if device == "cpu":
        return None
    try:
        return peak_flops(device, dtype)
    except ValueError:
        return None


def make_plan(
    recipe: Recipe,
    config,
    args,
    fields: dict,
    seq_len: int,
    fast: FastPath,
    train_blocks: int,
    manifest: dict | None,
    world: int,
    zero: int,
    machine: Machine,
    check_passes: bool = True,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
) -> dict:
    """The plan's figures for ``args`` (the run's TrainingArguments, made from ``fields``) on ``world`` processes at
    ZeRO stage ``zero``, ``tp`` x ``cp`` of them sharing each micro-batch; ``manifest``: data.path's (None: not
    tokenized yet). FLOPs per token are the model's whatever the layout; MFU divides the job's by ``world`` GPUs."""
    samples_per_step = args.per_device_train_batch_size * (world // (tp * cp)) * args.gradient_accumulation_steps
    tokens_per_step = samples_per_step * seq_len
    params = count_params(config)
    flops = flops_per_token(config, seq_len)
    peak = recipe.logging.peak_flops or detect_peak(machine.device, recipe.logging.dtype_for_peak)
    memory = run_memory(
        recipe,
        config,
        fields,
        seq_len,
        fast,
        world,
        zero,
        args.per_device_train_batch_size,
        args.gradient_accumulation_steps,
        tp=tp,
        cp=cp,
        sequence_parallel=sequence_parallel,
    )
    total_tokens = tokens_per_step * args.max_steps
    passes = args.max_steps * samples_per_step / train_blocks
    if check_passes and passes > MAX_PASSES_WITHOUT_WARNING:  # a mixture checks each of its sources instead
        logger.warning(
            "this run reads its training data %.1f times (%d blocks, %d samples): repeated tokens "
            "teach less; more data or a smaller budget is the usual fix",
            passes,
            train_blocks,
            args.max_steps * samples_per_step,
        )
    elif check_passes and passes > 1:
        logger.info(
            "this run reads its training data %.2f times (%d blocks, %d samples)",
            passes,
            train_blocks,
            args.max_steps * samples_per_step,
        )
    plan = {
        "parameters": asdict(params),
        "seq_len": seq_len,
        "world_size": world,
        "zero_stage": zero,
        "samples_per_step": samples_per_step,
        "tokens_per_step": tokens_per_step,
        "micro_batch": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "max_steps": args.max_steps,
        "total_tokens": total_tokens,
        "flops_per_token": flops.total,
        "flops_per_token_causal": flops.causal,
        "flops_per_token_head": flops.head,
        "flops_formula": flops.formula,
        "total_flops": flops.total * total_tokens,
        "memory_per_gpu_gib": {k: v / GIB for k, v in asdict(memory).items()},
        "peak_flops_per_gpu": peak,
        "assumed_mfu": recipe.logging.assumed_mfu,
        "fast_path": asdict(fast),
        "device": machine.device,
        "train_blocks": train_blocks,
        "passes_over_data": passes,
        "shape": {
            k: getattr(config, k, None)
            for k in (
                "model_type",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "vocab_size",
                "tie_word_embeddings",
            )
        },
        "validation_tokens_per_byte": tokens_per_byte(manifest) if manifest else None,  # None: no bits per byte
        "validation_text_bytes": ((manifest or {}).get("validation") or {}).get("text_bytes"),
        "precision": fast.precision,
        # transformers' gradient checkpointing: each decoder layer's input kept, its activations recomputed
        "activation_checkpointing": checkpointing_plan(fields),
        # fp8: MFU stays against the bf16 peak (comparable with every other figure); mfu_fp8 against fp8's
        "peak_flops_fp8_per_gpu": detect_peak(machine.device, "fp8") if fast.precision != "bf16" else None,
    }
    if peak:
        plan["expected_hours"] = plan["total_flops"] / (peak * world * recipe.logging.assumed_mfu) / 3600
    return plan


def _count(n: float) -> str:
    """1.83B, 596M, 623K: three significant figures and a suffix."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


def plan_summary(plan: dict) -> str:
    """The plan's headline figures in three lines, and a resume's reading (a dry run prints them on stderr; its
    JSON has the rest)."""
    params, memory = plan["parameters"], plan["memory_per_gpu_gib"]
    active = f", {_count(params['active'])} active" if params.get("active", params["total"]) != params["total"] else ""
    parallel, passes = plan["parallel"], f"{plan['passes_over_data']:.2g}"
    model_parallel = parallel.get("tp", 1) * parallel.get("cp", 1)  # a tp or cp group reads one micro-batch
    groups = f" (tp {parallel.get('tp', 1)} x cp {parallel.get('cp', 1)} per group)" if model_parallel > 1 else ""
    lines = [
        f"model: {_count(params['total'])} parameters ({_count(params['non_embedding'])} without the "
        f"embeddings{active}); layout {parallel['engine']} on {plan['world_size']} "
        f"process{'es' if plan['world_size'] > 1 else ''}{groups}",
        f"batch: {plan['world_size'] // model_parallel} x micro-batch {plan['micro_batch']} x "
        f"{plan['gradient_accumulation_steps']} accumulation = {plan['samples_per_step']:,} sequences of "
        f"{plan['seq_len']:,} tokens ({plan['tokens_per_step']:,} tokens) per step",
        f"run: {plan['max_steps']:,} steps = {_count(plan['total_tokens'])} tokens "
        f"({passes} pass{'' if passes == '1' else 'es'} over the data), "
        f"{plan['total_flops']:.2e} FLOPs; "
        f"{memory['total']:.1f} GiB per GPU (estimate)"
        + (
            f"; {plan['expected_hours']:.3g} h at {plan['assumed_mfu']:.0%} MFU"
            if plan.get("expected_hours") is not None
            else ""
        ),
    ]
    if plan.get("resume"):
        lines.append(f"resume: {plan['resume']['from']}, {plan['resume']['reading']}")
    return "\n".join(lines)


def checkpointing_plan(fields: dict) -> str:
    """What activation checkpointing does in this run, in words (the plan's ``activation_checkpointing``)."""
    on, kwargs = activation_checkpointing(fields)
    if not on:
        return "off"
    every = int(kwargs.get("every_n_layers", 1))
    where = "every decoder layer" if every == 1 else f"decoder layers 0, {every}, {2 * every}, ..."
    return where + (", inputs offloaded to host memory" if kwargs.get("offload") else "")


def attended_flops(config, plan: dict, attended_lengths: dict, data_path: str) -> dict:
    """Under the document mask a token attends within its document only: the FLOPs per token that MFU and TFLOP/s
    count take the data's mean attended length (``attended_lengths``: data folder -> mean, data/order.py) in the
    attention term instead of the block's (at 16k, 0.39 of the block on the mix corpus). A mixture weighs its
    sources by the samples the run reads from each. Budgets (``training_flops``, studies) stay on the block's
    count, so that a FLOPs budget buys the same steps with the mask as without it."""
    sources = (plan.get("data") or {}).get("sources")
    parts = [(s["path"], s["samples"]) for s in sources.values() if s["samples"]] if sources else [(data_path, 1)]
    length = sum(w * attended_lengths[str(p)] for p, w in parts) / sum(w for _, w in parts)
    return {"attended_length": length, "flops_per_token_attended": flops_per_token(config, length).total}
