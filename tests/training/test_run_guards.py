"""What a run owns and gives back: one run per output folder (a lock), and a failed run that still closes its
log and puts the process's SIGTERM handler back."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from hfpretrain.outdir import OutputBusyError, OutputLock
from hfpretrain.training.checkpoints import RUN_LOCK
from hfpretrain.training.trainer import NonFiniteLossError
from train_utils import TINY_RECIPE, make_overrides, run_pretrain

ONE_STEP = {"training.max_steps": "1"}


def test_a_second_run_on_the_same_output_dir_stops_at_once(mini_blocks, tmp_path):
    out = tmp_path / "run"
    with OutputLock(out / RUN_LOCK, "held", "by this test"):  # as a first run would, in another process
        with pytest.raises(
            OutputBusyError,
            match=rf"training.output_dir={out} is in use by another training run "
            rf"\(pid {os.getpid()}, lock ",
        ):
            run_pretrain(mini_blocks, out, ONE_STEP)
        assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK]  # nothing of the first run's touched
    summary = run_pretrain(mini_blocks, out, ONE_STEP)  # free again: the run goes on, and gives the lock back
    assert summary["global_step"] == 1
    assert not (out / RUN_LOCK).exists()


def open_files() -> set[str]:
    fds = Path("/proc/self/fd")
    return {os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()} if fds.is_dir() else set()


def test_a_failed_run_closes_its_log_and_gives_back_sigterm(mini_blocks, tmp_path):
    from hfpretrain.training import pretrain

    previous = signal.getsignal(signal.SIGTERM)
    diverge = {
        "training.max_steps": "6",
        "training.per_device_train_batch_size": "2",
        "training.learning_rate": "1e6",
        "training.warmup_steps": "0",
        "nan_policy": "stop",
    }
    try:  # not run_pretrain: it puts the handler back itself
        with pytest.raises(NonFiniteLossError):
            pretrain(str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "run", diverge))
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, previous)
    log = str((tmp_path / "run" / "log.jsonl").resolve())
    assert Path(log).is_file() and log not in open_files()
    assert not (tmp_path / "run" / RUN_LOCK).exists()
