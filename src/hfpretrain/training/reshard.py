"""A checkpoint read in another layout than it was saved in: a resume at another GPU count or engine.

* ZeRO's optimizer shards at another data-parallel size: DeepSpeed refuses them; its *universal* format (every
  parameter's fp32 weight and Adam moments whole, DeepSpeed's own ``ds_to_universal``) loads at any size with
  ``"checkpoint": {"load_universal": true}``. A resume at another size does both by itself
  (:func:`load_universal_if_resized`); ``scripts/zero_to_universal.py`` converts ahead of time.
* FSDP's sharded state dicts without FSDP (one process, DDP): read whole once into ``checkpoint-N/whole/``
  (:func:`whole_copy_if_fsdp`), which the Trainer resumes as any checkpoint of its own.
* Whole weights and ``optimizer.pt`` under FSDP or tensor parallelism: sharded in place
  (:func:`load_whole_weights_into_shards`, :func:`load_whole_optimizer_into_shards`), and a schedule saved with
  another number of param groups (:func:`load_scheduler_state`).

The copies a conversion writes live beside the checkpoint's own files and are dropped when the checkpoint is saved
again (:func:`drop_derived_copies`). A conversion runs on the main process while the others wait for its outcome
(``barrier.main_process_does``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

from .barrier import main_process_does
from .checkpoints import deepspeed_tag, saved_under_fsdp, write_failure

logger = logging.getLogger("hfpretrain")

WHOLE_COPY_DIR = "whole"  # inside an FSDP checkpoint: its plain copy (the Trainer refuses FSDP's files beside)
# FSDP's sharded state dicts (SHARDED_STATE_DICT), as accelerate saves them (torch.distributed.checkpoint folders)
FSDP_WEIGHTS_DIR, FSDP_OPTIMIZER_DIR = "pytorch_model_fsdp_0", "optimizer_0"
UNIVERSAL_MARKER = "latest_universal"  # DeepSpeed's file naming the universal tag: written last by a conversion
CONVERT_LOCK = ".reshard.lock"  # held while a copy is written into the checkpoint's folder (converting())


@contextmanager
def converting(checkpoint: str | Path):
    """One conversion of a checkpoint at a time, across the runs that resume it (a lock file in its folder): a
    second run waits, then finds the copy made."""
    from filelock import FileLock

    with FileLock(str(Path(checkpoint) / CONVERT_LOCK)):
        yield


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
    (ckpt / UNIVERSAL_MARKER).unlink(missing_ok=True)  # written last: absent until this conversion is whole
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
    (ckpt / UNIVERSAL_MARKER).write_text(universal)
    return universal


def zero_ranks(checkpoint: str | Path) -> int | None:
    """How many data-parallel ranks a DeepSpeed ZeRO checkpoint's optimizer states are split over (one
    ``*zero_pp_rank_R_*optim_states.pt`` file each); None for a checkpoint without them."""
    tag = deepspeed_tag(checkpoint)
    shards = list((Path(checkpoint) / tag).glob("*zero_pp_rank_*optim_states.pt")) if tag else []
    return len(shards) or None


def _converted(checkpoint: str | Path) -> bool:
    """Whether ``checkpoint`` holds the universal copy of its latest tag (``latest_universal`` is written last)."""
    marker = Path(checkpoint) / UNIVERSAL_MARKER
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
        with converting(checkpoint):
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


def fsdp_sharded(checkpoint: str | Path) -> bool:
    folder = Path(checkpoint)
    return (folder / FSDP_WEIGHTS_DIR).is_dir() and (folder / FSDP_OPTIMIZER_DIR).is_dir()


def write_whole_copy(checkpoint: str | Path) -> Path:
    """``checkpoint/whole/``: an FSDP checkpoint's sharded state dicts read whole on one process into the Trainer's
    own files (``model.safetensors``, ``optimizer.pt``) beside a copy of its other files, so that a resume without
    FSDP (one process, DDP) reads it as any checkpoint; the Trainer refuses a folder holding FSDP's files without
    FSDP. FSDP's optimizer states are keyed by parameter name (``get_optimizer_state_dict``); torch's optimizers
    key them by position in their groups, which the same recipe builds in the same order. Written in a temporary
    folder renamed at the end: ``whole/`` is complete or absent."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder = Path(checkpoint)
    out, tmp = folder / WHOLE_COPY_DIR, folder / f"{WHOLE_COPY_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    whole = tmp / "dcp.pt"
    try:
        dcp_to_torch_save(folder / FSDP_WEIGHTS_DIR, whole)
        weights = torch.load(whole, mmap=True, weights_only=True)["model"]
        shapes = {name: tuple(w.shape) for name, w in weights.items()}
        # a tied head is the embedding: its own copy here (safetensors refuses shared storage), loaded as the same
        save_file({k: v.contiguous().clone() for k, v in weights.items()}, tmp / "model.safetensors", {"format": "pt"})
        del weights
        dcp_to_torch_save(folder / FSDP_OPTIMIZER_DIR, whole)
        saved = torch.load(whole, mmap=True, weights_only=True)["optimizer"]
        position: dict[str, int] = {}
        groups = [
            {**g, "params": [position.setdefault(name, len(position)) for name in g["params"]]}
            for g in saved["param_groups"]
        ]
        for name, moments in saved["state"].items():  # a state under a name the weights lack, or of another shape
            moment = moments.get("exp_avg")
            if name not in shapes or (moment is not None and tuple(moment.shape) != shapes[name]):
                raise ValueError(f"{folder / FSDP_OPTIMIZER_DIR}: the optimizer's state of {name} fits no weight")
        state = {position[name]: s for name, s in saved["state"].items()}
        torch.save({"state": state, "param_groups": groups}, tmp / "optimizer.pt")
        del saved, state
        whole.unlink()
        for f in folder.iterdir():  # trainer_state.json, scheduler.pt, rng states, the run's records, COMPLETE
            if f.is_file() and f.name != CONVERT_LOCK:
                shutil.copy2(f, tmp / f.name)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def whole_copy_if_fsdp(checkpoint: str | None, trainer) -> str | None:
    """The checkpoint a resume reads: an FSDP checkpoint (sharded state dicts) resumed without FSDP (one process,
    DDP) is read from its whole copy, written once by the main process (:func:`write_whole_copy`; the others wait
    for its outcome, a failure being the same one line on every process); any other, itself."""
    if not checkpoint or trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled or not fsdp_sharded(checkpoint):
        return checkpoint
    out = Path(checkpoint) / WHOLE_COPY_DIR

    def copy() -> None:
        with converting(checkpoint):
            if out.is_dir():
                logger.info("%s: resumed without FSDP, from its whole copy %s/", checkpoint, out)
                return
            logger.info(
                "%s: FSDP's sharded weights and optimizer states, resumed without FSDP: reading them whole once "
                "into %s/ (model.safetensors, optimizer.pt)",
                checkpoint,
                out,
            )
            try:
                write_whole_copy(checkpoint)
            except Exception as e:  # noqa: BLE001 - a full disk in one line; anything else as what it says
                cause = write_failure(e)
                if cause is None:
                    raise
                raise OSError(cause) from e

    main_process_does(copy, f"{checkpoint}: its FSDP shards could not be copied whole for a resume without FSDP")
    return str(out)


