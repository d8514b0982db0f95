"""What a run is, resolved from its recipe before any model is built: the data's manifest and tokenizer, the
model config, the TrainingArguments, the fast path and the plan (parameters, FLOPs, tokens, memory, time).
``--dry-run`` prints the plan; a recipe whose data is not tokenized yet is planned with stated assumptions
(``plan_without_data``)."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import asdict
from pathlib import Path

from transformers import AutoTokenizer, TrainingArguments

from hfpretrain.data.manifest import require_manifest, tokens_per_byte
from hfpretrain.data.mixture import (
    MixtureSchedule,
    combined_fingerprint,
    describe_mixture,
    load_sources,
    mixture_plan,
    resolve_phases,
)
from hfpretrain.data.order import attended_length, load_input_ids
from hfpretrain.data.tokenizer import tokenizer_sha256
from hfpretrain.models import (
    TrainingLayout,
    count_params,
    detect_peak_flops,
    device_name,
    estimate_memory,
    flops_per_token,
    load_config,
)
from hfpretrain.models.memory import GIB

from .arguments import (activation_checkpointing, launched_processes, resolve_max_steps, training_arguments,
                        warn_long_warmup, wsd_decay)
from .config import Recipe, RecipeError, recipe_to_dict
from .context import apply_context, check_fits, context_max_steps, fit_positions
from .fast_path import FastPath, choose_fast_path, choose_micro_batch
from .loss import loss_chunk_tokens
from .moe import apply_moe_section

logger = logging.getLogger("hfpretrain")

def launch_sharding(args: TrainingArguments) -> int:
    """The ZeRO stage this launch amounts to, for the memory estimate: FSDP's full sharding is stage 3;
    DeepSpeed is stage 1 (the stage of every ds_configs/ file)."""
    if args.fsdp or os.environ.get("ACCELERATE_USE_FSDP") == "true":
        return 3
    return 1 if args.deepspeed or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true" else 0


def launch_layout(args: TrainingArguments, world_size: int | None, zero_stage: int | None) -> tuple[int, int]:
    """(processes, ZeRO stage) of the launch planned: the given ones (a dry run for another launch), else this one's."""
    return world_size or args.world_size, zero_stage if zero_stage is not None else launch_sharding(args)

MAX_PASSES_WITHOUT_WARNING = 4  # beyond ~4 passes repeated tokens are worth much less (Muennighoff et al. 2023)


def run_memory(recipe: Recipe, config, args: TrainingArguments, seq_len: int, fast: FastPath, world: int, zero: int,
               micro_batch: int, accumulation: int):
    """The memory estimate per GPU (models/memory.py) of this run at ``micro_batch x accumulation``."""
    loss = fast.fused_loss
    checkpointed, checkpointing = activation_checkpointing(args)
    return estimate_memory(config, TrainingLayout(
        micro_batch, seq_len, n_gpus=world, zero_stage=zero, grad_checkpointing=checkpointed,
        checkpoint_every_n_layers=int(checkpointing.get("every_n_layers", 1)),
        checkpoint_offload=bool(checkpointing.get("offload", False)), document_mask=recipe.model.document_mask,
        attn_implementation=fast.attn_implementation, grad_accum=accumulation, compile=fast.compile,
        fused_loss=loss, fused_loss_chunk=loss_chunk_tokens(loss, micro_batch * seq_len, config.vocab_size,
                                                            config.hidden_size, recipe.model.loss_chunk_tokens,
                                                            recipe.model.liger_min_chunk_tokens),
        residual_bytes=2 if fast.residual_dtype == "bfloat16" else 4,
        experts_implementation=fast.experts_implementation or "grouped_mm",
        float8=fast.precision == "fp8"))  # choose_precision gives fp8 only to a model torchao converts


