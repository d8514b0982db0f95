"""Two CPU processes over gloo: DDP, FSDP2 and DeepSpeed ZeRO-1 (also with emulated fp8), launched the way users launch them
(``accelerate launch --config_file accelerate_configs/cpu_2proc_*.yaml scripts/pretrain.py
recipes/tiny_cpu.yaml ...``).

2 processes x micro-batch 2 must follow the single-process micro-batch-4 reference run (same
seed, same global batch, same data order) step by step: that only holds if the two ranks read
the two disjoint halves of each step's samples. The data split itself is also checked directly,
in-process, with the real sampler and accelerate's own batch-sampler sharding.

The checks that share a launch layout share its launch (a module fixture per config): its two processes run
their runs one after another (tests/training/pretrain_runs.py, each as scripts/pretrain.py runs it), since starting
a launch costs ~20 s on the CPU machine and a run a few; a run refused at start is the last of its launch. The
FSDP2 launch runs them through tests/training/fsdp2_cpu.py, which keeps accelerate's FSDP2 on CPU processes (it would
run them as DDP): the runs are sharded as on GPUs. The ZeRO-1 resume and the two launchers as two nodes launch
``scripts/pretrain.py`` itself.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from forked import script
from pretrain_runs import run_output

from train_utils import (
    launch_of,
    PRETRAIN_SCRIPT,
    REFERENCE,
    REPO,
    TINY_RECIPE,
    free_port,
    load_weights,
    make_overrides,
    read_log,
    step_losses,
    subprocess_env,
)

STEPS = 5  # the reference run saved checkpoint-5: its weights are compared too
# the reference run's own schedule, resumed at checkpoint-5 to its end
REFERENCE_RESUMED = {**REFERENCE, "training.eval_on_start": "false"}
DIST = {"training.max_steps": str(STEPS), "training.per_device_train_batch_size": "2"}
# Float sums run in another order on 2 ranks (gradient all-reduce) than in one process.
LOSS_TOL = 2e-4
WEIGHT_TOL = 1e-4


def _accelerate(config: Path, *args: str) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file CONFIG ARGS...`` on a free port, from the repository's root."""
    cmd = ["accelerate", "launch", "--config_file", str(config), "--main_process_port", str(free_port()), *args]
    return subprocess.run(cmd, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=540)


def _launch(
    config: Path, mini_blocks, out: Path, extra: dict | None = None, recipe: Path = TINY_RECIPE, launch_args: tuple = ()
) -> subprocess.CompletedProcess:
    overrides = make_overrides(mini_blocks, out, {**DIST, **(extra or {})})
    return _ran(_accelerate(config, *launch_args, str(PRETRAIN_SCRIPT), str(recipe), *overrides))


def _launch_runs(
    config: Path, mini_blocks, runs: dict, base: Path, script: str = "pretrain_runs.py", launch_args: tuple = ()
) -> dict:
    """The runs of ``runs`` (name -> (output folder, extra overrides, recipe)) one after another in one two-process
    launch of ``config`` (tests/training/pretrain_runs.py, or ``script`` that runs them so; ``launch_args``:
    accelerate's, e.g. another process count): name -> that run's own output and exit code."""
    names = list(runs)
    argv = [[str(recipe), *make_overrides(mini_blocks, out, {**DIST, **extra})] for out, extra, recipe in runs.values()]
    (base / "runs.json").write_text(json.dumps(argv))
    proc = _accelerate(config, *launch_args, str(REPO / "tests" / "training" / script), str(base / "runs.json"))
    return {name: run_output(proc, n) for n, name in enumerate(names)}


def _has_fp8() -> bool:
    """torchao's float8 is installed (the [fp8] and [test] extras): the fp8 runs can run."""
    import importlib.util

    return importlib.util.find_spec("torchao") is not None and importlib.util.find_spec("torchao.float8") is not None


def _ran(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """A launch, or a run of a shared launch, finished (exit 0); else its output's tail, then the failure."""
    if proc.returncode != 0:  # pytest cuts long assertion messages: the launcher's stderr goes to captured stdout
        print(proc.stdout[-3000:], proc.stderr[-12000:], sep="\n----- stderr -----\n")
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-5:]
    return proc