def whole_into_fsdp(trainer, checkpoint: str | Path | None) -> bool:
    """A checkpoint of a run without FSDP (whole weights, ``optimizer.pt``) resumed under FSDP: read whole and
    sharded in place (:func:`load_whole_weights_into_shards`, :func:`load_whole_optimizer_into_shards`); accelerate's
    FSDP load reads only FSDP's own files."""
    folder = Path(checkpoint) if checkpoint else None
    return (
        folder is not None
        and trainer.is_fsdp_enabled
        and not saved_under_fsdp(folder)
        and (folder / "optimizer.pt").is_file()
        and ((folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file())
    )


def load_whole_weights_into_shards(model, checkpoint: str | Path) -> None:
    """A checkpoint's whole weights (save_pretrained gathered them) into a model sharded at load: each rank keeps its
    slices (``set_model_state_dict(full_state_dict=True)``). The Trainer's plain ``load_state_dict`` cannot copy a
    whole tensor into a DTensor. A tied head is the embedding, absent from the file."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    folder = Path(checkpoint)
    index = folder / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    )
    state = {}
    for name in files:
        state.update(load_file(folder / name))
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))


def load_whole_optimizer_into_shards(model, optimizer, checkpoint: str | Path) -> None:
    """``optimizer.pt`` of a run without FSDP (torch's states by position in the optimizer's groups) into an FSDP
    run's optimizer: each position named by this optimizer's own order (the same recipe builds its groups in the
    same order; ``get_optimizer_state_dict`` gives the names), then set whole (``full_state_dict``): each rank
    keeps its slices."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    path = Path(checkpoint) / "optimizer.pt"
    saved = torch.load(path, map_location="cpu", weights_only=True)
    names = [name for group in get_optimizer_state_dict(model, optimizer)["param_groups"] for name in group["params"]]
    positions = sorted(i for group in saved["param_groups"] for i in group["params"])
    if positions != list(range(len(names))):
        raise ValueError(
            f"{path} holds the states of {len(positions)} parameters and this run's optimizer has {len(names)}: "
            "resume it with the recipe it was saved with"
        )
    params = [p for group in optimizer.param_groups for p in group["params"]]  # names[i] is params[i]'s
    for i, moments in saved["state"].items():
        if "exp_avg" in moments and tuple(moments["exp_avg"].shape) != tuple(params[i].shape):
            raise ValueError(
                f"{path}: the state at position {i} has the shape {tuple(moments['exp_avg'].shape)}, this run's "
                f"{names[i]} {tuple(params[i].shape)}: resume it with the recipe it was saved with"
            )
    whole = {
        "state": {names[i]: state for i, state in saved["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in saved["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, whole, options=StateDictOptions(full_state_dict=True))


def load_scheduler_state(scheduler, path: str | Path) -> None:
    """An LR scheduler's state saved with another number of param groups (a tensor-parallel run groups its
    parameters by device mesh: training/optim.py, one more group than without tp). Its per-group lists are resized
    when they hold one value for every group, which the Trainer's schedules do; otherwise one line."""
    state = torch.load(path, weights_only=True)
    groups = len(scheduler.optimizer.param_groups)
    saved = len(state.get("base_lrs", [])) or groups
    if saved != groups:
        for key, value in state.items():
            if isinstance(value, list) and len(value) == saved:
                if any(v != value[0] for v in value):
                    raise ValueError(
                        f"{path}: the schedule's {key} differs between its {saved} parameter groups, and this run "
                        f"has {groups}: resume it at the checkpoint's tensor-parallel degree"
                    )
                state[key] = value[:1] * groups
    scheduler.load_state_dict(state)


def drop_derived_copies(folder: Path) -> None:
    """What a resume derived from a checkpoint (its whole copy, DeepSpeed's universal one): gone when the
    checkpoint is saved again over the same folder, so that no later resume reads the older states."""
    shutil.rmtree(folder / WHOLE_COPY_DIR, ignore_errors=True)
    (folder / UNIVERSAL_MARKER).unlink(missing_ok=True)
    for universal in folder.glob("global_step*_universal"):
        shutil.rmtree(universal, ignore_errors=True)
