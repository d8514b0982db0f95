"""Shared pieces of the training tests (imported as ``train_utils``; the fixtures are in conftest.py): the common tiny-run overrides, an in-process runner, the
JSONL log reader, and one session-scoped reference run that several tests read.

Every run is real (no mocks): the tiny Qwen3-style model (2 layers, hidden 64, gpt2 vocabulary) on
the ``mini_blocks`` fixture (seq_len 128), on CPU, a handful of optimizer steps. The machine is
small and shared, so runs are kept to a few steps and reused where possible.

The learning-rate schedule is ``constant_with_warmup`` (warmup 2) rather than the recipe's cosine,
so a shorter run (e.g. the 2-process runs of test_distributed.py) follows exactly the same
schedule as the first steps of the reference run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY_RECIPE = REPO / "recipes" / "tiny_cpu.yaml"
PRETRAIN_SCRIPT = REPO / "scripts" / "pretrain.py"

# What every test run shares; tests add/replace keys (dotted recipe keys -> value as a string).
BASE = {
    "model.config": "tiny",
    "training.use_cpu": "true",
    "training.report_to": "none",
    "training.dataloader_num_workers": "0",
    "training.disable_tqdm": "true",
    "training.per_device_train_batch_size": "4",
    "training.per_device_eval_batch_size": "16",
    "training.gradient_accumulation_steps": "1",
    "training.learning_rate": "3e-3",
    "training.lr_scheduler_type": "constant_with_warmup",
    "training.lr_scheduler_kwargs": "null",
    "training.warmup_steps": "2",
    "training.logging_steps": "1",
    "training.save_strategy": "no",
    "training.eval_strategy": "no",
    "training.seed": "1234",
    "evaluation.eval_tokens": "2048",  # 16 validation blocks of 128 tokens: one eval batch
    "evaluation.final_eval_tokens": "2048",  # the same set at the end (the default, all blocks, is tested apart)
}

# The reference run: 10 steps of micro-batch 4, checkpoints at 5 and 10, eval at start and end.
REFERENCE_STEPS = 10
REFERENCE = {
    "training.max_steps": str(REFERENCE_STEPS),
    "training.save_strategy": "steps",
    "training.save_steps": "5",
    "training.eval_strategy": "steps",
    "training.eval_steps": "10",
    "training.eval_on_start": "true",
    "logging.grad_stats_interval": "5",
    "logging.peak_flops": "1e12",  # a CPU has no known peak: force one so mfu is logged
}


def free_port() -> int:
    """A TCP port nobody listens on, for a launch's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_overrides(data_path: str | Path, output_dir: str | Path, extra: dict | None = None) -> list[str]:
    items = {**BASE, "data.path": str(data_path), "training.output_dir": str(output_dir), **(extra or {})}
    return [f"{k}={v}" for k, v in items.items()]


def run_pretrain(data_path, output_dir, extra: dict | None = None, recipe=TINY_RECIPE) -> dict:
    """``pretrain`` in this process; a finished run must have put pytest's SIGTERM handler back."""
    from hfpretrain.eval.callback import recipe_callbacks
    from hfpretrain.training import pretrain

    previous = signal.getsignal(signal.SIGTERM)
    try:
        summary = pretrain(str(recipe), make_overrides(data_path, output_dir, extra), callbacks=recipe_callbacks)
        assert signal.getsignal(signal.SIGTERM) is previous, "pretrain left its SIGTERM handler installed"
        return summary
    finally:
        signal.signal(signal.SIGTERM, previous)  # after a failed run too


def read_log(output_dir: str | Path, name: str = "log.jsonl") -> list[dict]:
    return [json.loads(line) for line in (Path(output_dir) / name).read_text().splitlines() if line.strip()]


def step_losses(output_dir: str | Path) -> dict[int, float]:
    """{step: train loss} from the log events (logging_steps=1: one per optimizer step)."""
    return {e["step"]: e["loss"] for e in read_log(output_dir) if e["event"] == "log" and "loss" in e}


def load_weights(folder: str | Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def launch_of(world: int, gib: float | None = None, zero: int | None = None, planning: bool = True):
    """A DDP launch of ``world`` CPU processes for resolve(); ``gib``: planned as if on GPUs of that memory, 8 a
    node."""
    from hfpretrain.training.machine import Machine

    return Machine(
        world_size=world,
        engine="ddp",
        zero_stage=zero,
        device="cpu",
        gpu_memory=int(gib * 2**30) if gib else None,
        gpu_count=8 if gib else 0,
        launched=world,
        planning=planning,
    )


def subprocess_env(**extra) -> dict:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        DS_ACCELERATOR="cpu",
    )
    env.update(extra)
    return env


def python() -> str:
    return sys.executable


def sigterm_after_first_log(
    cmd: list[str], log: Path, timeout: float = 240, signum: int = signal.SIGTERM
) -> tuple[int, str]:
    """Start ``cmd`` in its own process group, wait for the first training log in ``log`` (a
    log.jsonl), SIGTERM the whole group as a cluster (or `timeout`) does, or send ``signum`` (SIGINT: a
    terminal's Ctrl-C, which also reaches the whole foreground group); (return code, output)."""
    import subprocess
    import time

    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            if log.is_file() and '"event": "log"' in log.read_text():
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        os.killpg(proc.pid, signum)
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output


def wandb_records(run_file: Path):
    """The records of a W&B transaction log (run-*.wandb): a 7-byte header, then LevelDB-style blocks of
    32 KiB holding chunks (crc32, length, type: full/first/middle/last) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, pending = run_file.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # block padding
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def fake_checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    """A small checkpoint folder that passes trainer.checkpoint_problem (a trainer state, safetensors
    weights, optimizer and scheduler state): for tests of checkpoint selection and rotation."""
    import json

    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"w": torch.zeros(4)}, str(folder / "model.safetensors"))
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    if complete:
        (folder / "COMPLETE").write_text(f"step {step}\n")
    return folder