def choose_speed(recipe: Recipe, config, args: TrainingArguments, seq_len: int, world_size: int | None = None,
                 zero_stage: int | None = None, planning: bool = False) -> tuple[FastPath, TrainingArguments]:
    """The fast path for this run (training/fast_path.py) and the TrainingArguments with its micro-batch split."""
    fast = choose_fast_path(recipe.model, config, args.per_device_train_batch_size, seq_len, planning=planning,
                            bf16=bool(recipe.training.get("bf16")))
    world, zero = launch_layout(args, world_size, zero_stage)
    micro, accum = choose_micro_batch(
        recipe.model, fast, config, args.per_device_train_batch_size, args.gradient_accumulation_steps, seq_len,
        lambda micro, accum: run_memory(recipe, config, args, seq_len, fast, world, zero, micro, accum).total,
        planning=planning, target_gpu=recipe.context.gpu)
    if (micro, accum) != (args.per_device_train_batch_size, args.gradient_accumulation_steps):
        # made again, not changed in place: TrainingArguments fills DeepSpeed's batch settings when it is made
        args = training_arguments(recipe, planning, per_device_train_batch_size=micro,
                                  gradient_accumulation_steps=accum)
    return fast, args


def make_plan(recipe: Recipe, config, args: TrainingArguments, seq_len: int, fast: FastPath, manifest: dict,
              world_size: int | None = None, zero_stage: int | None = None, check_passes: bool = True) -> dict:
    world, zero = launch_layout(args, world_size, zero_stage)
    samples_per_step = args.per_device_train_batch_size * world * args.gradient_accumulation_steps
    tokens_per_step = samples_per_step * seq_len
    params = count_params(config)
    flops = flops_per_token(config, seq_len)
    peak = recipe.logging.peak_flops or detect_peak_flops(recipe.logging.dtype_for_peak)
    memory = run_memory(recipe, config, args, seq_len, fast, world, zero, args.per_device_train_batch_size,
                        args.gradient_accumulation_steps)
    total_tokens = tokens_per_step * args.max_steps
    train_blocks = int(manifest["train"]["blocks"])
    passes = args.max_steps * samples_per_step / train_blocks
    if check_passes and passes > MAX_PASSES_WITHOUT_WARNING:  # a mixture checks each of its sources instead
        logger.warning("this run reads its training data %.1f times (%d blocks, %d samples): repeated tokens "
                       "teach less; more data or a smaller budget is the usual fix", passes, train_blocks,
                       args.max_steps * samples_per_step)
    elif check_passes and passes > 1:
        logger.info("this run reads its training data %.2f times (%d blocks, %d samples)", passes, train_blocks,
                    args.max_steps * samples_per_step)
    plan = {
        "parameters": asdict(params), "seq_len": seq_len, "world_size": world,
        "zero_stage": zero, "samples_per_step": samples_per_step, "tokens_per_step": tokens_per_step,
        "micro_batch": args.per_device_train_batch_size, "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "max_steps": args.max_steps,
        "total_tokens": total_tokens, "flops_per_token": flops.total, "flops_per_token_causal": flops.causal,
        "flops_per_token_head": flops.head,
        "flops_formula": flops.formula, "total_flops": flops.total * total_tokens,
        "memory_per_gpu_gib": {k: v / GIB for k, v in asdict(memory).items()},
        "peak_flops_per_gpu": peak, "assumed_mfu": recipe.logging.assumed_mfu, "fast_path": asdict(fast),
        "device": device_name(), "train_blocks": train_blocks, "passes_over_data": passes,
        "shape": {k: getattr(config, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers",
                                                        "num_attention_heads", "vocab_size", "tie_word_embeddings")},
        "validation_tokens_per_byte": tokens_per_byte(manifest),  # None without the text's bytes: no bpb
        "validation_text_bytes": (manifest.get("validation") or {}).get("text_bytes"),
        "precision": fast.precision,
        # transformers' gradient checkpointing: each decoder layer's input kept, its activations recomputed
        "activation_checkpointing": checkpointing_plan(args),
        # fp8: MFU stays against the bf16 peak (comparable with every other figure); mfu_fp8 against fp8's
        "peak_flops_fp8_per_gpu": detect_peak_flops("fp8") if fast.precision != "bf16" else None,
    }
    if peak:
        plan["expected_hours"] = plan["total_flops"] / (peak * world * recipe.logging.assumed_mfu) / 3600
    return plan


def cuda_memory() -> int | None:
    """Total memory of the GPU this process trains on, in bytes; None on a CPU."""
    import torch

    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None


def checkpointing_plan(args: TrainingArguments) -> str:
    """What activation checkpointing does in this run, in words (the plan's ``activation_checkpointing``)."""
    on, kwargs = activation_checkpointing(args)
    if not on:
        return "off"
    every = int(kwargs.get("every_n_layers", 1))
    where = "every decoder layer" if every == 1 else f"decoder layers 0, {every}, {2 * every}, ..."
    return where + (", inputs offloaded to host memory" if kwargs.get("offload") else "")


