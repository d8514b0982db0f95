"""The context-extension phase (recipe section ``context``, training/context.py) and activation checkpointing.

A tiny model trained at 128 tokens (the ``mini_blocks`` fixture) is extended to 256 tokens on the same documents
packed at 256: real runs on CPU, a few steps each.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from forked import script

from hfpretrain.models.memory import TrainingLayout, estimate_memory
from hfpretrain.models.zoo import load_config
from hfpretrain.training import RecipeError, pretrain

from train_utils import REPO, TINY_RECIPE, make_overrides, read_log, run_pretrain, step_losses


@pytest.fixture(scope="module")
def blocks_256(tmp_path_factory, mini_train, mini_val, gpt2_tokenizer):
    from hfpretrain.data import tokenize_corpus

    return tokenize_corpus(
        inputs=[mini_train],
        val_inputs=[mini_val],
        out=tmp_path_factory.mktemp("d") / "b256",
        tokenizer=gpt2_tokenizer,
        seq_len=256,
        max_docs=300,
        val_docs=100,
    )


@pytest.fixture(scope="module")
def base_run(mini_blocks, tmp_path_factory):
    """The model to extend: 20 steps at 128 tokens, its final/ with lineage.json (seq_len 128)."""
    out = tmp_path_factory.mktemp("base") / "run"
    run_pretrain(mini_blocks, out, {"training.max_steps": "20"})
    return out / "final"


def phase(blocks, out, base, **extra) -> list[str]:
    items = {"model.init_from": str(base), "context.seq_len": "256", "training.max_steps": "3", **extra}
    return make_overrides(blocks, out, items)


def test_extension_trains_from_the_checkpoint_with_yarn(blocks_256, base_run, tmp_path):
    """rope=yarn: the model trains at 256 under YaRN (factor 2 over the 128 positions lineage.json records), starts
    from the base weights (its first loss is far below a fresh model's), and final/ holds the new RoPE."""
    from transformers import AutoModelForCausalLM

    out = tmp_path / "yarn"
    pretrain(str(TINY_RECIPE), phase(blocks_256, out, base_run, **{"context.rope": "yarn"}))
    plan = read_log(out)[0]["plan"]
    assert plan["seq_len"] == 256
    ctx = plan["context"]
    assert ctx["from_seq_len"] == 128 and ctx["from_seq_len_source"].endswith("lineage.json")
    assert ctx["rope_after"] == {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 2.0,
        "original_max_position_embeddings": 128,
    }
    model = AutoModelForCausalLM.from_pretrained(out / "final")
    assert model.config.rope_parameters["rope_type"] == "yarn" and model.config.max_position_embeddings == 256
    assert model.model.rotary_emb.attention_scaling > 1  # YaRN's temperature: the rotary module was built for it
    fresh = tmp_path / "fresh"
    run_pretrain(blocks_256, fresh, {"training.max_steps": "1"})
    assert step_losses(out)[1] < step_losses(fresh)[1] - 1.0


def test_theta_and_token_budget(blocks_256, base_run, tmp_path, caplog):
    """rope=theta sets the base frequency; context.tokens gives max_steps (tokens / tokens per step). A dry run with
    no GPU to check the plan against says so in a warning (before, only in the JSON's fits entry)."""
    out = tmp_path / "theta"
    overrides = phase(
        blocks_256,
        out,
        base_run,
        **{
            "context.rope": "theta",
            "context.rope_theta": "40000",
            "context.tokens": "3072",
            "training.max_steps": "-1",
        },
    )
    with caplog.at_level(logging.WARNING, logger="hfpretrain"):
        plan = pretrain(str(TINY_RECIPE), overrides, dry_run=True)["plan"]
    assert plan["max_steps"] == 3  # 3,072 tokens / (4 x 256)
    assert plan["context"]["rope_after"] == {"rope_theta": 40000.0, "rope_type": "default"}
    assert plan["context"]["fits"] == {"checked": False, "why": "no GPU in this process and context.gpu is not set"}
    assert any(
        "not checked against a GPU" in r.getMessage() and "context.gpu" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    short = pretrain(str(TINY_RECIPE), make_overrides(blocks_256, out, {"training.max_steps": "3"}), dry_run=True)
    assert "context" not in short["plan"]


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            {"context.seq_len": "128", "context.from_seq_len": "256"},
            "below the training length context.from_seq_len=256",
        ),
        ({"context.rope": "theta", "context.rope_theta": "5000"}, "not larger than the model's rope_theta=10000"),
        ({"context.rope": "theta"}, "context.rope=theta needs context.rope_theta"),
        ({"context.from_seq_len": "64"}, "lineage.json says model.init_from was trained at seq_len 128"),
        ({"context.tokens": "100"}, "less than one optimizer step"),
        ({"context.gpu": "H1OO"}, "context.gpu: unknown GPU"),
        ({"model.init_from": "null"}, "context.seq_len needs model.init_from"),
        ({"context.seq_len": "null", "context.rope": "yarn"}, "context.rope is set but context.seq_len is not"),
        ({"training.activation_checkpointing_kwargs": "{every_n_layers: 2}"}, "activation checkpointing is off"),
        (
            {"training.activation_checkpointing": "true", "training.activation_checkpointing_kwargs": "{every_n: 2}"},
            "not a checkpointing option \\(did you mean 'every_n_layers'",
        ),
    ],
)
def test_bad_phase_is_one_line(blocks_256, base_run, tmp_path, extra, says):
    with pytest.raises(RecipeError, match=says):
        pretrain(str(TINY_RECIPE), phase(blocks_256, tmp_path / "x", base_run, **extra), dry_run=True)
    assert not (tmp_path / "x").exists()


