"""A command run the way a user runs it, without paying for a fresh interpreter: ``fork()`` this test process
(torch, transformers and the package are imported already) and call the CLI's ``main`` in the child.

Imported as ``forked`` (tests/ is on sys.path). The child is a process of its own, as a subprocess would be:
its exit code (or the signal that killed it), its working folder and environment, and all it writes on file
descriptors 1 and 2 (``print``, logging, warnings, C libraries) come back in a ``subprocess.CompletedProcess``;
nothing it changes (sys.argv, os.environ, signal handlers, a seed, a monkeypatched function) reaches the tests.
What a fresh interpreter adds on top, the entry points themselves (``python -m hfpretrain``, ``scripts/*.py``),
is tested in tests/test_cli.py and tests/test_readme.py. ``run_forked_ranks`` forks the ranks of one process
group as torchrun would start them (tests/training/test_parallel.py's runs by hand).
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable

ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
}


def _as_a_fresh_process(out, err) -> None:
    """In the child: ``out`` and ``err`` become fds 1 and 2 and sys.stdout/sys.stderr; the root logger has no handler
    again; the handlers of other loggers made before the fork (they hold the test's captured streams) write to them; warnings are printed with Python's own filters,
    not pytest's recording; signals have their defaults."""
    import warnings

    olds = {
        id(s): new
        for new, pair in ((out, (sys.stdout, sys.__stdout__)), (err, (sys.stderr, sys.__stderr__)))
        for s in pair
    }
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", closefd=False), line_buffering=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(open(2, "wb", closefd=False), line_buffering=True)
    new = {out: sys.stdout, err: sys.stderr}
    root = logging.getLogger()  # as Python starts it: no handler (pytest's capture ones would hide what
    for handler in list(root.handlers):  # the CLI's logging.basicConfig prints), level WARNING
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    for lg in logging.Logger.manager.loggerDict.values():
        for handler in getattr(lg, "handlers", ()):
            if isinstance(getattr(type(handler), "stream", None), property):
                continue  # logging.lastResort: writes to sys.stderr as it is at the time
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in olds:
                handler.setStream(new[olds[id(stream)]])
                if "flush" in vars(handler):  # transformers binds the old stream's flush to its handler
                    handler.flush = handler.stream.flush

    def show(msg):
        sys.stderr.write(warnings._formatwarnmsg(msg))

    warnings._showwarnmsg_impl = show
    warnings.showwarning = warnings._showwarning_orig
    warnings.resetwarnings()  # then Python's default filters, the last one first
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    for signum, handler in (
        (signal.SIGTERM, signal.SIG_DFL),
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGALRM, signal.SIG_DFL),
    ):
        signal.signal(signum, handler)


def _start(fn: Callable[[], int | None], cwd, env: dict | None) -> tuple[int, object, object]:
    """Fork a child that runs ``fn()`` as :func:`run_forked` describes: (its pid, its stdout file, its stderr file)."""
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            _as_a_fresh_process(out, err)
            if "torch" in sys.modules:
                # libgomp is not fork-safe: once this process's OpenMP pool has run (a file run alone, without
                # xdist's one thread a worker), the child's first parallel matmul waits forever for the pool's
                # threads, which the fork did not copy. One thread never enters the pool. Set even when it is one
                # already: the first set_num_threads after a fork replaces torch's (caffe2) thread pool, which the
                # fork left corrupt, without a lock; left to the child's first threads (every new thread calls it
                # once a count was set, transformers loads weights on 4), one of them read the pool while another
                # replaced it: "Invalid thread pool!", by chance. Here, on the one thread there is yet, it cannot.
                sys.modules["torch"].set_num_threads(1)
            os.environ.update(ENV)
            for key, value in (env or {}).items():  # None: not in the child's environment
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = str(value)
            if cwd is not None:
                os.chdir(cwd)
            try:
                code = fn()
            except SystemExit as e:
                code = e.code
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    return pid, out, err


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _result(returncode: int, out, err) -> subprocess.CompletedProcess:
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read().decode(errors="replace"))
        f.close()
    return subprocess.CompletedProcess(["forked"], returncode, texts[0], texts[1])


def run_forked(
    fn: Callable[[], int | None], *, cwd=None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``fn()`` in a forked child, in ``cwd`` with ``env`` added to the environment (a name given None is removed
    from it); its return value (or SystemExit code) is the exit code, an exception escaping it a traceback on stderr
    and exit 1."""
    pid, out, err = _start(fn, cwd, env)
    (code,) = _wait([pid], timeout, ["forked", getattr(fn, "__name__", "fn")])
    return _result(code, out, err)


def _wait(pids: list[int], timeout: float, cmd: list[str]) -> list[int]:
    """Every child's exit code, by position; the first that fails, or the timeout, ends the others (SIGKILL: one
    waiting in a collective would wait for its own timeout). Past the timeout with none failed: TimeoutExpired."""
    codes: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while len(codes) < len(pids):
        for i, pid in enumerate(pids):
            if i not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[i] = _returncode(status)
        failed = any(code != 0 for code in codes.values())
        if failed or time.monotonic() > deadline:
            for i, pid in enumerate(pids):
                if i not in codes:
                    os.kill(pid, signal.SIGKILL)
                    codes[i] = _returncode(os.waitpid(pid, 0)[1])
            if not failed:
                raise subprocess.TimeoutExpired(cmd, timeout)
        time.sleep(0.02)
    return [codes[i] for i in range(len(pids))]


def run_forked_ranks(
    fn: Callable[[], int | None], world: int, *, port: int, cwd=None, env: dict | None = None, timeout: float = 300
) -> list[subprocess.CompletedProcess]:
    """``fn()`` in ``world`` forked children, the ranks of one process group as ``torchrun --nproc_per_node WORLD``
    starts them: each with the environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE,
    LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT = ``port``, a free one) beside ``env``. As torchrun does, the first
    rank that fails ends the others (:func:`_wait`). Each rank's result, by rank. What the fork saves is each rank's fresh interpreter and imports (~13 s of CPU for torch, transformers
    and the package); the launchers themselves are what the tests that start ``accelerate launch`` run."""
    ranks = []
    for rank in range(world):
        torchrun = {
            "RANK": rank,
            "LOCAL_RANK": rank,
            "GROUP_RANK": 0,
            "WORLD_SIZE": world,
            "LOCAL_WORLD_SIZE": world,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        ranks.append(_start(fn, cwd, {**torchrun, **(env or {})}))
    codes = _wait([pid for pid, _, _ in ranks], timeout, ["forked", getattr(fn, "__name__", "fn"), f"{world} ranks"])
    return [_result(code, out, err) for code, (_, out, err) in zip(codes, ranks)]


def cli(*args, cwd=None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``hfpretrain ARGS`` (``python -m hfpretrain ARGS``) in a forked child."""

    def main():
        from hfpretrain.cli import main

        return main([str(a) for a in args])

    return run_forked(main, cwd=cwd, env=env, timeout=timeout)


def script(name: str, *args, cwd=None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python scripts/NAME ARGS`` (an alias of a command's module: its ``main()`` reads sys.argv) in a forked
    child."""

    def main():
        import importlib

        from hfpretrain.cli import COMMANDS

        modules = {module for module, _ in COMMANDS.values()}
        module = name.removesuffix(".py")
        assert module in modules, f"scripts/{name} is no alias of a command's module"
        sys.argv = [f"scripts/{name}", *map(str, args)]
        return importlib.import_module(f"hfpretrain.cli.{module}").main()

    return run_forked(main, cwd=cwd, env=env, timeout=timeout)
