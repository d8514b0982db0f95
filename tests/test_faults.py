"""Fault injection: foreign files and folders next to or inside outputs, corrupt and truncated inputs, misspelt keys
(issue 36: nothing lost, nothing silently wrong, no tracebacks; issue 39 items 6, 7, 10).

Every case runs a command as a user would and checks three things: one ``error:`` line on stderr (no traceback),
the exit code (2: bad input, nothing done; 1: a failure while running), and that every file that existed before the
command is still there, byte for byte. Inputs are tiny (seq_len 16, a few dozen documents): seconds per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------- helpers
def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``, by relative path."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = None if p.is_dir() and not p.is_symlink() else (os.readlink(p) if p.is_symlink() else p.read_bytes())
    return out


def assert_kept(before: dict, root: Path) -> None:
    """Everything in ``before`` is still under ``root``, unchanged (new files may have appeared)."""
    after = snapshot(root)
    lost = [k for k in before if k not in after]
    changed = [k for k in before if k in after and before[k] != after[k]]
    assert not lost and not changed, f"lost: {lost[:10]}, changed: {changed[:10]}"


def one_error(stderr: str) -> str:
    """The one ``error:`` line of ``stderr`` (which holds no traceback)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", "hfpretrain", *map(str, args)], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def docs(n: int, field: str = "text") -> bytes:
    return b"".join(json.dumps({field: f"document number {i} " * 12, "meta": {"pile_set_name": "S"}}).encode() + b"\n"
                    for i in range(n))


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_bytes(docs(40))
    return path


def _tokenize(src, out, tok, *extra):
    return cli("tokenize", "--input", src, "--tokenizer", tok, "--seq-len", "16", "--val-docs", "4", "--out", out,
               "-q", *extra)


def _dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


# ----------------------------------------------------------------------------------------------- 36.1: tokenize
def _users_things(root: Path, name: str, pid: int) -> None:
    """What a user may keep beside an output called ``name``: a backup folder, a scratch folder, notes in a file
    whose name is the output's lock."""
    for folder in (f"{name}.old-2024", f"{name}.old-{pid}", f"{name}.tmp-{pid}"):
        (root / folder / "train").mkdir(parents=True)
        (root / folder / "notes.txt").write_text(f"my {folder}")
    (root / f"{name}.lock").write_text("my lock notes\n")


def test_tokenize_refusing_a_users_folder_touches_nothing_beside_it(tmp_path, small, gpt2_tokenizer):
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    _users_things(tmp_path, "corpus", _dead_pid())
    before = snapshot(tmp_path)
    r = _tokenize(small, out, gpt2_tokenizer)
    assert r.returncode == 2 and "not a tokenize_corpus output" in one_error(r.stderr)
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()  # nothing new either


def test_tokenize_leaves_users_folders_named_like_leftovers(tmp_path, small, gpt2_tokenizer):
    """A build that succeeds removes only what a build of this tool made (a marker inside it): a user's
    ``corpus.old-2024`` backup, a folder named after a dead pid and a ``corpus.lock`` file of theirs stay."""
    _users_things(tmp_path, "corpus", _dead_pid())
    before = snapshot(tmp_path)
    r = _tokenize(small, tmp_path / "corpus", gpt2_tokenizer)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "corpus" / "manifest.json").is_file()
    assert_kept(before, tmp_path)


def test_tokenize_refuses_a_folder_or_link_where_its_lock_goes(tmp_path, small, gpt2_tokenizer):
    (tmp_path / "corpus.lock").mkdir()
    (tmp_path / "corpus.lock" / "x.txt").write_text("mine")
    (tmp_path / "other.lock").symlink_to(tmp_path / "small.jsonl")
    before = snapshot(tmp_path)
    for name in ("corpus", "other"):
        r = _tokenize(small, tmp_path / name, gpt2_tokenizer)
        assert r.returncode == 2 and f"{name}.lock" in one_error(r.stderr)
        assert not (tmp_path / name).exists()
    assert_kept(before, tmp_path)