def test_data_packed_at_another_length(mini_blocks, base_run, tmp_path):
    with pytest.raises(
        RecipeError,
        match="is packed at seq_len 128, but context.seq_len=256: tokenize the phase's data with --seq-len 256",
    ):
        pretrain(str(TINY_RECIPE), phase(mini_blocks, tmp_path / "x", base_run), dry_run=True)


def test_a_length_below_what_the_checkpoint_recorded(mini_blocks, base_run, tmp_path):
    """The training length comes from the checkpoint's records when the recipe does not state it."""
    longer = tmp_path / "base512"
    shutil.copytree(base_run, longer)
    record = json.loads((longer / "lineage.json").read_text())
    (longer / "lineage.json").write_text(json.dumps({**record, "seq_len": 512}))
    with pytest.raises(RecipeError, match=r"context.seq_len=128 is below the training length 512 \(.*lineage.json\)"):
        pretrain(
            str(TINY_RECIPE), phase(mini_blocks, tmp_path / "x", longer, **{"context.seq_len": "128"}), dry_run=True
        )


def test_learned_positions_take_no_rope_change(blocks_256, tmp_path, gpt2_tokenizer):
    """GPT-2 learns its positions: no RoPE to change, and none past n_positions."""
    base = tmp_path / "gpt2"
    base.mkdir()
    config = load_config("gpt2_124m", {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128})
    config.save_pretrained(base)
    (base / "lineage.json").write_text(json.dumps({"seq_len": 128}))
    with pytest.raises(RecipeError, match="model type gpt2 has no rotary position embedding"):
        pretrain(str(TINY_RECIPE), phase(blocks_256, tmp_path / "x", base, **{"context.rope": "yarn"}), dry_run=True)
    with pytest.raises(RecipeError, match="learns absolute positions up to 128, so it has none for a longer context"):
        pretrain(str(TINY_RECIPE), phase(blocks_256, tmp_path / "x", base), dry_run=True)


def test_a_run_past_the_configs_positions(mini_blocks, tmp_path):
    """Outside a context phase the data's length rules: a RoPE model's saved config says it (lm-eval truncates to
    max_position_embeddings), learned positions that stop short are one line before any work."""
    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve

    short = {"model.overrides.max_position_embeddings": "64"}
    recipe = load_recipe(str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "r", short))
    run = resolve(recipe, read_data_facts(recipe, planning=True), Machine.detect(planning=True))
    assert run.seq_len == 128 and run.config.max_position_embeddings == 128
    gpt2 = {
        "model.config": "gpt2_124m",
        "model.overrides.n_layer": "2",
        "model.overrides.n_embd": "64",
        "model.overrides.n_head": "4",
        "model.overrides.n_positions": "64",
    }
    with pytest.raises(RecipeError, match=r"is packed at seq_len 128, past the 64 positions model type gpt2 learns"):
        pretrain(str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "g", gpt2), dry_run=True)
    assert not (tmp_path / "g").exists()


