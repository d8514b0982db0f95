"""Export a checkpoint to share it: weights in bf16 by default (half of fp32, what Hub models ship), the
tokenizer, the model card (its load lines naming the export, or the Hub repo it is pushed to; its YAML header with
``license`` and ``datasets``) and lineage beside them, and optionally a push to the Hugging Face Hub.

An export is meant to be published, so it carries no local paths: in ``lineage.json`` and in the card (its table
and recipe) every absolute path is reduced to its last component (the data is still named by its folder and its
manifest's fingerprint and sha256); the load lines name the export folder as given (or the Hub repo).

Only a new or empty folder, or an earlier export of the same checkpoint, is written (``--force`` writes into any
other folder, replacing files of the same names): an export used to overwrite a user's ``config.json`` and
``README.md``, and ``--out .`` wrote into the working directory. ``.hfpretrain-export.json`` in the export says
which checkpoint it is (a hash of its path, and its weights' names, sizes and times: no path).

An export whose tokenizer llama.cpp's GGUF converter would not recognise (a vocabulary trained with
``train-tokenizer``: the converter keys on a hash of its tokens, :mod:`.gguf`) carries ``GGUF.md`` with the hash and
the pre-tokenizer name to register, a section of the card pointing at it, and one line on the console; a zoo
tokenizer in the converter's table gets none of these.

The export is written in a hidden folder beside ``--out`` and moved into it when whole: a write that fails (the
disk full) is one line (exit 1) and leaves ``--out`` as it was (an earlier export intact), with no partial files.

The export is written first; a push that fails (offline, no token) leaves it in place with one line saying
how to upload it later (``hf upload``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

from hfpretrain.eval.card import refresh_card, set_metadata
from hfpretrain.eval.checkpoint import OutputFolderError, check_checkpoint, check_output_folder
from hfpretrain.eval.gguf import NOTE_FILE, card_section, check_tokenizer, console_line, note
from hfpretrain.outdir import listing, read_marker

DTYPES = ("bfloat16", "float16", "float32")
MARKER = ".hfpretrain-export.json"
MARKER_FORMAT = "hfpretrain.export/1"
# an absolute path inside text, of two components or more ("/home/me", "~/data"), not preceded by a word, a path or a
# URL's characters ("nats/token", "https://...") nor one component alone ("<!-- /hfpretrain:use -->")
_SEG = r"[^\s`'\"|()<>\[\],;/]+"
_ABS_PATH = re.compile(rf"(?<![\w/.~:\-])((?:/{_SEG}){{2,}}/?|~(?:/{_SEG})+/?)")


class PushError(RuntimeError):
    """One line: the push failed, the export is kept."""


def checkpoint_id(src: Path) -> str:
    """Which checkpoint an export was made from, without naming a path: a hash of its resolved path and its
    config's and weights' names, sizes and modification times."""
    h = hashlib.sha256(str(Path(src).resolve()).encode())
    for f in sorted(Path(src).iterdir()):
        if f.is_file() and (
            f.suffix in (".safetensors", ".bin") or f.name in ("config.json", "model.safetensors.index.json")
        ):
            st = f.stat()
            h.update(f"\n{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def _refuse_foreign(out: Path, src: Path, force: bool) -> None:
    """A non-empty ``out`` that is not an earlier export of ``src`` is refused unless ``force``."""
    if force or not out.is_dir() or not any(out.iterdir()):
        return
    info = read_marker(out / MARKER, MARKER_FORMAT)
    if info is not None and info.get("checkpoint") == checkpoint_id(src):
        return
    from hfpretrain.data.pipeline import protected_reason

    why = protected_reason(out)
    what = (
        "holds an export of another checkpoint"
        if info is not None
        else f"is {why}, not an export of this checkpoint"
        if why
        else "is not an export of this checkpoint"
    )
    raise OutputFolderError(
        f"--out {out} {what}, and is not empty ({listing(out)}); nothing was written: choose a new or "
        "empty folder, or pass --force to write into it (files of the same names are replaced)"
    )


def redact_paths(text: str) -> str:
    """``text`` with each absolute path (``/a/b/c``, ``~/c``) reduced to its last component (``c``)."""
    return _ABS_PATH.sub(lambda m: Path(m.group(1).rstrip("/")).name or m.group(1), text)


def _redact(obj):
    if isinstance(obj, str):
        return redact_paths(obj)
    if isinstance(obj, list):
        return [_redact(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _redact(v) for k, v in obj.items()}
    return obj


def _hub_datasets(lineage: dict) -> list[str]:
    """The Hub dataset ids among the raw inputs of the tokenized outputs the lineage names (their manifests, where
    this machine still has them); local files have none."""
    ids = []
    for src in [*(lineage.get("sources") or {}).values(), lineage.get("validation") or {}]:
        try:
            manifest = json.loads((Path(src.get("path", "")) / "manifest.json").read_text())
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        for item in [
            *(manifest.get("inputs") or []),
            *(manifest.get("val_inputs") or [] if isinstance(manifest.get("val_inputs"), list) else []),
        ]:
            if isinstance(item, dict) and item.get("kind") == "hub" and isinstance(item.get("path"), str):
                ids.append(item["path"].partition("?")[0])
    return list(dict.fromkeys(ids))


def export_checkpoint(
    checkpoint,
    out,
    dtype: str = "bfloat16",
    push_to_hub: str | None = None,
    private: bool = False,
    force: bool = False,
    license: str | None = None,
    datasets: list[str] | None = None,
    say=None,
) -> Path:
    """Write ``checkpoint`` (a ``save_pretrained`` folder) to ``out`` in ``dtype``; push it to the Hub
    repo ``push_to_hub`` (``user/name``) if given. Returns ``out``. ``license`` (a Hub license id; default
    ``unknown``) and ``datasets`` (Hub ids; default those the data's manifests name) go into the card's header.
    ``say``: called with the console's one line when llama.cpp's converter needs the tokenizer registered."""
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype}: one of {', '.join(DTYPES)}")
    src = check_checkpoint(checkpoint)
    out = check_output_folder(out, makes="export")
    if out.resolve() == src.resolve():
        raise OutputFolderError(f"--out {out}: is the checkpoint itself; export to another folder")
    _refuse_foreign(out, src, force)
    lineage = None
    if (src / "lineage.json").is_file():
        try:
            lineage = json.loads((src / "lineage.json").read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{src / 'lineage.json'}: not valid JSON ({str(e).splitlines()[0]})") from None
    card = None
    if (src / "README.md").is_file():
        card = (src / "README.md").read_text()
    # after the checks: a bad input is answered at once, not after seconds of importing torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: noise in a one-line-per-outcome command
    model = AutoModelForCausalLM.from_pretrained(src, dtype=getattr(torch, dtype))
    tokenizer = AutoTokenizer.from_pretrained(src)
    if model.generation_config is not None:
        model.generation_config.use_cache = True  # checkpoints saved before 2026-11-25 turned it off
    if isinstance(lineage, dict):
        datasets = datasets or _hub_datasets(lineage)
    with _staged(out) as stage:  # written beside ``out``, moved into it whole: a full disk leaves ``out`` as it was
        (stage / MARKER).write_text(
            json.dumps({"format": MARKER_FORMAT, "checkpoint": checkpoint_id(src), "dtype": dtype}) + "\n"
        )
        model.save_pretrained(stage)
        tokenizer.save_pretrained(stage)
        gguf = check_tokenizer(stage)  # as llama.cpp's converter reads it: the saved files
        if gguf is not None and gguf.known is None:
            (stage / NOTE_FILE).write_text(note(gguf, push_to_hub or str(out), hub=bool(push_to_hub)), encoding="utf-8")
        else:
            gguf = None
        if isinstance(lineage, dict):  # where the model came from, without this machine's paths
            (stage / "lineage.json").write_text(json.dumps(_redact(lineage), indent=2) + "\n")
        if card is not None:  # the model card (with the scores hfpretrain eval added), loading the copy
            card = refresh_card(redact_paths(card), push_to_hub or out)
            if gguf is not None:
                card = card.rstrip("\n") + "\n\n" + card_section(gguf)
            (stage / "README.md").write_text(
                set_metadata(card, license=license or "unknown", datasets=datasets or None)
            )
    if gguf is not None and say is not None:
        say(console_line(gguf, out))
    if push_to_hub:
        push(out, push_to_hub, private)
    return out


class ExportWriteError(OSError):
    """One line: the export could not be written (the disk full); ``--out`` is as it was before (exit 1)."""


@contextmanager
def _staged(out: Path):
    """A new hidden folder beside ``out`` to write the export in; when the block ends, its files are moved into
    ``out`` (the folder itself renamed if ``out`` is missing): a rename never needs space, so a write that fails
    (the disk full) fails before ``out`` is touched, the staging folder and any folder made for it are removed,
    and one line says so."""
    from hfpretrain.training.checkpoints import write_failure

    out = out.absolute()
    made = [p for p in [*reversed(out.parents), out] if not p.exists()]  # what this export creates, outermost first
    stage = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = out.parent / f".{out.name}.export-{os.getpid()}-{secrets.token_hex(4)}"
        stage.mkdir()  # not mkdtemp: the export keeps the folder mode a mkdir gives (mkdtemp's is 0700)
        yield stage
        if not out.exists():
            os.rename(stage, out)
        else:
            for f in sorted(stage.iterdir()):
                os.replace(f, out / f.name)
            stage.rmdir()
    except BaseException as e:  # a failed write, and an interrupt (Ctrl-C), leave no partial files behind
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for p in reversed(made):  # only the empty folders this export made
            try:
                p.rmdir()
            except OSError:
                pass
        cause = write_failure(e) or (
            f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}" if isinstance(e, OSError) else None
        )
        if cause is None:
            raise
        full = "space" in cause.lower() or "quota" in cause.lower() or "os error 28" in cause
        kept = "nothing was created" if made else f"{out} is as it was"
        raise ExportWriteError(
            f"{'the disk is full' if full else 'writing failed'}: exporting to {out} failed "
            f"({cause}); its partial files were removed, {kept}: "
            f"{'free space' if full else 'fix the cause'} and export again"
        ) from None


def push(folder: Path, repo_id: str, private: bool = False) -> str:
    """Upload ``folder`` as the model repo ``repo_id`` (created if missing); returns its URL."""
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="model",
            commit_message="hfpretrain export",
            ignore_patterns=[MARKER],
        )
    except Exception as err:  # offline, no token, no permission, a network error: all one line
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PushError(
            f"--push-to-hub {repo_id}: {reason}; the export is in {folder} "
            f"(upload it later: hf upload {repo_id} {folder} --exclude '{MARKER}'"
            f"{' --private' if private else ''})"
        ) from None
    return f"https://huggingface.co/{repo_id}"
