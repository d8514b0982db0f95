"""resolve(): one pure function from the recipe, the data's facts and the machine to a frozen ResolvedRun, which the
dry run prints, a run saves beside its recipe, and resume compares (training/resolve.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from resolved_snapshot import RECIPES, snapshot
from train_utils import TINY_RECIPE

GOLDEN = Path(__file__).with_name("resolved_recipes.json")

# Where today's resolution differs from the one recorded before resolve() (e716ca9), and why. Everything else must
# be equal, value for value; keys the plan gained are new figures, not changes.
CHANGED = {
    # a mixture's dry run before its data exists was refused ("manifest.json is missing"): now planned, as any recipe
    ("best_small_16k", "no_data/this"): "planned",
    ("best_small_16k", "no_data/8gpu_zero1"): "planned",
    ("curriculum_small", "no_data/this"): "planned",
    ("curriculum_small", "no_data/8gpu_zero1"): "planned",
    ("curriculum_best_small", "no_data/this"): "planned",
    # planned without data, the warmup-stable-decay lengths were never checked: on 8 GPUs best_small's budget is 78
    # steps, fewer than its 100 warmup steps plus the decay, which the same launch with data refuses too
    ("best_small", "no_data/8gpu_zero1"): "100 warmup steps + 16 decay steps > training.max_steps=78",
    ("best_small_moe", "no_data/8gpu_zero1"): "100 warmup steps + 16 decay steps > training.max_steps=78",
    ("curriculum_best_small", "no_data/8gpu_zero1"): "100 warmup steps + 16 decay steps > training.max_steps=78",
}


# shipped after the snapshot (e716ca9)
ADDED_SINCE = ("demo_cpu",)  # make demo's recipe (issue 59)


@pytest.fixture(scope="module")
def snapshot_folders(mini_blocks, mini_train, mini_val, data_root, tmp_path_factory) -> tuple[str, str, str]:
    """The snapshot's three data folders, made as resolved_snapshot.py's docstring says."""
    from hfpretrain.data import tokenize_corpus

    base = tmp_path_factory.mktemp("snapshot")
    made = [
        tokenize_corpus(
            inputs=[mini_train],
            val_inputs=[mini_val],
            out=base / name,
            tokenizer=tokenizer,
            seq_len=seq_len,
            max_docs=300,
            val_docs=100,
        )
        for name, tokenizer, seq_len in (
            ("gpt2_16k", data_root / "tokenizers" / "gpt2", 16384),
            ("qwen3_128", data_root / "tokenizers" / "qwen3", 128),
        )
    ]
    return str(mini_blocks), str(made[0]), str(made[1])


def _golden() -> dict:
    """The recorded resolutions, a recipe key that moved since (config.MOVED_KEYS) named at its new place in the
    reasons' text (``batch.micro_batch=recipe keeps it``): the wording changed, no planned value."""
    from hfpretrain.training.config import MOVED_KEYS

    text = GOLDEN.read_text()
    for old, new in MOVED_KEYS.items():
        text = text.replace(f"{old}=", f"{new}=")
    return json.loads(text)


