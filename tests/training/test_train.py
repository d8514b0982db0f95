"""Real tiny training runs on CPU: learning, telemetry, checkpoints, exact resume, gradient
accumulation, preemption (SIGTERM) and the non-finite-loss policies."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess

import numpy as np
import pytest
import torch
import yaml

from hfpretrain.training import trainer as trainer_mod
from hfpretrain.training.checkpoints import (
    COMPLETE_MARKER,
    NoCompleteCheckpointError,
    last_complete_checkpoint,
    rotate_checkpoints,
)
from hfpretrain.training.trainer import NonFiniteLossError
from train_utils import (
    PRETRAIN_SCRIPT,
    REFERENCE,
    REFERENCE_STEPS,
    REPO,
    TINY_RECIPE,
    fake_checkpoint,
    load_weights,
    make_overrides,
    python,
    read_log,
    run_pretrain,
    sigterm_after_first_log,
    step_losses,
    subprocess_env,
)

TOKENS_PER_STEP = 4 * 128


# ---- the reference run (10 steps, micro-batch 4, checkpoints at 5 and 10) --------------------


def test_loss_falls(reference_run):
    evals = [e for e in read_log(reference_run) if e["event"] == "eval"]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == REFERENCE_STEPS
    start, end = evals[0]["eval_loss"], evals[-1]["eval_loss"]
    assert start > 10.0  # ~ln(50304): a random init
    assert end < start - 0.5, (start, end)
    losses = step_losses(reference_run)
    assert sorted(losses) == list(range(1, REFERENCE_STEPS + 1))
    assert np.mean([losses[s] for s in (9, 10)]) < np.mean([losses[s] for s in (1, 2)]) - 0.5
    summary = json.loads((reference_run / "summary.json").read_text())
    assert summary["final_eval"]["eval_loss"] == pytest.approx(end, abs=1e-6)
    assert summary["final_eval"]["eval_perplexity"] == pytest.approx(np.exp(end), rel=1e-6)


def test_bits_per_byte_and_passes(reference_run, mini_blocks, mini_val):
    """Bits per byte by hand: nats/token x (validation tokens / UTF-8 bytes of the 100 validation documents'
    text, counted here from the file) / ln 2. The logged epoch is passes over the training blocks, and the
    plan names the device."""
    import io

    import zstandard

    per_set = {}
    with open(mini_val, "rb") as f:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        for _ in range(100):
            doc = json.loads(next(lines))
            name = doc["meta"]["pile_set_name"]
            per_set[name] = per_set.get(name, 0) + len(doc["text"].encode("utf-8"))
    text_bytes = sum(per_set.values())
    manifest = json.loads((mini_blocks / "manifest.json").read_text())
    val = manifest["validation"]
    assert val["text_bytes"] == text_bytes and val["documents"] == 100
    assert val["text_bytes_per_set"] == per_set  # each set's bits per byte (evaluation.per_set)
    summary = json.loads((reference_run / "summary.json").read_text())
    final = summary["final_eval"]
    assert final["eval_bpb"] == pytest.approx(final["eval_loss"] * val["tokens"] / text_bytes / np.log(2), rel=1e-9)
    assert 2.5 < text_bytes / val["tokens"] < 5  # GPT-2 on this mix of prose and code: ~3.2 bytes per token
    assert final["eval_tokens"] == 2048  # the reference run's set (the default, every block, is tested below)
    plan = summary["plan"]
    assert plan["device"] == "cpu" and plan["train_blocks"] == manifest["train"]["blocks"]
    assert plan["passes_over_data"] == pytest.approx(REFERENCE_STEPS * 4 / manifest["train"]["blocks"])
    logs = [e for e in read_log(reference_run) if e["event"] == "log" and "loss" in e]
    for e in logs:
        assert e["epoch"] == pytest.approx(e["step"] * 4 / manifest["train"]["blocks"], rel=1e-3)


def test_final_evaluation_covers_all_validation_blocks(mini_blocks_bpe1k, tmp_path):
    """In-loop evaluations read a fixed budget; the last one reads the whole validation split (on the 1k BPE's
    blocks: with GPT-2's 50k-row head the CPU spent 25 s on the split's logits)."""
    mini_blocks = mini_blocks_bpe1k
    summary = run_pretrain(
        mini_blocks,
        tmp_path / "run",
        {
            "training.max_steps": "2",
            "training.eval_steps": "1",
            "training.eval_strategy": "steps",
            "evaluation.eval_tokens": "1024",
            "evaluation.final_eval_tokens": "null",
        },
    )
    evals = [e for e in read_log(tmp_path / "run") if e["event"] == "eval"]
    blocks = json.loads((mini_blocks / "manifest.json").read_text())["validation"]["blocks"]
    assert summary["final_eval"]["eval_tokens"] == blocks * 128 > 1024
    assert summary["final_eval"]["eval_loss"] != pytest.approx(evals[-1]["eval_loss"], abs=1e-9)
    assert "eval_bpb" in summary["final_eval"] and "eval_bpb" in evals[-1]


def test_log_telemetry(reference_run):
    events = read_log(reference_run)
    kinds = {e["event"] for e in events}
    assert {"config", "log", "eval", "grad_norm", "grad_stats", "checkpoint", "end", "summary"} <= kinds
    config = events[0]
    assert config["event"] == "config" and config["loss_impl"] == "chunked"
    assert config["plan"]["tokens_per_step"] == TOKENS_PER_STEP
    assert config["recipe"]["training"]["max_steps"] == REFERENCE_STEPS

    logs = [e for e in events if e["event"] == "log" and "loss" in e]
    assert len(logs) == REFERENCE_STEPS
    for e in logs:
        for key in (
            "loss",
            "grad_norm",
            "learning_rate",
            "tokens_per_s",
            "tokens_per_s_per_gpu",
            "tflops_per_gpu",
            "tokens_seen",
            "grad_norm_max",
            "mfu",
        ):
            assert key in e, (key, e)
            assert np.isfinite(e[key]), (key, e)
        assert e["tokens_seen"] == e["step"] * TOKENS_PER_STEP
        assert e["tokens_per_s"] > 0 and e["tokens_per_s_per_gpu"] == e["tokens_per_s"]  # one process
        assert e["mfu"] == pytest.approx(e["tflops_per_gpu"] * 1e12 / 1e12)
        assert e["grad_norm_max"] == pytest.approx(e["grad_norm"], rel=1e-5)  # one step per window
    # warmup 2 then constant
    assert [e["learning_rate"] for e in logs[:4]] == pytest.approx([0.0, 1.5e-3, 3e-3, 3e-3])

    norms = [e for e in events if e["event"] == "grad_norm"]
    assert [v for e in norms for v in e["values"]] == pytest.approx([e["grad_norm"] for e in logs], rel=1e-5)
    stats = [e for e in events if e["event"] == "grad_stats"]
    assert [e["step"] for e in stats] == [5, 10]
    assert {"layer_0", "layer_1"} <= set(stats[0]["per_layer_norm"])
    assert len(stats[0]["log10_abs_grad_hist"]["counts"]) == 40
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [5, 10]
    assert events[-1]["event"] == "summary" and events[-1]["global_step"] == REFERENCE_STEPS

    summary = json.loads((reference_run / "summary.json").read_text())
    assert summary["global_step"] == REFERENCE_STEPS and summary["skipped_steps"] == 0
    assert summary["end_to_end"]["tokens_per_s"] > 0
    assert "max_steps: 10" in (reference_run / "recipe.yaml").read_text()
    # what the recipe resolved to, beside it: the same document as --dry-run's, and in the config event
    resolved = yaml.safe_load((reference_run / "resolved.yaml").read_text())
    assert resolved["resolved"]["max_steps"] == REFERENCE_STEPS and resolved["plan"]["max_steps"] == REFERENCE_STEPS
    assert resolved["resolved"]["max_steps_from"] == "training.max_steps"
    assert events[0]["resolved"]["loss"]["impl"] == resolved["resolved"]["loss"]["impl"]
    for step in (5, 10):
        ckpt = reference_run / f"checkpoint-{step}"
        assert (ckpt / COMPLETE_MARKER).read_text().strip() == f"step {step}"
        for name in (
            "model.safetensors",
            "optimizer.pt",
            "scheduler.pt",
            "rng_state.pth",
            "trainer_state.json",
            "recipe.yaml",
            "resolved.yaml",
            "config.json",
        ):
            assert (ckpt / name).is_file(), name


def test_final_checkpoint_loads(reference_run, mini_blocks):
    """final/ is a plain HF folder: model and tokenizer load with the Auto classes, equal the last
    checkpoint, and reproduce the trainer's final eval loss on the same validation blocks."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = reference_run / "final"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    twin = AutoModelForCausalLM.from_pretrained(reference_run / f"checkpoint-{REFERENCE_STEPS}").eval()
    tok = AutoTokenizer.from_pretrained(final)
    assert tok.eos_token == "<|endoftext|>"
    ids = tok("The quick brown fox jumps over the lazy dog.", return_tensors="pt")["input_ids"]
    assert tok.decode(ids[0]) == "The quick brown fox jumps over the lazy dog."

    blocks = datasets.load_from_disk(str(mini_blocks / "validation"))
    val = torch.tensor(np.asarray(blocks[:16]["input_ids"]), dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=val, labels=val)
        assert torch.equal(out.logits, twin(input_ids=val).logits)
    summary = json.loads((reference_run / "summary.json").read_text())
    assert out.loss.item() == pytest.approx(summary["final_eval"]["eval_loss"], abs=1e-4)


