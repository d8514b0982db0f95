"""The run folder: one run per ``output_dir`` (a lock), checkpoints that are whole or recognisably not (a
completion marker written last, integrity checks), the last complete one, and rotation that never deletes it; a
failed write (a full disk) in one line, saves without progress bars, and a resumed checkpoint's weights checked
against the model. ``PretrainTrainer`` calls these around the Trainer's own save and load."""

from __future__ import annotations

import json
import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import TrainingArguments

from hfpretrain.integrity import json_problem, weights_problem, zip_problem
from hfpretrain.outdir import OutputBusyError, OutputLock, listing, output_problem

from .config import RecipeError
from .lineage import FORMAT as LINEAGE_FORMAT
from .lineage import LINEAGE_FILE

logger = logging.getLogger("hfpretrain")

COMPLETE_MARKER = "COMPLETE"


class NoCompleteCheckpointError(ValueError):
    pass


def deepspeed_tag(checkpoint: str | Path) -> str | None:
    """The tag (``global_stepN``) of a checkpoint saved under DeepSpeed; None for any other checkpoint."""
    latest = Path(checkpoint) / "latest"
    return latest.read_text().strip() if latest.is_file() else None


def _checkpoint_step(path: Path) -> int | None:
    tail = path.name.split("-")[-1]
    return int(tail) if path.name.startswith("checkpoint-") and tail.isdigit() else None


def saved_under_fsdp(checkpoint: str | Path) -> bool:
    """FSDP's own weights in the checkpoint: a folder of shards (SHARDED_STATE_DICT) or pytorch_model_fsdp.bin
    (FULL_STATE_DICT)."""
    return any(Path(checkpoint).glob("pytorch_model_fsdp*"))