def _check_against_reference(out: Path, reference_run: Path):
    events = read_log(out)
    plan = events[0]["plan"]
    assert plan["world_size"] == 2 and plan["samples_per_step"] == 4
    dist, ref = step_losses(out), step_losses(reference_run)
    assert sorted(dist) == list(range(1, STEPS + 1))
    for step in dist:
        assert dist[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, dist[step], ref[step])
    # tokens_per_s is the whole job's; per GPU is half of it
    log = next(e for e in events if e["event"] == "log")
    assert log["tokens_per_s_per_gpu"] == pytest.approx(log["tokens_per_s"] / 2)
    assert log["tokens_seen"] == 4 * 128
    a, b = load_weights(out / "final"), load_weights(reference_run / f"checkpoint-{STEPS}")
    if "lm_head.weight" in a and "lm_head.weight" not in b:
        # DeepSpeed's gathered state dict saves the tied head as well: it must be the embedding.
        assert torch.equal(a.pop("lm_head.weight"), a["model.embed_tokens.weight"])
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=WEIGHT_TOL, msg=name)


def _ddp_config(tmp_path: Path) -> Path:
    return REPO / "accelerate_configs" / "cpu_2proc_ddp.yaml"


@pytest.fixture(scope="module")
def ddp_runs(reference_run, mini_blocks, tmp_path_factory):
    """One two-process launch of the DDP config: the plain run, the elastic resume of the reference run's
    checkpoint-5, then a run with tensor parallelism, refused at start (see their tests): name -> (output folder, that
    run's output)."""
    import shutil

    base = tmp_path_factory.mktemp("ddp")
    elastic = base / "elastic"
    shutil.copytree(reference_run / "checkpoint-5", elastic / "checkpoint-5")
    runs = {
        "ddp": (base / "ddp", {}, TINY_RECIPE),
        "elastic": (
            elastic,
            {
                **REFERENCE_RESUMED,
                "training.per_device_train_batch_size": "4",
                "training.resume_from_checkpoint": "auto",
            },
            TINY_RECIPE,
        ),
        "tp": (base / "tp", {"parallel.tp": "2"}, TINY_RECIPE),  # last: refused, it ends the launch
    }
    procs = _launch_runs(_ddp_config(base), mini_blocks, runs, base)
    return {name: (runs[name][0], procs[name]) for name in runs}


def test_ddp_two_processes_match_single_process(reference_run, ddp_runs):
    """Also what the DDP config launches: two processes (the plan's world_size, and losses that match only with
    both halves of each step's batch read)."""
    out, proc = ddp_runs["ddp"]
    _ran(proc)
    _check_against_reference(out, reference_run)


@pytest.fixture(scope="module")
def fsdp2_runs(mini_blocks, tmp_path_factory, reference_run):
    """One two-process launch of the FSDP2 config: the plain run, the MoE and fp8 (see their tests): name -> (output
    folder, that run's output)."""
    base = tmp_path_factory.mktemp("fsdp2")
    saved = {"training.save_strategy": "steps", "training.save_steps": "3"}
    resume = {"training.resume_from_checkpoint": str(base / "fsdp2" / "checkpoint-3")}
    runs = {
        "plain": (base / "fsdp2", saved, TINY_RECIPE),
        "resumed": (base / "resumed", resume, TINY_RECIPE),  # its checkpoint-3, in the same layout
        "moe": (base / "moe", MOE, TINY_RECIPE),
    }
    if _has_fp8():  # without torchao the fp8 test is skipped, the others still run
        runs["fp8"] = (base / "fp8", FP8, TINY_RECIPE)
    # a checkpoint saved without FSDP (one process), resumed under it: read whole and sharded in place
    runs["plain_checkpoint"] = (
        base / "plain_checkpoint",
        {"training.resume_from_checkpoint": str(reference_run / "checkpoint-5")},
        TINY_RECIPE,
    )
    config = REPO / "accelerate_configs" / "cpu_2proc_fsdp2.yaml"
    procs = _launch_runs(config, mini_blocks, runs, base, script="fsdp2_cpu.py")  # sharded, as on GPUs
    return {name: (runs[name][0], procs[name]) for name in runs}


def test_fsdp2_two_processes_match_single_process(reference_run, fsdp2_runs):
    """The FSDP2 config's plan and run, sharded (tests/training/fsdp2_cpu.py keeps accelerate's FSDP2 on CPU
    processes, which it would run as DDP): the losses and the gathered final/ are the one-process run's, and its
    checkpoint is FSDP's own (sharded weights and optimizer states, no model.safetensors), which the next
    resume takes as whole (it was reported damaged, and a resume refused to start, until 2026-12-01)."""
    from hfpretrain.training.checkpoints import last_complete_checkpoint

    out, proc = fsdp2_runs["plain"]
    _ran(proc)
    assert read_log(out)[0]["plan"]["zero_stage"] == 3  # planned (memory) as fully sharded
    saved = sorted(p.name for p in (out / "checkpoint-3").iterdir())
    assert {"pytorch_model_fsdp_0", "optimizer_0"} <= set(saved) and "model.safetensors" not in saved, saved
    assert last_complete_checkpoint(out) == str(out / f"checkpoint-{STEPS}")  # the newest: also sharded, whole
    _check_against_reference(out, reference_run)


