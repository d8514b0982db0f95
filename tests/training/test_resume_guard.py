"""A resume continues *this* run, and the tokenizer is the data's (issue 20, silent wrong results 3 and 4).

* ``resume_from_checkpoint=auto`` in an output_dir that holds another run's checkpoint (another model,
  data, seq_len, tokenizer, learning rate, batch or seed) stops with one line listing the differences
  (``resume_mismatch=allow`` resumes anyway, with a warning); max_steps, cadence and paths may differ.
* A checkpoint already at max_steps trains nothing: said in a warning, not silently.
* ``data.tokenizer`` that is not the tokenizer the data was made with stops with one line, unless
  its vocabulary is the same (a warning).

Tiny runs on the ``mini_blocks`` fixture (GPT-2, seq_len 128): one 2-step run with a checkpoint,
copied per test; the refusals happen at start, before anything is built or written.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from hfpretrain.training import pretrain

from train_utils import make_overrides, read_log, run_pretrain

OLD = {"training.max_steps": "2", "training.save_strategy": "steps", "training.save_steps": "2"}


@pytest.fixture(scope="module")
def old_run(mini_blocks, tmp_path_factory) -> Path:
    """A finished 2-step run (learning rate 3e-3) with checkpoint-2."""
    out = tmp_path_factory.mktemp("old") / "run"
    run_pretrain(mini_blocks, out, OLD)
    return out


@pytest.fixture
def run_dir(old_run, tmp_path) -> Path:
    """A copy of the old run's folder, as a new run pointed at it finds it."""
    dst = tmp_path / "run"
    shutil.copytree(old_run, dst)
    return dst


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_checkpoint_records_the_data(old_run, mini_blocks):
    data = json.loads((old_run / "checkpoint-2" / "data.json").read_text())
    manifest = json.loads((mini_blocks / "manifest.json").read_text())
    assert data["fingerprint"] == manifest["fingerprint"] and data["seq_len"] == 128
    assert data["tokenizer_sha256"] == manifest["tokenizer"]["sha256"]


@pytest.mark.parametrize(
    "extra, expect",
    [
        ({"training.learning_rate": "1e-4"}, "training.learning_rate 0.003 → 0.0001"),
        ({"model.overrides.num_hidden_layers": "1"}, "model.overrides {} → {'num_hidden_layers': 1}"),
        (
            {"training.per_device_train_batch_size": "2", "training.seed": "7"},
            "samples per step (global batch) 4 → 2; training.seed 1234 → 7",
        ),
    ],
)
def test_another_runs_checkpoint_is_refused(mini_blocks, run_dir, extra, expect):
    """The old behaviour: the new run resumed checkpoint-2, trained 0 steps and wrote final/, exit 0."""
    before = _snapshot(run_dir)
    with pytest.raises(ValueError) as err:
        run_pretrain(mini_blocks, run_dir, {**OLD, **extra, "training.resume_from_checkpoint": "auto"})
    msg = str(err.value)
    assert "\n" not in msg and "checkpoint-2 is from a different run" in msg, msg
    assert expect in msg and "resume_mismatch=allow" in msg, msg
    assert _snapshot(run_dir) == before  # nothing written: recipe.yaml, log.jsonl, final/ untouched


def test_other_data_is_refused(mini_blocks, mini_train, mini_val, gpt2_tokenizer, run_dir, tmp_path):
    from hfpretrain.data import tokenize_corpus

    other = tokenize_corpus(
        inputs=[mini_train],
        val_inputs=[mini_val],
        out=tmp_path / "other",
        tokenizer=gpt2_tokenizer,
        seq_len=64,
        max_docs=40,
        val_docs=20,
    )
    with pytest.raises(
        ValueError,
        match=r"data \(manifest fingerprint\) .*mini_blocks .* → .*other .*; "
        r"data seq_len 128 → 64",
    ):
        run_pretrain(other, run_dir, {**OLD, "training.resume_from_checkpoint": "auto"})


def test_allowed_differences_extend_the_run(mini_blocks, run_dir):
    """max_steps (extending), logging and save cadence, output paths: the same run, resumed."""
    summary = run_pretrain(
        mini_blocks,
        run_dir,
        {
            **OLD,
            "training.max_steps": "3",
            "training.save_steps": "3",
            "training.logging_steps": "1",
            "logging.jsonl": "log2.jsonl",
            "training.resume_from_checkpoint": "auto",
        },
    )
    assert summary["global_step"] == 3
    assert [e["step"] for e in read_log(run_dir, "log2.jsonl") if e["event"] == "log" and "loss" in e] == [3]
    assert (run_dir / "checkpoint-3" / "data.json").is_file()