def checkpoint_problem(path: str | Path) -> str | None:
    """The first damaged file of a checkpoint (one line naming it), or None when it looks resumable.

    Cheap, without loading anything (hfpretrain.integrity): trainer_state.json, data.json and recipe.yaml
    parse; the weights' safetensors header matches the file size; optimizer.pt / scheduler.pt / rng_state*.pth
    are whole zip archives (central directory; CRC too up to 256 MiB: a large run's optimizer.pt is only
    checked for truncation). Under DeepSpeed the optimizer (and scheduler) live in the ``latest`` tag's folder,
    under FSDP in ``optimizer_*`` / ``pytorch_model_fsdp*``: those must exist and not be empty.
    """
    path = Path(path)
    problem = json_problem(path / "trainer_state.json")
    if problem is None and (path / "data.json").exists():
        problem = json_problem(path / "data.json")
    if problem is None and (path / "recipe.yaml").exists():
        import yaml

        try:
            yaml.safe_load((path / "recipe.yaml").read_text())
        except (OSError, ValueError, yaml.YAMLError) as e:
            problem = f"{path / 'recipe.yaml'} is not readable YAML ({str(e).splitlines()[0]})"
    if problem:
        return problem
    tag = deepspeed_tag(path) if (path / "latest").is_file() else None
    sharded = [p for p in path.glob("pytorch_model_fsdp*") if p.is_dir()]
    problem = weights_problem(path)
    if problem and (tag or sharded) and "has no model weights" in problem:
        problem = None  # DeepSpeed's or FSDP's own weights instead (every FSDP checkpoint was "damaged" before)
    if problem:
        return problem
    fsdp_optimizer = [p for p in path.glob("optimizer_*") if p.is_dir()]
    for folder in [*sharded, *fsdp_optimizer]:  # torch's distributed checkpoint writes .metadata last
        metadata = folder / ".metadata"
        if not metadata.is_file() or metadata.stat().st_size == 0:
            return f"{metadata} is missing or empty: {folder.name}/ (FSDP's shards) was not saved whole"
    if tag:
        if not (path / tag).is_dir() or not any((path / tag).iterdir()):
            return f"{path / tag} (DeepSpeed's optimizer states, named by {path / 'latest'}) is missing or empty"
    elif (path / "optimizer.pt").exists() or (path / "optimizer.bin").exists():
        problem = zip_problem(path / ("optimizer.pt" if (path / "optimizer.pt").exists() else "optimizer.bin"))
    elif not any(p.is_dir() and any(p.iterdir()) for p in path.glob("optimizer_*")):
        return f"{path / 'optimizer.pt'} is missing (no optimizer state)"
    if problem:
        return problem
    if (path / "scheduler.pt").exists() or not tag:  # DeepSpeed keeps the HF scheduler's state in its own
        problem = zip_problem(path / "scheduler.pt")
    for rng in sorted(path.glob("rng_state*.pth")):
        problem = problem or zip_problem(rng)
    return problem


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """Newest ``checkpoint-N`` that finished saving and whose files are whole; partial ones are reported
    and ignored, and a complete one with a damaged file (truncated weights or optimizer state, broken
    trainer state: :func:`checkpoint_problem`) is reported naming the file and the previous complete one is
    taken. Checkpoints that all failed to finish, or are all damaged, are an error: resuming would silently
    start over at step 0."""
    done, partial = [], []
    for path in Path(output_dir).glob("checkpoint-*"):
        if _checkpoint_step(path) is None:
            continue
        if (path / COMPLETE_MARKER).exists():
            done.append(path)
        else:
            partial.append(path)
            logger.warning("ignoring %s: its save did not finish (no %s marker)", path, COMPLETE_MARKER)
    if partial and not done:
        raise NoCompleteCheckpointError(
            f"{output_dir} holds checkpoints but none finished saving ({', '.join(sorted(p.name for p in partial))}): "
            "refusing to start over at step 0; delete them or set training.resume_from_checkpoint=none"
        )
    damaged = []
    for path in sorted(done, key=_checkpoint_step, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            if damaged:
                logger.warning("resuming from %s instead: the newest complete checkpoint whose files are whole", path)
            return str(path)
        logger.warning("ignoring %s: marked %s, but %s", path, COMPLETE_MARKER, problem)
        damaged.append((path, problem))
    if damaged:
        raise NoCompleteCheckpointError(
            f"{output_dir}: every complete checkpoint is damaged ({'; '.join(f'{p.name}: {why}' for p, why in damaged)}): "
            "refusing to start over at step 0; restore or delete them, or set training.resume_from_checkpoint=none"
        )
    return None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_complete_marker(folder: Path, step: int) -> None:
    """Make the checkpoint's files durable, then the marker (the file and its folder entry)."""
    for path in sorted(folder.rglob("*")):
        _fsync(path)
    (folder / COMPLETE_MARKER).write_text(f"step {step}\n")
    _fsync(folder / COMPLETE_MARKER)
    _fsync(folder)


def rotate_checkpoints(output_dir: str | Path, keep: int | None, protect: str | None = None) -> None:
    """Keep the newest ``keep`` complete checkpoints (and ``protect``, the best one); delete older
    complete ones and every unfinished one. Never deletes the newest complete checkpoint."""
    if not keep or keep <= 0:
        return
    folders = [p for p in Path(output_dir).glob("checkpoint-*") if _checkpoint_step(p) is not None]
    complete = sorted((p for p in folders if (p / COMPLETE_MARKER).exists()), key=_checkpoint_step)
    kept = set(complete[-keep:]) | ({Path(protect)} if protect else set())
    for path in folders:
        if path not in kept:
            shutil.rmtree(path, ignore_errors=True)


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (the disk full, above all): the run failed (exit 1), its earlier
    checkpoints are intact."""


_WRITE_FAILED = (
    "No space left on device",
    "os error 28",
    "StorageFull",
    "Disk quota exceeded",
    "File too large",
    "PytorchStreamWriter failed writing",
    "file write failed",
    "inline_container.cc",
)


def write_failure(exc: BaseException) -> str | None:
    """The one-line cause when ``exc`` (or what it was raised from) is a failed write: an OSError ENOSPC/EDQUOT,
    safetensors' IoError, or torch's zip writer, which raises a RuntimeError without the errno
    ("PytorchStreamWriter failed writing file ...: file write failed", "unexpected pos ...")."""
    import errno

    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return os.strerror(seen.errno)
        text = str(seen)
        if any(marker in text for marker in _WRITE_FAILED):
            return text.strip().splitlines()[0] if text.strip() else type(seen).__name__
        seen = seen.__cause__ or seen.__context__
    return None


def checkpoint_write_error(folder: Path, cause: str) -> CheckpointWriteError:
    """One line for a checkpoint save that failed writing: the disk (full, when its free space says so), the
    folder, and the previous complete checkpoint, intact. The partial folder (no marker) is removed: it would
    only hold the space that is missing."""
    folder, run_dir = Path(folder), Path(folder).parent
    shutil.rmtree(folder, ignore_errors=True)
    earlier = sorted(
        (p for p in run_dir.glob("checkpoint-*") if _checkpoint_step(p) is not None and (p / COMPLETE_MARKER).exists()),
        key=_checkpoint_step,
    )
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        free = None
    full = free is not None and free < 64 << 20 or "space" in cause.lower() or "quota" in cause.lower()
    what = (
        f"the disk is full ({free / 2**20:.0f} MiB free)"
        if full and free is not None
        else "the disk is full"
        if full
        else "writing failed"
    )
    kept = (
        f"the previous checkpoint {earlier[-1]} is intact: free space and resume (training.resume_from_checkpoint=auto)"
        if earlier
        else "there is no earlier checkpoint"
    )
    return CheckpointWriteError(
        f"{what}: saving {folder.name} in {run_dir} failed ({cause}); its partial files were removed, {kept}"
    )


@contextmanager
def writing_checkpoint(folder: Path, writes_here: bool):
    """A failed write into ``folder`` (the disk full) said in one line on the rank that writes (``writes_here``):
    torch's writer says it with a RuntimeError, safetensors with its own error."""
    try:
        yield
    except Exception as e:
        cause = write_failure(e)
        if cause is None or not writes_here:
            raise
        raise checkpoint_write_error(folder, cause) from None


def write_recipe_and_data(folder: Path, run_files: dict, data_info: dict | None) -> None:
    """Beside the Trainer's files in a checkpoint: the run's files (``recipe.yaml`` as written, ``resolved.yaml``)
    and the data's facts (``data.json``: fingerprint, seq_len, tokenizer hash), which a resume compares with its
    own."""
    for name, text in run_files.items():
        (folder / name).write_text(text)
    if data_info:
        (folder / "data.json").write_text(json.dumps(data_info, indent=2) + "\n")


@contextmanager
def saved_as_from_the_hub(config):
    """``config`` as a model from the Hub has it, while it is saved: the KV cache on (training runs without it;
    generate() and pipeline() read config.use_cache, 4x slower without), and no pad_token_id in config.json
    (from_pretrained would make the end-of-text row the embedding's frozen padding_idx for anyone who fine-tunes
    it; generation_config.json keeps the pad id generation needs)."""
    saved = config.use_cache, config.pad_token_id
    config.use_cache, config.pad_token_id = True, None
    try:
        yield
    finally:
        config.use_cache, config.pad_token_id = saved


@contextmanager
def no_progress_bars():
    """transformers' progress bars off for the block: a save's "Writing model shards" bar put carriage returns
    into every log. Through the public hook transformers consults for each bar (5.17 on), chained to any other."""
    from transformers.utils import logging as hf_logging

    if not hasattr(hf_logging, "set_tqdm_hook"):
        yield
        return

    def quiet(factory, args, kwargs):
        kwargs = {**kwargs, "disable": True}
        return previous(factory, args, kwargs) if previous is not None else factory(*args, **kwargs)

    previous = hf_logging.set_tqdm_hook(quiet)
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)