def test_fsdp2_resumes_exactly_on_2_and_4_processes_without_fsdp_and_back(
    reference_run, fsdp2_runs, mini_blocks, tmp_path, caplog
):
    """Resumed from its checkpoint-3 in the same layout, on 4 processes (elastic: 2 -> 4), and without FSDP on 2 (DDP)
    and 1 process (its sharded state dicts read whole once, into the Trainer's own files), the FSDP2 run's steps 4
    and 5 are the one-process run's; and the one-process run's checkpoint goes on under FSDP on 2 (1 -> 2)."""
    from hfpretrain.training.config import RecipeError
    from hfpretrain.training.resume import refuse_other_optimizer_layout, resume_reading
    from train_utils import run_pretrain

    out, proc = fsdp2_runs["resumed"]
    _ran(proc)
    resumed, ref = step_losses(out), step_losses(reference_run)
    assert sorted(resumed) == [4, 5]
    for step in resumed:
        assert resumed[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, resumed[step], ref[step])
    checkpoint = fsdp2_runs["plain"][0] / "checkpoint-3"
    # on 4 processes (1 x 1 each: the global batch kept), torch's distributed checkpoint re-splits the shards
    four = _launch_runs(
        REPO / "accelerate_configs" / "cpu_2proc_fsdp2.yaml",
        mini_blocks,
        {"four": (tmp_path / "four", {"training.resume_from_checkpoint": str(checkpoint)}, TINY_RECIPE)},
        tmp_path,
        script="fsdp2_cpu.py",
        launch_args=("--num_processes", "4"),
    )["four"]
    _ran(four)
    assert "4 samples per step kept as 1 x 1 accumulation per process" in four.stderr
    assert read_log(tmp_path / "four")[0]["plan"]["world_size"] == 4
    elastic = step_losses(tmp_path / "four")
    assert sorted(elastic) == [4, 5]
    for step in elastic:
        assert elastic[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, elastic[step], ref[step])
    # without FSDP: DDP on 2 processes (rank 0 writes the whole copy while rank 1 waits), then 1 process (reuses it)
    assert not (checkpoint / "whole").exists()
    assert resume_reading(str(checkpoint), 1, 0, False).startswith("FSDP's sharded state dicts read whole once")
    ddp = _launch(
        _ddp_config(tmp_path), mini_blocks, tmp_path / "ddp", {"training.resume_from_checkpoint": str(checkpoint)}
    )
    assert "resumed without FSDP: reading them whole once into" in ddp.stderr
    whole = {p.name for p in (checkpoint / "whole").iterdir()}
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json", "scheduler.pt", "COMPLETE"} <= whole, whole
    with caplog.at_level(logging.INFO, logger="hfpretrain"):
        run_pretrain(mini_blocks, tmp_path / "one", {**DIST, "training.resume_from_checkpoint": str(checkpoint)})
    assert f"resumed without FSDP, from its whole copy {checkpoint / 'whole'}/" in caplog.text
    for plain in (tmp_path / "ddp", tmp_path / "one"):
        losses = step_losses(plain)
        assert sorted(losses) == [4, 5], plain
        for step in losses:
            assert losses[step] == pytest.approx(ref[step], abs=LOSS_TOL), (plain, step, losses[step], ref[step])
    # not into DeepSpeed's engine: refused at start, in one line naming the way that works
    with pytest.raises(RecipeError, match=r"checkpoint-3 was saved under FSDP .* or without DeepSpeed"):
        refuse_other_optimizer_layout(str(checkpoint), sharded_engine=True, deepspeed=True)
    # and back: the one-process run's checkpoint-5 (whole weights, optimizer.pt) under FSDP on 2 processes, its
    # states sharded in place (accelerate's FSDP load reads only FSDP's own files): steps 6 on repeat the reference
    out, proc = fsdp2_runs["plain_checkpoint"]
    _ran(proc)
    back = step_losses(out)
    assert sorted(back) == list(range(6, STEPS + 1))
    for step in back:
        assert back[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, back[step], ref[step])


def _zero1_config(tmp_path: Path) -> Path:
    return REPO / "accelerate_configs" / "cpu_2proc_zero1.yaml"


