"""``pretrain(recipe, overrides)``: recipe -> model + blocks + PretrainTrainer -> checkpoints and logs.

Read top to bottom: resolve the recipe, derive the plan (parameters, FLOPs, tokens, memory),
build the model, the data and the trainer, train, write the summary.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import sys
from contextlib import nullcontext
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed

from hfpretrain.data import load_blocks
from hfpretrain.data.manifest import require_manifest, tokens_per_byte
from hfpretrain.models import (TrainingLayout, build_model, count_params, detect_peak_flops, device_name,
                               estimate_memory, flops_per_token, load_config)
from hfpretrain.models.fp8 import check_fp8_available, convert_to_fp8
from hfpretrain.models.gelu import fuse_bias_gelu, use_sigmoid_gelu
from hfpretrain.models.memory import GIB
from hfpretrain.models.residual import cast_residual_stream, decoder_layers
from hfpretrain.models.rotary import tabulate_rotary
from hfpretrain.outdir import OutputBusyError, OutputLock

from transformers.trainer_callback import PrinterCallback, ProgressCallback

from .callbacks import (SIGTERM_RECEIVED, CompileCheckCallback, GradStatsCallback, JsonlLogCallback,
                        LineProgressCallback, MemoryCallback, PreemptionCallback, ProfilerCallback,
                        TelemetryProgressCallback, ThroughputCallback, WandbConfigCallback)
from .config import SDPA_BACKENDS, Recipe, RecipeError, load_recipe, recipe_to_dict, recipe_to_yaml
from .data import EvalBlocks, ResumableSampler, ShuffledBlocks, collate_blocks, install_worker_cleanup, load_input_ids
from .fast_path import FastPath, choose_fast_path, choose_micro_batch
from .lineage import WandbLineageCallback, lineage, write_lineage
from .mixture import (MixtureBlocks, MixtureLogCallback, MixtureSchedule, combined_fingerprint, describe_mixture,
                      load_sources, mixture_plan, resolve_phases)
from .loss import loss_chunk_tokens
from .model_card import write_model_card
from .per_set import per_set_bits_per_byte, per_set_losses
from .trainer import PretrainTrainer, last_complete_checkpoint
from .zero import deepspeed_tag

logger = logging.getLogger("hfpretrain")

# Settings pretraining always wants, whatever the recipe says (see PretrainTrainer for why).
FORCED_ARGS = dict(ignore_data_skip=True, logging_nan_inf_filter=False, prediction_loss_only=True,
                   remove_unused_columns=False)
DEFAULT_ARGS = dict(output_dir="runs/default", report_to="none", save_strategy="steps", eval_strategy="steps",
                    logging_steps=10, include_num_input_tokens_seen="no")


_wandb_dir = None  # the WANDB_DIR this module set, if any


def wandb_logged_in() -> bool:
    """An API key in the environment or from `wandb login` (~/.netrc): then W&B logs online."""
    import netrc

    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def missing_extras(args: TrainingArguments) -> list[str]:
    """One line for each optional package this run needs and this environment lacks (they are extras,
    so that a CPU user does not install DeepSpeed or W&B): said before the Trainer fails on it mid-start."""
    need = [(name, f"training.report_to={name}") for name in ("wandb", "tensorboard") if name in args.report_to]
    if args.deepspeed or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true":
        need.append(("deepspeed", "a DeepSpeed launch (accelerate config / ds_configs)"))
    modules = {"tensorboard": ("tensorboard", "tensorboardX")}
    return [f"{what} needs the {name} package: pip install 'hfpretrain[{name}]'" for name, what in need
            if not any(importlib.util.find_spec(m) for m in modules.get(name, (name,)))]


def resolve_max_steps(recipe: Recipe, config, seq_len: int, world: int) -> None:
    """``training_flops`` -> ``training.max_steps`` (in place) for ``world`` processes: the steps whose FLOPs come
    nearest the budget."""
    if recipe.training_flops is None:
        return
    t = recipe.training
    tokens_per_step = (int(_training_value(t, "per_device_train_batch_size"))
                       * int(_training_value(t, "gradient_accumulation_steps")) * world * seq_len)
    per_token = flops_per_token(config, seq_len).total
    steps = max(1, round(recipe.training_flops / (per_token * tokens_per_step)))
    given = t.get("max_steps")
    if given not in (None, -1) and int(given) != steps:
        raise RecipeError(f"training_flops={recipe.training_flops:.4g} means training.max_steps={steps} "
                          f"({per_token / 1e6:.1f}M FLOPs per token x {tokens_per_step:,} tokens per step), but "
                          f"training.max_steps={given} is set too: drop one (training_flops=null keeps max_steps, "
                          "e.g. to extend a run, or to resume a run's recipe.yaml on another number of GPUs)")
    t["max_steps"] = steps
    logger.info("training_flops %.4g: training.max_steps = %d (%.1fM FLOPs per token x %s tokens per step = "
                "%.4g FLOPs)", recipe.training_flops, steps, per_token / 1e6, f"{tokens_per_step:,}",
                per_token * tokens_per_step * steps)


def training_arguments(recipe: Recipe, dry_run: bool = False, **overrides) -> TrainingArguments:
    """The run's TrainingArguments: the recipe's ``training`` section over our defaults (``overrides`` over both)."""
    gpu = {"accelerator_config": {"non_blocking": True}} if torch.cuda.is_available() else {}
    # non_blocking (GPU): batch copies from pinned memory overlap the step before
    fields = {**DEFAULT_ARGS, **gpu, **recipe.training, **overrides, **FORCED_ARGS}
    if dry_run and not torch.cuda.is_available():
        fields.update(bf16=False, fp16=False, use_cpu=True)  # plan a GPU recipe from a CPU login node
    if "wandb" in str(fields.get("report_to")) and not dry_run:
        if not wandb_logged_in():
            os.environ.setdefault("WANDB_MODE", "offline")  # no key, no `wandb login`: log locally, never prompt
        # wandb/ in the run folder, not in whatever directory the run was started from (a user's WANDB_DIR wins;
        # ours follows each run of a study)
        global _wandb_dir
        if os.environ.get("WANDB_DIR") in (None, _wandb_dir):
            _wandb_dir = os.environ["WANDB_DIR"] = str(Path(fields.get("output_dir") or DEFAULT_ARGS["output_dir"]))
            Path(_wandb_dir).mkdir(parents=True, exist_ok=True)
    if fields.get("max_steps", -1) <= 0:
        raise ValueError("training.max_steps must be set (> 0): pretraining runs are counted in optimizer steps")
    fields.pop("resume_from_checkpoint", None)
    args = TrainingArguments(**fields)
    missing = missing_extras(args)
    if missing and not dry_run:
        raise RecipeError(missing[0])
    kwargs = args.lr_scheduler_kwargs
    if isinstance(kwargs, dict) and "min_lr" in kwargs and "min_lr_rate" not in kwargs:
        # transformers turns min_lr into a rate through optimizer.defaults, which DeepSpeed's ZeRO
        # optimizer does not have (AttributeError at the first step): hand it the rate instead.
        args.lr_scheduler_kwargs = {**kwargs, "min_lr_rate": kwargs["min_lr"] / args.learning_rate}
        del args.lr_scheduler_kwargs["min_lr"]
    return args


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
    return estimate_memory(config, TrainingLayout(
        micro_batch, seq_len, n_gpus=world, zero_stage=zero, grad_checkpointing=bool(args.gradient_checkpointing),
        attn_implementation=fast.attn_implementation, grad_accum=accumulation, compiled=fast.compile != "none",
        fused_loss=loss, fused_loss_chunk=loss_chunk_tokens(loss, micro_batch * seq_len, config.vocab_size,
                                                            config.hidden_size, recipe.model.loss_chunk_tokens,
                                                            recipe.model.liger_min_chunk_tokens),
        residual_bytes=2 if fast.residual_dtype == "bfloat16" else 4,
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
        planning=planning)
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
        # fp8: MFU stays against the bf16 peak (comparable with every other figure); mfu_fp8 against fp8's
        "peak_flops_fp8_per_gpu": detect_peak_flops("fp8") if fast.precision != "bf16" else None,
    }
    if peak:
        plan["expected_hours"] = plan["total_flops"] / (peak * world * recipe.logging.assumed_mfu) / 3600
    return plan


def compile_model(model, scope: str, backend: str = "inductor", mode: str = "default") -> int:
    """Compile in place (state-dict names unchanged) and return how many modules were compiled.

    ``decoder``: the base model (embeddings, layers, final norm), leaving the LM head and the
    fused loss outside, where liger's kernel must stay; ``layers``: each decoder layer (regional,
    one graph reused by all layers: the fastest compile); ``model``: everything.
    """
    if scope == "none":
        return 0
    # Dynamo's caches are per process and keyed by code, not by model: after 8 models of other
    # shapes (a study trains many in one process) it hits its recompile limit and silently runs
    # eager. Each run starts from a clean slate, as a fresh process would.
    torch._dynamo.reset()
    options = {"backend": backend, "mode": None if mode == "default" else mode}
    if scope in ("model", "decoder"):
        (model if scope == "model" else model.base_model).compile(**options)
        return 1
    try:
        blocks = decoder_layers(model)
    except ValueError as err:
        raise ValueError(f"model.compile=layers: {err}") from None
    for block in blocks:
        block.compile(**options)
    return len(blocks)


def sdpa_kernels(names: list[str]):
    """PyTorch SDPA kernels allowed, tried in the listed order (PyTorch's own order puts cuDNN
    last; on an H200 cuDNN first and flash first measured the same for the 1.8B shape)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    logger.info("sdpa kernels, in priority order: %s", list(names))
    return sdpa_kernel([getattr(SDPBackend, SDPA_BACKENDS[n]) for n in names], set_priority=True)


