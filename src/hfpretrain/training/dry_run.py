"""A dry run before the data exists: plan a recipe whose ``data.path`` has no ``manifest.json`` yet.

The plan needs four things the tokenized data normally gives: the sequence length, the vocabulary
(the tokenizer), the number of training blocks (for passes over the data) and the validation tokens
per byte (for bits per byte). Without the data they are assumed, and the plan says so under
``assumed`` (and one log line): seq_len = :data:`ASSUMED_SEQ_LEN` (capped at the model's
``max_position_embeddings``), the vocabulary of ``data.tokenizer`` if the recipe names one that
loads, else the model config's own ``vocab_size``, exactly one pass over the training data, no
bits-per-byte factor. Parameters, FLOPs, tokens per step, memory and expected time follow from those.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hfpretrain.models import load_config

logger = logging.getLogger("hfpretrain")

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


def plan_without_data(recipe, world_size: int | None = None, zero_stage: int | None = None) -> dict:
    """``pretrain(..., dry_run=True)``'s result for a recipe whose data is not tokenized yet."""
    from .config import recipe_to_dict
    from .run import choose_speed, make_plan, resolve_max_steps, training_arguments

    vocab, why = _tokenizer_vocab(recipe.data.tokenizer)
    config = load_config(recipe.model.config, dict(recipe.model.overrides), vocab_size=vocab)
    seq_len = min(ASSUMED_SEQ_LEN, getattr(config, "max_position_embeddings", None) or ASSUMED_SEQ_LEN)
    resolve_max_steps(recipe, config, seq_len, world_size or int(os.environ.get("WORLD_SIZE", "1")))
    args = training_arguments(recipe, dry_run=True)
    world = world_size or args.world_size
    train_blocks = args.max_steps * args.per_device_train_batch_size * world * args.gradient_accumulation_steps
    manifest = {"seq_len": seq_len, "train": {"blocks": train_blocks}}
    fast, args = choose_speed(recipe, config, args, seq_len, world_size, zero_stage, planning=True)
    plan = make_plan(recipe, config, args, seq_len, fast, manifest, world_size, zero_stage)
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