# ZeRO-1's schedule is given as the GPU recipes give it, cosine with an absolute ``min_lr`` (transformers reads that
# against ``optimizer.defaults``, which DeepSpeed's ZeRO optimizer lacks); min_lr = learning_rate makes it the
# reference's constant_with_warmup. Fused AdamW, as on GPUs (see the resume below).
ZERO1 = {
    "training.lr_scheduler_type": "cosine_with_min_lr",
    "training.lr_scheduler_kwargs": "{min_lr: 3e-3}",
    "optimizer.name": "adamw_torch_fused",
}


@pytest.fixture(scope="module")
def zero1_runs(mini_blocks, tmp_path_factory):
    """One two-process ZeRO-1 launch: the run of ZERO1's schedule, checkpoint at step 3, that the match and the
    resume tests below both read (each launched its own before: the same run twice), then the MoE and fp8, then a
    run with gradient statistics, refused at start (see their tests): name -> (output folder, that run's output);
    "zero1" also its recipe."""
    pytest.importorskip("deepspeed")
    base = tmp_path_factory.mktemp("zero1")
    recipe = base / "tiny_min_lr.yaml"
    recipe.write_text(TINY_RECIPE.read_text().replace("{min_lr_rate: 0.1}", "{min_lr: 3.0e-4}"))
    saved = {**ZERO1, "training.save_strategy": "steps", "training.save_steps": "3"}
    runs = {"zero1": (base / "zero1", saved, recipe), "moe": (base / "moe", MOE, TINY_RECIPE)}
    if _has_fp8():
        runs["fp8"] = (base / "fp8", FP8, TINY_RECIPE)
    # last: refused, it ends the launch
    runs["grad_stats"] = (base / "grad_stats", ZERO1_REFUSED[0][0], TINY_RECIPE)
    procs = _launch_runs(_zero1_config(base), mini_blocks, runs, base)
    return {name: (runs[name][0], procs[name], runs[name][2]) for name in runs}


@pytest.fixture(scope="module")
def zero1_run(zero1_runs):
    """The ZeRO-1 run of ``zero1_runs``, finished: (its recipe, its output folder, its output)."""
    out, proc, recipe = zero1_runs["zero1"]
    return recipe, out, _ran(proc)


def test_zero1_two_processes_match_single_process(reference_run, zero1_run):
    """ZeRO-1 on two processes, with the schedule of ZERO1's comment, follows the reference run."""
    _, out, proc = zero1_run
    assert "deepspeed" in (proc.stdout + proc.stderr).lower()  # DeepSpeed really ran
    assert read_log(out)[0]["plan"]["zero_stage"] == 1
    _check_against_reference(out, reference_run)


def test_zero1_resumes_on_one_process_and_back_on_two(reference_run, zero1_run, mini_blocks, tmp_path):
    """DeepSpeed refuses ZeRO optimizer shards saved at another data-parallel size: the resume converts them once
    to its universal format (zero.load_universal_if_resized) and goes on, exactly, with the same ZeRO-1 config on
    one process, and from there back on two (2 -> 1 -> 2). Fused AdamW, as on GPUs: there DeepSpeed's universal loader left its step counters on the wrong
    device (optim.steps_beside_params)."""
    from hfpretrain.training.resume import resume_reading
    from hfpretrain.training.reshard import zero_ranks

    recipe, out, _ = zero1_run
    ckpt = out / "checkpoint-3"
    assert zero_ranks(ckpt) == 2 and not (ckpt / "latest_universal").exists()
    assert resume_reading(str(ckpt), 1, 1, False).startswith("ZeRO optimizer states of 2 ranks on 1: converted once")
    assert resume_reading(str(ckpt), 2, 1, False) == "in the layout it was saved in"
    resumed = tmp_path / "resumed"  # 1 process, same global batch (micro-batch 4, set by the elastic resume)
    proc = _launch(
        _zero1_config(tmp_path),
        mini_blocks,
        resumed,
        {**ZERO1, "training.save_strategy": "steps", "training.resume_from_checkpoint": str(ckpt)},  # at the end
        recipe,
        launch_args=("--num_processes", "1"),
    )
    assert "ZeRO optimizer states of 2 ranks, resumed on 1: converting them" in proc.stderr, proc.stderr[-3000:]
    assert (ckpt / "latest_universal").read_text().strip() == "global_step3_universal"
    losses, ref = step_losses(resumed), step_losses(reference_run)
    assert sorted(losses) == [4, 5]
    for step in losses:
        assert losses[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, losses[step], ref[step])
    # and back: its checkpoint-5 (one rank's shards) on 2 processes, converted the same way, one step further (the
    # schedule is constant after warmup: step 6 is the reference's)
    back = tmp_path / "back"
    proc = _launch(
        _zero1_config(tmp_path),
        mini_blocks,
        back,
        {**ZERO1, "training.max_steps": "6", "training.resume_from_checkpoint": str(resumed / "checkpoint-5")},
        recipe,
    )
    assert "ZeRO optimizer states of 1 ranks, resumed on 2: converting them" in proc.stderr, proc.stderr[-3000:]
    assert step_losses(back) == pytest.approx({6: ref[6]}, abs=LOSS_TOL)

    # Without DeepSpeed the optimizer states in global_step3/ would be skipped silently: refused instead.
    proc = script(
        PRETRAIN_SCRIPT.name,
        TINY_RECIPE,
        *make_overrides(mini_blocks, tmp_path / "plain", {**DIST, "training.resume_from_checkpoint": str(ckpt)}),
        cwd=REPO,
        env={"DS_ACCELERATOR": "cpu"},
    )
    assert proc.returncode != 0 and "was saved under DeepSpeed" in proc.stderr, proc.stderr[-2000:]