def load_tokenizer(path: str):
    """AutoTokenizer, with a missing or unreadable tokenizer as one line (FileNotFoundError) naming it."""
    if not Path(path).exists() and (Path(path).is_absolute() or path.startswith(".") or path.count("/") > 1):
        raise FileNotFoundError(f"tokenizer {path} does not exist (data.path's tokenizer/ folder, or data.tokenizer)")
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(f"tokenizer {path}: cannot load it ({str(err).strip().splitlines()[0]})") from None


def check_output_dir(output_dir: str) -> None:
    """One line (RecipeError) when ``output_dir`` cannot be created or written: a file in the way, a
    read-only mount, no permission. Checked before the model is built, not at the first save."""
    from hfpretrain.outdir import output_problem

    from .config import RecipeError

    problem = output_problem(output_dir)
    if problem:
        raise RecipeError(f"training.output_dir={output_dir}: {problem}")


def resolve_resume(value, output_dir: str) -> str | None:
    if value in (None, False, "", "none", "no", "false", "False"):
        return None
    if value in (True, "auto", "true", "True", "last"):
        return last_complete_checkpoint(output_dir)
    if not Path(value).is_dir():
        raise FileNotFoundError(f"training.resume_from_checkpoint={value} does not exist")
    from .trainer import NoCompleteCheckpointError, checkpoint_problem

    problem = checkpoint_problem(value)  # named explicitly: no fallback, one line naming the damaged file
    if problem:
        raise NoCompleteCheckpointError(f"training.resume_from_checkpoint={value}: {problem}")
    return str(value)