def check_loaded_weights(model, load_result):
    """The result of loading a checkpoint's weights into ``model`` (a resume), without the tied head's keys; a
    ValueError when any other weight is missing (the Trainer only warns, and training went on with those weights
    as initialised)."""
    # A head tied to the embedding is saved once, as the embedding, so every resume found "missing keys:
    # ['lm_head.weight']": harmless, and it taught users to ignore the warning. Only that case is quiet.
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if (
        getattr(model.config, "tie_word_embeddings", False)
        and head is not None
        and embeddings is not None
        and head.weight is embeddings.weight
    ):
        tied = {name for name, p in model.named_parameters(remove_duplicate=False) if p is head.weight}
        if not tied <= set(load_result.missing_keys):  # the shared tensor was loaded under one of its names
            load_result = load_result._replace(missing_keys=[k for k in load_result.missing_keys if k not in tied])
    if load_result.missing_keys:
        raise ValueError(
            f"the checkpoint's weights do not fit the model: {len(load_result.missing_keys)} missing "
            f"({', '.join(load_result.missing_keys[:3])}), {len(load_result.unexpected_keys)} "
            "unexpected: "
            "resume it with the model it was saved from (an MoE checkpoint saved before 2026-11-25 "
            "has its experts in the Hub's layout: start from it with model.init_from instead)"
        )
    return load_result


