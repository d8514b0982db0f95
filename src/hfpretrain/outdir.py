"""Is an output folder usable, and is it ours alone? Checked before the work, so that a run never computes for minutes (or
hours) and then loses it all on a folder it cannot write (a file in the way, a read-only mount).

Every command that writes a folder (tokenize ``--out``, train-tokenizer ``--out``, eval ``--out``, export ``--out``,
train ``training.output_dir``, study ``--out``, demo ``--out``) asks :func:`output_problem` first and turns the
answer into its one ``error:`` line: the one output guard. Besides a folder it cannot write, it refuses the places no
command's output may be (:func:`protected_reason`): a command that replaces or cleans its output there would delete
the user's own files (``training.output_dir=.`` with ``overwrite_output_dir=true`` replaced a user's recipe.yaml).
Commands that write one file (plot, long-context) ask :func:`writable_problem` of its folder instead.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def protected_reason(path) -> str | None:
    """Why ``path`` can never be an output folder, or None: a filesystem root, the working directory or the home
    folder, or a folder holding either (links resolved, so ``.``, ``..`` and ``$HOME`` are caught however named)."""
    out = Path(path).expanduser().resolve()
    if out == Path(out.anchor):
        return "a filesystem root"
    for name, where in (("the working directory", Path.cwd), ("the home folder", Path.home)):
        try:
            here = where().resolve()
        except (OSError, RuntimeError):  # a deleted working directory, no HOME
            continue
        if out == here:
            return name
        if out in here.parents:
            return f"a folder holding {name}"
    return None


# This tool's outputs, told by the marker each command writes at its top: (file, its format, what the folder is).
# The formats are those of data/manifest.py, data/train_tokenizer.py, eval/export.py and training/lineage.py (this
# module imports none of them; tests/test_faults_more.py holds them equal). A run's final/ has a lineage.json too.
OUTPUT_MARKERS = (
    ("manifest.json", "hfpretrain.tokenized", "data", "a tokenized data folder"),
    ("training.json", "hfpretrain.tokenizer", "tokenizer", "a trained tokenizer's folder"),
    (".hfpretrain-export.json", "hfpretrain.export/1", "export", "an export"),
    ("lineage.json", "hfpretrain.lineage/1", "run", "a run's folder"),
)
# what may be made inside each kind of output (None: nothing): an evaluation's results in a run's final/ (eval's
# default --out CKPT/eval) or in an export; nothing in data, which a rebuild replaces whole
_INSIDE_ALLOWED = {"data": (), "tokenizer": (), "export": ("eval",), "run": ("eval",)}
_WHY_NOT_INSIDE = {
    "data": "a rebuild of it (tokenize --force, new settings) replaces that whole folder",
    "tokenizer": "it is a tokenizer that other commands load as a whole",
    "export": "an export is published as a whole (--push-to-hub uploads the folder)",
    "run": "a run's folder is its own: a new run there (overwrite_output_dir=true) and its checkpoint "
    "rotation remove what they find by name",
}


def output_kind(folder) -> tuple[str, str] | None:
    """``(kind, what)`` when ``folder`` is an output of one of this tool's commands (:data:`OUTPUT_MARKERS`)."""
    for name, format, kind, what in OUTPUT_MARKERS:
        if read_marker(Path(folder) / name, format) is not None:
            return kind, what
    return None


def nesting_problem(path, makes: str) -> str | None:
    """Why ``path`` cannot hold the output of a command that makes ``makes`` ("data", "tokenizer", "export", "run",
    "eval", "study", "demo"), or None: it is inside another command's output (a run's output_dir in a tokenized data
    folder, a data folder in a run's), or it is a data or tokenizer folder that this command did not make."""
    p = Path(path).expanduser().resolve()
    found = output_kind(p) if p.is_dir() else None
    if found and found[0] in ("data", "tokenizer") and found[0] != makes:
        return (
            f"{p} is {found[1]}: another command's files in it would be replaced with it, or break it; "
            "nothing was changed; choose another folder"
        )
    try:
        home = Path.home().resolve()
    except (OSError, RuntimeError):
        home = None
    for parent in p.parents:
        if parent == Path(parent.anchor) or parent == home:  # no output is ever there: a stray marker is no output
            continue
        found = output_kind(parent)
        if found is None:
            continue
        kind, what = found
        if makes in _INSIDE_ALLOWED.get(kind, ()):
            return None
        return (
            f"{p} is inside {what}, {parent}: {_WHY_NOT_INSIDE[kind]}; nothing was changed; choose a folder outside it"
        )
    return None


