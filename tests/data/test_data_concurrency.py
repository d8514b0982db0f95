"""One build per output folder, and nothing left behind by a killed one (issue #20, data loss 8).

Two tokenize runs to the same --out used to both exit 0 (only the last one's data remained); a killed run
left OUT.tmp-<pid> forever. Now: an exclusive lock on OUT.lock for the whole build (a second run fails at
once naming the first one's pid), leftovers of dead runs are removed by the next run (only folders with this
tool's marker inside: issue 36.1), and the datasets worker processes (num_proc=2 here) end with the main process
on SIGTERM (and on SIGKILL, by the kernel).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hfpretrain.data import DataError, tokenize_corpus
from hfpretrain.data.guard import BUILD_MARKER, BuildGuard

from helpers import doc, write_jsonl

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory) -> list[Path]:
    """4 files of 4,000 documents (~15 MB): a build with num_proc=2 takes a few seconds, in worker processes."""
    root = tmp_path_factory.mktemp("big")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    return [
        write_jsonl(root / f"in{f}.jsonl", [doc(" ".join(rng.choices(words, k=150))) for _ in range(4000)])
        for f in range(4)
    ]


def _cli(inputs, out, tok, *extra):
    return [
        sys.executable,
        str(REPO / "scripts" / "tokenize_pile.py"),
        "--input",
        *map(str, inputs),
        "--tokenizer",
        str(tok),
        "--seq-len",
        "64",
        "--val-docs",
        "10",
        "--num-proc",
        "2",
        "--out",
        str(out),
        "-q",
        *extra,
    ]


def _small(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "small.jsonl", [doc(f"a small document {i} " * 10) for i in range(30)])


def _holder(lock: Path) -> subprocess.Popen:
    """Another process holding OUT.lock, as a running build does (and writing in it what a build writes)."""
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'hfpretrain lock, pid %d\\n' % os.getpid()); "
        "print('locked', flush=True); time.sleep(120)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def _workers(proc: subprocess.Popen, at_least: int = 2, timeout: float = 120) -> list[psutil.Process]:
    """Wait until the build runs worker processes; return them."""
    main = psutil.Process(proc.pid)
    t0 = time.time()
    while time.time() - t0 < timeout and proc.poll() is None:
        kids = main.children(recursive=True)
        if len(kids) >= at_least:
            return kids
        time.sleep(0.02)
    pytest.fail(f"no worker processes seen (exit code {proc.poll()})")


def _gone(procs: list[psutil.Process], timeout: float = 10) -> list[int]:
    """The pids among ``procs`` still running after ``timeout`` seconds."""
    t0 = time.time()
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p.pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() - t0 > timeout:
            return alive
        time.sleep(0.1)


def test_a_second_build_of_the_same_out_fails_naming_the_first(tmp_path, gpt2_tokenizer):
    src, out = _small(tmp_path), tmp_path / "out"
    holder = _holder(tmp_path / "out.lock")
    try:
        with pytest.raises(DataError, match=rf"{out} is being built by another process \(pid {holder.pid}, lock "):
            tokenize_corpus([str(src)], out, gpt2_tokenizer, seq_len=16, val_docs=4)
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    tokenize_corpus([str(src)], out, gpt2_tokenizer, seq_len=16, val_docs=4)  # the lock died with its holder
    assert (out / "manifest.json").is_file() and not (tmp_path / "out.lock").exists()


def test_a_second_build_while_a_cli_build_runs(tmp_path, gpt2_tokenizer, big_inputs):
    out = tmp_path / "out"
    first = subprocess.Popen(
        _cli(big_inputs, out, gpt2_tokenizer), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _workers(first, at_least=1)  # it holds the lock by now
    assert (tmp_path / "out.lock").read_text().strip() == f"hfpretrain lock, pid {first.pid}"
    with pytest.raises(DataError, match=rf"being built by another process \(pid {first.pid}, "):
        tokenize_corpus([str(_small(tmp_path))], out, gpt2_tokenizer, seq_len=16, val_docs=4)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["train"]["documents"] + m["validation"]["documents"] == 16000  # the first run's data, whole


def test_leftovers_of_dead_builds_are_removed(tmp_path, gpt2_tokenizer, caplog):
    src, out = _small(tmp_path), tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        for name, pid in (
            (f"out.tmp-{dead_pid}", dead_pid),
            (f"out.old-{dead_pid}", dead_pid),
            (f"out.tmp-{alive.pid}", alive.pid),
            (f"other.tmp-{dead_pid}", dead_pid),
        ):
            (tmp_path / name / "train").mkdir(parents=True)  # as a build of this tool makes them: with its marker
            target = out if name.startswith("out.") else tmp_path / "other"
            (tmp_path / name / BUILD_MARKER).write_text(
                json.dumps({"format": "hfpretrain.tokenize-work/1", "out": str(target), "pid": pid})
            )
        # a user's folders of the same names (no marker, or a marker naming another pid) are never leftovers
        (tmp_path / "out.old-2024" / "train").mkdir(parents=True)
        (tmp_path / "out.tmp-999999999").mkdir()
        (tmp_path / "out.tmp-999999999" / BUILD_MARKER).write_text(
            json.dumps({"format": "hfpretrain.tokenize-work/1", "out": str(out), "pid": dead_pid})
        )
        with caplog.at_level(logging.WARNING):
            tokenize_corpus([str(src)], out, gpt2_tokenizer, seq_len=16, val_docs=4)
        assert not (tmp_path / f"out.tmp-{dead_pid}").exists() and not (tmp_path / f"out.old-{dead_pid}").exists()
        assert f"removing {tmp_path / f'out.tmp-{dead_pid}'}, left by a build that did not finish" in caplog.text
        assert (tmp_path / f"out.tmp-{alive.pid}").is_dir()  # its process may still be writing it
        assert (tmp_path / f"other.tmp-{dead_pid}").is_dir()  # another output's
        assert (tmp_path / "out.old-2024" / "train").is_dir() and (tmp_path / "out.tmp-999999999").is_dir()
    finally:
        alive.kill()
        alive.wait()


def test_sigterm_ends_the_workers_and_removes_the_partial_output(tmp_path, gpt2_tokenizer, big_inputs):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        _cli(big_inputs, out, gpt2_tokenizer), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    workers = _workers(proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, stderr[-3000:]  # ended by the signal, as it asked
    assert _gone(workers, timeout=3) == []
    assert not out.exists() and not list(tmp_path.glob("out.tmp-*")) and not (tmp_path / "out.lock").exists()


def test_a_child_forked_during_the_build_still_dies_by_sigterm(tmp_path):
    """pool.terminate() can signal a worker before its after-fork hooks reset the build's handler; raised there,
    Python only printed the exception, the worker lived on and the build hung in join (CI, filelock 4's fork hook).
    Now SIGTERM is blocked across the fork and the child has the default action back before it is unblocked (one
    still pending kills it); the handler itself, run in a child, ends that child as SIGTERM means."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the guard takes over only the default action
    guard = BuildGuard(tmp_path / "out").acquire()
    try:
        assert signal.getsignal(signal.SIGTERM) == guard._on_sigterm
        for inherited_handler in (False, True):
            pid = os.fork()
            if pid == 0:
                try:
                    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
                        os._exit(4)  # the at-fork hook did not reset it
                    if signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []):
                        os._exit(5)  # nor unblock it
                    if inherited_handler:  # as a child forked where the hook does not run (the handler's own check)
                        signal.signal(signal.SIGTERM, guard._on_sigterm)
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(10)
                except BaseException:
                    os._exit(3)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, (inherited_handler, status)
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the parent's mask as it was
    finally:
        guard.release()
        signal.signal(signal.SIGTERM, previous)
    assert not guard.terminated  # the parent's build was not stopped


def test_sigkill_leaves_no_workers_and_the_next_run_cleans_up(tmp_path, gpt2_tokenizer, big_inputs, caplog):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        _cli(big_inputs, out, gpt2_tokenizer), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    workers = _workers(proc)
    proc.kill()
    proc.wait(timeout=60)
    assert _gone(workers, timeout=3) == []  # the kernel ended them with their parent
    assert [p.name for p in tmp_path.glob("out.tmp-*")] == [f"out.tmp-{proc.pid}"]  # nothing could clean up
    with caplog.at_level(logging.WARNING):
        tokenize_corpus([str(_small(tmp_path))], out, gpt2_tokenizer, seq_len=16, val_docs=4)
    assert not list(tmp_path.glob("out.tmp-*")) and f"process {proc.pid} is gone" in caplog.text
