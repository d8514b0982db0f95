"""The shape-aware speed choices, in one place: attention kernel, compile scope and mode, loss.

A recipe's ``auto`` values are resolved here from the model shape, the micro-batch and the GPU,
and each choice comes with its reason (logged at start, and in ``--dry-run``'s plan):

* attention: flash-attn when installed, else SDPA called with ``is_causal=True`` and no mask
  (``sdpa_packed``: the flash kernel, not the masked memory-efficient one);
* compile: ``decoder`` (the base model as one graph) on a GPU, ``none`` on a CPU;
* loss: the LM head and cross-entropy whole when one micro-batch's logits are small (in training on a GPU the
  loss and its gradient in one kernel: loss.py), liger's fused chunks when they are not;
* precision (``auto``): fp8 from a hidden size of FP8_MIN_HIDDEN up, on a float8 GPU with torchao, else bf16;
* experts (``auto``, MoE): sonic-moe's fused kernels where they were measured and load, else one grouped matmul;
* residual stream (``auto``): bf16 between the decoder layers on a GPU (models/residual.py), fp32 on a CPU;
* micro-batch (``auto``): the recipe's micro-batch x accumulation is one split of a step's samples; any split
  with a larger micro-batch and fewer accumulation steps is the same step (same samples, same gradient up to
  summation order) with larger matmuls and fewer launches and weight casts, taken while it fits
  (choose_micro_batch).

Measured in docs/benchmarks.md (benchmarks/gpu_1gpu_fast_path.sh).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from hfpretrain.models.backend import PACKED_SDPA
from hfpretrain.models.fp8 import check_fp8_available, fp8_unsupported
from hfpretrain.models.hardware import canonical_gpu
from hfpretrain.models.hardware import gpu_memory_bytes as card_memory_bytes
from hfpretrain.models.sonic import SONIC_MODEL_TYPES
from hfpretrain.models.sonic import local_copy as sonic_local_copy
from hfpretrain.models.speedups import Speedups
from hfpretrain.models.zoo import is_moe, resolve_attn_implementation, supports_flex_attention

from .config import LossSection, RecipeError
from .loss import choose_fused_loss

logger = logging.getLogger("hfpretrain")

# A dry run on a machine without a GPU plans for this one (the loss choice depends on its memory).
ASSUMED_GPU_MEMORY = 80 * 10**9
# fp8 over bf16 on one H200 (docs/benchmarks.md § FP8): 1.04x at hidden 896, 1.08x at 1152, 1.21x at 2048,
# and the loss matched over 300 steps at 2048. Below that auto keeps bf16: little speed for a new rounding.
FP8_MIN_HIDDEN = 2048


# model.document_mask under attn auto on a GPU: flex attention's block mask against SDPA's dense mask (which costs
# SDPA its flash kernel), best_small's shape on one H100, the same call (results/long_context_2026-11-26/).
FLEX_SPEEDUP = "1.29x SDPA's dense mask at 2,048 tokens, 2.97x at 16,384, measured on an H100"


# batch.micro_batch=auto grows the micro-batch while the memory estimate (models/memory.py, within 4% of the
# measured peaks in docs/benchmarks.md) stays under this share of the GPU: room for its error and fragmentation.
# The shipped 1.8B recipe runs at 78% of an H200 (110.2 GiB measured, 105.5 estimated: docs/benchmarks.md), so
# a split estimated at up to 80% takes the risk the recipe already takes.
MICRO_BATCH_MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class FastPath:
    """The speed choices of a run, each with its reason (``reasons[name]``); made once by resolve(), never edited."""

    attn_implementation: str
    compile: str
    compile_mode: str
    fused_loss: str
    reasons: dict
    precision: str = "bf16"
    residual_dtype: str = "float32"
    experts_implementation: str | None = None  # MoE only: transformers' experts backend


@dataclass(frozen=True)
class MicroBatchChoice:
    """``batch.micro_batch``'s split of a step's samples, and the loss auto chose at that micro-batch."""

    micro_batch: int
    accumulation: int
    reason: str
    fused_loss: str  # the fast path's, or auto's choice at the chosen micro-batch
    loss_reason: str | None = None  # set where auto's loss reason changed with the micro-batch


def choose_fast_path(
    model_section,
    config,
    micro_batch: int,
    seq_len: int,
    cuda: bool,
    gpu_memory: int | None,
    planning: bool = False,
    bf16: bool = True,
    loss_section=None,
    experts_autocast: bool = True,
    world_size: int = 1,
) -> FastPath:
    """Resolve ``model.attn_implementation``, ``model.compile``, ``loss.implementation`` (``loss_section``: the
    recipe's ``loss:``, default its defaults) and the other ``auto`` choices for this run (``cuda``: it trains on a
    CUDA GPU of ``gpu_memory`` bytes; ``planning``: a dry run, which may be on a CPU login node planning a GPU run;
    ``bf16``: the run trains in bf16, ``training.bf16``; ``experts_autocast``: ``kernels.experts_autocast``; ``world_size``: the launch's processes)."""
    loss_section = loss_section if loss_section is not None else LossSection()
    reasons = {}
    try:
        attn, reasons["attn_implementation"] = resolve_attn_implementation(config, model_section.attn_implementation)
    except ValueError:
        if not planning:
            raise
        attn, reasons["attn_implementation"] = model_section.attn_implementation, "set in the recipe"
    if attn == "flex_attention" and not cuda and not planning:  # else a NotImplementedError at the first backward
        raise RecipeError(
            "model.attn_implementation=flex_attention needs a CUDA GPU: flex attention has no backward "
            "on a CPU; use sdpa, eager or auto"
        )
    if model_section.document_mask and attn == PACKED_SDPA:
        if model_section.attn_implementation != "auto":
            raise RecipeError(
                "model.document_mask=true needs a mask, which model.attn_implementation=sdpa_packed does "
                "not take: use sdpa, flash_attention_2 or auto"
            )
        flex = supports_flex_attention(config)
        if (cuda or planning) and flex:
            attn, reasons["attn_implementation"] = (
                "flex_attention",
                (
                    "document_mask: flex attention with a block mask, which skips the blocks across documents "
                    f"({FLEX_SPEEDUP}: docs/benchmarks.md)"
                ),
            )
        else:  # flex attention has no backward on a CPU
            why = "no GPU" if flex else f"transformers' {config.model_type} has no flex attention"
            attn, reasons["attn_implementation"] = (
                "sdpa",
                (f"document_mask: SDPA with the block-causal mask transformers builds from the position ids ({why})"),
            )

    compile_scope = model_section.compile
    if compile_scope == "auto":
        compile_scope = "decoder" if cuda or planning else "none"
        reasons["compile"] = (
            "auto: the base model as one graph (LM head and loss outside)"
            if compile_scope != "none"
            else "auto: no CUDA GPU (compiling on a CPU costs more than it saves)"
        )
    else:
        reasons["compile"] = "set in the recipe"
        if compile_scope == "layers" and is_moe(config):
            reasons["compile"] += (
                ": compiled per layer, an MoE shape trained at 64% of the tokens/s it reached "
                "compiled whole (auto's decoder; one H200) and kept 18% more memory "
                "(docs/benchmarks.md § Mixture-of-Experts)"
            )
            logger.warning("model.compile=layers on an MoE model: %s", reasons["compile"])

    gpu_memory = planned_gpu_memory(gpu_memory, planning)  # None: no GPU, so no compiled or liger loss for auto
    try:
        loss, reasons["fused_loss"] = choose_fused_loss(
            loss_section.implementation, logits_bytes(micro_batch, seq_len, config), gpu_memory
        )
    except RuntimeError:
        if not planning:
            raise
        loss, reasons["fused_loss"] = loss_section.implementation, "set in the recipe (not available on this machine)"
    if loss_section.z_loss and loss == "none":
        raise RecipeError(
            "loss.z_loss needs the project's loss (loss.implementation compiled, liger, chunked or "
            "auto): HF's own loss (none) has no z-loss term"
        )
    if planning and not cuda and loss_section.implementation == "auto":
        reasons["fused_loss"] += f" (planned for a GPU of {ASSUMED_GPU_MEMORY / 1e9:.0f} GB)"
    precision, reasons["precision"] = choose_precision(model_section, config, planning)
    residual, reasons["residual_dtype"] = choose_residual_dtype(model_section.residual_dtype, cuda or planning, bf16)
    experts, reasons["experts_implementation"] = choose_experts(
        model_section.experts_implementation,
        config,
        cuda or planning,
        load=not planning,
        experts_autocast=experts_autocast,
        bf16=bf16,
        world_size=world_size,
    )
    return FastPath(attn, compile_scope, model_section.compile_mode, loss, reasons, precision, residual, experts)


def choose_experts(
    requested: str,
    config,
    gpu: bool,
    load: bool = True,
    experts_autocast: bool = True,
    bf16: bool = True,
    world_size: int = 1,
) -> tuple[str | None, str]:
    """``model.experts_implementation`` for an MoE shape (None for a dense one; a setting there is refused).
    auto, on a GPU: sonicmoe where what was measured holds (one process training in bf16 with
    ``kernels.experts_autocast``: our experts function on the weights' bf16 copy; Qwen3-MoE's experts; the local
    copy of the kernel, never the Hub's) and its kernels load, else grouped_mm, one grouped matmul over all experts in place of
    transformers' loop (6.3x its tokens/s on an H100, the ~1B MoE shape); eager on a CPU. Measured on one H200
    (results/moe_sonic_2026-11-30, same call): sonicmoe 1.15x grouped_mm's tokens/s at best_small_moe's shape and
    1.07x at the 856M one. A plan for another machine (not ``load``) assumes grouped_mm: whether sonic-moe loads
    there is not known here.
    sonicmoe is loaded here when ``load``, so that a missing part is one error before anything is written."""
    if not is_moe(config):
        if requested != "auto":
            raise RecipeError(
                f"model.experts_implementation={requested}: {config.model_type} is a dense model (no "
                "routed experts); leave it at auto"
            )
        return None, "dense model: no experts"
    if requested == "sonicmoe":
        # what would stop it mid-run: inputs that are not 16-bit (on any machine, a plan too), then no kernel here
        # (checked last: loading it can fetch it from the Hub)
        for failed, why in (
            (not bf16, "its kernels take 16-bit inputs, and training.bf16 is off"),
            (not experts_autocast, "kernels.experts_autocast is off (the kernels take the weights' bf16 copy)"),
        ):
            if failed:
                raise RecipeError(f"model.experts_implementation=sonicmoe: {why}; use grouped_mm (or auto)")
        if load and (missing := sonicmoe_missing()):
            raise RecipeError(f"model.experts_implementation=sonicmoe: {missing}; use grouped_mm (or auto)")
        unmeasured = [
            why
            for failed, why in (
                (world_size > 1, "measured on one GPU only"),
                (config.model_type not in SONIC_MODEL_TYPES, f"checked on {', '.join(SONIC_MODEL_TYPES)} experts only"),
            )
            if failed
        ]
        return requested, "; ".join(["set in the recipe", *unmeasured])
    if requested != "auto":
        return requested, "set in the recipe"
    if not gpu:
        return "eager", "auto: no CUDA GPU (transformers' loop over the experts)"
    grouped = "auto: one grouped matmul over all experts (6.3x transformers' loop on an H100)"
    if not load:
        return "grouped_mm", f"{grouped}; sonicmoe where it loads on the machine that runs the plan"
    passed_over = (
        next(
            (
                why
                for failed, why in (
                    (not bf16, "it runs under bf16 autocast, and training.bf16 is off"),
                    (not experts_autocast, "kernels.experts_autocast is off"),
                    (world_size > 1, "measured on one GPU only"),
                    (
                        config.model_type not in SONIC_MODEL_TYPES,
                        f"checked on {', '.join(SONIC_MODEL_TYPES)} experts only",
                    ),
                    (
                        not sonic_local_copy(),
                        "no local sonic_moe package (benchmarks/sonic_kit.sh; auto takes no Hub kernel)",
                    ),
                )
                if failed
            ),
            None,
        )
        or sonicmoe_missing()
    )
    if passed_over:
        return "grouped_mm", f"{grouped}; not sonicmoe: {passed_over}"
    return "sonicmoe", "auto: sonic-moe's fused kernels load here (1.07-1.15x grouped_mm's tokens/s on one H200)"


def sonicmoe_missing() -> str | None:
    """What stops the sonicmoe experts backend from loading here (None: it loaded): models/sonic.py's loader, which
    takes a local ``sonic_moe`` package (benchmarks/sonic_kit.sh) where there is one, else transformers' (the
    ``kernels`` package and kernels-community/sonic-moe from the Hub), on a Hopper or newer GPU."""
    from hfpretrain.models.sonic import load_sonicmoe

    try:
        load_sonicmoe()
    except ImportError as error:
        return str(error)
    return None


def speedups_of(fast: FastPath, recipe, sequence_parallel: bool = False) -> Speedups:
    """What models/speedups.py does to this run's model: the fast path's choices and the recipe's ``kernels:``
    (``sequence_parallel``: the layout's, whose first layer sees more positions than the others: static shapes)."""
    m, k = recipe.model, recipe.kernels
    return Speedups(
        precision=fast.precision,
        fp8_emulate=m.fp8_emulate,
        fp8_fast_accum=m.fp8_fast_accum,
        residual_dtype=fast.residual_dtype,
        compile=fast.compile,
        compile_backend=m.compile_backend,
        compile_mode=fast.compile_mode,
        rope_table=k.rope_table,
        bias_gelu=k.bias_gelu,
        gelu_sigmoid=k.gelu_sigmoid,
        experts_implementation=fast.experts_implementation,
        experts_autocast=k.experts_autocast,
        experts_gather=k.experts_gather,
        static_shapes=sequence_parallel,
    )


def choose_residual_dtype(requested: str, gpu: bool, bf16: bool = True) -> tuple[str, str]:
    """``model.residual_dtype`` (models/residual.py): auto is bfloat16 on a GPU training in bf16, where the
    stream's bytes are a quarter of a small model's step; float32 on a CPU (the reference numerics the
    golden-loss test pins) and without bf16 (fp16 or fp32 training: no bf16 autocast for the hook to act in)."""
    if not bf16:
        why = (
            "the stream keeps its dtype"
            if requested == "auto"
            else f"model.residual_dtype={requested} has no bf16 autocast to act in"
        )
        return "float32", f"training.bf16 is off: {why}"
    if requested != "auto":
        return requested, "set in the recipe"
    if gpu:
        return "bfloat16", "auto: the stream between layers in bf16 under autocast (half the bytes of fp32)"
    return "float32", "auto: no CUDA GPU (the fp32 stream that fp32 embeddings give)"


def choose_precision(model_section, config, planning: bool = False) -> tuple[str, str]:
    precision, why = _choose_precision(model_section, config, planning)
    if precision.startswith("fp8") and is_moe(config):  # most of an MoE layer's FLOPs are not nn.Linear
        why += "; the routed experts' grouped matmuls stay bf16 (float8 converts the nn.Linear layers only)"
    return precision, why


def _choose_precision(model_section, config, planning: bool = False) -> tuple[str, str]:
    unsupported = fp8_unsupported(config)
    if model_section.precision != "auto":
        if unsupported and model_section.precision != "bf16":  # refused in the plan too, not only at conversion
            raise RecipeError(
                f"model.precision={model_section.precision}: {unsupported}: use a Qwen3/Llama config or bf16"
            )
        return model_section.precision, "set in the recipe"
    if unsupported:
        return "bf16", f"auto: {unsupported}"
    if config.hidden_size < FP8_MIN_HIDDEN:
        return "bf16", f"auto: hidden size {config.hidden_size} < {FP8_MIN_HIDDEN}, where fp8 pays little"
    try:
        check_fp8_available("fp8", model_section.fp8_emulate)
    except ValueError as err:
        if planning:  # a login node planning a GPU run
            return "fp8", f"auto: hidden size {config.hidden_size} >= {FP8_MIN_HIDDEN} (if the GPU has float8)"
        return "bf16", f"auto: bf16 here, as {err}"
    where = "emulated (model.fp8_emulate)" if model_section.fp8_emulate else "on a float8 GPU"
    return "fp8", f"auto: hidden size {config.hidden_size} >= {FP8_MIN_HIDDEN}, {where}"


def planned_gpu_memory(gpu_memory: int | None, planning: bool = False) -> int | None:
    """The memory the choices plan with: the GPU's (``gpu_memory``); a dry run without one plans for
    ASSUMED_GPU_MEMORY; None: no GPU."""
    if gpu_memory is not None:
        return gpu_memory
    return ASSUMED_GPU_MEMORY if planning else None


def logits_bytes(micro_batch: int, seq_len: int, config) -> int:
    return micro_batch * seq_len * config.vocab_size * 2  # one micro-batch's bf16 logits


def choose_micro_batch(
    requested: str,
    requested_loss: str,
    fast: FastPath,
    config,
    micro_batch: int,
    accumulation: int,
    seq_len: int,
    memory_bytes,
    gpu_memory: int | None,
    planning: bool = False,
    target_gpu: str | None = None,
) -> MicroBatchChoice:
    """``batch.micro_batch``'s split (``requested``; ``requested_loss``: ``loss.implementation``): with ``auto`` on
    a GPU (of ``gpu_memory`` bytes; None: none), the largest micro-batch that divides the step's ``micro_batch *
    accumulation`` samples (20 x 12 can become 24 x 10), no smaller than the recipe's, whose estimate
    ``memory_bytes(micro, accumulation, fused_loss)`` stays under MICRO_BATCH_MEMORY_SHARE of the GPU and whose loss
    implementation stays ``fast.fused_loss``; smaller than the recipe's only where the recipe's would not fit
    (_smaller_micro_batch). ``target_gpu`` (``context.gpu``): a dry
    run plans for that card's memory, as the context phase's fit check does."""
    recipe_split = f"{micro_batch} x {accumulation}"
    without_gpu = planning and gpu_memory is None
    gpu_memory = planned_gpu_memory(gpu_memory, planning)
    planned_for = f"{ASSUMED_GPU_MEMORY / 1e9:.0f} GB"
    if target_gpu is not None and without_gpu:
        gpu_memory, planned_for = card_memory_bytes(target_gpu), f"{canonical_gpu(target_gpu)}'s memory (context.gpu)"

    def keep(reason: str) -> MicroBatchChoice:
        return MicroBatchChoice(micro_batch, accumulation, reason, fast.fused_loss)

    if requested == "recipe":
        return keep(f"set in the recipe: {recipe_split}")
    if gpu_memory is None:
        return keep(f"auto: the recipe's {recipe_split} (no CUDA GPU)")
    samples = micro_batch * accumulation
    planned = f"; planned for a GPU of {planned_for}" if without_gpu else ""
    recipe_need = memory_bytes(micro_batch, accumulation, fast.fused_loss)
    if recipe_need > MICRO_BATCH_MEMORY_SHARE * gpu_memory:
        choice = _smaller_micro_batch(
            requested_loss,
            fast,
            config,
            micro_batch,
            accumulation,
            seq_len,
            memory_bytes,
            gpu_memory,
            recipe_need,
            on_this_gpu=not without_gpu,
        )
        return dataclasses.replace(choice, reason=choice.reason + planned)
    chosen, why_not = (micro_batch, accumulation), "no accumulation to fold"
    loss_reason = None  # auto's reason at the chosen micro-batch
    for micro in (m for m in range(micro_batch + 1, samples + 1) if samples % m == 0):
        accum = samples // micro
        loss, reason = fast.fused_loss, None  # a loss set in the recipe stays; auto's may change with the size
        if requested_loss == "auto":
            loss, reason = choose_fused_loss("auto", logits_bytes(micro, seq_len, config), gpu_memory)
        if loss != fast.fused_loss:
            why_not = f"at {micro} the loss would be {loss}, not {fast.fused_loss}"
            break
        need = memory_bytes(micro, accum, fast.fused_loss)
        if need > MICRO_BATCH_MEMORY_SHARE * gpu_memory:
            why_not = _over_budget(f"{micro} x {accum}", need, gpu_memory)
            break
        chosen, why_not, loss_reason = (micro, accum), "no accumulation left to fold", reason
    why_not += planned
    if chosen == (micro_batch, accumulation):
        return keep(f"auto: the recipe's {recipe_split} ({why_not})")
    return MicroBatchChoice(
        *chosen,
        (
            f"auto: {chosen[0]} x {chosen[1]} for the recipe's {recipe_split}, the same "
            f"{micro_batch * accumulation} samples per step in fewer, larger micro-batches "
            f"(larger: {why_not}; batch.micro_batch=recipe keeps the recipe's)"
        ),
        fast.fused_loss,
        loss_reason,
    )


def _over_budget(split: str, need: int, gpu_memory: int) -> str:
    return (
        f"{split} would take ~{need / 2**30:.1f} GiB, over {MICRO_BATCH_MEMORY_SHARE:.0%} of the GPU's "
        f"{gpu_memory / 2**30:.0f} GiB"
    )


def _smaller_micro_batch(
    requested_loss: str,
    fast: FastPath,
    config,
    micro_batch: int,
    accumulation: int,
    seq_len: int,
    memory_bytes,
    gpu_memory: int,
    recipe_need: int,
    on_this_gpu: bool = False,
) -> MicroBatchChoice:
    """The recipe's micro-batch would not fit this GPU (a recipe written for a 141 GB H200 on an 80 GB H100):
    the largest smaller split of the step's samples whose estimate fits, the loss re-chosen by ``auto`` at its size
    (so a size that would fit only with another loss than auto's is passed over). None fits: the recipe's, and the
    reason says so (the run may still fit: the share is a margin). ``on_this_gpu`` (not a plan for an assumed GPU):
    a RecipeError before any work when even micro-batch 1 is estimated over the GPU's whole memory (all experts'
    weights and optimizer states of an MoE, say): the estimator runs under the measured peaks, so that run would
    surely fail, after loading everything."""
    samples = micro_batch * accumulation
    over = _over_budget(f"the recipe's {micro_batch} x {accumulation}", recipe_need, gpu_memory)
    loss = fast.fused_loss
    for micro in (m for m in range(micro_batch - 1, 0, -1) if samples % m == 0):
        loss_reason = None
        if requested_loss == "auto":
            loss, loss_reason = choose_fused_loss("auto", logits_bytes(micro, seq_len, config), gpu_memory)
        if memory_bytes(micro, samples // micro, loss) <= MICRO_BATCH_MEMORY_SHARE * gpu_memory:
            return MicroBatchChoice(
                micro,
                samples // micro,
                f"auto: {micro} x {samples // micro}, the same {samples} samples per step in "
                f"smaller micro-batches ({over}; batch.micro_batch=recipe keeps it)",
                loss,
                loss_reason,
            )
    smallest = memory_bytes(1, samples, fast.fused_loss)
    if on_this_gpu and smallest > gpu_memory:
        raise RecipeError(
            f"this model does not fit the GPU: even micro-batch 1 x {seq_len} tokens would take "
            f"~{smallest / 2**30:.1f} GiB per GPU, over its {gpu_memory / 2**30:.0f} GiB: shard it over "
            "more GPUs (accelerate_configs/ fsdp2 or zero1), or a smaller model.config or seq_len"
        )
    return MicroBatchChoice(
        micro_batch,
        accumulation,
        f"auto: the recipe's {micro_batch} x {accumulation} ({over}, and no smaller split fits)",
        fast.fused_loss,
    )