def load_tokenizer(path: str):
    """AutoTokenizer, with a missing or unreadable tokenizer as one line (FileNotFoundError) naming it."""
    if not Path(path).exists() and (Path(path).is_absolute() or path.startswith(".") or path.count("/") > 1):
        raise FileNotFoundError(f"tokenizer {path} does not exist (data.path's tokenizer/ folder, or data.tokenizer)")
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(f"tokenizer {path}: cannot load it ({str(err).strip().splitlines()[0]})") from None


def tokenizer_hash(tokenizer) -> str | None:
    """sha256 of the backend tokenizer JSON, as the data pipeline records it in manifest.json."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return tokenizer_sha256(backend.to_str()) if backend is not None else None


def check_tokenizer(tokenizer, name: str, manifest: dict, data_path: str | Path) -> None:
    """An explicit data.tokenizer must be the one the data was tokenized with (manifest sha256); one with a
    different file but the same vocabulary as the data's tokenizer/ copy only warns."""
    recorded = manifest.get("tokenizer") or {}
    want, have = recorded.get("sha256"), tokenizer_hash(tokenizer)
    if not want or have == want:
        return
    copy = Path(data_path) / "tokenizer"
    try:
        same_vocab = copy.is_dir() and AutoTokenizer.from_pretrained(str(copy)).get_vocab() == tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - an unreadable copy proves nothing: treat as different
        same_vocab = False
    if same_vocab:
        logger.warning("data.tokenizer=%s is not the file %s was tokenized with (sha256 %s vs %s) but has the same "
                       "vocabulary: going on", name, data_path, (have or "?")[:12], want[:12])
        return
    raise ValueError(f"data.tokenizer={name} (sha256 {(have or '?')[:12]}, {len(tokenizer)} tokens) is not the tokenizer "
                     f"data.path={data_path} was tokenized with ({recorded.get('name_or_path')}, sha256 {want[:12]}, "
                     f"{recorded.get('vocab_size')} tokens): leave data.tokenizer unset to use the data's own "
                     "tokenizer/ copy, or tokenize the data with this tokenizer")


@dataclasses.dataclass
class RunSetup:
    """What a run is, resolved from its recipe before any model is built: enough for ``--dry-run``'s plan."""

    recipe: Recipe
    manifest: dict
    tokenizer: object
    config: object  # the model's PretrainedConfig
    seq_len: int
    args: TrainingArguments
    fast: FastPath
    plan: dict
    schedule: MixtureSchedule | None  # a weighted mixture in phases, or None for one data folder
    data_info: dict  # what each checkpoint's data.json records: a resume compares it