def test_allow_resumes_with_a_warning_and_nothing_to_train_is_said(mini_blocks, run_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="hfpretrain"):
        summary = run_pretrain(
            mini_blocks,
            run_dir,
            {
                **OLD,
                "training.learning_rate": "1e-4",
                "resume_mismatch": "allow",
                "training.resume_from_checkpoint": "auto",
            },
        )
    assert summary["global_step"] == 2
    text = caplog.text
    assert "different run (resume_mismatch=allow): training.learning_rate 0.003 → 0.0001" in text
    assert "checkpoint-2 is at step 2 and training.max_steps=2: NOTHING WILL BE TRAINED" in text


def test_checkpoint_without_data_json_is_compared_on_the_recipe(mini_blocks, run_dir, tmp_path):
    """Checkpoints saved before data.json existed: the recipe's data.path stands in for the fingerprint."""
    (run_dir / "checkpoint-2" / "data.json").unlink()
    moved = tmp_path / "moved_blocks"
    shutil.copytree(mini_blocks, moved)
    with pytest.raises(ValueError, match=r"data.path '.*mini_blocks' → '.*moved_blocks'"):
        run_pretrain(moved, run_dir, {**OLD, "training.resume_from_checkpoint": "auto"})


# ---- data.tokenizer vs the data's tokenizer ------------------------------------------------------


def _plan(data_path, extra):
    return pretrain(None, make_overrides(data_path, "unused", {"training.max_steps": "2", **extra}), dry_run=True)


@pytest.mark.full_data("Qwen3 tokenizer")
def test_tokenizer_of_other_data_is_refused(mini_blocks, data_root):
    """GPT-2 data with the Qwen3 tokenizer trained, and shipped the Qwen3 tokenizer, exit 0."""
    qwen3 = data_root / "tokenizers" / "qwen3"
    with pytest.raises(ValueError) as err:
        _plan(mini_blocks, {"data.tokenizer": str(qwen3)})
    msg = str(err.value)
    assert "\n" not in msg and f"data.tokenizer={qwen3}" in msg and "tokenizers/gpt2" in msg, msg
    assert "leave data.tokenizer unset" in msg


def test_same_tokenizer_given_explicitly_is_fine(mini_blocks, gpt2_tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="hfpretrain"):
        for tok in (gpt2_tokenizer, mini_blocks / "tokenizer"):
            _plan(mini_blocks, {"data.tokenizer": str(tok)})
    assert "data.tokenizer" not in caplog.text


def test_same_vocabulary_other_file_only_warns(mini_blocks, gpt2_tokenizer, tmp_path, caplog):
    tok = tmp_path / "gpt2_edited"
    shutil.copytree(gpt2_tokenizer, tok)
    config = json.loads((tok / "tokenizer_config.json").read_text())
    config["add_prefix_space"] = not config.get("add_prefix_space", False)  # another hash, the same vocabulary
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING, logger="hfpretrain"):
        _plan(mini_blocks, {"data.tokenizer": str(tok)})
    assert "has the same vocabulary" in caplog.text


def test_global_batch_not_gpu_count_makes_the_run():
    """A ZeRO-1 universal resume on another GPU count keeps the global batch (2 GPUs x 2 = 1 GPU x 4):
    the same run. A checkpoint without data.json has only its recipe's per-device batch to go by."""
    from hfpretrain.training.config import load_recipe, recipe_to_dict
    from hfpretrain.training.resume import resume_differences

    def recipe(batch):
        return recipe_to_dict(load_recipe(None, ["data.path=x", f"training.per_device_train_batch_size={batch}"]))

    data = {"data_path": "x", "fingerprint": "f", "seq_len": 128, "tokenizer": "t", "tokenizer_sha256": "s"}
    old, new = recipe(2), recipe(4)
    assert resume_differences(old, new, {**data, "samples_per_step": 4}, {**data, "samples_per_step": 4}) == []
    assert resume_differences(old, new, {**data, "samples_per_step": 4}, {**data, "samples_per_step": 8}) == [
        "samples per step (global batch) 4 → 8"
    ]
    assert resume_differences(old, new, None, {**data, "samples_per_step": 4}) == [
        "training.per_device_train_batch_size 2 → 4"
    ]


def test_document_mask_and_z_loss_make_another_run():
    """Both change what the model learns: resuming with either toggled is another run; a recipe saved before
    they existed reads as both off."""
    from hfpretrain.training.config import load_recipe, recipe_to_dict
    from hfpretrain.training.resume import resume_differences

    data = {
        "data_path": "x",
        "fingerprint": "f",
        "seq_len": 128,
        "tokenizer": "t",
        "tokenizer_sha256": "s",
        "samples_per_step": 4,
    }
    plain = recipe_to_dict(load_recipe(None, ["data.path=x"]))
    masked = recipe_to_dict(load_recipe(None, ["data.path=x", "model.document_mask=true", "loss.z_loss=1e-4"]))
    assert resume_differences(plain, masked, data, data) == [
        "model.document_mask False → True",
        "loss.z_loss 0.0 → 0.0001",
    ]
    older = {**plain, "model": {k: v for k, v in plain["model"].items() if k not in ("document_mask", "z_loss")}}
    assert resume_differences(older, plain, data, data) == []
    before_moe = {k: v for k, v in plain.items() if k != "moe"}  # a recipe saved before the moe: section
    assert resume_differences(before_moe, plain, data, data) == []


