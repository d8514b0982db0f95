"""Recipes and overrides: every shipped recipe validates and dry-runs; overrides are typed; bad
keys, types, sections and choices fail at start with a message that names the key."""

from __future__ import annotations

import json
import resource
import subprocess

import pytest
import torch
from forked import script

from hfpretrain.training import RecipeError, load_recipe, pretrain

from train_utils import PRETRAIN_SCRIPT, REPO, TINY_RECIPE, read_log

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
GPT2_PADDED_VOCAB = 50304  # the mini blocks use gpt2 (50,257 tokens), padded to a multiple of 128


def vocab_overrides(path) -> list[str]:
    """Zoo configs (and recipes) made for another tokenizer (Qwen3's 151,680) carry an explicit vocab_size that
    load_config refuses for gpt2 data; resize the table to the gpt2 vocabulary for the dry run."""
    from hfpretrain.models.zoo import load_config

    model = load_recipe(path, ["data.path=x"]).model
    try:  # the recipe's own overrides too: demo_cpu names its 2,048-token vocabulary
        load_config(model.config, model.overrides, vocab_size=50257)
        return []
    except ValueError as err:
        assert "vocab_size" in str(err)
        return [f"model.overrides.vocab_size={GPT2_PADDED_VOCAB}"]


def cpu_overrides(path) -> list[str]:
    """TrainingArguments refuses bf16 without a bf16 GPU unless use_cpu is set (even for a dry run),
    so the GPU recipes are planned here with use_cpu=true when no GPU is present."""
    import torch

    bf16 = load_recipe(path, ["data.path=x"]).training.get("bf16")
    return ["training.use_cpu=true"] if bf16 and not torch.cuda.is_available() else []


def context_overrides(path) -> list[str]:
    """A context-extension recipe (recipes/best_small_16k.yaml) planned on the mini blocks: its phase at their 128
    tokens, extending a model trained at 64."""
    if load_recipe(path, ["data.path=x"]).context.seq_len is None:
        return []
    return ["context.seq_len=128", "context.from_seq_len=64"]


def dry_run_overrides(path) -> list[str]:
    return vocab_overrides(path) + cpu_overrides(path) + context_overrides(path)


def source_overrides(path, data) -> list[str]:
    """A mixture recipe's sources (recipes/curriculum_small.yaml), all pointed at ``data`` for its plan."""
    return [f"data.sources.{name}={data}" for name in load_recipe(path, ["data.path=x"]).data.sources]