def test_a_one_process_checkpoint_resumes_on_two_at_its_global_batch(reference_run, ddp_runs):
    """Elastic resume: the reference run's checkpoint-5 (1 process x micro-batch 4) goes on on 2 processes with the
    same recipe (micro-batch 4 each, which would make 8 samples a step): the launch keeps the checkpoint's global
    batch (2 x 2), so steps 6-10 read the same samples and repeat the uninterrupted losses and weights."""
    out, proc = ddp_runs["elastic"]
    _ran(proc)
    assert "samples per step kept as 2 x 1 accumulation per process" in proc.stderr, proc.stderr[-3000:]
    losses, ref = step_losses(out), step_losses(reference_run)
    assert sorted(losses) == list(range(6, 11))
    for step in losses:
        assert losses[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, losses[step], ref[step])
    a, b = load_weights(out / "final"), load_weights(reference_run / "checkpoint-10")
    for name in b:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=WEIGHT_TOL, msg=name)


def test_a_cpu_launch_with_tensor_parallelism_is_one_error_line(ddp_runs):
    """Launched as a user launches it (accelerate, 2 CPU processes; the last run of the DDP config's shared
    launch, which had a launch of its own): refused at start naming the key and what blocks it (accelerate's
    ParallelismConfig on MULTI_CPU), exit 2 on both processes, nothing written; accelerate's launcher then reports the
    failed children in its own words, exit 1. (test_parallel.py runs tp on CPU processes with
    this check relaxed.)"""
    out, proc = ddp_runs["tp"]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [  # one line for the two processes: the second leaves it to its node's first
        "error: parallel.tp=2: accelerate takes a ParallelismConfig (tp_size, cp_size) only on GPU "
        "launches (MULTI_GPU, FSDP2, DeepSpeed), not on a CPU launch (MULTI_CPU): run it on GPUs"
    ], proc.stderr[-3000:]
    assert proc.returncode == 2 and not out.exists()


def test_a_resume_that_cannot_keep_the_global_batch_is_one_line(reference_run, mini_blocks, tmp_path):
    """4 samples a step do not split over 3 processes: refused before any work, naming the checkpoint; on 2 they
    split as 2 x 1 (planned in this process: resolve() for a launch of 2 or 3, and `--dry-run --world-size`)."""
    from hfpretrain.training.config import RecipeError, load_recipe
    from hfpretrain.training.resolve import read_data_facts, resolve
    from hfpretrain.training.resume import elastic_batch

    recipe = load_recipe(TINY_RECIPE, make_overrides(mini_blocks, tmp_path / "x", REFERENCE))
    facts, ckpt = read_data_facts(recipe, planning=True), str(reference_run / "checkpoint-5")

    def planned(world):
        return resolve(recipe, facts, launch_of(world, zero=0))

    assert elastic_batch(ckpt, planned(1)) == []
    assert elastic_batch(ckpt, planned(2)) == [
        "training.per_device_train_batch_size=2",
        "training.gradient_accumulation_steps=1",
    ]
    with pytest.raises(
        RecipeError,
        match=r"checkpoint-5 was trained at 4 samples per step on 1 processes: 3 "
        r"processes cannot split that global batch evenly",
    ):
        elastic_batch(ckpt, planned(3))
    # --dry-run plans the resume as the run would: the split it keeps, or the same one line, exit 2
    dry = [str(TINY_RECIPE), *make_overrides(mini_blocks, tmp_path / "x", REFERENCE)]
    dry += [f"training.resume_from_checkpoint={ckpt}", "--dry-run"]
    planned2 = script("pretrain.py", *dry, "--world-size", "2")
    assert planned2.returncode == 0, planned2.stderr[-2000:]
    plan = json.loads(planned2.stdout)["plan"]
    assert (plan["world_size"], plan["micro_batch"], plan["gradient_accumulation_steps"]) == (2, 2, 1), plan
    assert plan["resume"] == {"from": ckpt, "reading": "in the layout it was saved in"}
    assert f"resume: {ckpt}, in the layout it was saved in" in planned2.stderr
    # under FSDP (planned: --zero-stage 3) the one-process checkpoint's states are sharded in place
    fsdp = json.loads(script("pretrain.py", *dry, "--world-size", "2", "--zero-stage", "3").stdout)["plan"]
    assert fsdp["resume"]["reading"] == "whole weights and optimizer.pt, sharded in place under FSDP"
    refused = script("pretrain.py", *dry, "--world-size", "3")
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    assert refused.returncode == 2 and len(errors) == 1 and "cannot split that global batch" in errors[0]
    assert not (tmp_path / "x").exists()