def check_output_dir(output_dir: str) -> None:
    """One line (RecipeError) when ``output_dir`` cannot be created or written: a file in the way, a
    read-only mount, no permission. Checked before the model is built, not at the first save."""
    problem = output_problem(output_dir, makes="run")
    if problem:
        raise RecipeError(f"training.output_dir={output_dir}: {problem}")


RUN_LOCK = ".run.lock"

# What a run writes at its top level, beside its checkpoint-N folders: a new run in the folder replaces all of it
RUN_FILES = ("final", "summary.json", "log.jsonl", "lineage.json", "recipe.yaml", "resolved.yaml")


def is_run_folder(folder: Path) -> bool:
    """``lineage.json`` of ours (written when a run starts) is what tells a run's folder from a user's own, which
    may hold a recipe.yaml and a summary.json of theirs."""
    try:
        info = json.loads((folder / LINEAGE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("format") == LINEAGE_FORMAT


def prepare_fresh_output_dir(args: TrainingArguments, resume_value, overwrite: bool) -> None:
    """A new run (no checkpoint resumed) must not mix with what ``output_dir`` holds: the old run's checkpoints
    would be rotated against the new run's (``save_total_limit`` kept the old highest step and deleted the new
    run's own), its final/ and summary replaced, a user's files overwritten. So a new run needs a new or empty
    folder; ``overwrite_output_dir=true`` removes the earlier run's files first (a run's folder only: in a folder
    without our lineage.json the same names are the user's own); and ``resume_from_checkpoint=auto``
    starts over in a run folder of ours that saved no checkpoint (a run stopped before its first save).

    The main process decides and removes first, the others then find the folder as it leaves it."""
    out = Path(args.output_dir)
    with args.main_process_first(local=False, desc="output_dir check"):
        held = sorted(p for p in out.iterdir() if p.name != RUN_LOCK) if out.is_dir() else []
        if not held:
            return
        ours = is_run_folder(out)
        if overwrite and not ours:  # overwriting removes a run's files by name: in a user's folder, theirs
            raise RecipeError(
                f"training.output_dir={out} holds files that are not a run of this tool "
                f"({listing(out, exclude=RUN_LOCK)}): overwrite_output_dir=true replaces an earlier "
                "run's files only, and nothing was changed; choose another training.output_dir"
            )
        auto = resume_value in (True, "auto", "true", "True", "last")
        saved = [p for p in held if p.name.startswith("checkpoint-") or p.name == "final"]
        if not overwrite and not (auto and ours and not saved):
            what = "an earlier run" if ours else "files that are not a run of this tool"
            resume = "resume that run (training.resume_from_checkpoint=auto), " if ours and saved else ""
            raise RecipeError(
                f"training.output_dir={out} holds {what} ({listing(out, exclude=RUN_LOCK)}): a new run "
                f"needs a new or empty folder, nothing was changed; choose another training.output_dir"
                + (f", {resume}or set overwrite_output_dir=true to replace the earlier run's files" if ours else "")
            )
        replaced = [p for p in held if p.name in RUN_FILES or _checkpoint_step(p) is not None]
        if args.process_index == 0 and replaced:
            logger.warning(
                "%s: %s %s (%s)",
                out,
                "overwrite_output_dir=true: removing"
                if overwrite
                else "no checkpoint to resume: starting over, removing",
                "the earlier run's files",
                ", ".join(p.name for p in replaced),
            )
            for p in replaced:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()


def hold_run_lock(args: TrainingArguments) -> OutputLock:
    """One run per output_dir: two would overwrite each other's checkpoints and resume from each other's. The
    first process takes the lock and tells the others, so that a refused launch stops on every rank (the others
    would otherwise wait at their first collective for a rank that is gone)."""
    out = args.output_dir
    lock = OutputLock(
        Path(out) / RUN_LOCK,
        f"training.output_dir={out} is in use by another training run",
        "wait for it to finish, or choose another training.output_dir",
    )
    problem = None
    if args.process_index == 0:
        try:
            lock.acquire()
        except OutputBusyError as e:
            problem = str(e)
    if args.world_size > 1 and torch.distributed.is_initialized():
        box = [problem]
        torch.distributed.broadcast_object_list(box, src=0)
        problem = box[0]
    if problem:
        raise OutputBusyError(problem)
    return lock


def save_in_model_layout(trainer, output_dir: str, state_dict=None, hub_layout: bool = False) -> None:
    """A checkpoint's weights in the model's own parameter layout. By default transformers writes MoE experts one by
    one (the Hub's layout), which the Trainer's resume, a plain load_state_dict, cannot read (a resumed MoE run went
    on with freshly initialised experts); from_pretrained reads both, and final/ keeps the Hub's layout
    (``hub_layout``). The Trainer's _save cannot ask for it: these are its steps for a PreTrainedModel, with that
    argument. A model sharded at load (tensor parallelism) is saved by every rank: save_pretrained gathers its
    DTensor shards, a collective, and only the main process writes."""
    from transformers import PreTrainedModel
    from transformers.trainer import TRAINING_ARGS_NAME

    args = trainer.args
    if not args.should_save and not sharded_at_load(trainer):
        return
    if state_dict is None and not isinstance(trainer.model, PreTrainedModel):
        state_dict = trainer.model.state_dict()
    trainer.accelerator.unwrap_model(trainer.model, keep_torch_compile=False).save_pretrained(
        output_dir, state_dict=state_dict, is_main_process=args.should_save, save_original_format=hub_layout
    )
    if args.should_save:
        if trainer.processing_class is not None:
            trainer.processing_class.save_pretrained(output_dir)
        torch.save(args, os.path.join(output_dir, TRAINING_ARGS_NAME))


def sharded_at_load(trainer) -> bool:
    """The model was sharded by transformers at load (``tp_plan``; 5.2x marks it
    ``is_distributed_loading_by_transformers``, 5.17 leaves ``tp_size`` on it): saving it is a collective."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    return (
        bool(getattr(trainer, "is_distributed_loading_by_transformers", False))
        or (getattr(model, "tp_size", None) or 1) > 1
    )


# A tensor-parallel run's optimizer states, written by every rank (torch.distributed.checkpoint): the folder name is
# one of checkpoint_problem's ``optimizer_*``.
SHARDED_OPTIMIZER_DIR = "optimizer_sharded"


def save_sharded_optimizer(model, optimizer, output_dir: str | Path) -> None:
    """Every rank's optimizer states of its shards (DTensor parameters: each rank writes its slices; torch's
    ``get_optimizer_state_dict`` names them by parameter), so that a resume reads them back in place. A collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save(
        {"optimizer": get_optimizer_state_dict(model, optimizer)},
        checkpoint_id=Path(output_dir) / SHARDED_OPTIMIZER_DIR,
    )


def load_sharded_optimizer(model, optimizer, checkpoint: str | Path) -> None:
    """The states :func:`save_sharded_optimizer` wrote, into ``optimizer`` (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}  # the layout to read into
    dcp.load(state, checkpoint_id=Path(checkpoint) / SHARDED_OPTIMIZER_DIR)
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def sharded_state_dicts(trainer) -> bool:
    """FSDP saving sharded state dicts (``fsdp_state_dict_type: SHARDED_STATE_DICT``): an export must gather the
    whole model itself (gathering it at every checkpoint would cost time and disk)."""
    return "FULL_STATE_DICT" not in str(trainer.accelerator.state.fsdp_plugin.state_dict_type)