def test_recipes_are_shipped():
    assert TINY_RECIPE in RECIPES and len(RECIPES) >= 2


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_validates(path):
    recipe = load_recipe(path, ["data.path=x"])
    assert recipe.data.path == "x"
    # the budget, one way or another
    assert recipe.training.get("max_steps", 0) > 0 or (recipe.training_flops or 0) > 0 or recipe.context.tokens > 0
    assert recipe.nan_policy in {"stop", "skip"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_dry_run(path, mini_blocks, tmp_path):
    """The plan of every recipe on the mini blocks; its model is never built, so even the 1.8B
    shapes cost no memory (peak RSS grows by far less than the 7 GB of fp32 weights of 1.8B)."""
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out = pretrain(
        path,
        [
            f"data.path={mini_blocks}",
            f"training.output_dir={tmp_path / 'run'}",
            "logging.peak_flops=1e15",
            *dry_run_overrides(path),
            *source_overrides(path, mini_blocks),
        ],
        dry_run=True,
    )
    grown_gib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024**2
    assert grown_gib < 0.5, f"dry run allocated {grown_gib:.2f} GiB"
    plan = out["plan"]
    assert plan["parameters"]["total"] > 0
    assert plan["flops_per_token"] > 0
    assert plan["seq_len"] == 128  # from the data manifest, not the recipe's corpus
    assert plan["tokens_per_step"] == plan["samples_per_step"] * 128
    t = out["recipe"]["training"]
    assert plan["samples_per_step"] == t["per_device_train_batch_size"] * t.get("gradient_accumulation_steps", 1)
    assert plan["memory_per_gpu_gib"]["total"] > 0
    assert plan["peak_flops_per_gpu"] == 1e15
    assert plan["expected_hours"] > 0
    assert not (tmp_path / "run").exists()  # nothing written


def test_dry_run_big_model_plan_is_big(mini_blocks, tmp_path):
    """The 1.8B recipe's plan reflects its shape (not the tiny model), without building it."""
    path = REPO / "recipes" / "qwen3_1p8b.yaml"
    with pytest.raises(ValueError, match="made for another tokenizer"):  # Qwen3 vocab vs gpt2 data
        pretrain(path, [f"data.path={mini_blocks}", *cpu_overrides(path)], dry_run=True)
    qwen = pretrain(path, [f"data.path={mini_blocks}", *dry_run_overrides(path)], dry_run=True)["plan"]
    tiny = pretrain(TINY_RECIPE, [f"data.path={mini_blocks}"], dry_run=True)["plan"]
    assert qwen["flops_per_token"] > 100 * tiny["flops_per_token"]
    assert qwen["memory_per_gpu_gib"]["total"] > 10


def test_dry_run_plans_another_launch(mini_blocks):
    """--world-size/--zero-stage: plan the 8-GPU ZeRO-1 reference launch from one process."""
    path = REPO / "recipes" / "qwen3_1p8b.yaml"
    one = pretrain(path, [f"data.path={mini_blocks}", *dry_run_overrides(path)], dry_run=True)["plan"]
    eight = pretrain(
        path, [f"data.path={mini_blocks}", *dry_run_overrides(path)], dry_run=True, world_size=8, zero_stage=1
    )["plan"]
    assert eight["world_size"] == 8 and eight["samples_per_step"] == 22 * 2 * 8 == 8 * one["samples_per_step"]
    mem1, mem8 = one["memory_per_gpu_gib"], eight["memory_per_gpu_gib"]
    assert mem8["optimizer"] == pytest.approx(mem1["optimizer"] / 8, rel=1e-3)  # ZeRO-1 shards AdamW states
    assert mem8["weights"] == mem1["weights"] and mem8["grads"] == mem1["grads"]


def test_training_flops_derives_max_steps(mini_blocks):
    """training_flops fixes the budget: max_steps follows the shape, the batch and the GPU count, the planned FLOPs
    land within half a step of it, and a max_steps that disagrees fails at start naming both keys."""
    base = [f"data.path={mini_blocks}", "training.max_steps=-1", "training.per_device_train_batch_size=4"]
    per_step = pretrain(TINY_RECIPE, [*base[:1], "training.per_device_train_batch_size=4"], dry_run=True)["plan"]
    step_flops = per_step["flops_per_token"] * per_step["tokens_per_step"]
    plan = pretrain(TINY_RECIPE, [*base, f"training_flops={100.4 * step_flops}"], dry_run=True)["plan"]
    assert plan["max_steps"] == 100 and abs(plan["total_flops"] - 100.4 * step_flops) <= step_flops / 2
    four = pretrain(TINY_RECIPE, [*base, f"training_flops={100.4 * step_flops}"], dry_run=True, world_size=4)["plan"]
    assert four["max_steps"] == 25  # four GPUs: four times the tokens per step
    wider = pretrain(
        TINY_RECIPE, [*base, f"training_flops={100.4 * step_flops}", "model.overrides.hidden_size=128"], dry_run=True
    )["plan"]
    assert wider["max_steps"] < 100 and wider["total_flops"] == pytest.approx(100.4 * step_flops, rel=0.02)
    # Both set (a recipe.yaml saved before 2026-11-28 holds both) plans again; a max_steps that disagrees is refused.
    again = pretrain(
        TINY_RECIPE,
        [
            *base[:1],
            "training.per_device_train_batch_size=4",
            "training.max_steps=100",
            f"training_flops={100.4 * step_flops}",
        ],
        dry_run=True,
    )["plan"]
    assert again["max_steps"] == 100
    with pytest.raises(RecipeError, match=r"training_flops=.* means training.max_steps=100 .* training.max_steps=7"):
        pretrain(
            TINY_RECIPE,
            [
                *base[:1],
                "training.max_steps=7",
                "training.per_device_train_batch_size=4",
                f"training_flops={100.4 * step_flops}",
            ],
            dry_run=True,
        )


WSD = "training.lr_scheduler_type=warmup_stable_decay"


@pytest.mark.parametrize(
    "extra, expect",
    [
        (
            ["training.lr_scheduler_kwargs={decay_ratio: 0.2}"],
            "decay_ratio needs lr_scheduler_type=warmup_stable_decay",
        ),
        ([WSD, "training.lr_scheduler_kwargs={decay_ratio: 1.5}"], r"decay_ratio=1.5 is outside \(0, 1\)"),
        (
            [WSD, "training.lr_scheduler_kwargs={decay_ratio: 0.2, num_decay_steps: 3}"],
            "decay_ratio and num_decay_steps",
        ),
        (
            [WSD, "training.lr_scheduler_kwargs={decay_ratio: 0.2, num_stable_steps: 3}"],
            "decay_ratio and num_stable_steps",
        ),
        (
            [
                WSD,
                "training.lr_scheduler_kwargs={decay_ratio: 0.2}",
                "data.sources={a: x}",
                "data.mixture={a: 1}",
                "data.decay_in_last_phase=true",
            ],
            "decay_ratio and data.decay_in_last_phase",
        ),
    ],
)
def test_bad_decay_ratio_is_refused_at_load(extra, expect):
    with pytest.raises(RecipeError, match=expect):
        load_recipe(TINY_RECIPE, ["data.path=x", *extra])


def test_decay_ratio_follows_max_steps(mini_blocks, tmp_path):
    """lr_scheduler_kwargs.decay_ratio: warmup_stable_decay's decay is that share of max_steps (so a recipe whose
    max_steps follows from training_flops keeps its shape); the learning rate of a real run is HF's schedule."""
    from transformers import get_wsd_schedule

    recipe = tmp_path / "wsd.yaml"  # the tiny recipe with a WSD schedule (an override would merge the kwargs)
    recipe.write_text(
        TINY_RECIPE.read_text()
        .replace("lr_scheduler_type: cosine_with_min_lr", "lr_scheduler_type: warmup_stable_decay")
        .replace("{min_lr_rate: 0.1}", "{decay_ratio: 0.25, min_lr_ratio: 0.1}")
    )
    base = [f"data.path={mini_blocks}", "training.max_steps=12", "training.warmup_steps=2"]
    plan = pretrain(recipe, base, dry_run=True)["plan"]
    assert plan["lr_schedule"] == {
        "type": "warmup_stable_decay",
        "set_by": "training.lr_scheduler_kwargs.decay_ratio",
        "warmup_steps": 2,
        "stable_steps": 7,
        "num_decay_steps": 3,
        "decay_starts_at_step": 9,
        "min_lr_ratio": 0.1,
    }
    summary = pretrain(
        recipe,
        [
            *base,
            f"training.output_dir={tmp_path / 'run'}",
            "training.logging_steps=1",
            "training.eval_strategy=no",
            "training.save_strategy=no",
            "training.per_device_train_batch_size=2",
        ],
    )
    logged = {e["step"]: e["learning_rate"] for e in read_log(tmp_path / "run") if "learning_rate" in e}
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
    expected = get_wsd_schedule(optimizer, 2, num_decay_steps=3, num_training_steps=12, min_lr_ratio=0.1)
    for step in range(1, 13):  # the rate logged at step s is the one step s used: HF's at s - 1
        assert logged[step] == pytest.approx(3e-3 * expected.lr_lambdas[0](step - 1), rel=1e-6), step
    assert summary["global_step"] == 12
    # decay_ratio=null (an override that takes it out) leaves the kwargs get_wsd_schedule accepts
    plan = pretrain(
        recipe,
        [*base, "training.lr_scheduler_kwargs.decay_ratio=null", "training.lr_scheduler_kwargs.num_decay_steps=4"],
        dry_run=True,
    )["plan"]
    assert "lr_schedule" not in plan


def test_no_peak_no_expected_hours(mini_blocks):
    plan = pretrain(TINY_RECIPE, [f"data.path={mini_blocks}"], dry_run=True)["plan"]
    if plan["peak_flops_per_gpu"] is None:  # CPU: no known peak
        assert "expected_hours" not in plan
    else:
        assert plan["expected_hours"] > 0


# ---- overrides -------------------------------------------------------------------------------


def test_overrides_are_typed():
    r = load_recipe(
        TINY_RECIPE,
        [
            "data.path=/some/where",
            "training.max_steps=20",
            "training.learning_rate=1e-3",
            "training.bf16=false",
            "training.warmup_steps=0",
            "loss.chunk_tokens=1024",
            "logging.peak_flops=1e12",
            "logging.profile_steps=[2,4]",
            "nan_policy=skip",
            "training.save_strategy=no",
        ],
    )
    assert r.training["max_steps"] == 20 and type(r.training["max_steps"]) is int
    assert r.training["learning_rate"] == 1e-3 and type(r.training["learning_rate"]) is float
    assert r.training["bf16"] is False
    assert r.loss.chunk_tokens == 1024
    assert r.logging.peak_flops == 1e12 and isinstance(r.logging.peak_flops, float)
    assert list(r.logging.profile_steps) == [2, 4]
    assert r.nan_policy == "skip"
    # YAML reads a bare `no` as false; for a string field it is the "no" TrainingArguments wants.
    assert r.training["save_strategy"] == "no"


def test_int_learning_rate_coerced_to_float():
    r = load_recipe(TINY_RECIPE, ["data.path=x", "training.learning_rate=1"])
    assert r.training["learning_rate"] == 1.0 and type(r.training["learning_rate"]) is float


def test_nested_overrides():
    r = load_recipe(
        TINY_RECIPE,
        [
            "data.path=x",
            "model.overrides.num_hidden_layers=3",
            "model.overrides.rope_theta=50000.0",
            "training.lr_scheduler_kwargs.min_lr_rate=0.05",
            "training.lr_scheduler_kwargs.num_cycles=1",
        ],
    )
    assert r.model.overrides == {"num_hidden_layers": 3, "rope_theta": 50000.0}
    # merged into the recipe's dict, not replacing it
    assert r.training["lr_scheduler_kwargs"] == {"min_lr_rate": 0.05, "num_cycles": 1}


def test_defaults_without_recipe_file():
    r = load_recipe(None, ["data.path=x", "training.max_steps=5"])
    assert r.model.config == "tiny" and r.nan_policy == "stop" and r.training == {"max_steps": 5}


# ---- errors ----------------------------------------------------------------------------------


def _error(overrides, path=TINY_RECIPE) -> str:
    with pytest.raises(RecipeError) as info:
        load_recipe(path, overrides)
    return str(info.value)


def test_unknown_training_key_suggests():
    msg = _error(["data.path=x", "training.learning_rat=1e-3"])
    assert "training.learning_rat" in msg and "did you mean 'learning_rate'" in msg
    msg = _error(["data.path=x", "training.overwrite_output_dir=true"])  # the Trainer's flag: ours is top-level
    assert "overwrite_output_dir is a top-level recipe key" in msg and "(overwrite_output_dir=true on" in msg, msg


def test_wrong_type():
    msg = _error(["data.path=x", "training.learning_rate=fast"])
    assert "training.learning_rate" in msg and "float" in msg
    msg = _error(["data.path=x", "training.max_steps=ten"])
    assert "max_steps" in msg and "int" in msg
    msg = _error(["data.path=x", "loss.chunk_tokens=big"])
    assert "loss.chunk_tokens" in msg


def test_unknown_section():
    msg = _error(["data.path=x", "trainig.max_steps=3"])
    assert "unknown section 'trainig'" in msg and "did you mean 'training'" in msg
    # a key written without its section: the section(s) that have it
    assert "did you mean training.learning_rate=1e-3?" in _error(["data.path=x", "learning_rate=1e-3"])
    assert "did you mean model.compile=none?" in _error(["data.path=x", "compile=none"])


def test_unknown_model_key():
    msg = _error(["data.path=x", "model.atn_implementation=sdpa"])
    assert "model.atn_implementation" in msg and "did you mean 'attn_implementation'" in msg


@pytest.mark.parametrize(
    "item,key",
    [
        ("loss.implementation=fast", "loss.implementation"),
        ("model.compile=all", "model.compile"),
        ("model.attn_implementation=flash", "model.attn_implementation"),
        ("nan_policy=ignore", "nan_policy"),
    ],
)
def test_bad_choice(item, key):
    msg = _error(["data.path=x", item])
    assert key in msg and "is not one of" in msg


def test_a_bad_choice_names_the_nearest_value():
    assert _error(["data.path=x", "model.compile=layer"]) == (
        "model.compile='layer' is not one of ['auto', 'decoder', 'layers', 'model', 'none'] (did you mean 'layers'?)"
    )
    assert _error(["data.path=x", "context.rope=yarm"]).endswith("(did you mean 'yarn'?)")
    # `yes` is a boolean to YAML: the value reads 'True', and the line says why
    assert _error(["data.path=x", "model.compile=yes"]).startswith(
        "model.compile='True' (YAML reads yes/no/on/off/true/false as a boolean) is not one of"
    )


def test_choices_are_typed_on_the_fields():
    """Issue 57: a choice field's values are its Literal type (no side table); where a module owns the values
    (models/backend.py, fp8.py, residual.py), the type is made from them."""
    import typing

    from hfpretrain.models.backend import KNOWN_IMPLEMENTATIONS
    from hfpretrain.models.fp8 import FAST_ACCUM
    from hfpretrain.models.residual import RESIDUAL_DTYPES
    from hfpretrain.training import config

    assert not hasattr(config, "_CHOICES")
    hints = typing.get_type_hints(config.ModelSection)
    assert hints["compile"] == typing.Literal["auto", "none", "decoder", "layers", "model"]
    choices = config.recipe_choices()
    assert set(choices["model.attn_implementation"]) == {"auto", *KNOWN_IMPLEMENTATIONS}
    assert set(choices["model.fp8_fast_accum"]) == set(FAST_ACCUM)
    assert set(choices["model.residual_dtype"]) == set(RESIDUAL_DTYPES)
    assert set(choices) == {  # the keys the side table held, and the choices added since
        "model.attn_implementation",
        "model.compile",
        "model.precision",
        "model.fp8_fast_accum",
        "model.residual_dtype",
        "model.compile_backend",
        "model.compile_mode",
        "loss.implementation",
        "batch.micro_batch",
        "model.experts_implementation",
        "nan_policy",
        "resume_mismatch",
        "optimizer.name",
        "optimizer.muon_lr_scale",
        "logging.wandb_artifacts",
        "context.rope",
        "moe.aux_loss_scope",
    }
    phase = ["context.seq_len=4096", "context.from_seq_len=2048", "model.init_from=x"]
    for key, allowed in choices.items():  # each one accepted
        section, _, name = key.rpartition(".")
        for value in allowed:
            extra = (phase + ["context.rope_theta=1e6"] * (value == "theta")) if key == "context.rope" else []
            recipe = load_recipe(None, ["data.path=x", f"{key}={value}", *extra])
            assert getattr(getattr(recipe, section) if section else recipe, name) == value


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_a_recipe_written_out_loads_back_the_same(path, tmp_path):
    """recipe_to_yaml / recipe_to_dict: the sections' classes, not the schema OmegaConf reads them through."""
    import dataclasses

    from hfpretrain.training.config import Recipe, recipe_to_dict, recipe_to_yaml

    recipe = load_recipe(path, ["data.path=x"])
    assert type(recipe) is Recipe and type(recipe.model).__name__ == "ModelSection"
    (tmp_path / "r.yaml").write_text(recipe_to_yaml(recipe))
    again = load_recipe(tmp_path / "r.yaml")
    assert again == recipe and recipe_to_dict(again) == recipe_to_dict(recipe)
    assert list(recipe_to_dict(recipe)) == [f.name for f in dataclasses.fields(Recipe)]


@pytest.mark.parametrize(
    "item,key",
    [
        ("max_skipped_fraction=1.5", "max_skipped_fraction=1.5"),
        ("max_skipped_fraction=-0.1", "max_skipped_fraction=-0.1"),
        ("max_skipped_steps=-1", "max_skipped_steps=-1"),
    ],
)
def test_skip_ceilings_out_of_range(item, key):
    assert key in _error(["data.path=x", item])


@pytest.mark.parametrize(
    "item",
    [
        "training.gradient_accumulation_steps=0",
        "training.per_device_train_batch_size=0",
        "training.per_device_eval_batch_size=-1",
        "training.save_steps=0",
        "training.eval_steps=0",
        "evaluation.eval_tokens=-5",
        "evaluation.final_eval_tokens=-1",
    ],
)
def test_a_count_of_zero_is_refused_at_load(item):
    """gradient_accumulation_steps=0 was a ZeroDivisionError traceback, save_steps=0 a run with no checkpoint (exit
    0), a batch size or eval_tokens of 0 or less an error that named no key, after the model was built."""
    key, value = item.split("=")
    msg = _error(["data.path=x", item])
    assert msg.startswith(key) and "must be >" in msg, msg


@pytest.mark.parametrize("where", ["override", "file"])
def test_a_flow_mapping_without_a_space_after_the_colon_is_refused(tmp_path, where):
    """YAML reads {min_lr_rate:0.5} as the key 'min_lr_rate:0.5' with no value, and a kwarg set to null is unset:
    the run went on with the recipe's 0.1."""
    if where == "override":
        msg = _error(["data.path=x", "training.lr_scheduler_kwargs={min_lr_rate:0.5}"])
    else:
        recipe = tmp_path / "r.yaml"
        recipe.write_text(TINY_RECIPE.read_text().replace("{min_lr_rate: 0.1}", "{min_lr_rate:0.1}"))
        msg = _error(["data.path=x"], path=recipe)
    assert "'min_lr_rate:0." in msg and "space after the colon" in msg, msg
    assert load_recipe(TINY_RECIPE, ["data.path=x", "training.lr_scheduler_kwargs={min_lr_rate: 0.5}"]).training[
        "lr_scheduler_kwargs"
    ] == {"min_lr_rate": 0.5}


def test_the_trainers_sampling_strategies_are_refused():
    """PretrainTrainer's sampler replaces the Trainer's: group_by_length or sequential would silently do nothing."""
    assert "training.train_sampling_strategy='group_by_length'" in _error(
        ["data.path=x", "training.train_sampling_strategy=group_by_length"]
    )
    load_recipe(TINY_RECIPE, ["data.path=x", "training.train_sampling_strategy=random"])


def test_load_best_model_at_end_is_refused():
    msg = _error(["data.path=x", "training.load_best_model_at_end=true"])
    assert msg.startswith("training.load_best_model_at_end") and "metric_for_best_model" in msg


def test_malformed_override_and_missing_data_path():
    assert "section.key=value" in _error(["data.path=x", "training.max_steps"])
    assert "data.path is not set" in _error([], path=None)


def test_bad_key_in_recipe_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY_RECIPE.read_text().replace("\n  implementation:", "\n  implementaton:"))
    msg = _error(["data.path=x"], path=bad)
    assert "implementaton" in msg and "did you mean 'implementation'" in msg
    assert "does not exist" in _error(["data.path=x"], path=tmp_path / "missing.yaml")