# What makes a checkpoint another run's (resume refuses it unless resume_mismatch=allow): the model, the data
# (manifest fingerprint, seq_len), the tokenizer, the global batch (samples per step), and these training
# fields. max_steps (extending a run), logging/eval/save cadence and output paths may differ, and so may the
# GPU count at the same global batch (a ZeRO-1 universal resume).
RESUME_TRAINING_KEYS = ("learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "seed", "data_seed")
BATCH_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps")  # for checkpoints without data.json
CHECKPOINT_DATA = "data.json"  # beside a checkpoint's recipe.yaml, written by PretrainTrainer._save_checkpoint


def tokenizer_hash(tokenizer) -> str | None:
    """sha256 of the backend tokenizer JSON, as the data pipeline records it in manifest.json."""
    from hfpretrain.data.tokenizer import tokenizer_sha256

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


def _training_value(training: dict, key: str):
    field = TrainingArguments.__dataclass_fields__[key]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    value = training[key] if key in training else default
    return getattr(value, "value", value)  # enums (lr_scheduler_type) as their names


def resume_differences(old: dict, new: dict, old_data: dict | None, new_data: dict) -> list[str]:
    """``section.key old → new`` for everything that makes ``old`` (a checkpoint's recipe.yaml, and its
    data.json when it has one) another run than ``new``."""
    diffs = []

    def compare(key, a, b):
        if a != b:
            diffs.append(f"{key} {a!r} → {b!r}")

    for key in ("config", "overrides"):
        compare(f"model.{key}", (old.get("model") or {}).get(key), new["model"][key])
    for key, default in (("document_mask", False), ("z_loss", 0.0)):  # what the model learns from (absent: off)
        compare(f"model.{key}", (old.get("model") or {}).get(key, default), new["model"].get(key, default))
    if old_data is None:  # saved before data.json existed: the recipe is all there is
        for key in ("path", "tokenizer"):
            compare(f"data.{key}", (old.get("data") or {}).get(key), new["data"][key])
    else:
        if old_data.get("fingerprint") != new_data["fingerprint"] and ("mixture" in old_data or "mixture" in new_data):
            diffs.append(f"data mixture ({old_data.get('mixture') or old_data.get('data_path')}) → "
                         f"({new_data.get('mixture') or new_data.get('data_path')})")
        elif old_data.get("fingerprint") != new_data["fingerprint"]:
            diffs.append(f"data (manifest fingerprint) {old_data.get('data_path')} {str(old_data.get('fingerprint'))[:8]} "
                         f"→ {new_data['data_path']} {str(new_data['fingerprint'])[:8]}")
        compare("data seq_len", old_data.get("seq_len"), new_data["seq_len"])
        compare("samples per step (global batch)", old_data.get("samples_per_step"), new_data["samples_per_step"])
        if old_data.get("tokenizer_sha256") != new_data["tokenizer_sha256"]:
            diffs.append(f"tokenizer {old_data.get('tokenizer')} {str(old_data.get('tokenizer_sha256'))[:8]} "
                         f"→ {new_data['tokenizer']} {str(new_data['tokenizer_sha256'])[:8]}")
    old_training, new_training = old.get("training") or {}, new["training"] or {}
    for key in RESUME_TRAINING_KEYS + (BATCH_KEYS if old_data is None else ()):
        compare(f"training.{key}", _training_value(old_training, key), _training_value(new_training, key))
    if isinstance(old.get("optimizer"), dict) and isinstance(new.get("optimizer"), dict):
        for key in sorted(set(old["optimizer"]) | set(new["optimizer"])):
            compare(f"optimizer.{key}", old["optimizer"].get(key), new["optimizer"].get(key))
    return diffs


def refuse_deepspeed_checkpoint(resume: str | None, deepspeed: bool) -> None:
    if resume and deepspeed_tag(resume) and not deepspeed:
        # Without DeepSpeed the Trainer finds no optimizer.pt there and would go on with a fresh optimizer.
        raise ValueError(f"{resume} was saved under DeepSpeed (optimizer states in its global_step*/ folder): "
                         "resume it with a DeepSpeed accelerate config (on another GPU count: "
                         "scripts/zero_to_universal.py, then accelerate_configs/zero1_universal.yaml)")


def check_resume(checkpoint: str, recipe: Recipe, data_info: dict, max_steps: int) -> None:
    """Refuse to resume another run's checkpoint (``resume_mismatch=allow`` resumes it with a warning), and
    say so when the checkpoint leaves nothing to train."""
    from omegaconf import OmegaConf

    folder = Path(checkpoint)
    diffs = []
    if not (folder / "recipe.yaml").is_file():
        logger.warning("%s has no recipe.yaml (not saved by this project?): cannot check that it is this run's", folder)
    else:
        try:
            old = OmegaConf.to_container(OmegaConf.load(folder / "recipe.yaml"), resolve=True)
            old_data = (json.loads((folder / CHECKPOINT_DATA).read_text())
                        if (folder / CHECKPOINT_DATA).is_file() else None)
            if not isinstance(old, dict) or not isinstance(old_data, (dict, type(None))):
                raise ValueError("not a mapping")
        except Exception as e:  # noqa: BLE001 - one line naming the files
            diffs = [f"its recipe.yaml/{CHECKPOINT_DATA} cannot be read ({type(e).__name__}: "
                     f"{(str(e).splitlines() or [''])[0]})"]
        else:
            diffs = resume_differences(old, recipe_to_dict(recipe), old_data, data_info)
        if diffs and recipe.resume_mismatch == "error":
            raise ValueError(f"{folder} is from a different run: {'; '.join(diffs)}. Use another training.output_dir "
                             "for a new run, or set resume_mismatch=allow to resume this checkpoint anyway")
        if diffs:
            logger.warning("resuming %s although it is from a different run (resume_mismatch=allow): %s",
                           folder, "; ".join(diffs))
    state = folder / "trainer_state.json"
    try:
        step = int(json.loads(state.read_text()).get("global_step", 0)) if state.is_file() else None
    except (ValueError, TypeError):
        step = None
    if step is not None and step >= max_steps:
        logger.warning("%s is at step %d and training.max_steps=%d: NOTHING WILL BE TRAINED (0 steps); final/ and "
                       "the summary are that checkpoint's. Raise training.max_steps to train on", folder, step, max_steps)


def wsd_decay(args: TrainingArguments, decay_steps: int, source: str) -> dict:
    """warmup_stable_decay with ``decay_steps`` of decay, set from ``source`` (data.decay_in_last_phase: the last
    phase's steps; lr_scheduler_kwargs.decay_ratio: that share of max_steps). The schedule's plan entry."""
    warmup = args.get_warmup_steps(args.max_steps)
    if warmup + decay_steps > args.max_steps:
        raise ValueError(f"{source}: {warmup} warmup steps + {decay_steps} decay steps "
                         f"> training.max_steps={args.max_steps}: shorten the warmup or the decay")
    kwargs = args.lr_scheduler_kwargs if isinstance(args.lr_scheduler_kwargs, dict) else {}
    args.lr_scheduler_kwargs = {**kwargs, "num_decay_steps": decay_steps}
    return {"type": "warmup_stable_decay", "set_by": source, "warmup_steps": warmup,
            "stable_steps": args.max_steps - warmup - decay_steps, "num_decay_steps": decay_steps,
            "decay_starts_at_step": args.max_steps - decay_steps, **args.lr_scheduler_kwargs}


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


@dataclasses.dataclass
class RunLogs:
    """The callbacks ``pretrain`` reads back after training (the summary, the final export, teardown)."""

    jsonl: JsonlLogCallback
    throughput: ThroughputCallback
    preemption: PreemptionCallback
    mixture: MixtureLogCallback | None
    wandb_lineage: WandbLineageCallback | None


def pretrain(recipe_path: str | Path | None, overrides: list[str] | None = None, dry_run: bool = False,
             world_size: int | None = None, zero_stage: int | None = None) -> dict:
    """Train (or with ``dry_run`` only plan; ``world_size``/``zero_stage`` then describe the launch
    being planned, e.g. 8 GPUs with ZeRO-1, instead of the current process)."""
    recipe = load_recipe(recipe_path, overrides)
    if recipe.model.init_from and recipe.model.overrides:
        raise RecipeError(f"model.overrides {dict(recipe.model.overrides)} do not apply to model.init_from="
                          f"{recipe.model.init_from} (its weights define the model): remove them")
    if dry_run:
        from .dry_run import needs_assumed_data, plan_without_data

        if needs_assumed_data(recipe):  # not tokenized yet: plan with stated assumptions
            return plan_without_data(recipe, world_size, zero_stage)
    else:
        check_fp8_available(recipe.model.precision, recipe.model.fp8_emulate)  # before any work
    run = setup_run(recipe, dry_run, world_size if dry_run else None, zero_stage if dry_run else None)
    if dry_run:
        return {"recipe": recipe_to_dict(recipe), "plan": run.plan}
    check_output_dir(run.args.output_dir)  # before the work: a run that cannot save is lost
    lock = hold_run_lock(run.args)
    try:
        return train_run(run)
    finally:
        lock.release()


RUN_LOCK = ".run.lock"


def hold_run_lock(args: TrainingArguments) -> OutputLock:
    """One run per output_dir: two would overwrite each other's checkpoints and resume from each other's. The
    first process takes the lock and tells the others, so that a refused launch stops on every rank (the others
    would otherwise wait at their first collective for a rank that is gone)."""
    out = args.output_dir
    lock = OutputLock(Path(out) / RUN_LOCK, f"training.output_dir={out} is in use by another training run",
                      "wait for it to finish, or choose another training.output_dir")
    problem = None
    if args.process_index == 0:
        try:
            lock.acquire()
        except OutputBusyError as e:
            problem = str(e)
    if args.world_size > 1 and torch.distributed.is_initialized():
        box = [problem]
        torch.distributed.broadcast_object_list(box, src=0)
        problem = box[0]
    if problem:
        raise OutputBusyError(problem)
    return lock


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
    config = load_config(recipe.model.init_from or recipe.model.config, dict(recipe.model.overrides),
                         vocab_size=len(tokenizer))
    # Only eos: a pad_token_id would become the embedding's padding_idx, freezing the end-of-text
    # row at zero although it is a real token of every packed block.
    config.eos_token_id = tokenizer.convert_tokens_to_ids(eos)
    config.pad_token_id = None
    seq_len = int(manifest["seq_len"])

    launched = int(os.environ.get("WORLD_SIZE", "1"))
    resolve_max_steps(recipe, config, seq_len, world_size or launched)
    args = training_arguments(recipe, dry_run)
    if recipe.training_flops is not None and not dry_run and args.world_size != launched:
        raise RecipeError(f"training_flops: max_steps was derived for WORLD_SIZE={launched} "
                          f"processes but the Trainer runs {args.world_size}: launch with accelerate or torchrun, or "
                          "set training.max_steps instead")
    fast, args = choose_speed(recipe, config, args, seq_len, world_size, zero_stage, planning=dry_run)
    plan = make_plan(recipe, config, args, seq_len, fast, manifest, world_size, zero_stage,
                     check_passes=not recipe.data.sources)
    schedule = None
    if recipe.data.sources:  # a weighted mixture, in phases (training/mixture.py)
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
    data_info["samples_per_step"] = plan["samples_per_step"]
    return RunSetup(recipe, manifest, tokenizer, config, seq_len, args, fast, plan, schedule, data_info)


def train_run(run: RunSetup) -> dict:
    """Build the model, the data and the trainer; train; evaluate on the final set; export final/; summarise."""
    recipe, args, plan, seq_len = run.recipe, run.args, run.plan, run.seq_len
    data_seed = args.data_seed or args.seed
    record = lineage(recipe.data.path, run.manifest, recipe.data.tokenizer or str(Path(recipe.data.path) / "tokenizer"),
                     run.data_info["tokenizer_sha256"], seq_len, plan["samples_per_step"], args.max_steps, data_seed,
                     run.schedule)
    run.data_info["lineage"] = record  # in each checkpoint's data.json (a resume compares the keys above it)
    # Before anything is written to output_dir: is its checkpoint this run's?
    resume = resolve_resume(recipe.training.get("resume_from_checkpoint"), args.output_dir)
    refuse_deepspeed_checkpoint(resume, bool(args.deepspeed) or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true")
    if resume:
        check_resume(resume, recipe, run.data_info, args.max_steps)

    set_seed(args.seed)
    model, n_fp8, n_compiled = build_run_model(run)
    train_length = args.max_steps * plan["samples_per_step"]
    if run.schedule is None:
        train_blocks = ShuffledBlocks(load_input_ids(recipe.data.path, "train"), train_length, data_seed)
    else:
        train_blocks = MixtureBlocks([load_input_ids(s.path, "train") for s in run.schedule.sources.values()],
                                     run.schedule, data_seed)
    val_blocks = load_input_ids(recipe.data.path, "validation")
    eval_blocks = EvalBlocks(val_blocks, recipe.evaluation.eval_tokens // seq_len)
    final_tokens = recipe.evaluation.final_eval_tokens
    final_blocks = EvalBlocks(val_blocks, len(val_blocks) if final_tokens is None else final_tokens // seq_len)

    out = Path(args.output_dir)
    if args.process_index == 0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "recipe.yaml").write_text(recipe_to_yaml(recipe))
        write_lineage(out, record)
    trainer, logs = build_trainer(run, model, train_blocks, eval_blocks, train_length, record, n_compiled)
    refuse_deepspeed_checkpoint(resume, trainer.is_deepspeed_enabled)
    if resume:
        logger.info("resuming from %s", resume)
    if args.dataloader_num_workers > 0:
        install_worker_cleanup()
    attention_kernels = sdpa_kernels(recipe.model.sdpa_backends) if torch.cuda.is_available() else nullcontext()
    try:
        # torch.compile traces inside train() (and evaluate()), so both see the same kernels and inductor settings
        with attention_kernels, torch._inductor.config.patch(dict(recipe.model.inductor_options)):
            result = trainer.train(resume_from_checkpoint=resume)  # its train_loss: the whole run's (trainer.log)
            trainer.check_finite()  # the last step's loss and gradient norm
            final_eval = final_evaluation(trainer, run, final_blocks, len(eval_blocks))
        summary = {"train": result.metrics, "final_eval": final_eval, "global_step": trainer.state.global_step,
                   "end_to_end": getattr(logs.throughput, "end_to_end", {}),
                   "skipped_steps": trainer.skipped_before + trainer.skipped_steps,  # earlier sessions' included
                   "loss_impl": run.fast.fused_loss, "compiled_modules": n_compiled, "fp8_modules": n_fp8,
                   "plan": plan}
        if logs.mixture:
            summary["data"] = logs.mixture.figures(trainer.state.global_step)
        if trainer.state.global_step >= args.max_steps:
            trainer.save_model(str(out / "final"))
            if args.process_index == 0:
                write_lineage(out / "final", record)
                write_model_card(out / "final", run.config, plan, summary, recipe, run.manifest)
                if logs.wandb_lineage:
                    logs.wandb_lineage.log_model(out / "final", aliases=["final", f"step-{trainer.state.global_step}"])
        if args.process_index == 0:
            tmp = out / "summary.json.tmp"  # whole or absent: a study's other workers read it while it is written
            tmp.write_text(json.dumps(summary, indent=2, default=str))
            os.replace(tmp, out / "summary.json")
        logs.jsonl.write("summary", **summary)
    finally:  # a failed run too: its log file closed, the process's SIGTERM handler put back
        logs.jsonl.close()
        logs.preemption.restore()
    if "wandb" in args.report_to and args.process_index == 0:
        import wandb

        if wandb.run is not None:
            wandb.finish()  # this run's records and artifacts complete (a study trains the next in this process)
        # wandb keeps the settings of its first run in the process (its WANDB_DIR above all): reset them, so the
        # next run of a study logs into its own folder
        wandb.teardown()
    # A rank that exits while another still writes final/ aborted in gloo's teardown
    # ("terminate called without an active exception", SIGABRT, seen in CI under FSDP2).
    trainer.accelerator.wait_for_everyone()
    return summary


def build_run_model(run: RunSetup):
    """The model (built from its config, or ``init_from``'s weights), fp8-converted and compiled as the fast path
    says: ``(model, fp8 modules, compiled modules)``."""
    fast = run.fast
    for what in ("compile", "fused_loss", "precision", "residual_dtype"):
        logger.info("%s: %s (%s)", what, getattr(fast, what), fast.reasons[what])
    logger.info("micro-batch: %d x %d accumulation (%s)", run.args.per_device_train_batch_size,
                run.args.gradient_accumulation_steps, fast.reasons["micro_batch"])
    if run.recipe.model.init_from:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(run.recipe.model.init_from)
    else:
        model = build_model(run.config, attn_implementation=fast.attn_implementation)
    # Trainer.train() aligns config.pad_token_id with the tokenizer (for generation), so a checkpoint
    # reloaded with from_pretrained gets padding_idx = end-of-text; never train with that frozen row.
    model.get_input_embeddings().padding_idx = None
    # The same alignment done here, now that the embedding exists: the Trainer then finds nothing to change and
    # does not warn about it at every run (save_model leaves pad_token_id out of the export again).
    generation = getattr(model, "generation_config", None)
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        value = getattr(run.tokenizer, name)
        if value is not None:
            setattr(model.config, name, value)
            if generation is not None:
                setattr(generation, name, value)
    n_fp8 = convert_to_fp8(model, fast.precision, run.recipe.model.fp8_emulate,  # before compile: it traces them
                           run.recipe.model.fp8_fast_accum)
    cast_residual_stream(model, fast.residual_dtype)  # before compile too: a hook it traces
    # Compiled whole, the rotary embedding is inside the graph, where its cos/sin would be recomputed in every
    # layer's kernels (HFPRETRAIN_ROPE_TABLE=0 keeps transformers' forward, for A/B runs).
    if (fast.compile in ("decoder", "model") and os.environ.get("HFPRETRAIN_ROPE_TABLE", "1") != "0"
            and tabulate_rotary(model, run.seq_len)):
        logger.info("rotary cos/sin read from a table (models/rotary.py)")
    # Compiled, GPT-2's c_fc bias gradient is summed in GELU's backward kernel instead of a pass of its own
    # (HFPRETRAIN_BIAS_GELU=0 keeps transformers' MLP, for A/B runs).
    if fast.compile != "none" and os.environ.get("HFPRETRAIN_BIAS_GELU", "1") != "0":
        if n_mlp := fuse_bias_gelu(model):
            logger.info("MLP c_fc + GELU as one function, c_fc's bias gradient summed in GELU's backward, in %d "
                        "layers (models/gelu.py)", n_mlp)
    # Compiled, tanh would be libdevice's accurate tanhf per element, forward and backward
    # (HFPRETRAIN_GELU_SIGMOID=0 keeps transformers' module, for A/B runs).
    if fast.compile != "none" and os.environ.get("HFPRETRAIN_GELU_SIGMOID", "1") != "0":
        if n_gelu := use_sigmoid_gelu(model):
            logger.info("GELU (tanh approximation) computed as x * sigmoid(2u) in %d modules (models/gelu.py)", n_gelu)
    n_compiled = compile_model(model, fast.compile, run.recipe.model.compile_backend, fast.compile_mode)
    return model, n_fp8, n_compiled


def build_trainer(run: RunSetup, model, train_blocks, eval_blocks, train_length: int, record: dict,
                  n_compiled: int) -> tuple[PretrainTrainer, RunLogs]:
    """PretrainTrainer with the run's callbacks, in the order they must run (telemetry, then the log)."""
    recipe, args, plan = run.recipe, run.args, run.plan
    out = Path(args.output_dir)
    jsonl = JsonlLogCallback(out / recipe.logging.jsonl, {"recipe": recipe_to_dict(recipe), "plan": plan,
                                                           "loss_impl": run.fast.fused_loss,
                                                           "compiled_modules": n_compiled, "lineage": record})
    throughput = ThroughputCallback(plan["tokens_per_step"], plan["flops_per_token"], plan["peak_flops_per_gpu"],
                                    args.world_size, plan.get("peak_flops_fp8_per_gpu"))
    grad_stats = GradStatsCallback(jsonl, recipe.logging.grad_stats_interval)
    preemption = PreemptionCallback()
    callbacks = [throughput, MemoryCallback(), grad_stats, jsonl, preemption,
                 ProfilerCallback(out / "profile", recipe.logging.profile_steps, recipe.logging.nvtx)]
    mixture_log = MixtureLogCallback(run.schedule, run.seq_len) if run.schedule is not None else None
    if mixture_log:
        callbacks.insert(0, mixture_log)  # before the JSONL log and wandb: tokens seen per source
    if recipe.evaluation.lm_eval_task:
        from hfpretrain.eval.callback import LmEvalCallback  # eval sits after training: import only on request

        lm_eval_cb = LmEvalCallback(run.tokenizer, every_n_steps=args.eval_steps or args.save_steps,
                                    task=recipe.evaluation.lm_eval_task, limit=recipe.evaluation.lm_eval_limit)
        callbacks.append(lm_eval_cb)

    eos_id = run.config.eos_token_id
    collator = partial(collate_blocks, eos_id=eos_id) if recipe.model.document_mask else collate_blocks
    trainer = PretrainTrainer(
        model=model, args=args, train_dataset=train_blocks, eval_dataset=eval_blocks, data_collator=collator,
        processing_class=run.tokenizer, callbacks=callbacks,
        train_sampler=ResumableSampler(train_length), samples_per_step=plan["samples_per_step"],
        loss_impl=run.fast.fused_loss, loss_chunk_tokens=recipe.model.loss_chunk_tokens,
        liger_min_chunk_tokens=recipe.model.liger_min_chunk_tokens, nan_policy=recipe.nan_policy,
        max_skipped_steps=recipe.max_skipped_steps, max_skipped_fraction=recipe.max_skipped_fraction,
        z_loss=recipe.model.z_loss,
        compile_backend=recipe.model.compile_backend, compile_mode=run.fast.compile_mode,
        decay_embeddings=recipe.model.decay_embeddings, recipe_yaml=recipe_to_yaml(recipe),
        train_blocks=len(train_blocks.blocks) if run.schedule is None else None,
        tokens_per_byte=plan["validation_tokens_per_byte"],
        optimizer_section=recipe.optimizer,
    )
    trainer.grad_stats = grad_stats
    if trainer.is_deepspeed_enabled and recipe.logging.grad_stats_interval:
        # DeepSpeed reduces and clips the gradients inside its engine: per-layer statistics would log nothing
        raise RecipeError("logging.grad_stats_interval is not supported under DeepSpeed (it owns the gradients): "
                          "set it to 0, or use DDP/FSDP2 for per-layer gradient statistics")
    if recipe.evaluation.lm_eval_task:
        lm_eval_cb.attach(trainer)  # its scores then go through trainer.log, beside the loss
    # a progress bar on a terminal; one line per logging step in a log file or with disable_tqdm
    bar = trainer.pop_callback(ProgressCallback)
    if bar and sys.stderr.isatty():
        trainer.add_callback(TelemetryProgressCallback())
    elif bar or trainer.pop_callback(PrinterCallback):
        trainer.add_callback(LineProgressCallback())
    trainer.add_callback(CompileCheckCallback(n_compiled))
    if "wandb" in args.report_to and args.process_index == 0:  # after transformers' WandbCallback starts the run
        trainer.add_callback(WandbConfigCallback({"recipe": recipe_to_dict(recipe), "plan": plan}))
    wandb_lineage = None
    if "wandb" in args.report_to and recipe.logging.wandb_artifacts != "none" and args.process_index == 0:
        # added last: runs after transformers' WandbCallback has started the W&B run
        wandb_lineage = WandbLineageCallback(record, out, recipe.logging.wandb_artifacts,
                                             recipe.logging.wandb_checkpoint_artifacts)
        trainer.add_callback(wandb_lineage)
    trainer.data_info = run.data_info  # written into each checkpoint (data.json)
    return trainer, RunLogs(jsonl, throughput, preemption, mixture_log, wandb_lineage)


def final_evaluation(trainer: PretrainTrainer, run: RunSetup, final_blocks: EvalBlocks, n_eval_blocks: int) -> dict:
    """The last step's validation loss and bits per byte on the final set (all validation blocks by default),
    and per validation set with ``evaluation.per_set``. Not after a SIGTERM: the grace period is short, and on the
    GPU an evaluation after a preemption hung (docs/benchmarks.md)."""
    recipe, args = run.recipe, run.args
    if args.eval_strategy == "no" or SIGTERM_RECEIVED.is_set():
        return {}
    last = next((h for h in reversed(trainer.state.log_history) if "eval_loss" in h), None)
    if last and last.get("step") == trainer.state.global_step and len(final_blocks) == n_eval_blocks:
        final_eval = dict(last)
    else:
        final_eval = trainer.evaluate(eval_dataset=final_blocks, metric_key_prefix="final")
        final_eval = {k.replace("final_", "eval_", 1): v for k, v in final_eval.items()}
    final_eval["eval_tokens"] = len(final_blocks) * run.seq_len
    if recipe.evaluation.per_set:
        per_set = per_set_losses(trainer, load_blocks(recipe.data.path, "validation"), len(final_blocks),
                                 run.manifest.get("sets") or [], run.config.eos_token_id,
                                 args.per_device_eval_batch_size, recipe.model.document_mask)
        final_eval["eval_loss_per_set"] = {k: v["loss"] for k, v in per_set.items()}
        final_eval["eval_tokens_per_set"] = {k: v["tokens"] for k, v in per_set.items()}
        final_eval["eval_bpb_per_set"] = per_set_bits_per_byte(final_eval["eval_loss_per_set"],
                                                               run.manifest.get("validation") or {})
        if not final_eval["eval_bpb_per_set"]:
            logger.warning("%s was tokenized before the manifest counted each set's text bytes: the loss "
                           "per set is in nats only (tokenize again for bits per byte per set)", recipe.data.path)
    return final_eval


def shutdown_distributed() -> None:
    """End of a launched process: close the process group explicitly (gloo aborts in its destructor otherwise)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