# ---- the data split, checked directly ----------------------------------------------------------


class _BlockIds(torch.utils.data.Dataset):
    """The run's virtual sequence, yielding block ids instead of token rows."""

    def __init__(self, shuffled):
        self.shuffled = shuffled

    def __len__(self):
        return len(self.shuffled)

    def __getitem__(self, i):
        return self.shuffled.block_index(i)


def _rank_batches(blocks, per_device: int, world: int, rank: int, steps: int, start_step: int = 0):
    """Block ids per optimizer step for one rank, through the real ResumableSampler and accelerate's
    own sharding (prepare_data_loader, as Trainer's accelerator.prepare does it)."""
    from accelerate.data_loader import prepare_data_loader

    from hfpretrain.data.order import ResumableSampler, ShuffledBlocks

    samples_per_step = per_device * world
    length = steps * samples_per_step
    sampler = ResumableSampler(length)
    sampler.start = start_step * samples_per_step  # PretrainTrainer.position_data
    loader = torch.utils.data.DataLoader(
        _BlockIds(ShuffledBlocks(blocks, length, seed=1234)), sampler=sampler, batch_size=per_device
    )
    if world > 1:
        loader = prepare_data_loader(loader, num_processes=world, process_index=rank, put_on_device=False)
    return [batch.tolist() for batch in loader]


@pytest.mark.parametrize("start_step", [0, 3])
def test_ranks_read_disjoint_halves_of_each_step(mini_blocks, start_step):
    from hfpretrain.data.order import load_input_ids

    blocks = load_input_ids(mini_blocks, "train")
    steps = 6
    single = _rank_batches(blocks, 4, 1, 0, steps, start_step)
    ranks = [_rank_batches(blocks, 2, 2, r, steps, start_step) for r in (0, 1)]
    assert len(single) == len(ranks[0]) == len(ranks[1]) == steps - start_step
    seen = set()
    for step, whole in enumerate(single):
        r0, r1 = ranks[0][step], ranks[1][step]
        assert len(r0) == len(r1) == 2
        assert r0 + r1 == whole  # rank 0 the first half, rank 1 the second: the single run's batch
        assert not set(r0) & set(r1)
        seen |= set(whole)
    assert len(seen) == 4 * (steps - start_step)  # no block twice within an epoch


# What DeepSpeed would silently skip: (overrides, the refusal's words)
ZERO1_REFUSED = (
    ({"logging.grad_stats_interval": "5"}, "grad_stats_interval is not supported under DeepSpeed"),
    ({"nan_policy": "skip"}, "nan_policy=skip is not supported under DeepSpeed"),
)


def test_zero1_refuses_what_it_would_silently_skip(zero1_runs, mini_blocks, tmp_path):
    """Under DeepSpeed, per-layer gradient statistics would log nothing and nan_policy=skip cannot skip a step
    (the engine steps its own optimizer): each is one error line at start, exit 2, nothing written. The check
    needs DeepSpeed's engine, not two ranks: the last run of the shared ZeRO-1 launch (which had a one-process
    launch of its own) shows the launcher's DeepSpeed reaching the check (the gradient statistics); both refusals
    are that check (resolve.check_launch) on the machine such a launch detects, asked in this process (each was a
    launch)."""
    from hfpretrain.training.config import RecipeError, load_recipe
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve

    out, proc = zero1_runs["grad_stats"][:2]
    assert proc.returncode != 0 and ZERO1_REFUSED[0][1] in proc.stderr, proc.stderr[-3000:]
    assert not (out / "final").exists()
    # the machine a one-process launch of the ZeRO-1 config detects (Machine.detect: ACCELERATE_USE_DEEPSPEED)
    launched = Machine(
        world_size=1, engine="deepspeed", zero_stage=None, device="cpu", gpu_memory=None, gpu_count=0, launched=1
    )
    for extra, expected in ZERO1_REFUSED:
        recipe = load_recipe(TINY_RECIPE, make_overrides(mini_blocks, tmp_path / "x", {**DIST, **extra}))
        with pytest.raises(RecipeError, match=expected):
            resolve(recipe, read_data_facts(recipe), launched)
        resolve(recipe, read_data_facts(recipe), replace(launched, engine="ddp"))  # DeepSpeed's alone