# ---- the CLI ---------------------------------------------------------------------------------


def _cli(*args) -> subprocess.CompletedProcess:
    """``python scripts/pretrain.py TINY_RECIPE ARGS`` in a forked child (tests/forked.py)."""
    return script(PRETRAIN_SCRIPT.name, TINY_RECIPE, *args, cwd=REPO, env={"DS_ACCELERATOR": "cpu"})


def _one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_cli_bad_key_exits_2(tmp_path):
    line = _one_error_line(_cli(f"data.path={tmp_path}", "training.max_stepz=3", "--dry-run"))
    assert "training.max_stepz" in line and "max_steps" in line


def test_cli_missing_data_folder_exits_2(tmp_path):
    line = _one_error_line(_cli(f"data.path={tmp_path / 'nowhere'}", f"training.output_dir={tmp_path / 'run'}"))
    assert f"data.path={tmp_path / 'nowhere'} does not exist: make it with `hfpretrain tokenize " in line
    assert not (tmp_path / "run").exists()


def test_dry_run_without_data_plans_with_stated_assumptions(tmp_path, gpt2_tokenizer, caplog):
    """Before the data is tokenized, a dry run plans with an assumed seq_len (2048, at most the model's
    context), the vocabulary of data.tokenizer (else the config's) and one pass over the data, and says so."""
    path = REPO / "recipes" / "qwen3_1p8b.yaml"
    with caplog.at_level("WARNING", logger="hfpretrain"):
        plan = pretrain(
            path, [f"data.path={tmp_path / 'not_yet'}", *cpu_overrides(path)], dry_run=True, world_size=8, zero_stage=1
        )["plan"]
    assert plan["tokens_per_step"] == 720_896 and plan["seq_len"] == 2048 and plan["passes_over_data"] == 1.0
    assert plan["total_tokens"] == 720_896 * 162_000 and plan["shape"]["vocab_size"] == 151_680
    assumed = plan["assumed"]
    assert "no manifest.json" in assumed["why"] and assumed["vocab_size"] == 151_680
    assert "model config qwen3_1p8b" in assumed["vocabulary"] and plan["validation_tokens_per_byte"] is None
    assert "dry run without data" in caplog.text and "assumed seq_len 2048" in caplog.text
    tiny = pretrain(
        TINY_RECIPE, [f"data.path={tmp_path / 'not_yet'}", f"data.tokenizer={gpt2_tokenizer}"], dry_run=True
    )["plan"]
    assert tiny["shape"]["vocab_size"] == GPT2_PADDED_VOCAB and tiny["assumed"]["seq_len"] == 2048
    assert str(gpt2_tokenizer) in tiny["assumed"]["vocabulary"]
    with pytest.raises(FileNotFoundError, match="not_yet does not exist: make it with"):  # a real run needs the data
        pretrain(TINY_RECIPE, [f"data.path={tmp_path / 'not_yet'}", f"training.output_dir={tmp_path / 'run'}"])


