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