# ---- resume ----------------------------------------------------------------------------------


def test_end_of_text_embedding_is_trained(reference_run, mini_blocks):
    """End-of-text is a real token of every block: its embedding row must learn, i.e. it must not be
    the embedding's padding_idx (a zero row without gradient; on an H200 that led to NaN gradients,
    docs/benchmarks.md)."""
    eos = json.loads((mini_blocks / "manifest.json").read_text())["tokenizer"]["eos_token_id"]
    key = "model.embed_tokens.weight"
    early, final = (
        load_weights(reference_run / "checkpoint-5")[key][eos],
        load_weights(reference_run / "final")[key][eos],
    )
    assert early.abs().sum() > 0
    assert not torch.equal(early, final)


def test_last_complete_checkpoint(tmp_path):
    assert last_complete_checkpoint(tmp_path) is None
    for step, complete in ((3, True), (10, True), (12, False), (7, True)):
        fake_checkpoint(tmp_path / f"checkpoint-{step}", step, complete)
    (tmp_path / "checkpoint-final").mkdir()
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # numeric, not 12 (no marker)


def test_checkpoints_but_none_complete_is_an_error(tmp_path):
    """Resuming must not silently start over at step 0 when every checkpoint is unfinished."""
    (tmp_path / "checkpoint-4").mkdir()
    with pytest.raises(NoCompleteCheckpointError, match="none finished saving.*checkpoint-4"):
        last_complete_checkpoint(tmp_path)


