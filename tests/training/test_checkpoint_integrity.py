"""A checkpoint marked COMPLETE whose files are damaged (issue #20, data loss 6).

A truncated model.safetensors or optimizer.pt, or a broken trainer_state.json, in the newest complete
checkpoint used to stop auto-resume with a traceback (torch.load, safetensors or json deep in the
Trainer). Now the candidate is checked cheaply first (trainer.checkpoint_problem), the bad file is named in a
warning and the previous complete checkpoint is taken; with none left, one error line.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from hfpretrain.training.resume import resolve_resume
from hfpretrain.training.checkpoints import NoCompleteCheckpointError, checkpoint_problem, last_complete_checkpoint

from train_utils import REFERENCE, REFERENCE_STEPS, step_losses, run_pretrain


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {  # what is done to the newest checkpoint -> the file the warning must name
    "truncated-weights": (lambda c: _truncate(c / "model.safetensors"), "model.safetensors is truncated"),
    "truncated-optimizer": (lambda c: _truncate(c / "optimizer.pt"), "optimizer.pt is truncated"),
    "corrupt-optimizer": (lambda c: _flip_a_byte(c / "optimizer.pt"), "optimizer.pt is corrupt"),
    "appended-weights": (
        lambda c: (c / "model.safetensors").write_bytes((c / "model.safetensors").read_bytes() + b"x"),
        "model.safetensors is truncated or has bytes after its tensors",
    ),
    "broken-weights-header": (
        lambda c: (c / "model.safetensors").write_bytes(
            (c / "model.safetensors").read_bytes()[:8] + b"{bad" + (c / "model.safetensors").read_bytes()[12:]
        ),
        "model.safetensors: unreadable safetensors header",
    ),
    "missing-optimizer": (lambda c: (c / "optimizer.pt").unlink(), "optimizer.pt is missing"),
    "empty-scheduler": (lambda c: (c / "scheduler.pt").write_bytes(b""), "scheduler.pt is empty"),
    "broken-trainer-state": (
        lambda c: (c / "trainer_state.json").write_text('{"global_step": 1'),
        "trainer_state.json is not valid JSON",
    ),
}


def _run_dir(reference_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("checkpoint-5", "checkpoint-10"):
        shutil.copytree(reference_run / name, run / name)
    return run


def test_real_checkpoints_pass(reference_run):
    assert checkpoint_problem(reference_run / "checkpoint-5") is None
    assert checkpoint_problem(reference_run / "checkpoint-10") is None
    assert "trainer_state.json is missing" in checkpoint_problem(reference_run / "final")  # a model, not a checkpoint


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(reference_run, tmp_path, caplog, case):
    run = _run_dir(reference_run, tmp_path)
    damage, named = DAMAGE[case]
    damage(run / "checkpoint-10")
    with caplog.at_level(logging.WARNING):
        assert last_complete_checkpoint(run) == str(run / "checkpoint-5")
    assert f"ignoring {run / 'checkpoint-10'}: marked COMPLETE, but {run / 'checkpoint-10'}/{named}" in caplog.text
    assert f"resuming from {run / 'checkpoint-5'} instead" in caplog.text


def test_every_complete_checkpoint_damaged_is_one_error_line(reference_run, tmp_path):
    run = _run_dir(reference_run, tmp_path)
    _truncate(run / "checkpoint-10" / "optimizer.pt")
    _truncate(run / "checkpoint-5" / "model.safetensors")
    with pytest.raises(NoCompleteCheckpointError) as err:
        last_complete_checkpoint(run)
    msg = str(err.value)
    assert "\n" not in msg and "every complete checkpoint is damaged" in msg and "step 0" in msg
    assert "checkpoint-10: " in msg and "optimizer.pt is truncated" in msg and "model.safetensors is truncated" in msg


def test_a_damaged_checkpoint_named_explicitly_is_one_error_line(reference_run, tmp_path):
    run = _run_dir(reference_run, tmp_path)
    _truncate(run / "checkpoint-10" / "model.safetensors")
    with pytest.raises(
        NoCompleteCheckpointError,
        match=r"resume_from_checkpoint=.*checkpoint-10: .*model\.safetensors "
        r"is truncated",
    ):
        resolve_resume(str(run / "checkpoint-10"), str(run))
    assert resolve_resume(str(run / "checkpoint-5"), str(run)) == str(run / "checkpoint-5")


def test_auto_resume_past_a_truncated_optimizer_state(reference_run, mini_blocks, tmp_path):
    """The issue's case: the newest complete checkpoint's optimizer.pt cut short. The run resumes from
    checkpoint-5, steps 6..10 repeat the uninterrupted run's losses bitwise, and checkpoint-10 is saved
    again, whole (its old marker removed before the new files are written)."""
    run = _run_dir(reference_run, tmp_path)
    _truncate(run / "checkpoint-10" / "optimizer.pt")
    summary = run_pretrain(
        mini_blocks, run, {**REFERENCE, "training.eval_on_start": "false", "training.resume_from_checkpoint": "auto"}
    )
    assert summary["global_step"] == REFERENCE_STEPS
    ref, resumed = step_losses(reference_run), step_losses(run)
    assert sorted(resumed) == list(range(6, REFERENCE_STEPS + 1))
    assert [resumed[s] for s in resumed] == [ref[s] for s in resumed]
    assert checkpoint_problem(run / "checkpoint-10") is None


# ---- issue 36.8: a pickle payload that weights_only loading refuses ---------------------------------------------


class _Payload:
    """What a planted optimizer.pt could hold: a global that weights_only loading refuses (here a harmless one:
    nothing in these tests ever unpickles it unsafely)."""

    def __reduce__(self):
        import os

        return (os.getcwd, ())


def _plant(path: Path) -> None:
    import torch

    torch.save({"state": {}, "param_groups": [], "extra": _Payload()}, path)


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_pickle_payload_makes_the_checkpoint_unusable(reference_run, tmp_path, caplog, name):
    """It was a traceback from torch.load (weights_only=True) deep in the Trainer's resume."""
    run = _run_dir(reference_run, tmp_path)
    _plant(run / "checkpoint-10" / name)
    problem = checkpoint_problem(run / "checkpoint-10")
    assert problem.startswith(
        f"{run / 'checkpoint-10' / name} holds pickled objects that safe (weights_only) loading refuses (posix.getcwd)"
    ), problem
    assert "weights_only=False" not in problem
    with caplog.at_level(logging.WARNING):
        assert last_complete_checkpoint(run) == str(run / "checkpoint-5")
    assert f"ignoring {run / 'checkpoint-10'}: marked COMPLETE, but {run / 'checkpoint-10' / name} holds" in caplog.text
    with pytest.raises(NoCompleteCheckpointError, match=rf"resume_from_checkpoint=.*checkpoint-10: .*{name} holds "):
        resolve_resume(str(run / "checkpoint-10"), str(run))


