"""One build per output folder, and nothing left behind by a killed one.

:class:`BuildGuard` is held by ``tokenize_corpus`` for the whole build of ``OUT``:

* **Lock**: an exclusive lock (:class:`hfpretrain.outdir.OutputLock`, ``filelock``) on ``OUT.lock`` (beside the
  output), holding the builder's pid. A second build of the same ``OUT`` fails at once with one line naming the
  first one's pid (two builds used to both exit 0, each reporting its own counts, and only the last one's data
  remained). The kernel drops the lock when the process dies, however it dies. A user's own file of that name is
  locked but never written or removed.
* **Work folders**: a build writes in ``OUT.tmp-<pid>/`` and moves a replaced output aside into
  ``OUT.old-<pid>/``, each made by :func:`make_work_dir` with a marker file inside (:data:`BUILD_MARKER`, naming
  the tool, the output and the pid). The output itself is built in a subfolder, so the marker never ends up in an
  output (nor in a user's copy of one).
* **Leftovers**: work folders of builds whose process is gone (killed runs used to leave them forever) are
  removed, each with a log line, after the build's checks have passed; those of a live process are left alone,
  and so is every folder without this tool's marker (a user's ``corpus.old-2024`` backup is not a leftover).
* **Workers end with the build**: ``datasets`` reads and tokenizes in ``multiprocess`` pools (and a queue
  manager process). During the build, SIGTERM to the main process raises :class:`BuildTerminated` there, so
  the pools are terminated and the temporary folder removed on the way out, and then the process ends by
  SIGTERM as it would have. (Only over the default action: a caller's own SIGTERM handler stays in charge.)
  Every process forked during the build gets the default SIGTERM action back before SIGTERM can reach it
  (blocked across the fork, so one sent meanwhile stays pending and kills it), and those ``multiprocess`` starts ask
  the kernel (Linux ``PR_SET_PDEATHSIG``) for SIGKILL when their parent dies, so that even a SIGKILLed build leaves
  no worker behind. The handler's exception can be lost (Python only prints an exception raised inside an
  at-fork callback, and datasets forks often), so the build also calls :func:`raise_if_terminated` between
  its phases and before its output is put in place.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import threading
from pathlib import Path

from hfpretrain.outdir import OutputBusyError, OutputLock, read_marker

from .read import DataError

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
BUILD_MARKER = ".hfpretrain-build.json"  # inside OUT.tmp-<pid>/ and OUT.old-<pid>/: made by a build of this tool
_MARKER_FORMAT = "hfpretrain.tokenize-work/1"


def work_dir(out: Path, kind: str) -> Path:
    """This process's ``OUT.tmp-<pid>`` (kind ``tmp``: the build) or ``OUT.old-<pid>`` (kind ``old``: a replaced
    output)."""
    return out.parent / f"{out.name}.{kind}-{os.getpid()}"


def _work_pid(path: Path, out: Path) -> int | None:
    """The pid in ``path``'s name if it is a work folder a build of ``out`` made (its marker names this output and
    that pid), else None: anything else of that name is not ours."""
    m = re.fullmatch(rf"{re.escape(out.name)}\.(tmp|old)-(\d+)", path.name)
    if not m or path.is_symlink() or not path.is_dir():
        return None
    marker, pid = path / BUILD_MARKER, int(m.group(2))
    info = read_marker(marker, _MARKER_FORMAT) if marker.is_file() and not marker.is_symlink() else None
    return pid if info is not None and info.get("pid") == pid and info.get("out") == str(out) else None


def is_work_dir(path: Path, out: Path) -> bool:
    """Whether ``path`` is a work folder a build of ``out`` made, as opposed to anything else of that name."""
    return _work_pid(path, out) is not None


def _refuse_foreign_work_dir(path: Path, out: Path) -> None:
    if os.path.lexists(path) and not is_work_dir(path, out):
        raise DataError(
            f"{path} exists and was not made by this tool (no {BUILD_MARKER}): a build of {out} "
            "works there; nothing was changed: move it away"
        )


def make_work_dir(out: Path, kind: str) -> Path:
    """Create this process's ``OUT.<kind>-<pid>`` with its marker; one of ours left by a dead process of the same pid
    is removed first. Anything else of that name stops the build (:class:`DataError`): it is not ours to delete."""
    path = work_dir(out, kind)
    _refuse_foreign_work_dir(path, out)
    if os.path.lexists(path):
        shutil.rmtree(path)
    try:  # a Ctrl-C between the folder and its marker left an empty OUT.tmp-<pid> that no cleanup knew as ours
        path.mkdir()
        (path / BUILD_MARKER).write_text(
            json.dumps({"format": _MARKER_FORMAT, "out": str(out), "pid": os.getpid(), "kind": kind}) + "\n"
        )
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # nothing else is at this name: a foreign one was refused above
        raise
    return path


class BuildTerminated(BaseException):
    """SIGTERM arrived during a build (a BaseException, like KeyboardInterrupt: nothing should swallow it)."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