FP8 = {"model.precision": "fp8", "model.fp8_emulate": "true"}


@pytest.fixture(scope="module")
def fp8_reference(mini_blocks, tmp_path_factory):
    """One process, micro-batch 4, model.precision=fp8 emulated (no float8 GPU here): the 2-process runs' target."""
    pytest.importorskip("torchao.float8", reason="torchao is in the [fp8] and [test] extras")
    from train_utils import run_pretrain

    out = tmp_path_factory.mktemp("fp8_one") / "run"
    run_pretrain(mini_blocks, out, {**DIST, "training.per_device_train_batch_size": "4", **FP8})
    return out


@pytest.mark.parametrize("config", ["fsdp2", "zero1"])
def test_fp8_composes_with_sharding(fp8_reference, request, config):
    """fp8 (torchao's Float8Linear, converted before accelerate wraps the model) under the FSDP2 config (sharded:
    tests/training/fsdp2_cpu.py) and ZeRO-1 follows the one-process fp8 run step by step. Looser than bf16's match: each rank
    scales its own activations (tensorwise amax of its half of the batch), so the float8 rounding differs a little."""
    if config == "zero1":
        pytest.importorskip("deepspeed")
    out, proc = request.getfixturevalue(f"{config}_runs")["fp8"][:2]
    _ran(proc)
    summary = read_log(out)
    assert summary[0]["plan"]["precision"] == "fp8" and summary[0]["plan"]["world_size"] == 2
    dist, ref = step_losses(out), step_losses(fp8_reference)
    assert sorted(dist) == list(range(1, STEPS + 1))
    for step in dist:
        assert dist[step] == pytest.approx(ref[step], rel=1e-3), (step, dist[step], ref[step])
    a, b = load_weights(out / "final"), load_weights(fp8_reference / "final")
    if "lm_head.weight" in a and "lm_head.weight" not in b:  # DeepSpeed's gathered state dict saves the tied head
        assert torch.equal(a.pop("lm_head.weight"), a["model.embed_tokens.weight"])
    assert a.keys() == b.keys()  # plain weights under plain names: no float8 wrapper in the checkpoint


# A tiny GLM-4-MoE with aux-loss-free balancing: sigmoid routing, a correction bias moved every step
MOE = {
    "model.config": "glm4_moe_101m_a24m",
    "model.overrides.num_hidden_layers": "2",
    "model.overrides.hidden_size": "64",
    "model.overrides.num_attention_heads": "2",
    "model.overrides.num_key_value_heads": "2",
    "model.overrides.head_dim": "32",
    "model.overrides.moe_intermediate_size": "32",
    "model.overrides.n_routed_experts": "4",
    "model.overrides.num_experts_per_tok": "2",
    "model.overrides.intermediate_size": "64",
    "moe.bias_update_rate": "0.01",
    "training.logging_steps": "1",
}


@pytest.fixture(scope="module")
def moe_reference(mini_blocks, tmp_path_factory):
    from train_utils import run_pretrain

    out = tmp_path_factory.mktemp("moe_one") / "run"
    run_pretrain(mini_blocks, out, {**DIST, "training.per_device_train_batch_size": "4", **MOE})
    return out


@pytest.mark.parametrize("config", ["fsdp2", "zero1"])
def test_moe_with_balancing_composes_with_sharding(moe_reference, request, config):
    """An MoE under the FSDP2 config (sharded: tests/training/fsdp2_cpu.py) and ZeRO-1 follows the one-process run
    step by step, and its correction biases end where the one-process run's do: each step's expert counts are summed over
    the two ranks before the update, so both ranks (and the single process) move the same biases."""
    if config == "zero1":
        pytest.importorskip("deepspeed")
    out, proc = request.getfixturevalue(f"{config}_runs")["moe"][:2]
    _ran(proc)
    dist, ref = step_losses(out), step_losses(moe_reference)
    assert sorted(dist) == list(range(1, STEPS + 1))
    for step in dist:
        assert dist[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, dist[step], ref[step])
    a, b = load_weights(out / "final"), load_weights(moe_reference / "final")
    biases = [k for k in b if k.endswith("e_score_correction_bias")]
    assert biases and any(b[k].abs().sum() > 0 for k in biases)
    for k in biases:
        assert torch.equal(a[k], b[k]), k
    loads = [e for e in read_log(out) if e.get("event") == "log" and "loss" in e]
    assert all("expert_load_max_mean" in e for e in loads)