def test_schedule_shape_makes_another_run():
    """lr_scheduler_kwargs (the decay's length and floor) are not in the scheduler's saved state: resuming with
    other ones is another run; a recipe without them reads as {} (TrainingArguments' default)."""
    from hfpretrain.training.config import load_recipe, recipe_to_dict
    from hfpretrain.training.resume import resume_differences

    data = {
        "data_path": "x",
        "fingerprint": "f",
        "seq_len": 128,
        "tokenizer": "t",
        "tokenizer_sha256": "s",
        "samples_per_step": 4,
    }
    wsd = ["data.path=x", "training.lr_scheduler_type=warmup_stable_decay"]
    a = recipe_to_dict(load_recipe(None, [*wsd, "training.lr_scheduler_kwargs={decay_ratio: 0.2}"]))
    b = recipe_to_dict(load_recipe(None, [*wsd, "training.lr_scheduler_kwargs={decay_ratio: 0.1}"]))
    assert resume_differences(a, b, data, data) == [
        "training.lr_scheduler_kwargs {'decay_ratio': 0.2} → {'decay_ratio': 0.1}"
    ]
    plain = recipe_to_dict(load_recipe(None, ["data.path=x"]))
    assert "lr_scheduler_kwargs" not in plain["training"] and resume_differences(plain, plain, data, data) == []


# ---- issue 36.4: every optimisation setting the result depends on ------------------------------------------------


@pytest.mark.parametrize(
    "key, old, new",
    [
        ("training.warmup_steps", 2, 5),
        ("training.warmup_steps", 2, 0.1),
        ("training.weight_decay", 0.1, 0.0),
        ("training.adam_beta1", 0.9, 0.8),
        ("training.adam_beta2", 0.95, 0.999),
        ("training.adam_epsilon", 1e-8, 1e-6),
        ("training.max_grad_norm", 1.0, 0.5),
        ("optimizer.name", "adamw_torch", "adafactor"),
        ("training.lr_scheduler_kwargs", "{min_lr_rate: 0.1}", "{min_lr_rate: 0.2}"),
        ("training.label_smoothing_factor", 0.0, 0.1),
        ("optimizer.decay_embeddings", False, True),
        ("moe.aux_loss_coef", 0.001, 0.01),
        ("moe.aux_loss_scope", "pooled", "per_layer"),
        ("moe.bias_update_rate", 0.0, 0.001),
    ],
)
def test_every_optimisation_setting_makes_another_run(key, old, new):
    """A changed warmup made the learning rate rise again at the last step; the others changed the result with
    nothing said. The line names each difference."""
    from hfpretrain.training.config import load_recipe, recipe_to_dict
    from hfpretrain.training.resume import resume_differences

    data = {
        "data_path": "x",
        "fingerprint": "f",
        "seq_len": 128,
        "tokenizer": "t",
        "tokenizer_sha256": "s",
        "samples_per_step": 4,
    }
    a = recipe_to_dict(
        load_recipe(
            None,
            ["data.path=x", "training.lr_scheduler_type=cosine_with_min_lr", f"{key}={old}", "training.max_steps=10"],
        )
    )
    b = recipe_to_dict(
        load_recipe(
            None,
            ["data.path=x", "training.lr_scheduler_type=cosine_with_min_lr", f"{key}={new}", "training.max_steps=20"],
        )
    )  # max_steps may differ
    diffs = resume_differences(a, b, data, data)
    assert len(diffs) == 1 and diffs[0].startswith(f"{key} "), diffs
    assert resume_differences(a, a, data, data) == []


def test_changed_warmup_and_clipping_are_refused_naming_both(mini_blocks, run_dir):
    before = _snapshot(run_dir)
    with pytest.raises(ValueError) as err:
        run_pretrain(
            mini_blocks,
            run_dir,
            {
                **OLD,
                "training.max_steps": "4",
                "training.warmup_steps": "3",
                "training.max_grad_norm": "0.5",
                "training.resume_from_checkpoint": "auto",
            },
        )
    msg = str(err.value)
    assert "\n" not in msg and "training.warmup_steps 2.0 → 3.0" in msg and "training.max_grad_norm 1.0 → 0.5" in msg, (
        msg
    )
    assert "resume_mismatch=allow" in msg
    assert _snapshot(run_dir) == before


# ---- issue 36.10: another optimizer on resume --------------------------------------------------------------------


