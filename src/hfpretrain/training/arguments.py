"""The run's ``TrainingArguments``, from the recipe's ``training`` section: defaults, the fields pretraining
forces, the one ``max_steps`` (from ``training.max_steps``, ``training_flops`` or ``context.tokens``), and
warmup-stable-decay lengths. resolve() builds the arguments once, with every value final."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import logging
import os
from pathlib import Path
from types import SimpleNamespace

from transformers import TrainingArguments

from hfpretrain.models import flops_per_token

from .config import CHECKPOINTING_NAMES, Recipe, RecipeError
from .machine import Machine

logger = logging.getLogger("hfpretrain")

# Settings pretraining always wants, whatever the recipe says (see PretrainTrainer for why).
FORCED_ARGS = dict(
    ignore_data_skip=True, logging_nan_inf_filter=False, prediction_loss_only=True, remove_unused_columns=False
)

# logging_first_step: the first optimizer step's loss and gradient norm are logged (a run that starts wrong says so
# at once, not logging_steps later)
DEFAULT_ARGS = dict(
    output_dir="runs/default",
    report_to="none",
    save_strategy="steps",
    eval_strategy="steps",
    logging_steps=10,
    logging_first_step=True,
    include_num_input_tokens_seen="no",
)


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


def missing_extras(args: TrainingArguments, engine: str = "ddp") -> list[str]:
    """One line for each optional package this run needs and this environment lacks (they are extras,
    so that a CPU user does not install DeepSpeed or W&B): said before the Trainer fails on it mid-start."""
    need = [(name, f"training.report_to={name}") for name in ("wandb", "tensorboard") if name in args.report_to]
    if args.deepspeed or engine == "deepspeed":
        need.append(("deepspeed", "a DeepSpeed launch (accelerate config / ds_configs)"))
    modules = {"tensorboard": ("tensorboard", "tensorboardX")}
    return [
        f"{what} needs the {name} package: pip install 'hfpretrain[{name}]'"
        for name, what in need
        if not any(importlib.util.find_spec(m) for m in modules.get(name, (name,)))
    ]


def _training_value(training: dict, key: str):
    field = TrainingArguments.__dataclass_fields__[key]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    value = training[key] if key in training else default
    return getattr(value, "value", value)  # enums (lr_scheduler_type) as their names


def max_steps(recipe: Recipe, config, seq_len: int, world: int) -> tuple[int, str]:
    """The run's optimizer steps and where they come from, for ``world`` processes: ``training.max_steps``, or the
    steps whose FLOPs come nearest ``training_flops``, or whose tokens come nearest ``context.tokens``; a
    ``training.max_steps`` beside either must agree with it."""
    t = recipe.training
    given = t.get("max_steps")
    per_step = (
        int(_training_value(t, "per_device_train_batch_size"))
        * int(_training_value(t, "gradient_accumulation_steps"))
        * world
        * seq_len
    )
    if recipe.training_flops is not None:
        per_token = flops_per_token(config, seq_len).total
        budget, step_flops = recipe.training_flops, per_token * per_step
        if not budget == budget or budget in (float("inf"), float("-inf")) or budget < step_flops:
            what = (
                "is not a number of FLOPs"
                if budget != budget or budget in (float("inf"), float("-inf"))
                else ("is not a budget (> 0)" if budget <= 0 else "is less than one optimizer step")
            )
            raise RecipeError(
                f"training_flops={budget:.4g} {what}: one step costs {step_flops:.4g} FLOPs "
                f"({per_token / 1e6:.1f}M FLOPs per token x {per_step:,} tokens per step); give a "
                "budget of at least that, or set training.max_steps (and training_flops=null)"
            )
        steps = max(1, round(budget / step_flops))
        if given not in (None, -1) and int(given) != steps:
            raise RecipeError(
                f"training_flops={recipe.training_flops:.4g} means training.max_steps={steps} "
                f"({per_token / 1e6:.1f}M FLOPs per token x {per_step:,} tokens per step), but "
                f"training.max_steps={given} is set too: drop one (training.max_steps=null lets the "
                "budget decide; training_flops=null keeps max_steps, e.g. to extend a run)"
            )
        logger.info(
            "training_flops %.4g: training.max_steps = %d (%.1fM FLOPs per token x %s tokens per step = %.4g FLOPs)",
            budget,
            steps,
            per_token / 1e6,
            f"{per_step:,}",
            step_flops * steps,
        )
        return steps, f"training_flops={budget:.4g}"
    tokens = recipe.context.tokens
    if tokens is not None:
        if tokens < per_step:
            raise RecipeError(
                f"context.tokens={tokens:.4g} is less than one optimizer step ({per_step:,} tokens): give at least that"
            )
        steps = max(1, round(tokens / per_step))
        if given not in (None, -1) and int(given) != steps:
            raise RecipeError(
                f"context.tokens={tokens:.4g} means training.max_steps={steps} ({per_step:,} tokens "
                f"per step), but training.max_steps={given} is set too: drop one "
                "(training.max_steps=null lets context.tokens decide)"
            )
        logger.info("context.tokens %.4g: training.max_steps = %d (%s tokens per step)", tokens, steps, f"{per_step:,}")
        return steps, f"context.tokens={tokens:.4g}"
    if given is None or int(given) <= 0:
        raise ValueError("training.max_steps must be set (> 0): pretraining runs are counted in optimizer steps")
    return int(given), "training.max_steps"


def activation_checkpointing(args: TrainingArguments | dict) -> tuple[bool, dict]:
    """Whether activation checkpointing is on and its kwargs, under either transformers' name for them, in the
    TrainingArguments or in the keyword arguments they are made from."""
    get = args.get if isinstance(args, dict) else lambda name, default=None: getattr(args, name, default)
    on = bool(get("activation_checkpointing", False) or get("gradient_checkpointing", False))
    kwargs = get("activation_checkpointing_kwargs", None) or get("gradient_checkpointing_kwargs", None)
    return on, kwargs if isinstance(kwargs, dict) else {}


def training_fields(recipe: Recipe, machine: Machine) -> dict:
    """The keyword arguments of the run's TrainingArguments before resolve() fills in ``max_steps``, the batch split
    and the schedule's lengths: the recipe's ``training`` section over our defaults, under the forced settings."""
    gpu = {"accelerator_config": {"non_blocking": True}} if machine.cuda else {}
    # non_blocking (GPU): batch copies from pinned memory overlap the step before
    # a deep copy: TrainingArguments edits nested mappings (fsdp_config) in place, which would edit the recipe
    fields = {**DEFAULT_ARGS, **gpu, **copy.deepcopy(recipe.training), **FORCED_ARGS}
    # a collective that hangs ends at the process group's timeout: parallel.timeout_s unless the recipe sets its own
    fields.setdefault("ddp_timeout", int(recipe.parallel.timeout_s))
    if recipe.optimizer.name != "muon":  # optimizer.name is the one selector; Muon's optimizer is ours (optim.py)
        fields["optim"] = recipe.optimizer.name
    if machine.planning and not machine.cuda:
        fields.update(bf16=False, fp16=False, use_cpu=True)  # plan a GPU recipe from a CPU login node
    fields.pop("resume_from_checkpoint", None)
    kwargs = fields.get("lr_scheduler_kwargs")
    if isinstance(kwargs, dict):  # a name set to null (an override took it out) is unset
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if "min_lr" in kwargs and "min_lr_rate" not in kwargs:
            # transformers turns min_lr into a rate through optimizer.defaults, which DeepSpeed's ZeRO
            # optimizer does not have (AttributeError at the first step): hand it the rate instead.
            kwargs["min_lr_rate"] = kwargs.pop("min_lr") / float(_training_value(fields, "learning_rate"))
        fields["lr_scheduler_kwargs"] = kwargs
    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    for new, old in CHECKPOINTING_NAMES.items():
        if new in fields and new not in known:
            fields[old] = fields.pop(new)
    return fields


def training_arguments(fields: dict, machine: Machine) -> TrainingArguments:
    """The run's TrainingArguments, made once from the resolved ``fields``; an optional package the run needs
    and this environment lacks is one RecipeError (not in a dry run)."""
    args = TrainingArguments(**fields)
    missing = missing_extras(args, machine.engine)
    if missing and not machine.planning:
        raise RecipeError(missing[0])
    if not machine.planning and machine.launched == 1 and not args.use_cpu and machine.gpu_count > 1:
        # Without a launcher the Trainer wraps the model in torch's DataParallel over every visible GPU: a batch
        # the plan did not count, slower than one GPU for these models, broken under torch.compile. One process
        # trains on one GPU (transformers' own switch, as it does for a model-parallel model; it has no public one).
        logger.warning(
            "%d GPUs visible and no launcher: training on the first one alone (`accelerate launch "
            "--num_processes %d scripts/pretrain.py ...` trains on all of them)",
            machine.gpu_count,
            machine.gpu_count,
        )
        args._n_gpu = min(args.n_gpu, 1)
    return args


def prepare_wandb(args: TrainingArguments) -> None:
    """A run that reports to W&B: without a key or `wandb login` it logs locally (never prompts), into wandb/ in
    the run folder, not whatever directory the run was started from (a user's WANDB_DIR wins; ours follows each
    run of a study). W&B reads only its environment variables for these."""
    global _wandb_dir
    if "wandb" not in args.report_to:
        return
    if not wandb_logged_in():
        os.environ.setdefault("WANDB_MODE", "offline")
    if os.environ.get("WANDB_DIR") in (None, _wandb_dir):
        _wandb_dir = os.environ["WANDB_DIR"] = str(Path(args.output_dir))
        Path(_wandb_dir).mkdir(parents=True, exist_ok=True)


def warmup_steps(fields: dict, steps: int) -> int:
    """The warmup of ``steps`` steps as TrainingArguments.get_warmup_steps counts it (warmup_steps below 1: a ratio),
    before the arguments exist."""
    return TrainingArguments.get_warmup_steps(
        SimpleNamespace(warmup_steps=_training_value(fields, "warmup_steps")), steps
    )


def warn_long_warmup(args: TrainingArguments) -> None:
    """A warmup (warmup_steps; below 1, a ratio of max_steps, as warmup_ratio was) that lasts the whole run
    never reaches the peak learning rate: said at start (a training_flops budget or a shortened max_steps often
    does this)."""
    warmup = args.get_warmup_steps(args.max_steps)
    if warmup >= args.max_steps:
        ratio = getattr(args, "warmup_ratio", None)  # transformers < 5: a field of its own
        given = (
            f"training.warmup_ratio={ratio}"
            if ratio and not args.warmup_steps
            else f"training.warmup_steps={args.warmup_steps:g}"
        )
        logger.warning(
            "%s: %d warmup steps >= training.max_steps=%d: the learning rate never reaches "
            "training.learning_rate=%g; shorten the warmup or train longer",
            given,
            warmup,
            args.max_steps,
            args.learning_rate,
        )


def wsd_decay(fields: dict, steps: int, decay_steps: int, source: str) -> tuple[dict, dict]:
    """warmup_stable_decay with ``decay_steps`` of decay, set from ``source`` (data.decay_in_last_phase: the last
    phase's steps; lr_scheduler_kwargs.decay_ratio: that share of max_steps): ``(lr_scheduler_kwargs, the plan's
    lr_schedule entry)``."""
    warmup = warmup_steps(fields, steps)
    if warmup + decay_steps > steps:
        raise ValueError(
            f"{source}: {warmup} warmup steps + {decay_steps} decay steps "
            f"> training.max_steps={steps}: shorten the warmup or the decay"
        )
    kwargs = fields.get("lr_scheduler_kwargs") if isinstance(fields.get("lr_scheduler_kwargs"), dict) else {}
    kwargs = {**kwargs, "num_decay_steps": decay_steps}
    return kwargs, {
        "type": "warmup_stable_decay",
        "set_by": source,
        "warmup_steps": warmup,
        "stable_steps": steps - warmup - decay_steps,
        "num_decay_steps": decay_steps,
        "decay_starts_at_step": steps - decay_steps,
        **kwargs,
    }