def test_a_plan_that_does_not_fit_the_gpu_is_refused_before_any_work(tmp_path):
    """Planned before the base run or the data exist (model.config gives the shape): Qwen3 1.8B at 32k does not fit
    an H100 at micro-batch 8, does with micro-batch 1 and activation checkpointing. From the CLI: one `error:` line,
    exit 2."""
    common = [
        "model.config=qwen3_1p8b",
        f"model.init_from={tmp_path / 'not_yet'}",
        f"data.path={tmp_path / 'nodata'}",
        "context.seq_len=32768",
        "context.from_seq_len=2048",
        "context.rope=yarn",
        "context.gpu=H100-SXM",
        "batch.micro_batch=recipe",
        "training.max_steps=10",
        f"training.output_dir={tmp_path / 'run'}",
    ]
    with pytest.raises(
        RecipeError,
        match=r"the plan needs .* GiB per GPU \(micro-batch 8 x 32768 tokens\), more "
        "than 95% of the H100-SXM's 75 GiB",
    ):
        pretrain(str(TINY_RECIPE), [*common, "training.per_device_train_batch_size=8"], dry_run=True)
    fits = pretrain(
        str(TINY_RECIPE),
        [*common, "training.per_device_train_batch_size=1", "training.activation_checkpointing=true"],
        dry_run=True,
    )["plan"]
    assert fits["seq_len"] == 32768 and fits["context"]["fits"]["checked"] and fits["context"]["fits"]["share"] < 0.95
    assert fits["activation_checkpointing"] == "every decoder layer"
    proc = script("pretrain.py", TINY_RECIPE, "--dry-run", *common, "training.per_device_train_batch_size=8", cwd=REPO)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: context.seq_len=32768: the plan needs")
    assert "Traceback" not in proc.stderr and not proc.stdout.strip()
    assert not (tmp_path / "run").exists()


def test_a_dry_run_before_init_from_exists_needs_model_config(tmp_path):
    """Before the base run exists a dry run plans with model.config: left at its default (tiny) it would plan
    another model without a word, so it is refused in one line naming both keys."""
    recipe = tmp_path / "phase.yaml"
    recipe.write_text(
        f"model:\n  init_from: {tmp_path / 'not_yet'}\ncontext:\n  seq_len: 4096\n"
        f"  from_seq_len: 1024\ndata:\n  path: {tmp_path / 'nodata'}\ntraining:\n  max_steps: 10\n"
        f"  output_dir: {tmp_path / 'run'}\n"
    )
    with pytest.raises(RecipeError, match=r"model.init_from=.*not_yet does not exist yet and model.config is not set"):
        pretrain(str(recipe), [], dry_run=True)
    assert pretrain(str(recipe), ["model.config=qwen3_103m"], dry_run=True)["plan"]["seq_len"] == 4096


def test_activation_checkpointing_trains_the_same_with_less_memory(mini_blocks, tmp_path):
    """training.activation_checkpointing recomputes each layer in the backward: the same losses as without it (the
    same arithmetic, recomputed), and the estimator counts it: all layers, then every 2nd, then none."""
    plain, ckpt = tmp_path / "plain", tmp_path / "ckpt"
    run_pretrain(mini_blocks, plain, {"training.max_steps": "3"})
    run_pretrain(mini_blocks, ckpt, {"training.max_steps": "3", "training.activation_checkpointing": "true"})
    assert read_log(ckpt)[0]["plan"]["activation_checkpointing"] == "every decoder layer"
    a, b = step_losses(plain), step_losses(ckpt)
    assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-4 for k in a)

    config = load_config("qwen3_1p8b")
    gib = {}
    for name, kw in {
        "off": {},
        "every 2": {"grad_checkpointing": True, "checkpoint_every_n_layers": 2},
        "all": {"grad_checkpointing": True},
        "offload": {"grad_checkpointing": True, "checkpoint_offload": True},
    }.items():
        gib[name] = estimate_memory(config, TrainingLayout(1, 16384, compile="decoder", **kw)).activations
    assert gib["off"] > gib["every 2"] > gib["all"] > gib["offload"]


def test_the_document_mask_costs_one_shared_bias_with_sdpa():
    """With SDPA the document mask is one additive bias of S x 2 bytes per token, shared by the layers (measured on
    an H100 at 16k: +2.0 GiB at micro-batch 4; one bias per layer overestimated the peak by 62%): quadratic in the
    length; none with flash-attention's varlen path or flex attention's block mask."""
    config = load_config("qwen3_1p8b")

    def extra(seq_len, attn):
        base = estimate_memory(config, TrainingLayout(1, seq_len, attn_implementation=attn)).activations
        return (
            estimate_memory(
                config, TrainingLayout(1, seq_len, attn_implementation=attn, document_mask=True)
            ).activations
            - base
        )

    assert extra(16384, "sdpa") == 16384 * 2 * 16384
    assert extra(16384, "flash_attention_2") == 0 and extra(16384, "flex_attention") == 0
    assert torch.tensor(extra(32768, "sdpa") / extra(16384, "sdpa")).item() == pytest.approx(4, rel=1e-3)


