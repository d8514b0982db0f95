"""Resuming: which checkpoint (``training.resume_from_checkpoint``), and a refusal when it is another run's
(model, data, tokenizer, global batch, optimisation settings), unless ``resume_mismatch=allow``. A checkpoint
holds the recipe as written (``recipe.yaml``), the data's record (``data.json``) and the resolved run
(``resolved.yaml``); the new run's are compared with them."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from omegaconf import OmegaConf
from transformers import TrainingArguments

from .arguments import _training_value
from .checkpoints import (
    SHARDED_OPTIMIZER_DIR,
    NoCompleteCheckpointError,
    checkpoint_problem,
    deepspeed_tag,
    last_complete_checkpoint,
    saved_under_fsdp,
)
from .config import MoeSection, OptimizerSection, Recipe, RecipeError, migrate_recipe_dict, recipe_to_dict
from .resolve import RESOLVED_FILE, ResolvedRun
from .reshard import WHOLE_COPY_DIR, fsdp_sharded, zero_ranks

logger = logging.getLogger("hfpretrain")


def resolve_resume(value, output_dir: str) -> str | None:
    if value in (None, False, "", "none", "no", "false", "False"):
        return None
    if value in (True, "auto", "true", "True", "last"):
        return last_complete_checkpoint(output_dir)
    if not Path(value).is_dir():
        raise FileNotFoundError(f"training.resume_from_checkpoint={value} does not exist")
    problem = checkpoint_problem(value)  # named explicitly: no fallback, one line naming the damaged file
    if problem:
        raise NoCompleteCheckpointError(f"training.resume_from_checkpoint={value}: {problem}")
    return str(value)


# What makes a checkpoint another run's (resume refuses it unless resume_mismatch=allow): the model, the data
# (manifest fingerprint, seq_len), the tokenizer, the global batch (samples per step), and these training
# fields: every optimisation setting the result depends on (the schedule and its warmup, the optimizer and its
# hyperparameters, gradient clipping: none of them is in the optimizer's or scheduler's saved state, so a
# changed one would silently apply from the resumed step on). max_steps (extending a run), logging/eval/save
# cadence and output paths may differ, and so may the GPU count at the same global batch (a ZeRO-1 universal
# resume).
# (The optimizer itself is optimizer.name, compared with the rest of the optimizer section.)
RESUME_TRAINING_KEYS = (
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "warmup_ratio",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "optim_args",
    "optim_target_modules",
    "label_smoothing_factor",
    "seed",
    "data_seed",
)

BATCH_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps")  # for checkpoints without data.json

CHECKPOINT_DATA = "data.json"  # beside a checkpoint's recipe.yaml, written by PretrainTrainer._save_checkpoint


def resume_differences(old: dict, new: dict, old_data: dict | None, new_data: dict) -> list[str]:
    """``section.key old → new`` for everything that makes ``old`` (a checkpoint's recipe.yaml, and its
    data.json when it has one) another run than ``new``."""
    diffs = []

    def compare(key, a, b):
        if a != b:
            diffs.append(f"{key} {a!r} → {b!r}")

    for key in ("config", "overrides"):
        compare(f"model.{key}", (old.get("model") or {}).get(key), new["model"][key])
    # what the model learns from (absent: off)
    for key, default in (("model.document_mask", False), ("loss.z_loss", 0.0)):
        section, name = key.split(".")
        compare(key, (old.get(section) or {}).get(name, default), (new.get(section) or {}).get(name, default))
    # a context phase's positions: its RoPE is in the config made at start, not in the checkpoint's weights
    for key, default in (
        ("seq_len", None),
        ("from_seq_len", None),
        ("rope", "keep"),
        ("rope_theta", None),
        ("yarn_factor", None),
    ):
        compare(
            f"context.{key}", (old.get("context") or {}).get(key, default), (new.get("context") or {}).get(key, default)
        )
    if old_data is None:  # saved before data.json existed: the recipe is all there is
        for key in ("path", "tokenizer"):
            compare(f"data.{key}", (old.get("data") or {}).get(key), new["data"][key])
    else:
        if old_data.get("fingerprint") != new_data["fingerprint"] and ("mixture" in old_data or "mixture" in new_data):
            diffs.append(
                f"data mixture ({old_data.get('mixture') or old_data.get('data_path')}) → "
                f"({new_data.get('mixture') or new_data.get('data_path')})"
            )
        elif old_data.get("fingerprint") != new_data["fingerprint"]:
            diffs.append(
                f"data (manifest fingerprint) {old_data.get('data_path')} {str(old_data.get('fingerprint'))[:8]} "
                f"→ {new_data['data_path']} {str(new_data['fingerprint'])[:8]}"
            )
        compare("data seq_len", old_data.get("seq_len"), new_data["seq_len"])
        compare("samples per step (global batch)", old_data.get("samples_per_step"), new_data["samples_per_step"])
        if old_data.get("tokenizer_sha256") != new_data["tokenizer_sha256"]:
            diffs.append(
                f"tokenizer {old_data.get('tokenizer')} {str(old_data.get('tokenizer_sha256'))[:8]} "
                f"→ {new_data['tokenizer']} {str(new_data['tokenizer_sha256'])[:8]}"
            )
    old_training, new_training = old.get("training") or {}, new["training"] or {}
    for key in RESUME_TRAINING_KEYS + (BATCH_KEYS if old_data is None else ()):
        if key in TrainingArguments.__dataclass_fields__:  # warmup_ratio: transformers < 5 only
            compare(f"training.{key}", _training_value(old_training, key), _training_value(new_training, key))
    # the experts' balancing (absent: a checkpoint from before the section, whose defaults it ran with)
    for key in ("aux_loss_coef", "aux_loss_scope", "bias_update_rate"):
        default = getattr(MoeSection, key)
        compare(f"moe.{key}", (old.get("moe") or {}).get(key, default), (new.get("moe") or {}).get(key, default))
    # the optimizer and its settings, decay_embeddings (which matrices decay) among them; a key absent from an older
    # checkpoint's recipe.yaml is its default, which that run trained with
    defaults = {f.name: f.default for f in dataclasses.fields(OptimizerSection)}
    old_optimizer, new_optimizer = old.get("optimizer") or {}, new.get("optimizer") or {}
    for key in sorted(set(old_optimizer) | set(new_optimizer)):
        compare(
            f"optimizer.{key}", old_optimizer.get(key, defaults.get(key)), new_optimizer.get(key, defaults.get(key))
        )
    return diffs


def refuse_other_optimizer_layout(
    resume: str | None, tp: int = 1, sharded_engine: bool = False, deepspeed: bool = False, fsdp: bool | None = False
) -> None:
    """A checkpoint's optimizer states in a form this run cannot read, in one line: DeepSpeed's (its ``global_step*/``
    folder) without DeepSpeed, where the Trainer finds no optimizer.pt and would go on with a fresh optimizer; a
    tensor-parallel run's (``optimizer_sharded/``, read back at any tp degree or none) under DeepSpeed or FSDP
    without tp (FSDP2 beside tp reads them: tests/training/test_parallel.py); and
    any other checkpoint's under tensor parallelism (``optimizer.pt`` is keyed by parameter order, whole tensors:
    the Trainer would load it into the shards); an FSDP checkpoint under DeepSpeed, or without FSDP when it is not
    sharded state dicts (those are read whole), and a checkpoint under FSDP with neither FSDP's shards nor
    ``optimizer.pt`` (read whole and sharded in place) (``fsdp`` None: not known yet, not checked)."""
    if not resume:
        return
    tag = deepspeed_tag(resume)
    saved_fsdp = saved_under_fsdp(resume)
    # sharded state dicts resume without FSDP too, read whole once (reshard.whole_copy_if_fsdp), but not into
    # DeepSpeed's engine, and FULL_STATE_DICT's files (another format) not at all
    if saved_fsdp and fsdp is False and (deepspeed or not fsdp_sharded(resume)):
        raise RecipeError(
            f"{resume} was saved under FSDP (its weights in pytorch_model_fsdp*): resume "
            "it with an FSDP accelerate config (accelerate_configs/*fsdp2*.yaml; torch's distributed checkpoint "
            "re-splits the shards for another process count)"
            + (", or without DeepSpeed (its sharded state dicts are then read whole)" if fsdp_sharded(resume) else "")
        )
    whole = (Path(resume) / "optimizer.pt").is_file()  # read whole and sharded in place (PretrainTrainer's load)
    if fsdp and not saved_fsdp and tp == 1 and not tag and not whole:  # accelerate's FSDP load reads its shards
        raise RecipeError(
            f"{resume} holds no optimizer states FSDP can read (neither FSDP's shards nor optimizer.pt): resume it "
            "without the FSDP config, in the layout it was saved in"
        )
    if tag and not deepspeed:
        raise RecipeError(
            f"{resume} was saved under DeepSpeed (optimizer states in its global_step*/ folder): "
            "resume it with a DeepSpeed accelerate config (on any GPU count)"
        )
    saved_sharded = (Path(resume) / SHARDED_OPTIMIZER_DIR).is_dir()
    if saved_sharded and sharded_engine and tp == 1:
        raise RecipeError(
            f"{resume} was saved under tensor parallelism (optimizer states in {SHARDED_OPTIMIZER_DIR}/): resume it "
            "with parallel.tp, or without DeepSpeed and FSDP"
        )
    if tp > 1 and not saved_sharded:
        raise RecipeError(
            f"{resume} was saved without tensor parallelism: resume it with parallel.tp=1 (this run has "
            f"parallel.tp={tp})"
        )


def resume_reading(resume: str, world_size: int, zero_stage: int, fsdp: bool) -> str:
    """How a launch will read ``resume`` (``--dry-run`` says it; refused layouts were refused before): its own
    layout, or the conversion it takes on the way (DeepSpeed's universal format for ZeRO shards of another GPU
    count, FSDP's shards read whole, whole states sharded in place under FSDP)."""
    ranks = zero_ranks(resume)
    if zero_stage == 1 and ranks is not None and ranks != world_size:
        return (
            f"ZeRO optimizer states of {ranks} ranks on {world_size}: converted once at start to DeepSpeed's "
            "universal format beside them (scripts/zero_to_universal.py converts ahead of time)"
        )
    if not fsdp and fsdp_sharded(resume):
        return f"FSDP's sharded state dicts read whole once at start into {Path(resume) / WHOLE_COPY_DIR}/"
    if fsdp and not saved_under_fsdp(resume):
        return "whole weights and optimizer.pt, sharded in place under FSDP"
    return "in the layout it was saved in"


# what a model config records that does not make it another model
CONFIG_KEYS_IGNORED = ("transformers_version",)


def config_differences(old_resolved: dict | None, new_config: dict) -> list[str]:
    """``model config key old → new`` between a checkpoint's resolved model config and this run's: the zoo file or
    init_from's config.json may have changed under the same recipe."""
    old_config = ((old_resolved or {}).get("resolved") or {}).get("model_config")
    if not isinstance(old_config, dict):  # saved before resolved.yaml existed: the recipe is all there is
        return []
    keys = sorted((set(old_config) | set(new_config)) - set(CONFIG_KEYS_IGNORED))
    return [
        f"model config {k} {old_config.get(k)!r} → {new_config.get(k)!r}"
        for k in keys
        if _plain(old_config.get(k)) != _plain(new_config.get(k))
    ]


def _plain(value):
    """A value as resolved.yaml stores it (through JSON), so that a saved and a live config compare."""
    return json.loads(json.dumps(value, default=str))


def saved_layout(checkpoint: str) -> tuple[int, int] | None:
    """``(global batch in samples, processes)`` a checkpoint was trained with, or None when it does not say (saved
    before resolved.yaml, or not by this project)."""
    folder = Path(checkpoint)
    try:
        data = json.loads((folder / CHECKPOINT_DATA).read_text())
        layout = OmegaConf.to_container(OmegaConf.load(folder / RESOLVED_FILE))["resolved"]["layout"]
        return int(data["samples_per_step"]), int(layout["world_size"])
    except Exception:  # noqa: BLE001 - absent or unreadable: check_resume names what it cannot read
        return None


def elastic_batch(checkpoint: str, run: ResolvedRun) -> list[str]:
    """A checkpoint saved at another number of processes resumes at its global batch: the overrides of the
    micro-batch and accumulation that keep it on this launch (the recipe's micro-batch, or the largest divisor of
    the per-process share below it); [] when nothing changed. A global batch this launch cannot split evenly is
    one error naming the keys."""
    saved = saved_layout(checkpoint)
    world, now = run.layout.world_size, run.plan["samples_per_step"]
    if saved is None or saved[1] == world or saved[0] == now:  # same launch, or a change the user made: compared
        return []
    samples, processes = saved
    dp = run.layout.dp  # a tp or cp group reads one micro-batch: the batch splits over the data-parallel ranks
    ranks = f"{world} processes" + (f" ({dp} data-parallel ranks)" if dp != world else "")
    if samples % dp:
        raise RecipeError(
            f"{checkpoint} was trained at {samples} samples per step on {processes} processes: "
            f"{ranks} cannot split that global batch evenly; resume on a number of processes "
            f"that divides {samples}, or start a new run (another training.output_dir)"
        )
    share, recipe_micro = samples // dp, int(run.recipe.training.get("per_device_train_batch_size", 8))
    micro = max(d for d in range(1, min(share, recipe_micro) + 1) if share % d == 0)
    logger.info(
        "resuming %s (%d processes) on %d: %d samples per step kept as %d x %d accumulation per process",
        checkpoint,
        processes,
        world,
        samples,
        micro,
        share // micro,
    )
    return [f"training.per_device_train_batch_size={micro}", f"training.gradient_accumulation_steps={share // micro}"]


def check_resume(checkpoint: str, run: ResolvedRun) -> None:
    """Refuse to resume another run's checkpoint (``resume_mismatch=allow`` resumes it with a warning), and
    say so when the checkpoint leaves nothing to train."""
    recipe, data_info, max_steps = run.recipe, run.data_info, run.args.max_steps
    folder = Path(checkpoint)
    diffs, old, old_resolved = [], None, None
    if not (folder / "recipe.yaml").is_file():
        logger.warning("%s has no recipe.yaml (not saved by this project?): cannot check that it is this run's", folder)
    else:
        try:
            old = OmegaConf.to_container(OmegaConf.load(folder / "recipe.yaml"), resolve=True)
            if isinstance(old, dict):  # saved before keys moved (config.MOVED_KEYS): compared at their new place
                old = migrate_recipe_dict(old, str(folder / "recipe.yaml"), warn=False)
            old_data = (
                json.loads((folder / CHECKPOINT_DATA).read_text()) if (folder / CHECKPOINT_DATA).is_file() else None
            )
            old_resolved = (
                OmegaConf.to_container(OmegaConf.load(folder / RESOLVED_FILE), resolve=True)
                if (folder / RESOLVED_FILE).is_file()
                else None
            )
            if not isinstance(old, dict) or not all(
                isinstance(x, (dict, type(None))) for x in (old_data, old_resolved)
            ):
                raise ValueError("not a mapping")
        except Exception as e:  # noqa: BLE001 - one line naming the files
            diffs = [
                f"its recipe.yaml/{CHECKPOINT_DATA}/{RESOLVED_FILE} cannot be read ({type(e).__name__}: "
                f"{(str(e).splitlines() or [''])[0]})"
            ]
        else:
            diffs = resume_differences(old, recipe_to_dict(recipe), old_data, data_info)
            diffs += config_differences(old_resolved, run.config.to_diff_dict())
        if diffs and recipe.resume_mismatch == "error":
            raise ValueError(
                f"{folder} is from a different run: {'; '.join(diffs)}. Use another training.output_dir "
                "for a new run, or set resume_mismatch=allow to resume this checkpoint anyway"
            )
        if diffs:
            logger.warning(
                "resuming %s although it is from a different run (resume_mismatch=allow): %s", folder, "; ".join(diffs)
            )
    state = folder / "trainer_state.json"
    try:
        step = int(json.loads(state.read_text()).get("global_step", 0)) if state.is_file() else None
    except (ValueError, TypeError):
        step = None
    _warn_stretched_schedule(folder, old, old_resolved, recipe, step, max_steps)
    if step is not None and step >= max_steps:
        logger.warning(
            "%s is at step %d and training.max_steps=%d: NOTHING WILL BE TRAINED (0 steps); final/ and "
            "the summary are that checkpoint's. Raise training.max_steps to train on",
            folder,
            step,
            max_steps,
        )


# schedules whose learning rate after the warmup does not depend on max_steps
_FLAT_SCHEDULES = ("constant", "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau")


def _warn_stretched_schedule(
    folder: Path, old, old_resolved: dict | None, recipe: Recipe, step: int | None, max_steps: int
) -> None:
    """Extending a run (a larger max_steps) is a resume of the same run, but a schedule that decays over max_steps
    is stretched: from the resumed step on the learning rate is not the one the run was heading for (a cosine jumps
    back up). Said, not refused: for a constant or warmup-stable-decay schedule it is how a run is extended."""
    if not isinstance(old, dict) or not isinstance(old.get("training"), dict):
        return
    # the resolved run's max_steps (training_flops or context.tokens may have set it), else the recipe's
    before = ((old_resolved or {}).get("resolved") or {}).get("max_steps", old["training"].get("max_steps"))
    schedule = str(
        getattr(recipe.training.get("lr_scheduler_type"), "value", recipe.training.get("lr_scheduler_type", "linear"))
    )
    if not isinstance(before, int) or before == max_steps or schedule in _FLAT_SCHEDULES:
        return
    logger.warning(
        "%s: training.max_steps %d → %d on resume stretches the %s schedule over the new length: from "
        "step %s on the learning rate follows the new schedule, not the one the run was following%s",
        folder,
        before,
        max_steps,
        schedule,
        step if step is not None else "?",
        "" if schedule == "warmup_stable_decay" else " (a decaying rate jumps there)",
    )
