"""Where local data lives, and how a name that may be a Hub id or a local path is resolved.

The data root (tokenizers/, eval/, pretrain/ as in the shared data mount) comes from the
``DATA_ROOT`` environment variable; nothing in the project hard-codes it.
"""

from __future__ import annotations

import os
from pathlib import Path


class MissingDataError(FileNotFoundError):
    """Raised with a one-line message saying what is missing and how to provide it."""


def data_root(root: str | os.PathLike | None = None) -> Path:
    """``root`` if given, else ``$DATA_ROOT``; one clear error line otherwise."""
    root = root if root not in (None, "") else os.environ.get("DATA_ROOT")
    if not root:
        raise MissingDataError(
            "DATA_ROOT is not set: point it at a folder holding tokenizers/, eval/ and pretrain/ "
            "(e.g. `export DATA_ROOT=/path/to/data`)"
        )
    path = Path(root).expanduser()
    if not path.is_dir():
        raise MissingDataError(f"DATA_ROOT={root} is not a directory")
    return path


def resolve(name: str | os.PathLike) -> str:
    """Turn ``name`` into something ``from_pretrained``/``load_dataset`` accept.

    An existing path is returned as is; ``data:foo/bar`` means ``$DATA_ROOT/foo/bar``; anything
    else is treated as a Hub id, which fails clearly when the Hub is unreachable (offline mode).
    """
    name = str(name)
    if name.startswith("data:"):
        path = data_root() / name[len("data:"):]
        if not path.exists():
            raise MissingDataError(f"{path} does not exist (from {name}; DATA_ROOT={data_root()})")
        return str(path)
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    looks_local = name.startswith((".", "/", "~")) or name.count("/") != 1
    if looks_local:
        raise MissingDataError(f"{name} does not exist")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise MissingDataError(
            f"{name} is neither a local path nor reachable: HF_HUB_OFFLINE=1, so Hub id '{name}' cannot be "
            "downloaded; pass a local path (or data:<path under DATA_ROOT>)"
        )
    return name
