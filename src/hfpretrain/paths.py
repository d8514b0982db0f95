"""Where local data lives, and how a name that may be a Hub id or a local path is resolved.

The data root (tokenizers/, eval/, pretrain/ as in the shared data mount) comes from the
``DATA_ROOT`` environment variable; nothing in the project hard-codes it. When it is not set,
the small embedded root shipped with the package is used (:data:`EMBEDDED_DATA_ROOT`: a
Pile-format sample, the GPT-2 tokenizer and a few dozen ARC questions; see its README.md),
and one log line says so.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

EMBEDDED_DATA_ROOT = Path(__file__).resolve().parent / "assets" / "default_data"
DATA_ROOT_LAYOUT = ("tokenizers", "eval", "pretrain")  # the folders a data root holds
# The repository's recipes/*.yaml, shipped in the wheel as package data: in a checkout this folder is a link to
# ../../recipes (one copy, nothing to keep in step); an installed wheel holds the files themselves.
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
_said_embedded = False


class MissingDataError(FileNotFoundError):
    """Raised with a one-line message saying what is missing and how to provide it."""


def data_root(root: str | os.PathLike | None = None) -> Path:
    """``root`` if given, else ``$DATA_ROOT``, else the embedded root (one log line, once per process)."""
    global _said_embedded
    root = root if root not in (None, "") else os.environ.get("DATA_ROOT")
    if not root:
        if not EMBEDDED_DATA_ROOT.is_dir():
            raise MissingDataError(
                f"DATA_ROOT is not set and the embedded data ({EMBEDDED_DATA_ROOT}) is missing: point DATA_ROOT "
                "at a folder holding tokenizers/, eval/ and pretrain/ (e.g. `export DATA_ROOT=/path/to/data`)"
            )
        if not _said_embedded:
            logger.warning(
                "DATA_ROOT is not set: using the small embedded data in %s (set DATA_ROOT for the full data)",
                EMBEDDED_DATA_ROOT,
            )
            _said_embedded = True
        return EMBEDDED_DATA_ROOT
    path = Path(root).expanduser()
    if not path.is_dir():
        raise MissingDataError(f"DATA_ROOT={root} is not a directory")
    return path


def recipe_path(recipe: str | os.PathLike) -> Path:
    """``recipe`` if it is a file, else the shipped recipe of that name (``tiny_cpu``, ``tiny_cpu.yaml`` or
    ``recipes/tiny_cpu.yaml``), which an installed wheel has too; neither: a MissingDataError naming both."""
    path = Path(recipe).expanduser()
    if path.is_file():
        return path
    name = path.name if path.suffix == ".yaml" else path.name + ".yaml"
    shipped = RECIPES_DIR / name
    if shipped.is_file():
        return shipped
    known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
    raise MissingDataError(f"recipe {recipe} does not exist, as a file or as a shipped recipe ({known})")


def using_embedded_data(root: str | os.PathLike | None = None) -> bool:
    """Whether :func:`data_root` (for this ``root``) is the embedded sample rather than a full data root."""
    root = root if root not in (None, "") else os.environ.get("DATA_ROOT")
    return not root or Path(root).expanduser().resolve() == EMBEDDED_DATA_ROOT


# a missing name ending in one of these is a file that is not there, not a Hub id (`pile/train.jsonl`)
FILE_SUFFIXES = (".jsonl", ".json", ".zst", ".gz", ".txt", ".parquet", ".arrow", ".csv", ".yaml", ".safetensors")


def resolve(name: str | os.PathLike, bare_hub_ids: bool = False) -> str:
    """Turn ``name`` into something ``from_pretrained``/``load_dataset`` accept.

    An existing path is returned as is; ``data:foo/bar`` means ``<data root>/foo/bar``; a missing ``owner/name``
    (or, with ``bare_hub_ids``, a bare ``name``: tokenizers and models such as ``gpt2``; a corpus input of one word
    is a mistyped file more often than a Hub dataset) is treated as a Hub id, which fails clearly when the Hub is
    unreachable (offline mode); anything else does not exist.
    """
    name = str(name)
    if name.startswith("data:"):
        path = data_root() / name[len("data:") :]
        if not path.exists():
            raise MissingDataError(f"{path} does not exist (from {name}; DATA_ROOT={data_root()})")
        return str(path)
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    looks_local = (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or (name.count("/") == 0 and not bare_hub_ids)
        or name.lower().endswith(FILE_SUFFIXES)
    )
    if looks_local:
        raise MissingDataError(f"{name} does not exist")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise MissingDataError(
            f"{name} is neither a local path nor reachable: HF_HUB_OFFLINE=1, so Hub id '{name}' cannot be "
            "downloaded; pass a local path (or data:<path under DATA_ROOT>)"
        )
    return name