def test_a_tokenizer_that_passed_is_read_again_once_changed(gpt2_tokenizer, tmp_path):
    """integrity.tokenizer_problem passes a folder whose files passed already in this process without reading them
    again: a file written or made unreadable since is read again, and its problem named, in the same words."""
    import os

    from hfpretrain.integrity import tokenizer_problem

    folder = tmp_path / "tok"
    shutil.copytree(gpt2_tokenizer, folder)
    for f in folder.iterdir():
        f.chmod(0o644)
    assert tokenizer_problem(folder) is None and tokenizer_problem(folder) is None
    config = (folder / "tokenizer_config.json").read_text()
    (folder / "tokenizer_config.json").write_text(config[:-2])  # cut short
    assert "tokenizer_config.json is not valid JSON" in tokenizer_problem(folder)
    (folder / "tokenizer_config.json").write_text(config)
    assert tokenizer_problem(folder) is None
    text = (folder / "tokenizer.json").read_text()
    (folder / "tokenizer.json").write_text(text[:1000])
    assert "tokenizer.json is not valid JSON" in tokenizer_problem(folder)
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}')
    assert "is not a tokenizer the tokenizers library reads" in tokenizer_problem(folder)
    (folder / "tokenizer.json").write_text(text)
    assert tokenizer_problem(folder) is None
    if os.geteuid() != 0:  # root reads a file of mode 000
        (folder / "tokenizer.json").chmod(0)
        assert tokenizer_problem(folder) is not None