def test_cli_dry_run_prints_plan(mini_blocks, tmp_path):
    proc = _cli(f"data.path={mini_blocks}", f"training.output_dir={tmp_path / 'run'}", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["plan"]["tokens_per_step"] == 16 * 128
    assert out["recipe"]["data"]["path"] == str(mini_blocks)
    assert not (tmp_path / "run").exists()


def test_sdpa_backends_are_checked_and_ordered():
    assert "model.sdpa_backends" in _error(["data.path=x", "model.sdpa_backends=[cudnn,flsh]"])
    assert "model.sdpa_backends" in _error(["data.path=x", "model.sdpa_backends=[]"])
    r = load_recipe(TINY_RECIPE, ["data.path=x", "model.sdpa_backends=[cudnn,flash]"])
    from torch.nn.attention import SDPBackend

    from hfpretrain.training.run import sdpa_kernels

    before = torch._C._get_sdp_priority_order()
    with sdpa_kernels(r.model.sdpa_backends):  # the listed order becomes PyTorch's priority order
        assert torch._C._get_sdp_priority_order()[:2] == [
            int(SDPBackend.CUDNN_ATTENTION),
            int(SDPBackend.FLASH_ATTENTION),
        ]
    assert torch._C._get_sdp_priority_order() == before


ACCELERATE_CONFIGS = sorted((REPO / "accelerate_configs").glob("*.yaml"))


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.stem)
def test_accelerate_config_loads(path):
    """Every shipped accelerate config loads with accelerate's own reader, and a DeepSpeed one names
    a ds_configs/ file that exists, is JSON, and leaves the batch sizes to the recipe ("auto")."""
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(path))
    assert config.num_processes >= 1 and config.num_machines >= 1
    if config.distributed_type == "DEEPSPEED":
        ds = json.loads((REPO / config.deepspeed_config["deepspeed_config_file"]).read_text())
        assert ds["zero_optimization"]["stage"] == 1
        assert ds["train_micro_batch_size_per_gpu"] == ds["gradient_accumulation_steps"] == "auto"