def setup_run(recipe: Recipe, dry_run: bool, world_size: int | None, zero_stage: int | None) -> RunSetup:
    """The data's manifest and tokenizer, the model config, TrainingArguments, the fast path and the plan."""
    manifest = require_manifest(recipe.data.path)
    tokenizer = load_tokenizer(recipe.data.tokenizer or str(Path(recipe.data.path) / "tokenizer"))
    if recipe.data.tokenizer:
        check_tokenizer(tokenizer, recipe.data.tokenizer, manifest, recipe.data.path)
    data_info = {"data_path": str(recipe.data.path), "fingerprint": manifest.get("fingerprint"),
                 "seq_len": int(manifest["seq_len"]), "tokenizer": recipe.data.tokenizer or "<data.path>/tokenizer",
                 "tokenizer_sha256": tokenizer_hash(tokenizer)}
    eos = manifest["tokenizer"]["eos_token"]
    tokenizer.eos_token = eos  # the end-of-text token the data was packed with, not a chat token
    if tokenizer.pad_token is None:
        tokenizer.pad_token = eos
    # With init_from the loaded model's own config is the plan's (parameters, FLOPs, MFU), not model.config's
    source = recipe.model.init_from or recipe.model.config
    if dry_run and recipe.context.seq_len and not (Path(source) / "config.json").is_file():
        # a context phase is planned before the run it extends has finished: model.config gives the shape
        source = _shape_before_init_from(recipe)
    config = load_config(source, dict(recipe.model.overrides), vocab_size=len(tokenizer))
    apply_moe_section(recipe.moe, config)
    # Only eos: a pad_token_id would become the embedding's padding_idx, freezing the end-of-text
    # row at zero although it is a real token of every packed block.
    config.eos_token_id = tokenizer.convert_tokens_to_ids(eos)
    config.pad_token_id = None
    seq_len = int(manifest["seq_len"])
    context = apply_context(recipe, config, seq_len, recipe.data.path)  # None: not a context-extension phase
    if context is None:
        fit_positions(config, seq_len, recipe.data.path)

    launched = launched_processes()
    resolve_max_steps(recipe, config, seq_len, world_size or launched)
    context_max_steps(recipe, seq_len, world_size or launched)
    args = training_arguments(recipe, dry_run)
    if recipe.training_flops is not None and not dry_run and args.world_size != launched:
        raise RecipeError(f"training_flops: max_steps was derived for WORLD_SIZE={launched} "
                          f"processes but the Trainer runs {args.world_size}: launch with accelerate or torchrun, or "
                          "set training.max_steps instead")
    fast, args = choose_speed(recipe, config, args, seq_len, world_size, zero_stage, planning=dry_run)
    warn_long_warmup(args)
    plan = make_plan(recipe, config, args, seq_len, fast, manifest, world_size, zero_stage,
                     check_passes=not recipe.data.sources)
    if context is not None:
        plan["context"] = {**context, "fits": check_fits(plan, recipe.context.gpu, cuda_memory(), planning=dry_run)}
    schedule = None
    if recipe.data.sources:  # a weighted mixture, in phases (data/mixture.py)
        sources = load_sources(recipe.data.sources, manifest, recipe.data.path, require_manifest)
        schedule = MixtureSchedule(sources, resolve_phases(recipe.data, args.max_steps), plan["samples_per_step"])
        plan["data"] = mixture_plan(schedule, seq_len, MAX_PASSES_WITHOUT_WARNING)
        plan["train_blocks"] = sum(s.train_blocks for s in sources.values())
        plan["passes_over_data"] = max(s["passes"] for s in plan["data"]["sources"].values())
        data_info.update(fingerprint=combined_fingerprint(schedule, manifest.get("fingerprint")),
                         mixture=describe_mixture(schedule))
        if recipe.data.decay_in_last_phase:
            plan["lr_schedule"] = wsd_decay(args, schedule.phases[-1].steps, "data.decay_in_last_phase")
    kwargs = args.lr_scheduler_kwargs if isinstance(args.lr_scheduler_kwargs, dict) else {}
    if "decay_ratio" in kwargs:  # ours, not get_wsd_schedule's: taken out, turned into num_decay_steps
        args.lr_scheduler_kwargs = {k: v for k, v in kwargs.items() if k != "decay_ratio"}
        if kwargs["decay_ratio"] is not None:  # null: an override took it out
            plan["lr_schedule"] = wsd_decay(args, max(1, round(kwargs["decay_ratio"] * args.max_steps)),
                                            "training.lr_scheduler_kwargs.decay_ratio")
    if recipe.model.document_mask:
        plan.update(attended_flops(config, plan, recipe.data.path, int(manifest["tokenizer"]["eos_token_id"])))
    data_info["samples_per_step"] = plan["samples_per_step"]
    return RunSetup(recipe, manifest, tokenizer, config, seq_len, args, fast, plan, schedule, data_info)


def attended_flops(config, plan: dict, data_path: str, eos_id: int) -> dict:
    """Under the document mask a token attends within its document only: the FLOPs per token that MFU and TFLOP/s
    count take the data's mean attended length (data/order.py) in the attention term instead of the block's (at
    16k, 0.39 of the block on the mix corpus). A mixture weighs its sources by the samples the run reads from each.
    Budgets (``training_flops``, studies) stay on the block's count, so that a FLOPs budget buys the same steps with
    the mask as without it."""
    sources = (plan.get("data") or {}).get("sources")
    parts = [(s["path"], s["samples"]) for s in sources.values() if s["samples"]] if sources else [(data_path, 1)]
    length = sum(w * attended_length(load_input_ids(p, "train"), eos_id) for p, w in parts) / sum(w for _, w in parts)
    return {"attended_length": length, "flops_per_token_attended": flops_per_token(config, length).total}


# ---- a dry run before the data exists ----