def test_a_resume_with_another_rope_is_another_run():
    """The RoPE change is made in the config at start, so a resumed phase with another one would train the saved
    weights under other positions: resume_differences names it; a recipe saved before the section existed is none."""
    from hfpretrain.training.config import load_recipe, recipe_to_dict
    from hfpretrain.training.resume import resume_differences

    def recipe(*extra):
        return recipe_to_dict(
            load_recipe(
                TINY_RECIPE,
                ["data.path=x", "model.init_from=base", "context.seq_len=256", "context.rope=theta", *extra],
            )
        )

    data = {"fingerprint": "f", "seq_len": 256, "samples_per_step": 4, "tokenizer_sha256": "t"}
    old, new = recipe("context.rope_theta=40000"), recipe("context.rope_theta=80000")
    assert resume_differences(old, old, data, data) == []
    assert resume_differences(old, new, data, data) == ["context.rope_theta 40000.0 → 80000.0"]
    plain = recipe_to_dict(load_recipe(TINY_RECIPE, ["data.path=x"]))
    assert resume_differences({k: v for k, v in plain.items() if k != "context"}, plain, data, data) == []


def test_long_context_evaluation_at_the_end_of_training(mini_blocks, tmp_path):
    """evaluation.long_context_*: after the last step, passkey and the loss by position on the live model, into
    output_dir/long_context.json and the log; the run's report finds it beside final/. Without the eval package's
    callbacks the keys would do nothing: refused."""
    from hfpretrain.study.long_context_report import long_context_lines

    out = tmp_path / "run"
    extra = {
        "training.max_steps": "2",
        "evaluation.long_context_lengths": "[128]",
        "evaluation.long_context_samples": "2",
        "evaluation.long_context_blocks": "2",
    }
    run_pretrain(mini_blocks, out, extra)
    result = json.loads((out / "long_context.json").read_text())
    assert result["step"] == 2 and result["passkey"]["128"]["samples"] == 2
    assert result["loss_by_position"]["blocks"] == 2 and result["loss_by_position"]["tokens"] > 0
    logged = [e for e in read_log(out) if e["event"] == "log" and "long_context/passkey_128" in e]
    assert len(logged) == 1 and any(k.startswith("long_context/loss_") for k in logged[0])
    assert long_context_lines(out / "final", tmp_path / "report")[0] == "## Long context"
    with pytest.raises(RecipeError, match="evaluation.long_context_lengths=\\[32\\]: passkey prompt lengths"):
        pretrain(
            str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "x", {"evaluation.long_context_lengths": "[32]"})
        )
    with pytest.raises(RecipeError, match="is scored by the eval package's callback"):
        pretrain(str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "x", extra))
    with pytest.raises(RecipeError, match=r"\[4096\] are past the model's 2048 positions"):
        run_pretrain(mini_blocks, tmp_path / "y", {**extra, "evaluation.long_context_lengths": "[128, 4096]"})


def test_a_failing_long_context_evaluation_does_not_cost_the_run(mini_blocks, tmp_path, monkeypatch, caplog):
    """It runs inside trainer.train(), before final/ is saved: out of memory at a long length lost the trained
    run's final/ and summary. Now a warning, and the run finishes."""
    from hfpretrain.eval import long_context_callback

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")

    monkeypatch.setattr(long_context_callback, "passkey_accuracy", out_of_memory)
    out = tmp_path / "run"
    summary = run_pretrain(mini_blocks, out, {"training.max_steps": "2", "evaluation.long_context_lengths": "[128]"})
    assert (
        summary["global_step"] == 2 and (out / "final" / "config.json").is_file() and (out / "summary.json").is_file()
    )
    assert not (out / "long_context.json").exists()
    assert "long-context evaluation failed (OutOfMemoryError: CUDA out of memory" in caplog.text