def test_a_missing_optional_package_is_named_with_its_extra(monkeypatch):
    """W&B, TensorBoard and DeepSpeed are extras: a run that needs one this environment lacks says which."""
    import importlib.util

    from hfpretrain.training.arguments import missing_extras
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="/tmp/x", report_to=["wandb", "tensorboard"], use_cpu=True)
    assert missing_extras(args) == []  # the test environment has them all
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert missing_extras(args) == ["training.report_to=wandb needs the wandb package: pip install 'hfpretrain[wandb]'"]


def test_inductor_options_are_checked():
    """A misspelt inductor setting would be a silent no-op: it is refused, with the nearest name."""
    r = load_recipe(
        TINY_RECIPE, ["data.path=x", "model.inductor_options={coordinate_descent_tuning: true, triton.multi_kernel: 1}"]
    )
    assert r.model.inductor_options == {"coordinate_descent_tuning": True, "triton.multi_kernel": 1}
    err = _error(["data.path=x", "model.inductor_options={coordinate_descent_tunin: true}"])
    assert "model.inductor_options.coordinate_descent_tunin" in err and "coordinate_descent_tuning?" in err
    assert "a group of settings" in _error(["data.path=x", "model.inductor_options={triton: 1}"])
    # a dotted override reaches inside the group: flattened to the name inductor's config.patch takes
    r = load_recipe(TINY_RECIPE, ["data.path=x", "model.inductor_options.triton.prefer_nd_tiling=true"])
    assert r.model.inductor_options == {"triton.prefer_nd_tiling": True}
    assert "triton.nope" in _error(["data.path=x", "model.inductor_options.triton.nope=1"])
    # a misspelt mapping-valued setting, or an empty group, is refused rather than flattened into nothing
    assert "pre_grad_fusion_option:" in _error(
        ["data.path=x", "model.inductor_options={pre_grad_fusion_option: {a: {}}}"]
    )
    assert "a group of settings" in _error(["data.path=x", "model.inductor_options={triton: {}}"])
    # a setting whose value is itself a mapping stays whole
    r = load_recipe(
        TINY_RECIPE, ["data.path=x", "model.inductor_options={pre_grad_fusion_options: {batch_linear: {}}}"]
    )
    assert r.model.inductor_options == {"pre_grad_fusion_options": {"batch_linear": {}}}
    assert "triton.nope" in _error(["data.path=x", "model.inductor_options={triton.nope: 1}"])
    assert "expected a bool" in _error(["data.path=x", "model.inductor_options={coordinate_descent_tuning: 5}"])


