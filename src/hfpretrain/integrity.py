"""Cheap checks that saved files are whole, without loading them: is a checkpoint usable before a resume,
an evaluation or a generation starts (a truncated ``model.safetensors`` or ``optimizer.pt`` otherwise fails
minutes later with a traceback, or not at all).

Each ``*_problem`` function returns a one-line reason naming the file, or None when it looks whole.

* safetensors: ``safe_open`` reads the header and checks that its tensors cover the file exactly (a file cut
  short, or with bytes appended, fails);
* ``torch.save`` files (``optimizer.pt``, ``scheduler.pt``, ``pytorch_model.bin``) are zip archives: the
  central directory at the end must read (a truncated file fails), and every member must lie inside the file;
  files up to :data:`CRC_CHECK_MAX_BYTES` are also CRC-checked member by member (``ZipFile.testzip``), larger
  ones are not (that reads the whole file, gigabytes for a large run's optimizer state); and the pickle inside
  must name only what ``torch.load(weights_only=True)`` accepts (read, never executed: a payload that the Trainer's
  load would refuse with a traceback makes the file unusable, like a truncated one);
* JSON files must parse.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

CRC_CHECK_MAX_BYTES = 256 << 20

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# any one of these lets AutoTokenizer load a tokenizer from the folder
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def json_problem(path) -> str | None:
    path = Path(path)
    if not path.is_file():
        return f"{path} is missing"
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"{path} is not valid JSON ({str(e).splitlines()[0]})"
    return None


def safetensors_problem(path) -> str | None:
    """``safetensors.safe_open`` reads the header alone (the tensors are mapped, not read) and refuses a header
    that does not parse or whose tensors do not cover the file exactly: cut short, or with bytes appended."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        return f"{path} is missing"
    try:
        with safe_open(str(path), "np"):
            return None
    except SafetensorError as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "not fully covered" in why or "too small" in why:
            return f"{path} is truncated or has bytes after its tensors ({path.stat().st_size:,} bytes; {why})"
        return f"{path}: unreadable safetensors header ({why})"
    except OSError as e:
        return f"{path}: unreadable ({e.strerror or e})"


def zip_problem(path, crc_max_bytes: int = CRC_CHECK_MAX_BYTES) -> str | None:
    """For ``torch.save`` files (zip archives since torch 1.6)."""
    path = Path(path)
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    if size == 0:
        return f"{path} is empty"
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"{path} is truncated (member {info.filename} ends past the end of the file)"
            if size <= crc_max_bytes:
                bad = zf.testzip()
                if bad is not None:
                    return f"{path} is corrupt (CRC mismatch in {bad})"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        return f"{path} is truncated or corrupt ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return pickle_problem(path)


def pickle_problem(path) -> str | None:
    """A whole ``torch.save`` file whose pickle names globals that ``weights_only`` loading refuses (a payload,
    or objects that are no tensor state): read from the pickle's opcodes, nothing is executed. The numpy types the
    Trainer allows for its RNG states (transformers' ``safe_globals``) are accepted."""
    try:
        from torch.serialization import get_unsafe_globals_in_checkpoint
    except ImportError:  # torch < 2.5: the load itself says it
        return None
    try:
        from transformers.trainer_pt_utils import safe_globals
    except ImportError:
        from contextlib import nullcontext as safe_globals
    try:
        with safe_globals():
            unsafe = get_unsafe_globals_in_checkpoint(str(path))
    except Exception as e:  # noqa: BLE001 - a pickle that cannot even be scanned is no state to load
        return f"{path} is corrupt (its pickle does not read: {str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if unsafe:
        names = ", ".join(unsafe[:3]) + (f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else "")
        return (
            f"{path} holds pickled objects that safe (weights_only) loading refuses ({names}): not a state "
            "this training saves, possibly planted code; unusable"
        )
    return None


def weights_problem(folder) -> str | None:
    """The model weights of a save_pretrained folder: present and whole (every shard of a sharded save)."""
    folder = Path(folder)
    if (folder / "model.safetensors").exists():
        return safetensors_problem(folder / "model.safetensors")
    for index_name, check in (
        ("model.safetensors.index.json", safetensors_problem),
        ("pytorch_model.bin.index.json", zip_problem),
    ):
        index = folder / index_name
        if index.exists():
            problem = json_problem(index)
            if problem:
                return problem
            shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
            if not shards:
                return f"{index} lists no weight files"
            for shard in shards:
                problem = check(folder / shard)
                if problem:
                    return problem
            return None
    if (folder / "pytorch_model.bin").exists():
        return zip_problem(folder / "pytorch_model.bin")
    return f"{folder} has no model weights (model.safetensors or pytorch_model.bin)"


# the tokenizer's JSON files, each read when present (a truncated one was the JSON parser's bare "Expecting value")
TOKENIZER_JSON = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "added_tokens.json",
)


def tokenizer_problem(
    folder, again: str = "copy in the tokenizer/ folder of the data it was trained on (tokenizer.save_pretrained)"
) -> str | None:
    """The tokenizer files of a folder: one of them present, each JSON one whole, and ``tokenizer.json`` a file the
    tokenizers library reads (a broken one was the library's internal text: ``KeyError: 'added_tokens'``). ``again``:
    what to do about it. ``tokenizer.json`` is parsed as JSON only when the library refuses it (a file it reads is
    whole JSON; Qwen3's 11 MB one took 0.5 s more to parse twice): the same answer, in the same order of files. A
    folder whose files passed already in this process, unchanged since, passes without reading them again."""
    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return f"{folder} has no tokenizer files (tokenizer.json, tokenizer.model or vocab.json): {again}"
    seen = _tokenizer_files_seen(folder)
    if seen in _WHOLE_TOKENIZERS:
        return None
    problem = _tokenizer_files_problem(folder, again)
    if problem is None:
        _WHOLE_TOKENIZERS.add(seen)
    return problem


# The tokenizer folders that passed in this process, by their files' identities (path, inode, mode, size, modification
# and change times in ns): a file written, replaced or chmod-ed since is checked again. Qwen3's tokenizer.json takes
# ~0.4 s to read, and a process may check the same folder many times (a dry run per case, a study's runs).
_WHOLE_TOKENIZERS: set = set()


def _tokenizer_files_seen(folder: Path) -> tuple:
    stats = []
    for name in sorted(set(TOKENIZER_FILES) | set(TOKENIZER_JSON)):
        try:
            st = (folder / name).stat()
        except OSError:
            stats.append((name, None))
            continue
        stats.append((name, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return (str(folder.resolve()), tuple(stats))


def _tokenizer_files_problem(folder: Path, again: str) -> str | None:
    unreadable = None  # the tokenizers library's reason for refusing tokenizer.json, if it does
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as e:  # noqa: BLE001 - the tokenizers library's own error, whatever it is
            unreadable = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    for name in TOKENIZER_JSON:
        if name == "tokenizer.json" and (folder / name).is_file() and unreadable is None:
            continue  # the library read it: whole JSON
        if (folder / name).is_file():
            problem = json_problem(folder / name)
            if problem:
                return f"{problem}: a truncated or damaged tokenizer file; {again}"
    if unreadable is not None:
        return f"{folder / 'tokenizer.json'} is not a tokenizer the tokenizers library reads ({unreadable}); {again}"
    return None


__all__ = [
    "json_problem",
    "safetensors_problem",
    "zip_problem",
    "pickle_problem",
    "weights_problem",
    "tokenizer_problem",
    "WEIGHT_FILES",
    "TOKENIZER_FILES",
    "CRC_CHECK_MAX_BYTES",
]