def output_problem(path, makes: str | None = None) -> str | None:
    """Why ``path`` cannot be an output folder (:func:`protected_reason`; with ``makes``, what the command makes,
    :func:`nesting_problem`), or cannot be created and written, or None."""
    why = protected_reason(path)
    if why:
        return (
            f"{Path(path).expanduser().absolute()} is {why}: an output needs a folder of its own, nothing was "
            "changed; name a new subfolder"
        )
    return (makes and nesting_problem(path, makes)) or writable_problem(path)


def writable_problem(path) -> str | None:
    """Why ``path`` cannot be created (if missing) and written as a folder, or None.

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
            if probe.is_symlink():  # a dangling link: creating the folder fails with "File exists"
                return (
                    f"{probe} is a link to {os.readlink(probe)}, which does not exist: create the folder it "
                    "points to, or remove the link"
                )
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


def read_marker(path, format: str) -> dict | None:
    """The JSON object in ``path`` if it is a marker this tool wrote (``{"format": format, ...}``), else None
    (missing, unreadable, not JSON, another format): how a command tells its own outputs from a user's folder."""
    try:
        info = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("format") == format else None


def listing(folder, shown: int = 3, exclude: str | None = None) -> str:
    """``a, b, c and N more``: the first names in ``folder`` (sorted; ``exclude``, a lock file of ours, left out),
    for an error about what it holds."""
    names = sorted(p.name for p in Path(folder).iterdir() if p.name != exclude)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


class OutputBusyError(ValueError):
    """Another live process holds the output's lock (the message names its pid and the lock file), or something that
    is not a lock file is where the lock goes. A ValueError: like a wrong setting, the command's own arguments (or
    the thing in the way) are what must change (exit 2)."""


LOCK_MARK = "hfpretrain lock, pid "  # the first line of a lock file this module wrote: "hfpretrain lock, pid N"


def _holder(path: Path) -> str:
    """The pid a lock file names ("?" if none: a lock file of someone else's)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(128).decode(errors="replace").strip()
    except OSError:
        return "?"
    text = text[len(LOCK_MARK) :] if text.startswith(LOCK_MARK) else text
    return text if text.isdigit() else "?"


class OutputLock:
    """An exclusive lock (``filelock.FileLock``: ``flock`` on ``path``) for as long as a command writes an output
    (``with OutputLock(...):``). A second command on the same output fails at once with one line,
    ``"<busy> (pid N, lock PATH): <advice>"``; the kernel drops the lock when the process dies, however it dies,
    so a killed run never blocks the next one.

    The lock file is written (``"hfpretrain lock, pid N"``) and removed on release only when it is ours: created
    by this acquire, or left by a killed holder (it carries that first line). A file of the same name that is
    someone else's is only locked, never written, truncated or removed; a folder or a link there is refused."""

    def __init__(self, path, busy: str, advice: str):
        self.path, self.busy, self.advice = Path(path), busy, advice
        self._lock = None
        self._ours = False

    def acquire(self) -> "OutputLock":
        from filelock import FileLock, Timeout

        if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
            what = "a link" if self.path.is_symlink() else "a folder" if self.path.is_dir() else "not a file"
            raise OutputBusyError(
                f"{self.path} is {what}, where this command keeps its lock file: nothing was "
                "changed; move it away, or choose another output"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = os.path.lexists(self.path)
        lock = FileLock(str(self.path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise OutputBusyError(f"{self.busy} (pid {_holder(self.path)}, lock {self.path}): {self.advice}") from None
        except OSError as e:
            raise OutputBusyError(
                f"{self.path}: cannot use it as a lock file ({e.strerror or e}): nothing was "
                "changed; move it away, or choose another output"
            ) from None
        self._lock = lock
        try:
            with open(self.path, "r+b") as fh:
                head = fh.read(len(LOCK_MARK)).decode(errors="replace")
                self._ours = not existed or head == LOCK_MARK
                if self._ours:
                    fh.seek(0)
                    fh.truncate()
                    fh.write(f"{LOCK_MARK}{os.getpid()}\n".encode())
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        if self._lock is None:
            return
        if self._ours:
            try:
                os.unlink(self.path)  # while still holding it: a waiter finds the inode unlinked and starts over
            except FileNotFoundError:
                pass
        self._lock.release()
        self._lock, self._ours = None, False

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = [
    "OutputBusyError",
    "OutputLock",
    "listing",
    "nesting_problem",
    "output_kind",
    "output_problem",
    "protected_reason",
    "read_marker",
    "writable_problem",
]