def test_a_recipe_saved_with_the_old_boolean_fp8_fast_accum_still_loads(tmp_path):
    """Recipes saved before fp8_fast_accum became a choice wrote a bool: false was torchao's forward-only recipe."""
    for old, now in (("false", "forward"), ("true", "all")):
        path = tmp_path / f"{old}.yaml"
        path.write_text(f"model:\n  fp8_fast_accum: {old}\ndata:\n  path: somewhere\n")
        assert load_recipe(path).model.fp8_fast_accum == now
    with pytest.raises(
        RecipeError, match=r"model.fp8_fast_accum='backward' is not one of \['all', 'forward', 'input_grad'\]"
    ):
        load_recipe(path, ["model.fp8_fast_accum=backward"])


def resolved_arguments(recipe):
    """The TrainingArguments ``recipe`` resolves to in a dry run on this machine."""
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve

    return resolve(recipe, read_data_facts(recipe, planning=True), Machine.detect(planning=True)).args


# ---- issue 36.9: scheduler kwargs the chosen schedule does not take ------------------------------------------


@pytest.mark.parametrize(
    "extra, names",
    [
        # the tiny recipe's cosine_with_min_lr {min_lr_rate: 0.1}, switched to WSD: min_lr_rate stays behind
        (["training.lr_scheduler_type=warmup_stable_decay"], "does not take min_lr_rate"),
        (["training.lr_scheduler_kwargs.min_lr_rat=0.2"], "min_lr_rat (did you mean 'min_lr_rate'?)"),  # a typo
        (["training.lr_scheduler_type=cosine"], "cosine does not take min_lr_rate"),
        # transformers drops any kwargs of these two silently: no floor, no cycles, whatever the recipe says
        (["training.lr_scheduler_type=constant_with_warmup"], "constant_with_warmup does not take min_lr_rate"),
        (
            ["training.lr_scheduler_type=linear", "training.lr_scheduler_kwargs={min_lr_rate: null, power: 2}"],
            "linear does not take power",
        ),
    ],
)
def test_scheduler_kwargs_the_schedule_does_not_take_are_refused_at_load(extra, names):
    with pytest.raises(RecipeError) as err:
        load_recipe(TINY_RECIPE, ["data.path=x", *extra])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("training.lr_scheduler_kwargs: lr_scheduler_type=") and names in msg, msg
    assert "it takes: " in msg, msg


