"""DeepSpeed ZeRO checkpoints across GPU counts.

ZeRO-1 saves each rank's slice of the optimizer states (``global_stepN/zero_pp_rank_R_*``), and
DeepSpeed refuses to load them at another data-parallel size. Its *universal* format stores every
parameter's fp32 weight and Adam moments whole; DeepSpeed's own ``ds_to_universal`` writes it, and
``"checkpoint": {"load_universal": true}`` loads it at any size. A resume at another size does both by itself
(:func:`load_universal_if_resized`); ``scripts/zero_to_universal.py`` converts ahead of time.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .barrier import main_process_does

logger = logging.getLogger("hfpretrain")


def deepspeed_tag(checkpoint: str | Path) -> str | None:
    """The tag (``global_stepN``) of a checkpoint saved under DeepSpeed; None for any other checkpoint."""
    latest = Path(checkpoint) / "latest"
    return latest.read_text().strip() if latest.is_file() else None


def convert_to_universal(checkpoint: str | Path, workers: int | None = None) -> str:
    """Write ``checkpoint/global_stepN_universal`` and ``latest_universal``; return the new tag.
    ``workers`` processes extract and merge the parameters (default: one per core, at most 8)."""
    workers = str(workers or min(8, os.cpu_count() or 1))
    ckpt = Path(checkpoint)
    tag = deepspeed_tag(ckpt)
    if tag is None:
        raise FileNotFoundError(f"{ckpt}: no DeepSpeed 'latest' file (not a checkpoint saved under DeepSpeed?)")
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        raise RuntimeError(
            "converting a ZeRO checkpoint needs the deepspeed package: pip install 'hfpretrain[deepspeed]'"
        )
    universal = f"{tag}_universal"
    (ckpt / "latest_universal").unlink(missing_ok=True)  # written last: absent until this conversion is whole
    shutil.rmtree(ckpt / universal, ignore_errors=True)  # a conversion cut short before: its files are not reused
    cmd = [
        sys.executable,
        "-m",
        "deepspeed.checkpoint.ds_to_universal",
        "--input_folder",
        str(ckpt / tag),
        "--output_folder",
        str(ckpt / universal),
        "--num_extract_workers",
        workers,
        "--num_merge_workers",
        workers,
        "--inject_missing_state",
    ]  # HF Trainer checkpoints lack Megatron's universal_checkpoint_info
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][-300:]
        raise RuntimeError(f"{ckpt}: ds_to_universal failed (exit status {proc.returncode}): {last}")
    (ckpt / "latest_universal").write_text(universal)
    return universal


def zero_ranks(checkpoint: str | Path) -> int | None:
    """How many data-parallel ranks a DeepSpeed ZeRO checkpoint's optimizer states are split over (one
    ``*zero_pp_rank_R_*optim_states.pt`` file each); None for a checkpoint without them."""
    tag = deepspeed_tag(checkpoint)
    shards = list((Path(checkpoint) / tag).glob("*zero_pp_rank_*optim_states.pt")) if tag else []
    return len(shards) or None


def _converted(checkpoint: str | Path) -> bool:
    """Whether ``checkpoint`` holds the universal copy of its latest tag (``latest_universal`` is written last)."""
    marker = Path(checkpoint) / "latest_universal"
    return marker.is_file() and marker.read_text().strip() == f"{deepspeed_tag(checkpoint)}_universal"


def load_universal_if_resized(checkpoint: str | None, trainer) -> None:
    """A ZeRO checkpoint resumed at another data-parallel size (or under ``load_universal`` already): converted
    once to DeepSpeed's universal format beside its shards, by the main process (the others wait for its outcome:
    a failure is the same one line on every process), and this run's DeepSpeed set to load that copy. Set before
    ``train()`` builds the engine, which reads ``checkpoint.load_universal`` when it is built."""
    if not checkpoint or not trainer.is_deepspeed_enabled:
        return
    saved = zero_ranks(checkpoint)
    state = trainer.accelerator.state
    config = state.deepspeed_plugin.deepspeed_config
    asked = bool((config.get("checkpoint") or {}).get("load_universal"))
    if saved is None or (saved == state.num_processes and not asked):
        return

    def convert() -> None:
        if _converted(checkpoint):
            logger.info("%s: reading its universal copy (%s_universal)", checkpoint, deepspeed_tag(checkpoint))
            return
        logger.info(
            "%s: ZeRO optimizer states of %d ranks, resumed on %d: converting them to DeepSpeed's universal "
            "format once (beside them, %s_universal)",
            checkpoint,
            saved,
            state.num_processes,
            deepspeed_tag(checkpoint),
        )
        convert_to_universal(checkpoint)

    main_process_does(convert, f"{checkpoint}: converting its ZeRO shards to DeepSpeed's universal format")
    config.setdefault("checkpoint", {})["load_universal"] = True