def test_an_fsdp_checkpoint_is_whole_with_every_shard_folders_metadata(reference_run, tmp_path):
    """FSDP's sharded checkpoint holds no model.safetensors or optimizer.pt: its folders of shards instead, each with
    the .metadata torch's distributed checkpoint writes last (every such checkpoint was reported damaged before
    2026-12-01; tests/training/test_distributed.py resumes a real one). A folder without it was not saved whole."""
    ckpt = tmp_path / "checkpoint-5"
    shutil.copytree(reference_run / "checkpoint-5", ckpt)
    (ckpt / "model.safetensors").unlink()
    (ckpt / "optimizer.pt").unlink()
    for folder in ("pytorch_model_fsdp_0", "optimizer_0"):
        (ckpt / folder).mkdir()
        (ckpt / folder / "__0_0.distcp").write_bytes(b"shard")
        (ckpt / folder / ".metadata").write_bytes(b"metadata")
    assert checkpoint_problem(ckpt) is None
    (ckpt / "optimizer_0" / ".metadata").write_bytes(b"")
    assert checkpoint_problem(ckpt) == (
        f"{ckpt / 'optimizer_0' / '.metadata'} is missing or empty: optimizer_0/ (FSDP's shards) was not saved whole"
    )
    (ckpt / "pytorch_model_fsdp_0" / ".metadata").unlink()
    assert "pytorch_model_fsdp_0/.metadata is missing or empty" in checkpoint_problem(ckpt)


def test_the_main_process_work_reaches_every_process_as_one_line():
    """main_process_does on one process: the work runs; what it raises is a RecipeError of one line naming what was
    done (a RecipeError as it is); a Ctrl-C is raised again as itself."""
    from hfpretrain.training.barrier import main_process_does
    from hfpretrain.training.config import RecipeError

    done = []
    main_process_does(lambda: done.append(1), "work")
    assert done == [1]

    def fails(err):
        def work():
            raise err

        return work

    with pytest.raises(RecipeError) as caught:
        main_process_does(fails(RuntimeError("shard missing\nsecond line")), "ckpt: converting")
    assert str(caught.value) == "ckpt: converting: shard missing"
    with pytest.raises(RecipeError, match=r"^ckpt: converting: KeyError$"):
        main_process_does(fails(KeyError()), "ckpt: converting")
    with pytest.raises(RecipeError, match=r"^as it is$"):
        main_process_does(fails(RecipeError("as it is")), "ckpt: converting")
    with pytest.raises(KeyboardInterrupt):
        main_process_does(fails(KeyboardInterrupt()), "ckpt: converting")


def test_a_checkpoint_saved_again_drops_the_copies_made_for_a_resume(tmp_path):
    """A checkpoint-N saved over (after a rollback) must not be resumed from the older states' copies: its whole copy
    and DeepSpeed's universal one go; its own files stay."""
    from hfpretrain.training.reshard import drop_derived_copies

    folder = tmp_path / "checkpoint-3"
    for sub in ("whole", "global_step3_universal/zero", "global_step3"):
        (folder / sub).mkdir(parents=True)
    (folder / "latest_universal").write_text("global_step3_universal")
    (folder / "latest").write_text("global_step3")
    drop_derived_copies(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["global_step3", "latest"]


def test_optimizer_states_that_fit_no_parameter_are_refused_in_one_line(tmp_path):
    """optimizer.pt read into FSDP's layout by position: a state whose shape is not its parameter's (another recipe's
    checkpoint) is one line naming the file and the parameter, not a silent mix-up (a real AdamW's states)."""
    import torch

    from hfpretrain.training.reshard import load_whole_optimizer_into_shards

    def adamw(model):
        optimizer = torch.optim.AdamW(model.parameters())
        model(torch.ones(1, 4)).sum().backward()
        optimizer.step()
        return optimizer

    saved = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    torch.save(adamw(saved).state_dict(), tmp_path / "optimizer.pt")
    other = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Linear(2, 3))  # the same count, other shapes
    with pytest.raises(ValueError, match=r"optimizer.pt: the state at position 0 has the shape \(3, 4\), this run's "):
        load_whole_optimizer_into_shards(other, adamw(other), tmp_path)
    fewer = torch.nn.Sequential(torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"holds the states of 4 parameters and this run's optimizer has 2"):
        load_whole_optimizer_into_shards(fewer, adamw(fewer), tmp_path)
    same = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = adamw(same)
    load_whole_optimizer_into_shards(same, optimizer, tmp_path)  # one process: no shards, the states set whole
    torch.testing.assert_close(
        optimizer.state_dict()["state"][0]["exp_avg"], torch.load(tmp_path / "optimizer.pt")["state"][0]["exp_avg"]
    )