@pytest.mark.parametrize(
    "extra",
    [
        [],  # cosine_with_min_lr {min_lr_rate}
        [
            "training.lr_scheduler_type=warmup_stable_decay",
            "training.lr_scheduler_kwargs.min_lr_rate=null",
            "training.lr_scheduler_kwargs.min_lr_ratio=0.1",
            "training.lr_scheduler_kwargs.decay_ratio=0.2",
        ],
        [
            "training.lr_scheduler_type=cosine_with_min_lr",
            "training.lr_scheduler_kwargs={min_lr_rate: null, min_lr: 1e-5}",
        ],
        ["training.lr_scheduler_type=polynomial", 'training.lr_scheduler_kwargs={"power": 2.0, min_lr_rate: null}'],
        ["training.lr_scheduler_type=reduce_lr_on_plateau", "training.lr_scheduler_kwargs={patience: 3}"],  # **kwargs
        ["training.lr_scheduler_type=constant", "training.lr_scheduler_kwargs=null"],
    ],
)
def test_scheduler_kwargs_the_schedule_takes_load(extra):
    load_recipe(TINY_RECIPE, ["data.path=x", *extra])


def test_a_null_scheduler_kwarg_is_not_handed_to_the_scheduler(mini_blocks, tmp_path):
    """An override that takes a kwarg out (``...min_lr_rate=null``) leaves it unset: TrainingArguments would pass
    min_lr_rate=None to get_wsd_schedule (a TypeError when the Trainer makes the scheduler)."""
    recipe = load_recipe(
        TINY_RECIPE,
        [
            f"data.path={mini_blocks}",
            "training.lr_scheduler_type=warmup_stable_decay",
            "training.lr_scheduler_kwargs.min_lr_rate=null",
            "training.lr_scheduler_kwargs.num_decay_steps=3",
        ],
    )
    assert resolved_arguments(recipe).lr_scheduler_kwargs == {"num_decay_steps": 3}


# ---- issue 36.5: a compute budget that buys no step -------------------------------------------------------------


@pytest.mark.parametrize(
    "share, says",
    [
        (0, "is not a budget (> 0)"),
        (-1, "is not a budget (> 0)"),
        (0.4, "is less than one optimizer step"),
        (0.9, "is less than one optimizer step"),
    ],
)
def test_training_flops_that_buys_no_step_is_refused(mini_blocks, share, says):
    """It trained one step and exited 0."""
    per_step = pretrain(
        TINY_RECIPE, [f"data.path={mini_blocks}", "training.per_device_train_batch_size=4"], dry_run=True
    )["plan"]
    step_flops = per_step["flops_per_token"] * per_step["tokens_per_step"]
    with pytest.raises(RecipeError) as err:
        pretrain(
            TINY_RECIPE,
            [
                f"data.path={mini_blocks}",
                "training.max_steps=-1",
                "training.per_device_train_batch_size=4",
                f"training_flops={share * step_flops}",
            ],
            dry_run=True,
        )
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("training_flops=") and says in msg and f"{step_flops:.4g}" in msg, msg
    # one step's FLOPs buy one step
    plan = pretrain(
        TINY_RECIPE,
        [
            f"data.path={mini_blocks}",
            "training.max_steps=-1",
            "training.per_device_train_batch_size=4",
            f"training_flops={step_flops}",
        ],
        dry_run=True,
    )["plan"]
    assert plan["max_steps"] == 1


# ---- issue 39.5: a warmup as long as the run; the first step's log -------------------------------------------------


@pytest.mark.parametrize("warmup, warned", [("30", True), ("10", True), ("9", False), ("0.5", False), ("0.95", True)])
def test_a_warmup_as_long_as_the_run_is_said(mini_blocks, caplog, warmup, warned):
    with caplog.at_level("WARNING", logger="hfpretrain"):
        pretrain(
            TINY_RECIPE,
            [f"data.path={mini_blocks}", "training.max_steps=10", f"training.warmup_steps={warmup}"],
            dry_run=True,
        )
    said = [r.getMessage() for r in caplog.records if "warmup steps >= training.max_steps=10" in r.getMessage()]
    assert len(said) == int(warned), caplog.text
    if warned:
        assert said[0].startswith(f"training.warmup_steps={warmup}:"), said


def test_the_first_steps_log_is_written_unless_the_recipe_says_otherwise(mini_blocks):

    def args(*extra):
        return resolved_arguments(load_recipe(TINY_RECIPE, [f"data.path={mini_blocks}", *extra]))

    assert args().logging_first_step is True and args().logging_steps == 10
    assert args("training.logging_first_step=false").logging_first_step is False