def _within(before, after, path=""):
    """The differences of ``after`` from ``before``, leaving out keys ``before`` does not have."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [
            d
            for k in before
            for d in (_within(before[k], after[k], f"{path}/{k}") if k in after else [f"{path}/{k}: gone"])
        ]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


@pytest.mark.full_data("the Qwen3 tokenizer and the mini corpus the snapshot was taken on")
def test_every_shipped_recipe_resolves_as_before(snapshot_folders):
    golden, now = _golden(), snapshot(*snapshot_folders)
    assert sorted(now) == sorted(p.stem for p in RECIPES.glob("*.yaml"))
    # recipes shipped after the snapshot have no resolution from before to hold: each must plan before its data
    # exists (the snapshot's data folders are made with other tokenizers than demo_cpu's own 2,048-token one)
    assert sorted(set(now) - set(golden)) == sorted(ADDED_SINCE)
    for recipe in ADDED_SINCE:
        assert all("plan" in now[recipe][case] for case in ("no_data/this", "no_data/8gpu_zero1")), now[recipe]
    for recipe, cases in golden.items():
        for case, before in cases.items():
            after, changed = now[recipe][case], CHANGED.get((recipe, case))
            if changed == "planned":
                assert "error" in before and "plan" in after, (recipe, case, after)
            elif changed:
                assert changed in after.get("error", ""), (recipe, case, after)
            else:
                assert _within(before, after) == [], (recipe, case)


def test_resolve_edits_none_of_its_inputs_and_returns_frozen_objects(mini_blocks, tmp_path):
    import yaml

    from hfpretrain.training.config import load_recipe, recipe_to_dict
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve

    # what made an earlier setup write into the recipe: a FLOPs budget (max_steps), a schedule decay ratio
    # (lr_scheduler_kwargs); and a nested mapping TrainingArguments edits in place (fsdp_config: min_num_params, xla)
    raw = yaml.safe_load(TINY_RECIPE.read_text())
    del raw["training"]["max_steps"]
    (tmp_path / "budget.yaml").write_text(yaml.safe_dump(raw))
    recipe = load_recipe(
        tmp_path / "budget.yaml",
        [
            f"data.path={mini_blocks}",
            "training_flops=2e12",
            "training.lr_scheduler_type=warmup_stable_decay",
            "training.warmup_steps=1",
            "training.lr_scheduler_kwargs={decay_ratio: 0.2}",
            "training.lr_scheduler_kwargs.min_lr_rate=null",
            "training.fsdp=full_shard",
            "training.fsdp_config={fsdp_version: 2}",
        ],
    )
    written = recipe_to_dict(recipe)
    assert written["training"]["fsdp_config"] == {"fsdp_version": 2}
    facts = read_data_facts(recipe)
    manifest = json.dumps(facts.manifest, sort_keys=True)
    machine = Machine.detect()
    run = resolve(recipe, facts, machine)
    assert recipe_to_dict(recipe) == written and json.dumps(facts.manifest, sort_keys=True) == manifest
    assert "max_steps" not in recipe.training and run.args.max_steps > 0
    assert run.max_steps_from == "training_flops=2e+12"
    assert run.args.lr_scheduler_kwargs == {"num_decay_steps": round(0.2 * run.args.max_steps)}
    for frozen in (run, run.fast, run.loss, run.layout, facts, machine):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, dataclasses.fields(frozen)[0].name, None)
    # the same inputs resolve to the same run
    assert resolve(recipe, facts, machine).to_dict() == run.to_dict()


def test_a_mixture_recipe_dry_runs_before_its_data_exists(tmp_path):
    from hfpretrain.training import pretrain

    result = pretrain(
        RECIPES / "curriculum_small.yaml",
        [f"data.path={tmp_path}/none", f"data.sources.hq={tmp_path}/hq"],
        dry_run=True,
    )
    assert "not tokenized yet" in result["plan"]["assumed"]["why"]
    phases = result["plan"]["data"]["phases"]
    assert phases and sum(p["steps"] for p in phases) == result["plan"]["max_steps"]
    assert all(s["passes"] == 1.0 for s in result["plan"]["data"]["sources"].values())
    assert result["resolved"]["max_steps_from"] and result["resolved"]["layout"]["engine"] == "ddp"


def test_a_launch_that_cannot_run_the_recipe_is_refused_before_anything_is_built(mini_blocks):
    from hfpretrain.training.config import RecipeError, load_recipe
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve

    machine = dataclasses.replace(Machine.detect(planning=True), world_size=8, zero_stage=1)
    for overrides, key in (
        (["optimizer.name=muon"], "optimizer.name=muon"),
        (["nan_policy=skip"], "nan_policy=skip"),
        (["logging.grad_stats_interval=5"], "logging.grad_stats_interval"),
    ):
        recipe = load_recipe(TINY_RECIPE, [f"data.path={mini_blocks}", *overrides])
        with pytest.raises(RecipeError, match=key):
            resolve(recipe, read_data_facts(recipe, planning=True), machine)
