"""Is an output folder usable, and is it ours alone? Checked before the work, so that a run never computes for minutes (or
hours) and then loses it all on a folder it cannot write (a file in the way, a read-only mount).

Every command that writes a folder (tokenize_pile.py ``--out``, train_tokenizer.py ``--out``,
evaluate.py ``--out``, pretrain.py ``training.output_dir``, study.py ``--out``) asks
:func:`output_problem` first and turns the answer into its one ``error:`` line.
"""

from __future__ import annotations

import fcntl
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


class OutputBusyError(ValueError):
    """Another live process holds the output's lock (the message names its pid and the lock file). A ValueError:
    like a wrong setting, the command's own arguments are what must change (exit 2)."""


class OutputLock:
    """An exclusive ``fcntl.flock`` on ``path``, holding the holder's pid, for as long as a command writes an
    output (``with OutputLock(...):``). A second command on the same output fails at once with one line,
    ``"<busy> (pid N, lock PATH): <advice>"``; the kernel drops the lock when the process dies, however it dies,
    so a killed run never blocks the next one."""

    def __init__(self, path, busy: str, advice: str):
        self.path, self.busy, self.advice = Path(path), busy, advice
        self._fd: int | None = None

    def acquire(self) -> "OutputLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise OutputBusyError(f"{self.busy} (pid {holder}, lock {self.path}): {self.advice}") from None
            try:  # the file may have been removed by the previous holder between open and flock: retry
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it: a waiter re-checks the inode
        except FileNotFoundError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["OutputBusyError", "OutputLock", "output_problem"]