ASSUMED_SEQ_LEN = 2048  # what the recipes' data is tokenized with (recipes/*.yaml: --seq-len 2048)


def needs_assumed_data(recipe) -> bool:
    return not recipe.data.sources and not (Path(recipe.data.path) / "manifest.json").is_file()


def _tokenizer_vocab(name: str | None) -> tuple[int | None, str]:
    if not name:
        return None, "data.tokenizer is not set"
    try:
        from hfpretrain.data.tokenizer import load_tokenizer

        return len(load_tokenizer(name)), f"data.tokenizer {name}"
    except Exception as err:  # noqa: BLE001 - a plan goes on with the config's vocabulary
        return None, f"data.tokenizer {name} does not load ({str(err).splitlines()[0]})"


def _shape_before_init_from(recipe) -> str:
    """The shape a dry run plans a context phase with while ``model.init_from`` does not exist yet: model.config,
    which must then be set (its default, tiny, would plan another model without a word)."""
    default_config = next(f.default for f in dataclasses.fields(type(recipe.model)) if f.name == "config")
    if recipe.model.config == default_config:
        raise RecipeError(f"model.init_from={recipe.model.init_from} does not exist yet and model.config is not set: "
                          "a dry run plans the phase with model.config, the shape of the model init_from will hold "
                          "(e.g. model.config=qwen3_103m)")
    logger.warning("dry run: model.init_from=%s does not exist yet; planning with model.config=%s",
                   recipe.model.init_from, recipe.model.config)
    return recipe.model.config


def plan_without_data(recipe, world_size: int | None = None, zero_stage: int | None = None) -> dict:
    """``pretrain(..., dry_run=True)``'s result for a recipe whose data is not tokenized yet."""
    vocab, why = _tokenizer_vocab(recipe.data.tokenizer)
    # a context phase's model: init_from's once it exists; before, model.config describes its shape
    source = recipe.model.config
    if recipe.context.seq_len and recipe.model.init_from:
        exists = (Path(recipe.model.init_from) / "config.json").is_file()
        source = recipe.model.init_from if exists else _shape_before_init_from(recipe)
    config = load_config(source, dict(recipe.model.overrides), vocab_size=vocab)
    apply_moe_section(recipe.moe, config)
    seq_len = min(ASSUMED_SEQ_LEN, getattr(config, "max_position_embeddings", None) or ASSUMED_SEQ_LEN)
    context = None
    if recipe.context.seq_len:  # the phase's length is known without its data
        seq_len = recipe.context.seq_len
        context = apply_context(recipe, config, seq_len, recipe.data.path)
    world = world_size or launched_processes()
    resolve_max_steps(recipe, config, seq_len, world)
    context_max_steps(recipe, seq_len, world)
    args = training_arguments(recipe, dry_run=True)
    world = world_size or args.world_size
    train_blocks = args.max_steps * args.per_device_train_batch_size * world * args.gradient_accumulation_steps
    manifest = {"seq_len": seq_len, "train": {"blocks": train_blocks}}
    fast, args = choose_speed(recipe, config, args, seq_len, world_size, zero_stage, planning=True)
    warn_long_warmup(args)
    plan = make_plan(recipe, config, args, seq_len, fast, manifest, world_size, zero_stage)
    if context is not None:
        plan["context"] = {**context, "fits": check_fits(plan, recipe.context.gpu, cuda_memory(), planning=True)}
    vocab_note = (f"vocabulary {config.vocab_size:,} from {why.removeprefix('data.tokenizer ')}" if vocab
                  else f"vocabulary {config.vocab_size:,} of the model config {recipe.model.config} ({why})")
    plan["assumed"] = {
        "why": f"data.path {recipe.data.path} has no manifest.json (not tokenized yet)",
        "seq_len": seq_len, "vocab_size": config.vocab_size, "vocabulary": vocab_note,
        "train_blocks": f"{train_blocks:,}: exactly one pass over the training data",
        "validation_tokens_per_byte": None,
    }
    logger.warning("dry run without data: %s; assumed seq_len %d, %s, one pass over the training data "
                   "(%d blocks); tokenize the data (scripts/tokenize_pile.py --out %s) for the real figures",
                   plan["assumed"]["why"], seq_len, vocab_note, train_blocks, recipe.data.path)
    return {"recipe": recipe_to_dict(recipe), "plan": plan}
