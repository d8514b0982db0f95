"""A context-extension phase (the recipe's ``context`` section): the model of ``model.init_from``, trained at
``from_seq_len``, trains on at ``context.seq_len`` on data packed at that length, with the RoPE change the recipe
chooses, its own learning rate (``training.learning_rate``) and token budget (``context.tokens``).

Everything here runs before any model is built, so that a phase which cannot work stops with one line: a length
below the training length, a RoPE change the model type has no RoPE for (GPT-2's learned positions), data packed
at another length than the phase's, a plan that does not fit the GPU.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

from hfpretrain.models.hardware import canonical_gpu, device_name, gpu_memory_bytes
from hfpretrain.models.memory import GIB

from .config import Recipe, RecipeError

logger = logging.getLogger("hfpretrain")

# The estimate is the allocator's modelled peak; the CUDA context and the caching allocator's fragmentation come on
# top, so a plan above this share of the card would run out of memory at its first steps.
FIT_SHARE = 0.95


def training_length(init_from: str | Path) -> tuple[int | None, str]:
    """``(seq_len, file)`` the model in ``init_from`` was trained at, read from the run's records next to its weights:
    ``lineage.json`` (a run's final/) or ``data.json`` (a checkpoint-N folder); ``(None, "")`` without either."""
    for name in ("lineage.json", "data.json"):
        path = Path(init_from) / name
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        seq_len = record.get("seq_len") or (record.get("lineage") or {}).get("seq_len")
        if seq_len:
            return int(seq_len), str(path)
    return None, ""


def rope_summary(config) -> dict | None:
    """The config's RoPE settings (None for a model without RoPE), as the plan shows them."""
    params = getattr(config, "rope_parameters", None)
    return dict(params) if params else None


def _position_limit(config) -> int | None:
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def change_rope(config, recipe: Recipe, from_seq_len: int):
    """A copy of ``config`` with its RoPE (``rope_parameters``) and ``max_position_embeddings`` set for
    ``context.seq_len``, as ``context.rope`` asks; RecipeError where the model type cannot take it."""
    ctx = recipe.context
    params = getattr(config, "rope_parameters", None)
    limit = _position_limit(config)
    if not params:
        if ctx.rope != "keep":
            raise RecipeError(
                f"context.rope={ctx.rope}: model type {config.model_type} has no rotary position "
                f"embedding (it learns absolute positions, up to {limit}): only a RoPE model "
                "(Llama, Qwen3) takes a RoPE change"
            )
        if limit is not None and ctx.seq_len > limit:
            raise RecipeError(
                f"context.seq_len={ctx.seq_len}: model type {config.model_type} learns absolute "
                f"positions up to {limit}, so it has none for a longer context; extend a RoPE model "
                "(Llama, Qwen3) instead"
            )
        return config
    if "rope_type" not in params:  # per-layer-type parameters (e.g. sliding and full attention layers)
        raise RecipeError(
            f"context.rope={ctx.rope}: {config.model_type} has RoPE parameters per layer type "
            f"({sorted(params)}), which a context-extension phase does not change"
        )
    new = dict(params)
    theta = float(params.get("rope_theta") or 0)
    if ctx.rope == "theta":
        if ctx.rope_theta <= theta:
            raise RecipeError(
                f"context.rope_theta={ctx.rope_theta:g} is not larger than the model's rope_theta="
                f"{theta:g}: a longer context needs lower rotary frequencies, a larger base"
            )
        new["rope_theta"] = float(ctx.rope_theta)
        positions = ctx.seq_len
    elif ctx.rope == "yarn":
        kind = params.get("rope_type", "default")
        if kind not in ("default", "yarn"):
            raise RecipeError(
                f"context.rope=yarn: the model's RoPE is already {kind!r}, which YaRN does not extend; "
                "use context.rope=theta or keep"
            )
        # a model extended with YaRN before keeps the length its frequencies were learned at: the factor counts
        # from there (a 16k phase's model taken to 32k), not from the phase's starting length
        original = (
            int(params.get("original_max_position_embeddings") or from_seq_len) if kind == "yarn" else int(from_seq_len)
        )
        needed = ctx.seq_len / original
        factor = float(ctx.yarn_factor or needed)
        if factor < needed:  # allowed (inference-style YaRN does it), but seldom what a phase means
            logger.warning(
                "context.yarn_factor=%g stretches %d positions to %d, short of context.seq_len=%d: the "
                "phase trains past YaRN's range (a factor of at least %g covers it)",
                factor,
                original,
                round(original * factor),
                ctx.seq_len,
                needed,
            )
        # the model's other rotary parameters stay (partial_rotary_factor: GLM-4-MoE rotates half of each head)
        new = {
            **params,
            "rope_type": "yarn",
            "rope_theta": float(ctx.rope_theta or theta),
            "factor": factor,
            "original_max_position_embeddings": original,
        }
        from_seq_len = original
        # transformers reads max_position_embeddings / original as YaRN's implicit factor and warns when the two differ
        positions = max(ctx.seq_len, round(from_seq_len * factor))
    else:
        positions = ctx.seq_len
    config = copy.deepcopy(config)
    config.rope_parameters = new
    config.max_position_embeddings = max(int(limit or 0), int(positions)) if ctx.rope != "yarn" else int(positions)
    try:
        config.validate_rope()
    except (KeyError, ValueError) as err:
        raise RecipeError(f"context.rope={ctx.rope}: {config.model_type} does not take {new}: {err}") from None
    return config


def fit_positions(config, seq_len: int, data_path: str):
    """``config`` for a run outside a context phase at the data's length: learned positions (GPT-2) must reach it,
    one line before any work (past them the embedding lookup fails at the first step); a RoPE model's
    ``max_position_embeddings`` is raised to it in a copy, so that the saved checkpoint states the length it was
    trained at (lm-eval truncates its contexts to that number). The rotary frequencies do not depend on it, so
    training is unchanged."""
    limit = _position_limit(config)
    if limit is None or seq_len <= limit:
        return config
    params = getattr(config, "rope_parameters", None)
    if not params:
        raise RecipeError(
            f"data.path={data_path} is packed at seq_len {seq_len}, past the {limit} positions model "
            f"type {config.model_type} learns: tokenize with --seq-len {limit} or less, or set "
            f"model.overrides.n_positions={seq_len}"
        )
    if params.get("rope_type", "default") == "default":  # YaRN and the others read it: a context phase sets them
        logger.info("max_position_embeddings %d -> %d: the training length of data.path=%s", limit, seq_len, data_path)
        config = copy.deepcopy(config)
        config.max_position_embeddings = int(seq_len)
    return config


def apply_context(recipe: Recipe, config, data_seq_len: int, data_path: str) -> tuple[object, dict | None]:
    """Check the phase against its model and data: ``(config for the phase, the plan's context entry)``; without a
    context section ``(config, None)``. ``data_seq_len``: the length data.path is packed at."""
    ctx = recipe.context
    if ctx.seq_len is None:
        return config, None
    if data_seq_len != ctx.seq_len:
        raise RecipeError(
            f"data.path={data_path} is packed at seq_len {data_seq_len}, but context.seq_len="
            f"{ctx.seq_len}: tokenize the phase's data with --seq-len {ctx.seq_len} "
            "(scripts/tokenize_pile.py)"
        )
    recorded, where = training_length(recipe.model.init_from)
    from_seq_len = ctx.from_seq_len or recorded
    if from_seq_len is None:
        raise RecipeError(
            f"context.from_seq_len is not set and model.init_from={recipe.model.init_from} records no "
            "training length (no lineage.json or data.json beside its weights): set it"
        )
    if ctx.from_seq_len is not None and recorded is not None and recorded != ctx.from_seq_len:
        raise RecipeError(
            f"context.from_seq_len={ctx.from_seq_len}, but {where} says model.init_from was trained at "
            f"seq_len {recorded}: correct it (or leave it out)"
        )
    if ctx.seq_len < from_seq_len:
        raise RecipeError(
            f"context.seq_len={ctx.seq_len} is below the training length {from_seq_len}"
            f"{f' ({where})' if where and not ctx.from_seq_len else ''}: a context-extension phase "
            "trains at a longer length"
        )
    phase = change_rope(config, recipe, from_seq_len)
    return phase, {
        "from_seq_len": int(from_seq_len),
        "from_seq_len_source": where or "context.from_seq_len",
        "seq_len": int(ctx.seq_len),
        "extension": ctx.seq_len / from_seq_len,
        "rope": ctx.rope,
        "rope_before": rope_summary(config),
        "rope_after": rope_summary(phase),
        "max_position_embeddings": _position_limit(phase),
        "tokens": ctx.tokens,
    }


def check_fits(plan: dict, gpu: str | None, cuda_total_bytes: int | None = None, planning: bool = False) -> dict:
    """Whether the plan's memory per GPU fits the GPU (``context.gpu``, else the one this process runs on, whose
    ``cuda_total_bytes`` the caller passes); RecipeError when it does not. The plan's ``fits`` entry. ``planning``
    (a dry run): a plan checked against no GPU is said in a warning, not only in the JSON."""
    need = plan["memory_per_gpu_gib"]["total"]
    if gpu is not None:
        name, capacity = canonical_gpu(gpu), gpu_memory_bytes(gpu) / GIB
    elif cuda_total_bytes:
        name, capacity = device_name(), cuda_total_bytes / GIB
    else:
        if planning:  # a dry run on a login node: the GPU the run will get is unknown here
            logger.warning(
                "context.seq_len=%d: the plan needs %.1f GiB per GPU, not checked against a GPU (none in "
                "this process): set context.gpu (e.g. H100, H200) to check it",
                plan["seq_len"],
                need,
            )
        return {"checked": False, "why": "no GPU in this process and context.gpu is not set"}
    if need > FIT_SHARE * capacity:
        raise RecipeError(
            f"context.seq_len={plan['seq_len']}: the plan needs {need:.1f} GiB per GPU (micro-batch "
            f"{plan['micro_batch']} x {plan['seq_len']} tokens), more than {FIT_SHARE:.0%} of the {name}'s "
            f"{capacity:.0f} GiB: set training.activation_checkpointing=true, a smaller "
            "training.per_device_train_batch_size (more accumulation), or shard over more GPUs"
        )
    return {
        "checked": True,
        "gpu": name,
        "capacity_gib": round(capacity, 1),
        "need_gib": round(need, 2),
        "share": round(need / capacity, 3),
    }
