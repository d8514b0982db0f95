"""Tensor parallelism through transformers' tp_plan on two and four CPU processes (gloo), and a late rank named by the
check-in timeout (training/barrier.py).

A user's CPU launch refuses tensor parallelism: accelerate refuses a ParallelismConfig on a MULTI_CPU launch, and the
Trainer makes one for any model loaded with tp_size > 1 (training/layout.py CPU_REFUSAL, test_layout.py checks that
refusal). The sharded model's loading (``models.parallel.load_tensor_parallel``) is trained here by hand (its ranks
forked from the test's process as torchrun would start them: tests/forked.py), and the whole Trainer path with those
two checks relaxed (tests/training/tp_trainer.py, launched by accelerate), each against one process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from forked import run_forked, run_forked_ranks
from pretrain_runs import run_output

from train_utils import (
    REPO,
    TINY_RECIPE,
    free_port,
    load_weights,
    make_overrides,
    read_log,
    run_pretrain,
    step_losses,
    subprocess_env,
)

STEPS = 5
# tp_steps.py's runs by hand (a layout's start costs most of a launch, but on two busy cores each of its steps waits
# on a dozen gloo collectives): 3 steps, the first two with AdamW's moments, each loss compared
HAND_STEPS = 3
# The two ranks sum each row-wise projection's halves in another order than one process: measured equal to the last
# bit on the loss here (transformers 5.24, torch 2.13), the weights within 2e-5 after 5 AdamW steps.
LOSS_TOL = 1e-5
WEIGHT_TOL = 1e-4


def _accelerate(
    script: Path, *args, config: str = "cpu_2proc_ddp.yaml", nproc: int = 2, timeout: int = 400
) -> subprocess.CompletedProcess:
    """``script`` launched as a user launches it: accelerate, ``nproc`` CPU processes over gloo."""
    cmd = [
        "accelerate",
        "launch",
        "--config_file",
        str(REPO / "accelerate_configs" / config),
        "--num_processes",
        str(nproc),
        "--main_process_port",
        str(free_port()),
        str(script),
        *map(str, args),
    ]
    return subprocess.run(cmd, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


def _tp_trainer_runs(
    base: Path, *runs: list[str], config: str = "cpu_2proc_ddp.yaml", nproc: int = 2
) -> list[subprocess.CompletedProcess]:
    """tests/training/tp_trainer.py's runs (each the tiny recipe's overrides) one after another in one launch
    (pretrain_runs.py: a launch's start costs more than a run's few steps): each run's own output and exit code."""
    (base / "runs.json").write_text(json.dumps([[str(TINY_RECIPE), *argv] for argv in runs]))
    proc = _accelerate(
        REPO / "tests" / "training" / "tp_trainer.py", base / "runs.json", config=config, nproc=nproc, timeout=540
    )
    return [run_output(proc, n) for n in range(len(runs))]


def _main_of(script: str, *args):
    """``tests/training/SCRIPT``'s main with ``args`` as its command line (in a forked child: its argv and seed stay
    there)."""

    def main():
        import importlib
        import sys

        sys.argv = [script, *map(str, args)]
        return importlib.import_module(script.removesuffix(".py")).main()

    return main