def test_rotation_keeps_the_newest_complete(tmp_path):
    for step, complete in ((3, True), (10, True), (12, False), (7, True)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / COMPLETE_MARKER).write_text(f"step {step}\n")
    rotate_checkpoints(tmp_path, 2, protect=str(tmp_path / "checkpoint-3"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-10", "checkpoint-3", "checkpoint-7"]
    rotate_checkpoints(tmp_path, 1)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-10"]


def test_rotation_waits_for_the_marker(mini_blocks, tmp_path, monkeypatch):
    """save_total_limit=1: when checkpoint-4's marker is written, checkpoint-2 (the last complete one)
    still exists; the Trainer used to delete it before the marker, so a kill there lost both. With a best
    checkpoint (metric_for_best_model; the highest loss here, so checkpoint-2), rotation keeps it beside the
    newest: at the end of training the Trainer used to delete every checkpoint but the best, the newest included."""
    seen = []
    write = trainer_mod.write_complete_marker

    def recording(folder, step):
        seen.append((step, sorted(p.name for p in folder.parent.glob("checkpoint-*"))))
        write(folder, step)

    monkeypatch.setattr(trainer_mod, "write_complete_marker", recording)
    first = tmp_path / "first"  # beside the second run: a run's folder may not hold another run
    run_pretrain(
        mini_blocks,
        first,
        {
            "training.max_steps": "4",
            "training.save_strategy": "steps",
            "training.save_steps": "2",
            "training.save_total_limit": "1",
            "training.eval_strategy": "no",
        },
    )
    assert seen == [(2, ["checkpoint-2"]), (4, ["checkpoint-2", "checkpoint-4"])]
    assert sorted(p.name for p in first.glob("checkpoint-*")) == ["checkpoint-4"]
    assert (first / "checkpoint-4" / COMPLETE_MARKER).is_file()

    best = tmp_path / "best"
    run_pretrain(
        mini_blocks,
        best,
        {
            "training.max_steps": "4",
            "training.save_strategy": "steps",
            "training.save_steps": "2",
            "training.save_total_limit": "1",
            "training.eval_strategy": "steps",
            "training.eval_steps": "2",
            "evaluation.eval_tokens": "256",
            "evaluation.final_eval_tokens": "256",
            "training.metric_for_best_model": "loss",
            "training.greater_is_better": "true",
        },
    )
    assert sorted(p.name for p in best.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert last_complete_checkpoint(best) == str(best / "checkpoint-4")


def test_resume_is_exact(reference_run, mini_blocks, tmp_path, caplog, monkeypatch):
    """Killed after checkpoint-5 (its folder copied into a fresh run dir, nothing after it), plus an
    interrupted save checkpoint-8 (no COMPLETE marker, truncated weights). resume=auto must take
    checkpoint-5, and steps 6..10 must be bitwise the reference's (losses and final weights). The tied head,
    saved once as the embedding, is not reported as a missing key."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(reference_run / "checkpoint-5", run / "checkpoint-5")
    partial = run / "checkpoint-8"
    shutil.copytree(reference_run / "checkpoint-10", partial)
    (partial / COMPLETE_MARKER).unlink()
    data = (partial / "model.safetensors").read_bytes()
    (partial / "model.safetensors").write_bytes(data[: len(data) // 3])

    assert last_complete_checkpoint(run) == str(run / "checkpoint-5")
    # the optimizer the trainer's on_train_begin hands to steps_beside_params is the checkpoint's, loaded
    seen = []
    real = trainer_mod.steps_beside_params
    monkeypatch.setattr(trainer_mod, "steps_beside_params", lambda opt: (seen.append(len(opt.state)), real(opt)))
    with caplog.at_level("WARNING"):
        summary = run_pretrain(
            mini_blocks,
            run,
            {**REFERENCE, "training.eval_on_start": "false", "training.resume_from_checkpoint": "auto"},
        )
    assert summary["global_step"] == REFERENCE_STEPS
    assert seen and seen[0] > 0  # after the Trainer loaded the optimizer state, not before
    assert not [r for r in caplog.records if "missing keys" in r.getMessage()]
    # the whole run's mean loss, not only the resumed steps' (it was 7.40 vs 8.44 in the issue's report)
    reference = json.loads((reference_run / "summary.json").read_text())
    assert summary["train"]["train_loss"] == pytest.approx(reference["train"]["train_loss"], rel=1e-6)

    # ... and the console's last line says the same (LineProgressCallback prints the Trainer's train_loss log)
    end = next(e for e in read_log(run) if "train_loss" in e)
    assert end["train_loss"] == pytest.approx(reference["train"]["train_loss"], rel=1e-6)

    ref, resumed = step_losses(reference_run), step_losses(run)
    assert sorted(resumed) == list(range(6, REFERENCE_STEPS + 1))  # no replay of steps 1..5
    # the logged epoch is passes over the data, continuous across the resume (it restarted from 0)
    epochs = {e["step"]: e["epoch"] for e in read_log(run) if e["event"] == "log" and "loss" in e}
    ref_epochs = {e["step"]: e["epoch"] for e in read_log(reference_run) if e["event"] == "log" and "loss" in e}
    assert epochs[6] > 0 and epochs == {s: ref_epochs[s] for s in epochs}
    assert [resumed[s] for s in resumed] == [ref[s] for s in resumed]  # bitwise
    a, b = load_weights(reference_run / "final"), load_weights(run / "final")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_resume_puts_optimizer_steps_beside_their_parameters():
    """DeepSpeed's universal loader leaves fused AdamW's step counters on the CPU (bypassing torch's
    load_state_dict); once the Trainer has loaded the checkpoint, before the first step, they are moved beside
    their parameters, through accelerate's and DeepSpeed's wrappers. (A meta parameter stands in for a GPU one.)"""
    from types import SimpleNamespace

    param = torch.nn.Parameter(torch.zeros(2, device="meta"))
    inner = SimpleNamespace(
        param_groups=[{"fused": True, "params": [param]}], state={param: {"step": torch.tensor(3.0)}}
    )
    trainer = SimpleNamespace(position_data=lambda step: None, nonfinite=SimpleNamespace(optimizer=None))
    state = SimpleNamespace(global_step=3, log_history=[])
    trainer_mod._Resume(trainer).on_train_begin(None, state, None, optimizer=SimpleNamespace(optimizer=inner))
    assert inner.state[param]["step"].device.type == "meta"


def test_only_the_tied_head_is_quiet_when_missing(tmp_path, caplog):
    """The tied head's key is missing from every checkpoint by design; any other missing key stops the resume with
    one line naming it (the Trainer only warned, and trained on with those weights as initialised), the embedding
    (the shared tensor itself) included."""
    from torch.nn.modules.module import _IncompatibleKeys
    from transformers import TrainingArguments

    from hfpretrain.models import build_model, load_config

    model = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    assert model.config.tie_word_embeddings
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = trainer_mod.PretrainTrainer(model=model, args=args, train_sampler=None, samples_per_step=1)
    for missing, reported in (
        (["lm_head.weight"], None),
        (["lm_head.weight", "model.norm.weight"], "model.norm.weight"),
        (["lm_head.weight", "model.embed_tokens.weight"], "model.embed_tokens.weight"),
    ):
        caplog.clear()
        if reported:
            with pytest.raises(ValueError, match=f"weights do not fit the model: .* missing .*{reported}"):
                trainer._issue_warnings_after_load(_IncompatibleKeys(missing, []))
            continue
        with caplog.at_level("WARNING"):
            trainer._issue_warnings_after_load(_IncompatibleKeys(missing, []))
        assert not [r for r in caplog.records if "missing keys" in r.getMessage()], missing


def test_saves_draw_no_progress_bar(tmp_path, capsys):
    """A save printed tqdm's "Writing model shards" bar, carriage returns and all, into every log; the bar is off
    for the project's saves only (the hook transformers calls for each bar is put back, and still consulted)."""
    from transformers import TrainingArguments
    from transformers.utils import logging as hf_logging

    from hfpretrain.models import build_model, load_config

    model = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = trainer_mod.PretrainTrainer(model=model, args=args, train_sampler=None, samples_per_step=1)
    seen = []

    def users_hook(factory, args, kwargs):
        seen.append(kwargs.get("desc"))
        return factory(*args, **kwargs)

    capsys.readouterr()
    previous = hf_logging.set_tqdm_hook(users_hook)
    try:
        trainer.save_model(str(tmp_path / "final"))
    finally:
        assert hf_logging.set_tqdm_hook(previous) is users_hook
    assert (tmp_path / "final" / "model.safetensors").is_file() and seen == ["Writing model shards"]
    assert "Writing model shards" not in capsys.readouterr().err


def test_resume_from_missing_path_fails(mini_blocks, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_pretrain(
            mini_blocks,
            tmp_path / "x",
            {"training.max_steps": "2", "training.resume_from_checkpoint": str(tmp_path / "nope")},
        )


# ---- gradient accumulation -------------------------------------------------------------------


def test_accumulation_equivalence(mini_blocks, tmp_path):
    """micro-batch 4 x accumulation 1 == micro-batch 2 x accumulation 2 (same seed, same samples per
    step). Plain SGD without clipping makes the update linear in the gradient, so any error in the
    loss normalisation (e.g. a mean per micro-batch summed over the accumulation: 2x the gradient)
    changes the parameters by ~100% of the update, far above the tolerance (AdamW and clipping would
    hide a uniform scale)."""
    common = {
        "training.max_steps": "3",
        "optimizer.name": "sgd",
        "training.learning_rate": "1.0",
        "training.warmup_steps": "0",
        "training.max_grad_norm": "0",
        "training.weight_decay": "0",
    }
    run_pretrain(
        mini_blocks,
        tmp_path / "a",
        {**common, "training.per_device_train_batch_size": "4", "training.gradient_accumulation_steps": "1"},
    )
    run_pretrain(
        mini_blocks,
        tmp_path / "b",
        {**common, "training.per_device_train_batch_size": "2", "training.gradient_accumulation_steps": "2"},
    )
    la, lb = step_losses(tmp_path / "a"), step_losses(tmp_path / "b")
    assert la.keys() == lb.keys() == {1, 2, 3}
    for s in la:
        assert la[s] == pytest.approx(lb[s], abs=1e-5)
    a, b = load_weights(tmp_path / "a" / "final"), load_weights(tmp_path / "b" / "final")
    init = _initial_weights(mini_blocks, tmp_path)
    moved = max((a[n] - init[n]).abs().max().item() for n in a)
    assert moved > 1e-3  # the steps changed the weights by far more than the tolerance
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)


def _initial_weights(mini_blocks, tmp_path) -> dict:
    """The seeded initial weights, as pretrain builds them (same seed, same config)."""
    from transformers import set_seed

    from hfpretrain.models import build_model, load_config

    set_seed(1234)
    config = load_config("tiny", {}, vocab_size=50257)
    model = build_model(config, attn_implementation="sdpa")
    return {n: p.detach().clone() for n, p in model.state_dict().items()}


# ---- preemption ------------------------------------------------------------------------------


@pytest.mark.parametrize("signum, name, status", [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGINT, "Ctrl-C", 130)])
def test_a_stop_signal_saves_and_stops(mini_blocks, tmp_path, signum, name, status):
    """SIGTERM to the whole process group, as a cluster (or `timeout`) sends it, and Ctrl-C, which a terminal
    sends to its whole foreground group: data-loader workers included. The run is not finished: the command
    exits with the shell's status for the signal and says how to go on."""
    out = tmp_path / "run"
    cmd = [
        python(),
        str(PRETRAIN_SCRIPT),
        str(TINY_RECIPE),
        *make_overrides(
            mini_blocks,
            out,
            {
                "training.max_steps": "1000",
                "training.save_strategy": "steps",
                "training.save_steps": "1000",
                "training.dataloader_num_workers": "2",
                "training.eval_strategy": "steps",
                "training.eval_steps": "1000",
            },
        ),
    ]
    returncode, output = sigterm_after_first_log(cmd, out / "log.jsonl", signum=signum)
    assert returncode == status, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert f"stopped by {name} at step" in output and "training.resume_from_checkpoint=auto" in output
    events = read_log(out)
    stopped = max(e["step"] for e in events if e["event"] == "log")
    assert 0 < stopped < 1000
    ckpt = out / f"checkpoint-{stopped}"
    assert (ckpt / COMPLETE_MARKER).is_file(), sorted(p.name for p in out.iterdir())
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == stopped
    assert last_complete_checkpoint(out) == str(ckpt)
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [stopped]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["global_step"] == stopped and summary["final_eval"] == {}  # no evaluation in the grace period
    assert summary["stopped"] == name
    assert not any(e["event"] == "eval" for e in events)
    assert not (out / "final").exists()  # stopped early: no final model


def test_a_second_ctrl_c_stops_at_once():
    """The first Ctrl-C asks for a stop at the step's end; the second raises KeyboardInterrupt, as Ctrl-C does
    elsewhere (in a fresh process: the stop flag is never cleared, by design)."""
    code = (
        "import signal\nfrom hfpretrain.training.callbacks import request_stop, stopped_by\n"
        "request_stop(signal.SIGINT); print(stopped_by())\n"
        "try:\n    request_stop(signal.SIGINT)\nexcept KeyboardInterrupt:\n    print('at once')\n"
    )
    proc = subprocess.run([python(), "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["Ctrl-C", "at", "once"], proc.stderr[-2000:]
    assert "Ctrl-C again stops at once" in proc.stderr


def test_a_terminal_shows_a_bar_readable_lines_and_where_the_model_is(mini_blocks, tmp_path):
    """On a terminal (a pseudo-terminal here): the progress bar, evaluations and the end as readable lines, never
    the Trainer's raw log dicts; the last words name the final loss, bits per byte and final/."""
    import os
    import pty

    out = tmp_path / "run"
    cmd = [
        python(),
        str(PRETRAIN_SCRIPT),
        str(TINY_RECIPE),
        *make_overrides(
            mini_blocks,
            out,
            {
                "training.max_steps": "4",
                "training.disable_tqdm": "false",
                "training.eval_strategy": "steps",
                "training.eval_steps": "2",
            },
        ),
    ]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=subprocess_env(), stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=300) == 0
    os.close(leader)
    text = b"".join(chunks).decode(errors="replace")
    assert "{'loss'" not in text and "{'eval_loss'" not in text, text[-3000:]
    assert "step 2/4 | val loss" in text and "done in" in text, text[-3000:]
    done = [line for line in text.splitlines() if "done: validation loss" in line]
    assert done and "bits per byte" in done[-1] and str(out / "final") in done[-1], text[-3000:]


# ---- non-finite loss -------------------------------------------------------------------------

# A real divergence: Adam at lr 1e6 without clipping blows the weights up; the gradients overflow at
# step 3 and the loss is non-finite from step 4 on (deterministic with the fixed seed).
DIVERGE = {
    "training.max_steps": "6",
    "training.per_device_train_batch_size": "2",
    "training.learning_rate": "1e6",
    "training.max_grad_norm": "0",
    "training.warmup_steps": "0",
}


def test_nan_policy_stop(mini_blocks, tmp_path):
    with pytest.raises(NonFiniteLossError) as info:
        run_pretrain(mini_blocks, tmp_path / "run", {**DIVERGE, "nan_policy": "stop"})
    msg = str(info.value)
    assert "nan_policy=stop" in msg and "at step" in msg and ("nan" in msg or "inf" in msg)
    # max_grad_norm 0: the Trainer does not clip, yet the overflowing gradients of step 3 are caught before the
    # loss turns non-finite at step 4 (and their norms are logged)
    assert msg.startswith("gradient norm is") and "at step 3" in msg, msg
    assert [e["first_step"] for e in read_log(tmp_path / "run") if e["event"] == "grad_norm"] == [1, 2]
    assert not (tmp_path / "run" / "final").exists()


def test_nan_policy_skip(mini_blocks, tmp_path):
    """Skipped steps are counted and logged as skipped: a window's loss (and the session's train_loss) is the
    mean of the steps taken, never pulled down by a 0 for a skipped one. More skips than max_skipped_steps, or
    than max_skipped_fraction of the run's steps (here at the end, after the last save), stop the run."""
    skip = {**DIVERGE, "nan_policy": "skip", "max_skipped_steps": "6"}
    summary = run_pretrain(mini_blocks, tmp_path / "run", {**skip, "max_skipped_fraction": "1"})
    assert summary["global_step"] == 6
    assert 0 < summary["skipped_steps"] < 6
    logs = [e for e in read_log(tmp_path / "run") if e["event"] == "log" and "loss" in e]
    skipped = [e for e in logs if e.get("skipped_steps")]
    assert sum(e["skipped_steps"] for e in skipped) == summary["skipped_steps"]
    taken = {e["step"]: e["loss"] for e in logs if not e.get("skipped_steps")}  # logging_steps=1: one step each
    assert all(np.isfinite(v) and v != 0 for v in taken.values()) and all(np.isnan(e["loss"]) for e in skipped)
    end = next(e for e in read_log(tmp_path / "run") if "train_loss" in e)
    assert end["train_loss"] == pytest.approx(np.mean(list(taken.values())), rel=1e-5)

    # The same run logged in windows of 4 steps, the first with a skipped step: its loss is the mean of the others.
    # 3 of 6 steps skipped is more than the default 5%: the run stops at its end, checkpoint-6 saved first.
    with pytest.raises(NonFiniteLossError, match=r"of 6 optimizer steps skipped .*max_skipped_fraction=0.05"):
        run_pretrain(
            mini_blocks,
            tmp_path / "windows",
            {
                **skip,
                "training.logging_steps": "4",
                "training.logging_first_step": "false",
                "training.save_strategy": "steps",
                "training.save_steps": "6",
            },
        )
    (window,) = [e for e in read_log(tmp_path / "windows") if e["event"] == "log" and "loss" in e]
    steps = [s for s in taken if s <= 4]
    assert window["step"] == 4 and window["skipped_steps"] == 4 - len(steps) > 0
    assert window["loss"] == pytest.approx(np.mean([taken[s] for s in steps]), rel=1e-5)
    assert last_complete_checkpoint(tmp_path / "windows") == str(tmp_path / "windows" / "checkpoint-6")
    assert not (tmp_path / "windows" / "final").exists()

    with pytest.raises(NonFiniteLossError, match="max_skipped_steps=0"):
        run_pretrain(mini_blocks, tmp_path / "capped", {**DIVERGE, "nan_policy": "skip", "max_skipped_steps": "0"})


def test_skipped_fraction_stops_during_training(tmp_path):
    """From the 20th optimizer step on the share is checked at each skip, counting the skips of the sessions
    before a resume (here 1): the run stops there, not only at its end. (Driven step by step: a real run of 20
    steps would take 15 s on CPU.) The skip-step optimizer wraps the trainer's own and leaves it untouched by a
    skipped step."""
    from transformers import TrainingArguments

    from hfpretrain.models import build_model, load_config
    from hfpretrain.training.nonfinite import NonFinitePolicy, SkipStepOptimizer

    model = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = trainer_mod.PretrainTrainer(
        model=model, args=args, train_sampler=None, samples_per_step=1, nonfinite=NonFinitePolicy("skip", 100, 0.2)
    )
    optimizer = trainer.create_optimizer()
    assert isinstance(optimizer, SkipStepOptimizer) and trainer.nonfinite.optimizer is optimizer
    assert optimizer.param_groups is optimizer.optimizer.param_groups
    stepped = []
    optimizer.optimizer.register_step_pre_hook(lambda *args: stepped.append(1))
    optimizer.resume(0, 1)
    for step in range(19):  # 1 + 4 of the first 19 steps skipped: more than 20%, but not checked yet
        optimizer.skip_next = step >= 15
        optimizer.step()
    assert optimizer.skipped == 4 and len(stepped) == 15  # the wrapped optimizer took the other steps only
    optimizer.skip_next = True
    with pytest.raises(NonFiniteLossError, match=r"6 of 20 optimizer steps skipped .*max_skipped_fraction=0.2"):
        optimizer.step()


def test_final_checkpoint_loads_like_a_hub_model(reference_run):
    """KV cache on and no pad_token_id in config.json (padding_idx would freeze the end-of-text row for a
    fine-tuner); the pad id generation needs is in generation_config.json; a model card is written."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    final = reference_run / "final"
    config = json.loads((final / "config.json").read_text())
    assert config["use_cache"] is True and config.get("pad_token_id") is None
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.get_input_embeddings().padding_idx is None
    assert GenerationConfig.from_pretrained(final).pad_token_id is not None
    assert GenerationConfig.from_pretrained(final).use_cache is True  # generate() and pipeline() with the KV cache
    card = (final / "README.md").read_text()
    assert "pipeline_tag: text-generation" in card and "bits per byte" in card and str(final) in card


def test_lm_eval_during_training_is_logged_beside_the_loss(mini_blocks, tmp_path):
    """evaluation.lm_eval_task scores the live model through lm-eval's HFLM at each evaluation; its
    time is not counted as training time (no throughput figure on a non-training log)."""
    out = tmp_path / "lm_eval"
    run_pretrain(
        mini_blocks,
        out,
        {
            "training.max_steps": 4,
            "training.eval_steps": 2,
            "training.logging_steps": 2,
            "training.save_strategy": "no",
            "evaluation.lm_eval_task": "arc_easy",
            "evaluation.lm_eval_limit": 10,
        },
    )
    events = read_log(out)
    scores = [e for e in events if "eval/arc_easy_acc" in e]
    assert {e["step"] for e in scores} >= {2, 4}
    assert all(0.0 <= e["eval/arc_easy_acc"] <= 1.0 for e in scores)
    assert all("loss" in e for e in events if "tokens_per_s" in e)


def test_a_crash_with_data_loader_workers_ends_the_process(mini_blocks, tmp_path):
    """Workers ignore SIGTERM (a preemption must not kill them mid-save), so the SIGTERM with which
    Python's exit ends daemon children did not end them, and a crashed run waited for them forever
    (seen on the GPU machine). Here the crash is a real one: a diverging run stopped by nan_policy=stop (DIVERGE's:
    non-finite from step 4, where lr 1e4 took more of its 50 steps)."""
    cmd = [
        python(),
        str(PRETRAIN_SCRIPT),
        str(TINY_RECIPE),
        *make_overrides(mini_blocks, tmp_path / "run", {**DIVERGE, "training.dataloader_num_workers": "2"}),
    ]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the crashed run did not exit")
    assert proc.returncode == 1 and "nan_policy=stop" in proc.stderr.strip().splitlines()[-1]  # one line, exit 1


def test_each_run_in_a_process_compiles(mini_blocks, tmp_path, caplog):
    """A study trains many models in one process. Dynamo's recompile limit is per process (8; here 1):
    without a reset per run, the later models silently ran eager. The compile check raises if a run
    made no graph of its own. (config.patch, not monkeypatch: monkeypatch's undo deleted the setting, and
    every later compile in the process failed.) Compiled whole, the rotary embedding reads its table."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    with torch._dynamo.config.patch(recompile_limit=1), caplog.at_level(logging.INFO, logger="hfpretrain"):
        for width in (128, 192):
            before = counters["stats"]["unique_graphs"]
            run_pretrain(
                mini_blocks,
                tmp_path / f"ffn{width}",
                {
                    "training.max_steps": "2",
                    "model.compile": "decoder",
                    "model.compile_backend": "eager",
                    "model.overrides.intermediate_size": str(width),
                },
            )
            assert counters["stats"]["unique_graphs"] > before, width
    assert caplog.text.count("rotary cos/sin read from a table") == 2


def test_a_compiled_gpt2_run_computes_gelu_with_a_sigmoid(mini_blocks, tmp_path, caplog, monkeypatch):
    """Compiled, each GPT-2 MLP's c_fc and GELU are one module whose backward sums the bias gradient, and the
    GELU runs as x * sigmoid(2u) (models/gelu.py); kernels.bias_gelu=false keeps transformers' MLP with the sigmoid
    GELU; uncompiled, transformers' modules. The summary records what each speed-up changed."""
    gpt2 = {
        "model.config": "gpt2_124m",
        "model.overrides.n_layer": "2",
        "model.overrides.n_embd": "64",
        "model.overrides.n_head": "2",
        "training.max_steps": "1",
        "training.save_strategy": "no",
    }
    compiled = {**gpt2, "model.compile": "decoder", "model.compile_backend": "eager"}
    with caplog.at_level(logging.INFO, logger="hfpretrain"):
        run_pretrain(mini_blocks, tmp_path / "compiled", compiled)
        assert "gradient summed in GELU's backward, in 2 layers" in caplog.text
        assert "sigmoid(2u)" not in caplog.text  # no GELU module left outside the fused MLPs
        caplog.clear()
        summary = json.loads((tmp_path / "compiled" / "summary.json").read_text())
        assert summary["speedups"]["bias_gelu_mlps"] == 2 and summary["speedups"]["sigmoid_gelus"] == 0
        run_pretrain(mini_blocks, tmp_path / "unfused", {**compiled, "kernels.bias_gelu": "false"})
        assert "GELU (tanh approximation) computed as x * sigmoid(2u) in 2 modules" in caplog.text
        assert "GELU's backward" not in caplog.text
        assert "bias_gelu: false" in (tmp_path / "unfused" / "recipe.yaml").read_text()
        caplog.clear()
        run_pretrain(mini_blocks, tmp_path / "eager", {**gpt2, "model.compile": "none"})
        assert "sigmoid(2u)" not in caplog.text and "GELU's backward" not in caplog.text


def test_inductor_options_hold_while_training(mini_blocks, tmp_path, monkeypatch):
    """model.inductor_options are in effect where torch.compile compiles (inside train()), and only there."""
    import torch._inductor.config as inductor_config

    seen = []
    train = trainer_mod.PretrainTrainer.train

    def spy(self, *args, **kwargs):
        seen.append(inductor_config.coordinate_descent_tuning)
        return train(self, *args, **kwargs)

    monkeypatch.setattr(trainer_mod.PretrainTrainer, "train", spy)
    run_pretrain(
        mini_blocks,
        tmp_path / "run",
        {
            "training.max_steps": "1",
            "training.save_strategy": "no",
            "model.inductor_options": "{coordinate_descent_tuning: true}",
        },
    )
    assert seen == [True] and inductor_config.coordinate_descent_tuning is False


def test_a_sharded_fsdp_run_still_exports_whole_weights(tmp_path):
    """Under FSDP with SHARDED_STATE_DICT (accelerate_configs/2gpu_fsdp2.yaml) the Trainer's save_model writes
    nothing: on 2 H200s final/ came out empty. The project gathers the full state dict instead. (accelerate runs
    an FSDP config as DDP on a CPU, so the flag is set here by hand; the gather itself is accelerate's.)"""
    from types import SimpleNamespace

    from transformers import TrainingArguments

    from hfpretrain.models import build_model, load_config

    model = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    trainer = trainer_mod.PretrainTrainer(model=model, args=args, train_sampler=None, samples_per_step=1)
    trainer.is_fsdp_enabled = True
    trainer.accelerator.state.fsdp_plugin = SimpleNamespace(state_dict_type="StateDictType.SHARDED_STATE_DICT")
    try:
        trainer.save_model(str(tmp_path / "final"))
        trainer.save_model(str(tmp_path / "checkpoint"), _internal_call=True)  # a checkpoint: the shards only
    finally:
        trainer.accelerator.state.fsdp_plugin = None
    saved, expected = load_weights(tmp_path / "final"), model.state_dict()
    expected.pop("lm_head.weight")  # tied to the embedding: saved once
    assert saved.keys() == expected.keys() and all(torch.equal(saved[k], v) for k, v in expected.items())
    assert not (tmp_path / "checkpoint").exists()


def test_the_overridden_trainer_hooks_exist():
    """A transformers whose Trainer lacks a private method PretrainTrainer overrides would silently skip the
    override's behaviour: the run stops at start instead, naming it."""
    trainer_mod.check_trainer_hooks()  # the installed transformers has them all

    class OldTrainer:
        def _get_train_sampler(self):
            pass

    with pytest.raises(RuntimeError, match="_clip_grad_norm") as info:
        trainer_mod.check_trainer_hooks(OldTrainer)
    assert "transformers>=5.17" in str(info.value)

    class NoSave(OldTrainer):  # every hook overridden, but a private method PretrainTrainer calls is gone
        pass

    for name in trainer_mod.PRIVATE_HOOKS + trainer_mod.PRIVATE_CALLS:
        setattr(NoSave, name, lambda self: None)
    trainer_mod.check_trainer_hooks(NoSave)
    del NoSave._save
    with pytest.raises(RuntimeError, match="Trainer has no _save, which PretrainTrainer overrides or calls"):
        trainer_mod.check_trainer_hooks(NoSave)


def test_importing_the_library_leaves_the_process_alone():
    """No exit hook, SIGTERM or SIGCHLD handler at import: those belong to a run (installed and put back by it)."""
    code = (
        "import signal; term, chld = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGCHLD)\n"
        "import hfpretrain.training, hfpretrain.data.order as d\n"
        "assert signal.getsignal(signal.SIGTERM) is term and signal.getsignal(signal.SIGCHLD) is chld\n"
        "assert not d._cleanup_installed\n"
        "print('ok')"
    )
    proc = subprocess.run([python(), "-c", code], capture_output=True, text=True, env=subprocess_env(), cwd=REPO)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_wandb_logs_in_the_run_folder_with_the_recipe(mini_blocks, tmp_path, monkeypatch):
    """report_to=wandb: offline without a login (never a prompt), wandb/ inside the run folder (not the current
    directory), and the ResolvedRun (the recipe as written, what was resolved, the plan) in the W&B run's config."""
    from train_utils import wandb_records

    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: not logged in
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    run_pretrain(
        mini_blocks,
        out,
        {"training.max_steps": "2", "training.report_to": "[wandb]", "logging.wandb_artifacts": "none"},
    )
    assert not (tmp_path / "wandb").exists()
    (run_file,) = out.glob("wandb/offline-run-*/run-*.wandb")
    config = {}
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    assert config["hfpretrain/recipe"]["training"]["max_steps"] == 2
    assert config["hfpretrain/plan"]["tokens_per_step"] == TOKENS_PER_STEP


def test_init_from_plans_the_loaded_model(reference_run, mini_blocks, tmp_path):
    """model.init_from: the plan (parameters, FLOPs, MFU) is the loaded checkpoint's, not model.config's, and
    model.overrides (which cannot reshape loaded weights) are refused."""
    from hfpretrain.training import RecipeError, pretrain

    base = make_overrides(mini_blocks, tmp_path / "run", {"model.init_from": str(reference_run / "final")})
    plan = pretrain(str(TINY_RECIPE), [*base, "model.config=scale_7m"], dry_run=True)["plan"]
    reference = json.loads((reference_run / "summary.json").read_text())["plan"]
    assert plan["parameters"] == reference["parameters"] and plan["flops_per_token"] == reference["flops_per_token"]
    with pytest.raises(RecipeError, match="do not apply to model.init_from"):
        pretrain(str(TINY_RECIPE), [*base, "model.overrides.hidden_size=32"], dry_run=True)