def _positions_per_step(world: int, micro: int, accum: int, first_step: int, last_step: int, samples: int):
    """The positions of the shuffled sequence that each optimizer step first_step..last_step reads on a launch of
    ``world`` processes, wired as the Trainer wires it: our sampler from ``first_step - 1`` steps in (its
    ``position_data`` on resume), batched by the micro-batch, each rank's batches chosen by accelerate's
    BatchSamplerShard (what ``accelerator.prepare`` wraps the loader's batch sampler in)."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    from hfpretrain.data.order import ResumableSampler

    sampler = ResumableSampler(10_000)
    sampler.start = (first_step - 1) * samples
    shards = [
        iter(BatchSamplerShard(BatchSampler(sampler, micro, drop_last=False), num_processes=world, process_index=rank))
        for rank in range(world)
    ]
    return {
        step: sorted(p for shard in shards for _ in range(accum) for p in next(shard))
        for step in range(first_step, last_step + 1)
    }


def test_an_elastic_resume_reads_each_sample_once_as_the_uninterrupted_run(reference_run, mini_blocks, tmp_path):
    """A run of 4 samples per step on 1 process, resumed on 4, then 2, then 1 process (and on 2 with a
    micro-batch of 1, which splits it as 1 x 2 accumulation): each launch's micro-batch and accumulation as
    elastic_batch sets them for a checkpoint of this run, the positions every step reads as the loader gives them.
    Every step reads the uninterrupted run's samples, so the whole run's multiset is the same: none repeated, none
    skipped."""
    from collections import Counter

    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.resolve import read_data_facts, resolve
    from hfpretrain.training.resume import elastic_batch

    ckpt = str(reference_run / "checkpoint-5")

    def split(world: int, *extra: str) -> tuple[int, int]:
        recipe = load_recipe(TINY_RECIPE, [*make_overrides(mini_blocks, tmp_path / "x", REFERENCE), *extra])
        machine = launch_of(world, zero=0)
        keys = dict(
            o.split("=") for o in elastic_batch(ckpt, resolve(recipe, read_data_facts(recipe, planning=True), machine))
        )
        return int(keys["training.per_device_train_batch_size"]), int(keys["training.gradient_accumulation_steps"])

    assert split(4) == (1, 1) and split(2) == (2, 1) and split(2, "training.per_device_train_batch_size=1") == (1, 2)
    samples, last = 4, 40
    uninterrupted = _positions_per_step(1, 4, 1, 1, last, samples)
    hops = [(1, (4, 1), 1, 10), (4, split(4), 11, 20), (2, split(2), 21, 28), (1, (4, 1), 29, 34)]
    hops.append((2, split(2, "training.per_device_train_batch_size=1"), 35, last))
    resumed = {}
    for world, (micro, accum), first, end in hops:
        resumed.update(_positions_per_step(world, micro, accum, first, end, samples))
    assert resumed == uninterrupted
    seen = Counter(p for step in resumed.values() for p in step)
    assert seen == Counter(range(last * samples)) and max(seen.values()) == 1


def test_two_launchers_as_two_nodes_match_one(reference_run, mini_blocks, tmp_path):
    """Several nodes, on one host: two `accelerate launch --num_machines 2 --machine_rank {0,1}` of one process
    each, as scripts/slurm_pretrain.sbatch starts one per node, train as the one launcher of two processes does
    (the reference's losses), and one writer keeps the run's log (each step logged once)."""
    out, port = tmp_path / "nodes", str(free_port())
    launches = [
        subprocess.Popen(
            [
                "accelerate",
                "launch",
                "--config_file",
                str(_ddp_config(tmp_path)),
                "--num_machines",
                "2",
                "--num_processes",
                "2",
                "--machine_rank",
                str(rank),
                "--main_process_ip",
                "127.0.0.1",
                "--main_process_port",
                port,
                "--rdzv_backend",
                "static",
                str(PRETRAIN_SCRIPT),
                str(TINY_RECIPE),
                *make_overrides(mini_blocks, out, DIST),
            ],
            cwd=REPO,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    results = [launch.communicate(timeout=540) for launch in launches]
    for launch, (_, stderr) in zip(launches, results):
        assert launch.returncode == 0, stderr[-6000:]
    _check_against_reference(out, reference_run)
    steps = [e["step"] for e in read_log(out) if e["event"] == "log" and "loss" in e]
    assert steps == list(range(1, STEPS + 1)), steps
