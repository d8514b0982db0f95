"""Is an output folder usable? Checked before the work, so that a run never computes for minutes (or
hours) and then loses it all on a folder it cannot write (a file in the way, a read-only mount).

Every command that writes a folder (tokenize_pile.py ``--out``, train_tokenizer.py ``--out``,
evaluate.py ``--out``, pretrain.py ``training.output_dir``, study.py ``--out``) asks
:func:`output_problem` first and turns the answer into its one ``error:`` line.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def output_problem(path) -> str | None:
    """Why ``path`` cannot be created (if missing) and written as an output folder, or None.

    Probes by creating and removing a temporary file in the deepest folder that exists (the folder
    itself, or the ancestor the missing folders would be created in), so a read-only mount or a
    permission problem is found even for root; nothing is left behind and nothing is created.
    """
    p = Path(path).expanduser().absolute()
    try:
        if p.exists() and not p.is_dir():
            return f"{p} is a file, not a folder"
        probe = p
        while not probe.exists():
            if probe.parent == probe:
                return f"{p}: no existing folder to create it in"
            probe = probe.parent
    except OSError as e:  # an unreadable ancestor
        return f"{p}: cannot look there ({e.strerror})"
    if not probe.is_dir():
        return f"{probe} is a file, not a folder: cannot create {p} inside it"
    try:
        fd, name = tempfile.mkstemp(prefix=".hfpretrain-write-test-", dir=probe)
    except OSError as e:
        return f"cannot write in {probe} ({e.strerror or e})"
    os.close(fd)
    os.unlink(name)
    return None


__all__ = ["output_problem"]
