"""The run's ``TrainingArguments``, from the recipe's ``training`` section: defaults, the fields pretraining
forces, ``training_flops`` turned into ``max_steps``, and warmup-stable-decay lengths."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from pathlib import Path

import torch
from transformers import TrainingArguments

from hfpretrain.models import flops_per_token

from .config import CHECKPOINTING_NAMES, Recipe, RecipeError

logger = logging.getLogger("hfpretrain")

# Settings pretraining always wants, whatever the recipe says (see PretrainTrainer for why).
FORCED_ARGS = dict(ignore_data_skip=True, logging_nan_inf_filter=False, prediction_loss_only=True,
                   remove_unused_columns=False)

# logging_first_step: the first optimizer step's loss and gradient norm are logged (a run that starts wrong says so
# at once, not logging_steps later)
DEFAULT_ARGS = dict(output_dir="runs/default", report_to="none", save_strategy="steps", eval_strategy="steps",
                    logging_steps=10, logging_first_step=True, include_num_input_tokens_seen="no")


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


def launched_processes() -> int:
    """The processes of this launch: accelerate and torchrun set WORLD_SIZE; 1 without a launcher."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def missing_extras(args: TrainingArguments) -> list[str]:
    """One line for each optional package this run needs and this environment lacks (they are extras,
    so that a CPU user does not install DeepSpeed or W&B): said before the Trainer fails on it mid-start."""
    need = [(name, f"training.report_to={name}") for name in ("wandb", "tensorboard") if name in args.report_to]
    if args.deepspeed or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true":
        need.append(("deepspeed", "a DeepSpeed launch (accelerate config / ds_configs)"))
    modules = {"tensorboard": ("tensorboard", "tensorboardX")}
    return [f"{what} needs the {name} package: pip install 'hfpretrain[{name}]'" for name, what in need
            if not any(importlib.util.find_spec(m) for m in modules.get(name, (name,)))]


def _training_value(training: dict, key: str):
    field = TrainingArguments.__dataclass_fields__[key]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    value = training[key] if key in training else default
    return getattr(value, "value", value)  # enums (lr_scheduler_type) as their names


def resolve_max_steps(recipe: Recipe, config, seq_len: int, world: int) -> None:
    """``training_flops`` -> ``training.max_steps`` (in place) for ``world`` processes: the steps whose FLOPs come
    nearest the budget."""
    if recipe.training_flops is None:
        return
    t = recipe.training
    tokens_per_step = (int(_training_value(t, "per_device_train_batch_size"))
                       * int(_training_value(t, "gradient_accumulation_steps")) * world * seq_len)
    per_token = flops_per_token(config, seq_len).total
    budget, step_flops = recipe.training_flops, per_token * tokens_per_step
    if not budget == budget or budget in (float("inf"), float("-inf")) or budget < step_flops:
        what = "is not a number of FLOPs" if budget != budget or budget in (float("inf"), float("-inf")) else (
            "is not a budget (> 0)" if budget <= 0 else "is less than one optimizer step")
        raise RecipeError(f"training_flops={budget:.4g} {what}: one step costs {step_flops:.4g} FLOPs "
                          f"({per_token / 1e6:.1f}M FLOPs per token x {tokens_per_step:,} tokens per step); give a "
                          "budget of at least that, or set training.max_steps (and training_flops=null)")
    steps = max(1, round(budget / step_flops))
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


def activation_checkpointing(args: TrainingArguments) -> tuple[bool, dict]:
    """Whether activation checkpointing is on and its kwargs, under either transformers' name for them."""
    on = bool(getattr(args, "activation_checkpointing", False) or getattr(args, "gradient_checkpointing", False))
    kwargs = getattr(args, "activation_checkpointing_kwargs", None) or getattr(args, "gradient_checkpointing_kwargs", None)
    return on, kwargs if isinstance(kwargs, dict) else {}


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
    if isinstance(fields.get("lr_scheduler_kwargs"), dict):  # a name set to null (an override took it out) is unset
        fields["lr_scheduler_kwargs"] = {k: v for k, v in fields["lr_scheduler_kwargs"].items() if v is not None}
    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    for new, old in CHECKPOINTING_NAMES.items():
        if new in fields and new not in known:
            fields[old] = fields.pop(new)
    args = TrainingArguments(**fields)
    missing = missing_extras(args)
    if missing and not dry_run:
        raise RecipeError(missing[0])
    if not dry_run and launched_processes() == 1 and not args.use_cpu and torch.cuda.device_count() > 1:
        # Without a launcher the Trainer wraps the model in torch's DataParallel over every visible GPU: a batch
        # the plan did not count, slower than one GPU for these models, broken under torch.compile. One process
        # trains on one GPU (transformers' own switch, as it does for a model-parallel model).
        logger.warning("%d GPUs visible and no launcher: training on the first one alone (`accelerate launch "
                       "--num_processes %d scripts/pretrain.py ...` trains on all of them)", torch.cuda.device_count(),
                       torch.cuda.device_count())
        args._n_gpu = min(args.n_gpu, 1)
    kwargs = args.lr_scheduler_kwargs
    if isinstance(kwargs, dict) and "min_lr" in kwargs and "min_lr_rate" not in kwargs:
        # transformers turns min_lr into a rate through optimizer.defaults, which DeepSpeed's ZeRO
        # optimizer does not have (AttributeError at the first step): hand it the rate instead.
        args.lr_scheduler_kwargs = {**kwargs, "min_lr_rate": kwargs["min_lr"] / args.learning_rate}
        del args.lr_scheduler_kwargs["min_lr"]
    return args


def warn_long_warmup(args: TrainingArguments) -> None:
    """A warmup (warmup_steps; below 1, a ratio of max_steps, as warmup_ratio was) that lasts the whole run
    never reaches the peak learning rate: said at start (a training_flops budget or a shortened max_steps often
    does this)."""
    warmup = args.get_warmup_steps(args.max_steps)
    if warmup >= args.max_steps:
        ratio = getattr(args, "warmup_ratio", None)  # transformers < 5: a field of its own
        given = f"training.warmup_ratio={ratio}" if ratio and not args.warmup_steps else \
            f"training.warmup_steps={args.warmup_steps:g}"
        logger.warning("%s: %d warmup steps >= training.max_steps=%d: the learning rate never reaches "
                       "training.learning_rate=%g; shorten the warmup or train longer", given, warmup,
                       args.max_steps, args.learning_rate)


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