def test_the_training_length_of_a_checkpoint_folder(tmp_path):
    """Continuing a run: a checkpoint-N folder records its length in data.json (final/ in lineage.json)."""
    from hfpretrain.training.context import training_length

    ckpt = tmp_path / "checkpoint-200"
    ckpt.mkdir()
    assert training_length(ckpt) == (None, "")
    (ckpt / "data.json").write_text(json.dumps({"seq_len": 2048, "samples_per_step": 64}))
    assert training_length(ckpt) == (2048, str(ckpt / "data.json"))
    (ckpt / "lineage.json").write_text("not json")  # unreadable: the next record is read
    assert training_length(ckpt)[0] == 2048


def changed_rope(config, from_seq_len: int, *context):
    """The config ``change_rope`` makes of ``config`` for a phase of ``context`` overrides from ``from_seq_len``."""
    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.context import change_rope

    return change_rope(
        config, load_recipe(TINY_RECIPE, ["data.path=x", "model.init_from=base", *context]), from_seq_len
    )


def test_yarn_keeps_the_models_other_rope_parameters_and_chains():
    """YaRN's parameters were built from scratch: GLM-4-MoE's partial_rotary_factor 0.5 was dropped (the rotary
    then covered the whole head), and a model already under YaRN (a 16k phase taken to 32k) was rebuilt from default
    frequencies with the phase's starting length as the original one."""
    glm = load_config("glm4_moe_101m_a24m", vocab_size=1024)
    assert glm.rope_parameters.get("partial_rotary_factor") == 0.5
    extended = changed_rope(glm, 1024, "context.seq_len=4096", "context.rope=yarn")
    params = extended.rope_parameters
    assert params["partial_rotary_factor"] == 0.5 and params["factor"] == 4.0
    assert params["original_max_position_embeddings"] == 1024
    again = changed_rope(extended, 4096, "context.seq_len=8192", "context.rope=yarn")  # extended again
    assert again.rope_parameters["original_max_position_embeddings"] == 1024 and again.rope_parameters["factor"] == 8.0
    assert again.max_position_embeddings == 8192
    assert glm.rope_parameters.get("rope_type", "default") == "default"  # the config it was given: unchanged


def test_yarn_factor_beyond_the_new_length(caplog):
    """context.yarn_factor stretches the positions further than the new length needs (recipes/best_small_16k.yaml:
    32 for 1,024 -> 16,384): YaRN takes the recipe's factor, and max_position_embeddings says how far it reaches.
    A factor short of the new length is a warning: the phase would train past the stretched range."""
    from hfpretrain.training.config import load_recipe

    config = load_config("qwen3_103m")
    extended = changed_rope(config, 1024, "context.seq_len=16384", "context.rope=yarn", "context.yarn_factor=32")
    assert extended.rope_parameters["factor"] == 32.0
    assert extended.rope_parameters["original_max_position_embeddings"] == 1024
    assert extended.max_position_embeddings == 32768
    with caplog.at_level(logging.WARNING, logger="hfpretrain"):  # the recipe's factor, overridden to a longer phase
        changed_rope(
            load_config("qwen3_103m"), 1024, "context.seq_len=65536", "context.rope=yarn", "context.yarn_factor=32"
        )
    assert "short of context.seq_len=65536" in caplog.text and "at least 64" in caplog.text
    shipped = load_recipe(REPO / "recipes" / "best_small_16k.yaml", ["data.path=x"])
    assert shipped.context.yarn_factor == 2 * shipped.context.seq_len / shipped.context.from_seq_len


def test_rope_a_phase_cannot_change_is_refused():
    """Two RoPE layouts a phase does not extend, each refused with the reason: RoPE parameters per layer type
    (sliding and full attention layers) and a model whose RoPE is another scaling already
    (Llama 3's), which YaRN would silently replace; a larger theta still applies to the latter."""
    per_layer = load_config("qwen3_103m")
    per_layer.rope_parameters = {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    with pytest.raises(RecipeError, match=r"context.rope=yarn: qwen3 has RoPE parameters per layer type"):
        changed_rope(per_layer, 1024, "context.seq_len=4096", "context.rope=yarn")
    llama3 = load_config("qwen3_103m")
    llama3.rope_parameters = {
        **llama3.rope_parameters,
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    }
    with pytest.raises(RecipeError, match=r"the model's RoPE is already 'llama3', which YaRN does not extend"):
        changed_rope(llama3, 1024, "context.seq_len=4096", "context.rope=yarn")
    theta = changed_rope(llama3, 1024, "context.seq_len=4096", "context.rope=theta", "context.rope_theta=1e7")
    assert theta.rope_parameters["rope_theta"] == 1e7