def _torchrun(script: str, *args, nproc: int = 2, timeout: int = 400) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node NPROC tests/training/SCRIPT ARGS``, its ranks forked from this process
    (tests/forked.py run_forked_ranks: one gloo process group, each rank a process of its own, with torchrun's
    environment but without a fresh interpreter's imports, ~13 s of CPU a rank): the first failing rank's exit
    code (torchrun's), every rank's output."""
    ranks = run_forked_ranks(_main_of(script, *args), nproc, port=free_port(), cwd=REPO, timeout=timeout)
    code = next((r.returncode for r in ranks if r.returncode != 0), 0)
    return subprocess.CompletedProcess(
        [script, *map(str, args)],
        code,
        "".join(r.stdout for r in ranks),
        "".join(f"---- rank {n} ----\n{r.stderr}" for n, r in enumerate(ranks)),
    )


def _check_norm_grads(run: Path, one: Path) -> None:
    """The norms' gradients of step 1 (two micro-batches) equal the one-process run's."""
    a, b = (json.loads((d / "norm_grads.json").read_text()) for d in (run, one))
    assert a.keys() == b.keys() and any("q_norm" in name for name in a)
    for name in a:
        # measured within 8e-10 (the ranks sum in another order); transformers' style was 5e-4 off
        torch.testing.assert_close(torch.tensor(a[name]), torch.tensor(b[name]), rtol=1e-5, atol=1e-8, msg=name)


def _check_final_gathered(tp_final: Path, one_final: Path):
    """A tensor-parallel run's final/ holds the one-process run's weights, gathered whole (the tied head written
    beside the embedding and equal to it), and loads with from_pretrained as a plain model: (weights, model)."""
    from transformers import AutoModelForCausalLM

    a, b = load_weights(tp_final), load_weights(one_final)
    if "lm_head.weight" in a and "lm_head.weight" not in b:  # the tied head, gathered on its own: the embedding
        assert torch.equal(a.pop("lm_head.weight"), a["model.embed_tokens.weight"])
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=WEIGHT_TOL, msg=name)
    model = AutoModelForCausalLM.from_pretrained(tp_final)  # one process, no tp_plan
    assert getattr(model, "tp_size", None) in (None, 1)
    return a, model


def test_tensor_parallel_two_processes_match_one(mini_blocks, tmp_path):
    """tiny Qwen3 (4 heads, 2 KV heads) split 2 ways: the same losses step by step as one process, and the
    checkpoint it saves (gathered whole by save_pretrained) loads with from_pretrained as a plain model."""
    one, two = tmp_path / "one", tmp_path / "tp2"
    # no launch: the one-process reference and each layout's ranks are forked from this process (tests/forked.py),
    # which skips a fresh interpreter's imports (~13 s of CPU a process) and runs the same tp_steps.main
    proc = run_forked(_main_of("tp_steps.py", mini_blocks, one, HAND_STEPS), cwd=REPO, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _torchrun("tp_steps.py", mini_blocks, two, HAND_STEPS)
    assert proc.returncode == 0, proc.stderr[-6000:]
    ref, tp = (json.loads((d / "losses.json").read_text()) for d in (one, two))
    assert sorted(tp, key=int) == [str(s) for s in range(1, HAND_STEPS + 1)]
    for step in ref:
        assert tp[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, tp[step], ref[step])
    assert ref[str(HAND_STEPS)] < ref["1"]  # it trained
    # Qwen3's q_norm and k_norm see this rank's heads only, their gradients summed over the group once per
    # micro-batch (models.parallel.PARTIAL_NORM; transformers' own style summed the accumulated gradient at every
    # micro-batch: off by 5e-4 here)
    _check_norm_grads(two, one)

    # 2 forward (o, down) and 2 backward (the attention's and the MLP's inputs, models.parallel.BLOCK_INPUT) a layer,
    # the embedding's forward and the head's backward (16 with an all-reduce after each column-wise projection)
    layers = json.loads((REPO / "src" / "hfpretrain" / "models" / "configs" / "tiny.json").read_text())[
        "num_hidden_layers"
    ]
    counted = json.loads((two / "all_reduces.json").read_text())
    assert counted["activation_all_reduces"] == 4 * layers + 2 and counted["tp_group_ranks"] == [0, 1], counted

    weights, model = _check_final_gathered(two / "final", one / "final")
    for name, tensor in weights.items():
        assert not hasattr(tensor, "device_mesh"), name  # plain tensors, no DTensor
    ids = torch.arange(16).unsqueeze(0)
    assert torch.isfinite(model(input_ids=ids, labels=ids).loss)

    # tp 2 inside a (2, 2) mesh, four processes reading the same batch: transformers 5.2x shards the other
    # dimension with FSDP2 at load; 5.17 applies tp alone over the mesh's tp dimension (FSDP2 is accelerate's there).
    # With sequence parallelism (models.parallel: each tp rank holds half of the positions between the blocks, the
    # loss over its own; every norm's weight gradient summed over the group, which the norm check covers) and the
    # trainer's loss (training.loss.sequence_parallel_loss): the one activation-sized all-reduce left is the
    # embedding's, the blocks' all-reduces now all-gathers and reduce-scatters
    four = tmp_path / "tp2x2"
    proc = _torchrun("tp_steps.py", mini_blocks, four, HAND_STEPS, 2, "sp", nproc=4)
    assert proc.returncode == 0, proc.stderr[-6000:]
    grid = json.loads((four / "losses.json").read_text())
    for step in ref:
        assert grid[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, grid[step], ref[step])
    _check_norm_grads(four, one)
    counted = json.loads((four / "all_reduces.json").read_text())
    assert counted["activation_all_reduces"] == 1 and "gloo:all_gather" in counted["gloo"], counted
    assert counted["tp_group_ranks"] == [0, 1], counted  # the mesh's inner dimension, not the world
    _check_final_gathered(four / "final", one / "final")


def test_the_trainer_under_tensor_parallelism_matches_one_process(mini_blocks, tmp_path):
    """The Trainer with parallel.tp=2 on two gloo processes (accelerate's CPU refusal relaxed): one micro-batch per
    tensor-parallel group, each rank's half of its rows through the gathered head (left unsummed, either the hidden
    states' or the head's gradient moves step 3's loss by 6e-4 or more), the same losses step by step as one process,
    the same evaluation loss over 20 blocks (a batch of 16 and one of 4: a gather over both ranks weighted the
    shorter one half), and final/ gathered whole, loading as a plain model. Under our own attention backend's
    name, which every rank loading the sharded model must have registered (rank 1 did not, on the first GPU run).
    The run takes sequence parallelism (asked for: each rank the loss over its half of the positions); its
    checkpoint at step 3 (whole weights, each rank's optimizer states: training/checkpoints.py) resumes without it
    (auto: the model fits; each rank the loss over its half of the rows) into the same steps 4 and 5."""
    extra = {
        "model.attn_implementation": "sdpa_packed",
        "training.max_steps": str(STEPS),
        "training.eval_strategy": "steps",
        "training.eval_steps": str(STEPS),
        "evaluation.eval_tokens": "2560",
        "evaluation.final_eval_tokens": "2560",
    }
    one, two, resumed = tmp_path / "one", tmp_path / "tp2", tmp_path / "resumed"
    run_pretrain(mini_blocks, one, extra)
    tp2 = {**extra, "parallel.tp": "2"}
    saving = {
        **tp2,
        "parallel.sequence_parallel": "true",
        "training.save_strategy": "steps",
        "training.save_steps": "3",
    }
    # the run and its resume one after the other in one launch's two processes (tp_trainer.py RUNS.json)
    proc, resume = _tp_trainer_runs(
        tmp_path,
        make_overrides(mini_blocks, two, saving),
        make_overrides(mini_blocks, resumed, {**tp2, "training.resume_from_checkpoint": str(two / "checkpoint-3")}),
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    plan = read_log(two)[0]["plan"]
    assert plan["parallel"]["tp"] == 2 and plan["world_size"] == 2 and plan["samples_per_step"] == 4, plan
    assert plan["parallel"]["sequence_parallel"], plan["parallel"]
    ref, tp = step_losses(one), step_losses(two)
    assert sorted(tp) == list(range(1, STEPS + 1))
    for step in ref:
        assert tp[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, tp[step], ref[step])
    evals = [[e["eval_loss"] for e in read_log(d) if e["event"] == "eval"] for d in (one, two)]
    assert len(evals[1]) == len(evals[0]) >= 1 and evals[1] == pytest.approx(evals[0], abs=LOSS_TOL), evals

    _check_final_gathered(two / "final", one / "final")

    assert resume.returncode == 0, resume.stderr[-6000:]
    assert not read_log(resumed)[0]["plan"]["parallel"]["sequence_parallel"]
    again = step_losses(resumed)
    assert sorted(again) == [4, 5]
    for step in again:
        assert again[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, again[step], ref[step])
    _check_final_gathered(resumed / "final", one / "final")

    # without tensor parallelism, on one process: the states read back whole (torch.distributed.checkpoint reshards)
    alone = tmp_path / "alone"
    run_pretrain(mini_blocks, alone, {**extra, "training.resume_from_checkpoint": str(two / "checkpoint-3")})
    again = step_losses(alone)
    assert sorted(again) == [4, 5]
    for step in again:
        assert again[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, again[step], ref[step])


def test_the_trainer_under_fsdp2_and_tensor_parallelism_resumes_exactly(mini_blocks, tmp_path):
    """FSDP2 x tp 2 (a (2, 2) mesh: four gloo processes, accelerate's FSDP2 launch, transformers' plan on the inner
    dimension) through the Trainer: the same losses step by step as one process reading the same 8 rows a step (two
    data-parallel groups of 4), a checkpoint at step 3 (whole weights, each rank's optimizer states by parameter:
    training/checkpoints.py) that resumes into the same steps 4 and 5 in the same layout and on one process, and a
    final/ gathered whole that loads as a plain model. transformers 5.17 loads the model with tp alone and leaves the
    data-parallel ranks unsynchronised (models.parallel.fsdp_beside_tp_supported): there the launch stops at start."""
    from hfpretrain.models.parallel import fsdp_beside_tp_supported

    extra = {"training.max_steps": str(STEPS), "model.attn_implementation": "sdpa"}

    def overrides(out: Path, more: dict) -> list[str]:
        return make_overrides(mini_blocks, out, {**extra, "parallel.tp": "2", **more})

    def grid(out: Path, more: dict) -> subprocess.CompletedProcess:
        script = REPO / "tests" / "training" / "tp_trainer.py"
        return _accelerate(script, TINY_RECIPE, *overrides(out, more), config="cpu_2proc_fsdp2.yaml", nproc=4)

    saved = tmp_path / "fsdp2_tp2"
    if not fsdp_beside_tp_supported():
        proc = grid(saved, {})
        errors = {line for line in proc.stderr.splitlines() if line.startswith("error: ")}
        assert len(errors) == 1 and "parallel.tp=2 on 4 ranks needs a transformers" in errors.pop(), proc.stderr
        assert proc.returncode != 0 and not saved.exists()
        return
    one = tmp_path / "one"
    run_pretrain(mini_blocks, one, {**extra, "training.per_device_train_batch_size": "8"})
    ref = step_losses(one)
    checkpoint = {"training.resume_from_checkpoint": str(saved / "checkpoint-3")}
    resumed, alone = tmp_path / "resumed", tmp_path / "alone"
    # the run and its resume in the same layout one after the other in one launch's four processes
    proc, resume = _tp_trainer_runs(
        tmp_path,
        overrides(saved, {"training.save_strategy": "steps", "training.save_steps": "3"}),
        overrides(resumed, checkpoint),
        config="cpu_2proc_fsdp2.yaml",
        nproc=4,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    layout = read_log(saved)[0]["plan"]["parallel"]
    assert layout["engine"] == "fsdp2+tp2" and layout["dp_shard"] == 2, layout
    losses = step_losses(saved)
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step in ref:
        assert losses[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, losses[step], ref[step])
    _check_final_gathered(saved / "final", one / "final")

    assert resume.returncode == 0, resume.stderr[-6000:]
    run_pretrain(mini_blocks, alone, {**extra, **checkpoint, "training.per_device_train_batch_size": "8"})
    for again in (step_losses(resumed), step_losses(alone)):
        assert sorted(again) == [4, 5]
        for step in again:
            assert again[step] == pytest.approx(ref[step], abs=LOSS_TOL), (step, again[step], ref[step])


def test_optimizer_states_of_another_layout_are_refused_in_one_line(tmp_path):
    """A tensor-parallel checkpoint's states (optimizer_sharded/) under DeepSpeed or FSDP without tp, and a
    checkpoint saved without tp (optimizer.pt) under tp: refused at start, naming the checkpoint and the key."""
    from hfpretrain.training.checkpoints import SHARDED_OPTIMIZER_DIR
    from hfpretrain.training.resume import refuse_other_optimizer_layout

    tp_ckpt, plain_ckpt = tmp_path / "tp" / "checkpoint-3", tmp_path / "plain" / "checkpoint-3"
    (tp_ckpt / SHARDED_OPTIMIZER_DIR).mkdir(parents=True)
    plain_ckpt.mkdir(parents=True)
    (plain_ckpt / "optimizer.pt").write_bytes(b"")
    refuse_other_optimizer_layout(str(tp_ckpt), tp=2, sharded_engine=False)  # the same layout
    refuse_other_optimizer_layout(str(tp_ckpt), tp=1, sharded_engine=False)  # one process or DDP: read whole
    refuse_other_optimizer_layout(str(plain_ckpt), tp=1, sharded_engine=True)
    refuse_other_optimizer_layout(str(tp_ckpt), tp=2, sharded_engine=True)  # FSDP2 beside tp reads them
    for ckpt, tp, sharded, words in [
        (tp_ckpt, 1, True, "was saved under tensor parallelism"),
        (plain_ckpt, 2, False, "resume it with parallel.tp=1 (this run has parallel.tp=2)"),
    ]:
        with pytest.raises(ValueError) as err:
            refuse_other_optimizer_layout(str(ckpt), tp=tp, sharded_engine=sharded)
        assert words in str(err.value) and str(ckpt) in str(err.value) and "\n" not in str(err.value)


def test_a_late_rank_is_named_instead_of_a_hang(tmp_path):
    """Rank 1 sleeps past parallel.timeout_s before a check-in: rank 0 stops with one error line naming rank 1, in
    seconds, not after the process group's 30 minutes; on time, both pass. One group of two ranks (forked as torchrun
    starts them), as a run checks in: first on time (rank 1 a second late against 30), then at checkpoint-3 past the
    timeout (8 s against 2)."""
    proc = _torchrun("late_rank.py", 30, 1, 1, 2, 8, 1, timeout=120)
    assert proc.returncode != 0
    # counted, not split into lines: the two ranks' prints share one pipe and can interleave
    passed = proc.stdout.count("passed start of training"), proc.stdout.count("passed")
    assert passed == (2, 2), (proc.stdout, proc.stderr[-3000:])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors and errors[0] == (
        "error: checkpoint-3: rank 1 of 2 did not arrive within parallel.timeout_s=2 s "
        "(a hung or much slower process: its own log says where it stopped)"
    ), proc.stderr[-3000:]


def test_the_process_group_timeout_is_the_recipe_key(mini_blocks, tmp_path):
    """parallel.timeout_s is also TrainingArguments' ddp_timeout (the process group's), unless training sets it."""
    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.machine import Machine
    from hfpretrain.training.resolve import read_data_facts, resolve
    from train_utils import TINY_RECIPE

    machine = Machine.detect(planning=True, world_size=2)
    for overrides, expected in (
        (["parallel.timeout_s=90"], 90),
        (["parallel.timeout_s=90", "training.ddp_timeout=600"], 600),
    ):
        recipe = load_recipe(TINY_RECIPE, [f"data.path={mini_blocks}", *overrides])
        assert resolve(recipe, read_data_facts(recipe, planning=True), machine).args.ddp_timeout == expected


def test_tp_overlap_waits_for_an_all_reduce_after_the_independent_matmul(tmp_path):
    """``parallel.tp_overlap`` (models/parallel.py ``order_tp_collectives``) on this torch: inductor's passes move
    an all-reduce's wait past a matmul that does not need its result, where by default it follows the all-reduce.
    One gloo process (a group of one still issues the collective); the generated code is read, not timed."""
    import torch._inductor.config as inductor
    from torch._inductor.utils import run_and_get_code

    from hfpretrain.models.parallel import order_tp_collectives

    owned = not torch.distributed.is_initialized()  # a group another test of this worker left is used, not replaced
    if owned:
        torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1)
    saved = inductor.reorder_for_compute_comm_overlap, list(inductor.reorder_for_compute_comm_overlap_passes)
    group = torch.distributed.group.WORLD.group_name
    functional = torch.ops._c10d_functional

    def block(x, w1, w2):  # a block input's gradient all-reduced, a weight gradient that does not need it
        reduced = functional.all_reduce(x @ w1, "sum", group)
        independent = x.t() @ w2
        return functional.wait_tensor(reduced), independent

    def wait_after_matmul() -> bool:
        torch._dynamo.reset()
        x, w1, w2 = torch.randn(32, 16), torch.randn(16, 16), torch.randn(32, 8)
        (_, code) = run_and_get_code(torch.compile(block, backend="inductor"), x, w1, w2)
        call = code[0][code[0].index("def call(") :]
        return call.index("wait_tensor") > call.rindex("extern_kernels.mm")

    try:
        assert not wait_after_matmul()  # inductor's default: the wait follows its collective
        order_tp_collectives()
        assert wait_after_matmul()
    finally:
        inductor.reorder_for_compute_comm_overlap, inductor.reorder_for_compute_comm_overlap_passes = saved
        torch._dynamo.reset()
        if owned:
            torch.distributed.destroy_process_group()


@pytest.mark.parametrize("saved", ["pytorch_model_fsdp_0", "pytorch_model_fsdp.bin"])
def test_fsdp_checkpoints_and_plain_ones_stay_in_their_layout(tmp_path, saved):
    """FSDP's own weights: a folder of shards (SHARDED_STATE_DICT, with its optimizer's) resumes without FSDP (read
    whole) but not under DeepSpeed; one file (FULL_STATE_DICT) needs FSDP. A checkpoint without FSDP resumes under it
    from its optimizer.pt (sharded in place), refused without one; not known yet (a CPU launch that accelerate may
    run as DDP), not checked."""
    from hfpretrain.training.config import RecipeError
    from hfpretrain.training.resume import refuse_other_optimizer_layout

    fsdp_ckpt, plain_ckpt = tmp_path / "fsdp" / "checkpoint-3", tmp_path / "plain" / "checkpoint-3"
    fsdp_ckpt.mkdir(parents=True)
    (fsdp_ckpt / saved).mkdir() if "." not in saved else (fsdp_ckpt / saved).write_bytes(b"x")
    plain_ckpt.mkdir(parents=True)
    (plain_ckpt / "optimizer.pt").write_bytes(b"")
    for ckpt, fsdp in ((fsdp_ckpt, True), (plain_ckpt, False), (fsdp_ckpt, None), (plain_ckpt, None)):
        refuse_other_optimizer_layout(str(ckpt), sharded_engine=bool(fsdp), fsdp=fsdp)  # their own layout, or unknown
    if saved == "pytorch_model_fsdp_0":  # sharded state dicts: read whole without FSDP, unless under DeepSpeed
        (fsdp_ckpt / "optimizer_0").mkdir()
        refuse_other_optimizer_layout(str(fsdp_ckpt), fsdp=False)
        with pytest.raises(RecipeError, match=r"checkpoint-3 was saved under FSDP .*, or without DeepSpeed"):
            refuse_other_optimizer_layout(str(fsdp_ckpt), sharded_engine=True, deepspeed=True, fsdp=False)
    else:  # FULL_STATE_DICT's one file: FSDP's own format
        with pytest.raises(RecipeError, match=r"checkpoint-3 was saved under FSDP \(its weights in pytorch_model_fsdp"):
            refuse_other_optimizer_layout(str(fsdp_ckpt), fsdp=False)
    # a checkpoint without FSDP under FSDP: its optimizer.pt read whole and sharded in place; without it, refused
    (plain_ckpt / "optimizer.pt").unlink()
    with pytest.raises(RecipeError, match=r"checkpoint-3 holds no optimizer states FSDP can read"):
        refuse_other_optimizer_layout(str(plain_ckpt), sharded_engine=True, fsdp=True)
