"""What every shipped recipe resolves to, as ``--dry-run`` reports it: with its data not tokenized yet (the assumed
facts) and with a small real data folder, for this process and for 8 GPUs under ZeRO-1. ``test_resolve.py`` holds
today's resolution against ``resolved_recipes.json``, recorded before the resolution moved into one ``resolve()``
(issue 57): a structural change must not change a value.

    python tests/training/resolved_snapshot.py GPT2_128 GPT2_16K QWEN3_128 > tests/training/resolved_recipes.json

The folders: tokenize_pile.py's output of the mini corpus (300 training documents, 100 validation) with GPT-2's
tokenizer at seq_len 128 (the tests' ``mini_blocks``) and at 16,384 (the context recipe's length), and with Qwen3's
at 128 (for the recipes whose data is Qwen3's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
LAUNCHES = {"this": {}, "8gpu_zero1": {"world_size": 8, "zero_stage": 1}}
# what depends on the machine the snapshot is taken on, not on the recipe: its GPU, and the data folders'
# fingerprints (they hash the input files' modification times)
VOLATILE = ("device", "fingerprint")


# The TrainingArguments values that decide the run and its loss, kept beside the plan under ``resolved`` (recorded after
# the golden file, which holds the plan only: test_resolve compares the keys the golden file has)
RESOLVED_ARGUMENTS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_steps",
    "learning_rate",
    "warmup_steps",
    "warmup_ratio",
    "lr_scheduler_type",
    "optim",
)


def resolved_subset(resolved: dict) -> dict:
    """``RESOLVED_ARGUMENTS`` of a dry run's ``resolved`` entry (which lists the arguments that differ from
    transformers' defaults: the others are the defaults) and its loss specification."""
    import dataclasses

    from transformers import TrainingArguments

    fields, changed = TrainingArguments.__dataclass_fields__, resolved["training_arguments"]
    out = {}
    for key in RESOLVED_ARGUMENTS:
        if key in changed:
            out[key] = changed[key]
        elif key in fields:  # warmup_ratio: transformers < 5
            default = fields[key].default
            out[key] = getattr(default, "value", default) if default is not dataclasses.MISSING else None
    return {**out, "loss": resolved["loss"]}


def _without_volatile(value):
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    return [_without_volatile(v) for v in value] if isinstance(value, list) else value


def data_overrides(recipe_path: Path, data: str, data_16k: str, data_qwen3: str) -> list[str]:
    """Overrides that point the recipe (and each of its mixture's sources) at the given data folder."""
    import yaml

    raw = yaml.safe_load(recipe_path.read_text()) or {}
    section = raw.get("data") or {}
    folder = data_16k if (raw.get("context") or {}).get("seq_len") else data
    if "qwen3" in str(section.get("path")):
        folder = data_qwen3
    out = [f"data.path={folder}", "data.tokenizer=null"]
    out += [f"data.sources.{name}={folder}" for name in section.get("sources") or {}]
    return out


def resolved(recipe_path: Path, overrides: list[str], launch: dict, folders: dict) -> dict:
    """``pretrain(..., dry_run=True)``'s plan, or the one line it stopped with; ``folders``' paths as their names."""
    from hfpretrain.training import pretrain

    try:
        result = pretrain(recipe_path, overrides, dry_run=True, **launch)
    except Exception as err:  # noqa: BLE001 - a recipe that cannot be planned is recorded as such
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
    text = json.dumps(
        {"plan": _without_volatile(result["plan"]), "resolved": resolved_subset(result["resolved"])}, default=str
    )
    for path, name in folders.items():
        text = text.replace(json.dumps(str(path))[1:-1], name)
    return json.loads(text)


def snapshot(data: str, data_16k: str, data_qwen3: str) -> dict:
    out = {}
    for recipe_path in sorted(RECIPES.glob("*.yaml")):
        cases = {}
        for where, overrides in (("no_data", []), ("data", data_overrides(recipe_path, data, data_16k, data_qwen3))):
            for name, launch in LAUNCHES.items():
                cases[f"{where}/{name}"] = resolved(
                    recipe_path, overrides, launch, {data_16k: "<data_16k>", data_qwen3: "<data_qwen3>", data: "<data>"}
                )
        out[recipe_path.stem] = cases
    return out


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    json.dump(snapshot(*sys.argv[1:4]), sys.stdout, indent=1, sort_keys=True)
    print()