_ACTIVE: list[BuildGuard] = []  # guards that got SIGTERM
_INSTALLED: list[BuildGuard] = []  # guards whose SIGTERM handler is installed


def _block_sigterm_for_fork() -> None:
    """os.fork's before hook, while a build's handler is installed: a SIGTERM sent to the child before Python's own
    after-fork work was lost there (the C handler only sets a flag, which the child clears), and the worker lived on;
    blocked, it stays pending in the kernel until the child has the default action back."""
    if _INSTALLED:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _unblock_sigterm_in_parent() -> None:
    if _INSTALLED:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _default_sigterm_in_child() -> None:
    if _INSTALLED:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the build's handler is the parent's: a pending one kills
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_block_sigterm_for_fork,
        after_in_parent=_unblock_sigterm_in_parent,
        after_in_child=_default_sigterm_in_child,
    )


def raise_if_terminated() -> None:
    """Raise BuildTerminated if SIGTERM arrived: the handler's own exception can be lost (raised inside an
    at-fork callback, e.g. while datasets starts a worker, Python only prints it), so the build also checks
    between its phases and before the output is put in place."""
    if _ACTIVE:
        raise BuildTerminated(f"SIGTERM: building {_ACTIVE[-1].out} stopped")


class _DieWithParent:
    """Registered with ``multiprocess.util.register_after_fork``: runs in each forked child."""

    def __init__(self):
        self.pid = os.getpid()
        try:  # resolved here: dlopen in a child forked from a threaded parent can deadlock
            import ctypes

            self.prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # not Linux
            self.prctl = None

    def arm(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the build's handler is the parent's, not the workers'
        if self.prctl is None or self.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            return
        if os.getppid() != self.pid:  # the parent died before the request took effect
            os._exit(1)
        self.pid = os.getpid()  # for this child's own children


class BuildGuard:
    def __init__(self, out: Path):
        self.out = Path(out)
        self.lock_path = self.out.parent / f"{self.out.name}.lock"
        self._lock = OutputLock(
            self.lock_path,
            f"{self.out} is being built by another process",
            "wait for it to finish, or choose another --out",
        )
        self._previous = None
        self._armer = None
        self._pid = os.getpid()
        self.terminated = False

    # ---- lock ------------------------------------------------------------------------------
    def acquire(self) -> "BuildGuard":
        try:
            self._lock.acquire()
        except OutputBusyError as e:
            raise DataError(str(e)) from None
        self._install()
        return self

    def release(self) -> None:
        self._uninstall()
        self._lock.release()
        if self.terminated:  # the default action was in place: end as the signal meant, now that all is cleaned up
            os.kill(os.getpid(), signal.SIGTERM)

    def check_work_dirs(self) -> None:
        """This process's work folder names must be free, or ours (a dead build's of the same pid)."""
        for kind in ("tmp", "old"):
            _refuse_foreign_work_dir(work_dir(self.out, kind), self.out)

    def remove_leftovers(self) -> None:
        """Remove work folders of builds of this output whose process is gone (only those with this tool's marker)."""
        for path in self.out.parent.iterdir():
            pid = _work_pid(path, self.out)
            if pid is None or pid == os.getpid():
                continue
            if pid_alive(pid):
                logger.warning("leaving %s alone: its process %d is still alive", path, pid)
                continue
            logger.warning("removing %s, left by a build that did not finish (process %d is gone)", path, pid)
            shutil.rmtree(path, ignore_errors=True)

    # ---- signals and workers -------------------------------------------------------------
    def _on_sigterm(self, signum, frame):
        if os.getpid() != self._pid:
            # A child forked during the build runs this inherited handler until its after-fork hooks reset it, and
            # pool.terminate() may signal it in that window; raised there (filelock's at-fork hook runs first)
            # Python only prints the exception, the child lives on as a worker and the parent's join waits forever.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.terminated = True
        _ACTIVE.append(self)
        raise BuildTerminated(f"SIGTERM: building {self.out} stopped")

    def _install(self) -> None:
        # only over the default action (terminate): a caller's own SIGTERM handler (or SIG_IGN) keeps its meaning
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self._pid = os.getpid()
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            _INSTALLED.append(self)
        try:
            import multiprocess.util

            self._armer = _DieWithParent()
            multiprocess.util.register_after_fork(self._armer, _DieWithParent.arm)
        except ImportError:
            pass

    def _uninstall(self) -> None:
        if self in _INSTALLED:
            _INSTALLED.remove(self)
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._armer = None  # the after-fork registry holds it weakly: gone with the build


__all__ = ["BuildGuard", "BuildTerminated", "pid_alive", "raise_if_terminated"]
