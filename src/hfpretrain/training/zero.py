"""DeepSpeed ZeRO checkpoints across GPU counts.

ZeRO-1 saves each rank's slice of the optimizer states (``global_stepN/zero_pp_rank_R_*``), and
DeepSpeed refuses to load them at another data-parallel size. Its *universal* format stores every
parameter's fp32 weight and Adam moments whole; DeepSpeed's own ``ds_to_universal`` writes it, and
``"checkpoint": {"load_universal": true}`` (``ds_configs/zero1_universal.json``) loads it at any size.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{ckpt}: ds_to_universal failed: {last}")
    (ckpt / "latest_universal").write_text(universal)
    return universal
