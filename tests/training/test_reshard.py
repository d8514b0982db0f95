"""training/reshard.py on one process: an FSDP-format checkpoint (torch's distributed checkpoint folders, written
here without a process group, as accelerate lays them out) read whole into the Trainer's own files, and one
conversion of a checkpoint at a time. The distributed resumes themselves: tests/training/test_distributed.py."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import torch
from torch import nn


def _fsdp_layout_checkpoint(folder):
    """A real AdamW after one step, in two param groups (decayed matrices, then the rest), saved as accelerate's
    FSDP2 SHARDED_STATE_DICT does: {"model": state dict} and {"optimizer": get_optimizer_state_dict}."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    groups = [
        {"params": [model[0].weight, model[1].weight], "weight_decay": 0.1},
        {"params": [model[0].bias, model[1].bias], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=1e-2)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    folder.mkdir(parents=True)
    dcp.save({"model": model.state_dict()}, checkpoint_id=folder / "pytorch_model_fsdp_0")
    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=folder / "optimizer_0")
    (folder / "trainer_state.json").write_text('{"global_step": 3}')
    (folder / "COMPLETE").write_text("3")
    return model, optimizer, groups


def test_an_fsdp_checkpoint_read_whole_is_the_trainers_own_format(tmp_path):
    """whole/ holds the weights as saved and optimizer.pt that a fresh optimizer of the same groups loads into the
    same states, position by position, beside the checkpoint's other files."""
    from safetensors.torch import load_file

    from hfpretrain.training.reshard import write_whole_copy

    folder = tmp_path / "checkpoint-3"
    model, optimizer, _ = _fsdp_layout_checkpoint(folder)
    out = write_whole_copy(folder)
    assert sorted(p.name for p in out.iterdir()) == [
        "COMPLETE",
        "model.safetensors",
        "optimizer.pt",
        "trainer_state.json",
    ]
    weights = load_file(out / "model.safetensors")
    assert weights.keys() == model.state_dict().keys()
    for name, w in model.state_dict().items():
        assert torch.equal(weights[name], w), name
    fresh = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    again = torch.optim.AdamW(
        [
            {"params": [fresh[0].weight, fresh[1].weight], "weight_decay": 0.1},
            {"params": [fresh[0].bias, fresh[1].bias], "weight_decay": 0.0},
        ],
        lr=1e-2,
    )
    again.load_state_dict(torch.load(out / "optimizer.pt", weights_only=True))
    saved, loaded = optimizer.state_dict(), again.state_dict()
    assert [g["weight_decay"] for g in loaded["param_groups"]] == [0.1, 0.0]
    for position, state in saved["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(loaded["state"][position][key], state[key]), (position, key)


def test_a_second_resume_waits_for_the_copy_being_made(tmp_path, caplog):
    """Two runs resuming one checkpoint without FSDP: the copy is made under a lock in its folder; a run that finds
    the lock held waits, then reads the copy (here the lock is held by the test, then let go)."""
    import logging

    from filelock import FileLock

    from hfpretrain.training.reshard import CONVERT_LOCK, whole_copy_if_fsdp

    folder = tmp_path / "checkpoint-3"
    _fsdp_layout_checkpoint(folder)
    trainer = SimpleNamespace(is_fsdp_enabled=False, is_deepspeed_enabled=False)
    found = []
    with caplog.at_level(logging.INFO, logger="hfpretrain"):
        with FileLock(str(folder / CONVERT_LOCK)):
            worker = threading.Thread(target=lambda: found.append(whole_copy_if_fsdp(str(folder), trainer)))
            worker.start()
            time.sleep(0.5)
            assert worker.is_alive() and not (folder / "whole").exists()  # waiting for the lock
        worker.join(timeout=60)
    assert found == [str(folder / "whole")] and (folder / "whole" / "optimizer.pt").is_file()
    assert "reading them whole once into" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hfpretrain"):  # the next resume reads the copy made
        assert whole_copy_if_fsdp(str(folder), trainer) == str(folder / "whole")
    assert "from its whole copy" in caplog.text and "reading them whole once" not in caplog.text