def test_another_optimizer_on_resume_is_one_line(mini_blocks, run_dir):
    """optimizer.name changed on resume: refused as another run; with resume_mismatch=allow the checkpoint's
    optimizer state cannot continue in the new optimizer (it was ``KeyError: 'beta1'`` at the first step)."""
    new = {**OLD, "training.max_steps": "4", "optimizer.name": "adafactor", "training.resume_from_checkpoint": "auto"}
    with pytest.raises(ValueError, match=r"is from a different run: optimizer.name 'adamw_torch' → 'adafactor'"):
        run_pretrain(mini_blocks, run_dir, new)
    with pytest.raises(ValueError) as err:
        run_pretrain(mini_blocks, run_dir, {**new, "resume_mismatch": "allow"})
    msg = str(err.value)
    assert "\n" not in msg and f"{run_dir / 'checkpoint-2' / 'optimizer.pt'} holds another optimizer's state" in msg
    assert "optimizer.name=adafactor" in msg and "beta1" in msg, msg
    assert not (run_dir / "checkpoint-4").exists()
    # the same optimizer under another implementation keeps its state: resumes
    summary = run_pretrain(
        mini_blocks, run_dir, {**new, "optimizer.name": "adamw_torch_fused", "resume_mismatch": "allow"}
    )
    assert summary["global_step"] == 4


@pytest.mark.parametrize(
    "schedule, warned", [("cosine_with_min_lr", True), ("linear", True), ("constant_with_warmup", False)]
)
def test_a_longer_run_on_resume_says_the_schedule_is_stretched(tmp_path, caplog, schedule, warned):
    """Extending a run is allowed, but a cosine over 10 steps resumed at step 5 as a cosine over 20 steps went from
    the middle of its decay back near the peak, with nothing said."""
    import json

    from hfpretrain.training.config import load_recipe, recipe_to_yaml
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve
    from hfpretrain.training.resume import check_resume

    def recipe(steps):
        kwargs = "{min_lr_rate: 0.1}" if schedule == "cosine_with_min_lr" else "null"
        return load_recipe(
            None,
            [
                "data.path=x",
                f"training.lr_scheduler_type={schedule}",
                f"training.lr_scheduler_kwargs={kwargs}",
                f"training.max_steps={steps}",
            ],
        )

    checkpoint = tmp_path / "checkpoint-5"
    checkpoint.mkdir()
    (checkpoint / "recipe.yaml").write_text(recipe_to_yaml(recipe(10)))
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    with caplog.at_level("WARNING", logger="hfpretrain"):
        for steps in (20, 10):  # 10: the same length, nothing to say
            run = resolve(recipe(steps), read_data_facts(recipe(steps), planning=True), Machine.detect(planning=True))
            check_resume(str(checkpoint), run)
    said = [r.getMessage() for r in caplog.records if "stretches" in r.getMessage()]
    assert len(said) == int(warned), caplog.text
    if warned:
        assert f"training.max_steps 10 → 20 on resume stretches the {schedule} schedule" in said[0]
        assert "from step 5 on" in said[0] and "jumps" in said[0]


def test_a_checkpoint_saved_before_keys_moved_is_the_same_run():
    """A checkpoint's recipe.yaml from before the loss:, batch: and optimizer.name keys (config.MOVED_KEYS) is read at
    their new places: the same settings are the same run, a changed one is named by its new key."""
    from hfpretrain.training.config import load_recipe, recipe_to_dict, migrate_recipe_dict
    from hfpretrain.training.resume import resume_differences

    data = {
        "data_path": "x",
        "fingerprint": "f",
        "seq_len": 128,
        "tokenizer": "t",
        "tokenizer_sha256": "s",
        "samples_per_step": 4,
    }
    new = recipe_to_dict(
        load_recipe(
            None,
            [
                "data.path=x",
                "loss.z_loss=1e-4",
                "optimizer.name=adamw_torch",
                "optimizer.decay_embeddings=true",
                "training.max_steps=10",
            ],
        )
    )
    old = {key: dict(value) if isinstance(value, dict) else value for key, value in new.items()}
    old["model"] = {
        **new["model"],
        "fused_loss": "auto",
        "z_loss": 1e-4,
        "decay_embeddings": True,
        "micro_batch": "auto",
    }
    old.pop("loss"), old.pop("batch")
    old["optimizer"] = {k: v for k, v in new["optimizer"].items() if k != "decay_embeddings"} | {"name": "adamw"}
    old["training"] = {**new["training"], "optim": "adamw_torch"}
    migrated = migrate_recipe_dict(old, "recipe.yaml", warn=False)
    assert resume_differences(migrated, new, data, data) == []
    migrated["loss"]["z_loss"] = 0.0
    assert resume_differences(migrated, new, data, data) == ["loss.z_loss 0.0 → 0.0001"]