@pytest.mark.parametrize("warmup, peak", [(30, 3e-3 * 2 / 30), (1, 3e-3)])
def test_the_model_card_states_the_learning_rate_that_ran(mini_blocks, tmp_path, warmup, peak):
    """A 3-step run with a 30-step warmup trained at most at 2/30 of training.learning_rate: the card said 3e-3."""
    from train_utils import run_pretrain

    out = tmp_path / "run"
    summary = run_pretrain(mini_blocks, out, {"training.max_steps": "3", "training.warmup_steps": str(warmup)})
    assert summary["peak_learning_rate"] == pytest.approx(peak)
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "final" / "README.md")  # the header as the Hub reads it
    assert card.data.pipeline_tag == "text-generation" and "hfpretrain" in card.data.tags
    row = next(line for line in card.text.splitlines() if line.startswith("| peak learning rate"))
    if warmup > 3:
        assert f"{peak:.3g} (peak reached; 0.003 set, but the warmup outlasts the run)" in row, row
    else:
        assert row == "| peak learning rate, schedule | 0.003, constant_with_warmup |", row


@pytest.mark.parametrize("name", ["activation_checkpointing", "gradient_checkpointing"])
def test_checkpointing_under_either_name(name):
    """transformers 5.24's name and 5.17's both load, on whichever transformers is installed."""
    from hfpretrain.training.arguments import activation_checkpointing

    recipe = load_recipe(
        TINY_RECIPE,
        [
            "data.path=x",
            "training.max_steps=3",
            f"training.{name}=true",
            f"training.{name}_kwargs={{every_n_layers: 2}}",
        ],
    )
    assert activation_checkpointing(resolved_arguments(recipe)) == (True, {"every_n_layers": 2})


# ---- one optimizer selector: optimizer.name (issue 57) ------------------------------------------------------------


def _old_recipe(tmp_path, training: dict, optimizer: dict | None = None):
    import yaml

    raw = yaml.safe_load(TINY_RECIPE.read_text())
    raw.pop("optimizer", None)
    raw["training"].update(training)
    if optimizer is not None:
        raw["optimizer"] = optimizer
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_training_optim_still_loads_as_optimizer_name_with_one_warning(tmp_path, caplog):
    from hfpretrain.training.arguments import training_fields
    from hfpretrain.training.machine import Machine

    with caplog.at_level("WARNING", logger="hfpretrain"):
        recipe = load_recipe(_old_recipe(tmp_path, {"optim": "adamw_torch"}, {"name": "adamw"}))
    assert recipe.optimizer.name == "adamw_torch" and "optim" not in recipe.training
    said = [r.getMessage() for r in caplog.records if "training.optim is now optimizer.name" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert training_fields(recipe, Machine.detect(planning=True))["optim"] == "adamw_torch"
    caplog.clear()
    with caplog.at_level("WARNING", logger="hfpretrain"):
        recipe = load_recipe(TINY_RECIPE, ["training.optim=sgd"])  # an override too
    assert recipe.optimizer.name == "sgd" and "optimizer.name" in caplog.text


def test_training_optim_beside_another_optimizer_name_is_one_error(tmp_path):
    with pytest.raises(
        RecipeError,
        match=r"training.optim='adamw_torch' and optimizer.name='sgd' are one setting: "
        r"keep optimizer.name",
    ):
        load_recipe(_old_recipe(tmp_path, {"optim": "adamw_torch"}, {"name": "sgd"}))


def test_muon_keeps_its_adamw_and_an_unknown_optimizer_is_named(tmp_path):
    recipe = load_recipe(_old_recipe(tmp_path, {"optim": "adamw_torch_fused"}, {"name": "muon"}))
    assert recipe.optimizer.name == "muon" and "optim" not in recipe.training
    assert load_recipe(TINY_RECIPE, ["optimizer.name=adamw"]).optimizer.name == "adamw_torch_fused"  # the old default
    with pytest.raises(RecipeError, match=r"optimizer.name='adamw_fused' is not one of .*did you mean"):
        load_recipe(TINY_RECIPE, ["optimizer.name=adamw_fused"])


# ---- keys grouped by what they configure (issue 57) --------------------------------------------------------------


def test_a_moved_key_still_loads_at_its_new_place_with_one_warning(tmp_path, caplog):
    import yaml

    from hfpretrain.training.config import MOVED_KEYS

    raw = yaml.safe_load(TINY_RECIPE.read_text())
    raw.pop("loss", None)
    raw["model"].update(
        fused_loss="chunked",
        loss_chunk_tokens=512,
        liger_min_chunk_tokens=0,
        z_loss=1e-4,
        micro_batch="recipe",
        decay_embeddings=True,
    )
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(raw))
    with caplog.at_level("WARNING", logger="hfpretrain"):
        recipe = load_recipe(tmp_path / "old.yaml", ["model.z_loss=1e-3"])  # an override names the old key too
    assert (
        recipe.loss.implementation,
        recipe.loss.chunk_tokens,
        recipe.loss.liger_min_chunk_tokens,
        recipe.loss.z_loss,
    ) == ("chunked", 512, 0, 1e-3)
    assert recipe.batch.micro_batch == "recipe" and recipe.optimizer.decay_embeddings is True
    for old, new in MOVED_KEYS.items():
        if old.startswith("model."):
            assert f"{old} is now {new}" in caplog.text, old
    raw["loss"] = {"implementation": "liger"}
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(
        RecipeError,
        match=r"model.fused_loss='chunked' and loss.implementation='liger' are one "
        r"setting: keep loss.implementation",
    ):
        load_recipe(tmp_path / "both.yaml")
