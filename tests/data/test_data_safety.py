"""tokenize_corpus never deletes what it did not write (issue 20, data loss 1).

Only an output of this tool (``manifest.json`` with ``format`` = ``hfpretrain.tokenized``) is ever
replaced, with or without ``--force``; a user's folder that happens to hold some ``manifest.json``
is not one. ``--force`` never touches the working directory, the home folder or a filesystem root.
Small inputs (seq_len 16): each build takes about a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from forked import script

from hfpretrain.data import DataError, tokenize_corpus
from hfpretrain.data.manifest import FORMAT
from hfpretrain.data.pipeline import protected_reason

from helpers import doc, write_jsonl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def src(tmp_path) -> Path:
    return write_jsonl(tmp_path / "a.jsonl", [doc(f"document {i} " * 20) for i in range(12)])


def _kw(gpt2_tokenizer):
    return dict(tokenizer=gpt2_tokenizer, seq_len=16, val_docs=2)


def _users_folder(path: Path, manifest: str | None = '{"title": "my notes"}') -> Path:
    path.mkdir()
    (path / "notes.txt").write_text("keep me")
    if manifest is not None:
        (path / "manifest.json").write_text(manifest)
    return path


@pytest.mark.parametrize("force", [False, True])
def test_folder_with_a_foreign_manifest_is_never_replaced(tmp_path, src, gpt2_tokenizer, force):
    out = _users_folder(tmp_path / "mine")
    with pytest.raises(DataError, match="not a tokenize_corpus output") as err:
        tokenize_corpus([src], out, force=force, **_kw(gpt2_tokenizer))
    assert "\n" not in str(err.value) and str(out) in str(err.value)
    assert (out / "notes.txt").read_text() == "keep me"
    assert json.loads((out / "manifest.json").read_text()) == {"title": "my notes"}
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_force_on_a_folder_that_is_not_an_output_refuses(tmp_path, src, gpt2_tokenizer):
    out = _users_folder(tmp_path / "mine", manifest=None)
    with pytest.raises(DataError, match="--force only rebuilds outputs of this tool"):
        tokenize_corpus([src], out, force=True, **_kw(gpt2_tokenizer))
    assert (out / "notes.txt").read_text() == "keep me"
    # a manifest that is JSON but not a dict, or names another format, is not ours either
    for text in ("[1, 2]", json.dumps({"format": "something.else", "fingerprint": "x"})):
        (out / "manifest.json").write_text(text)
        with pytest.raises(DataError, match="not a tokenize_corpus output"):
            tokenize_corpus([src], out, force=True, **_kw(gpt2_tokenizer))
        assert (out / "notes.txt").read_text() == "keep me"


def test_force_rebuilds_a_real_previous_output(tmp_path, src, gpt2_tokenizer, caplog):
    out = tmp_path / "out"
    tokenize_corpus([src], out, **_kw(gpt2_tokenizer))
    first = json.loads((out / "manifest.json").read_text())
    assert first["format"] == FORMAT
    (out / "train" / "marker-of-old-build").write_text("old")
    tokenize_corpus([src], out, force=True, **_kw(gpt2_tokenizer))
    second = json.loads((out / "manifest.json").read_text())
    assert not (out / "train" / "marker-of-old-build").exists()  # really rebuilt, not reused
    assert second["fingerprint"] == first["fingerprint"] and second["train"]["blocks"] == first["train"]["blocks"]
    # and a different setting (no --force) replaces it too: it is ours, and a warning names both fingerprints
    with caplog.at_level("WARNING"):
        tokenize_corpus([src], out, **{**_kw(gpt2_tokenizer), "seq_len": 8})
    third = json.loads((out / "manifest.json").read_text())
    assert third["seq_len"] == 8
    assert (
        f"replacing {out}: it was tokenized from other inputs or settings (fingerprint {second['fingerprint']}, "
        f"now {third['fingerprint']})" in caplog.text
    )
    caplog.clear()
    with caplog.at_level("WARNING"):  # --force asks for the replacement: no warning
        tokenize_corpus([src], out, force=True, **{**_kw(gpt2_tokenizer), "seq_len": 4})
    assert json.loads((out / "manifest.json").read_text())["seq_len"] == 4 and "replacing" not in caplog.text


def test_an_empty_existing_folder_is_written_into(tmp_path, src, gpt2_tokenizer):
    out = tmp_path / "empty"
    out.mkdir()
    tokenize_corpus([src], out, **_kw(gpt2_tokenizer))
    assert json.loads((out / "manifest.json").read_text())["format"] == FORMAT


def test_force_refuses_the_working_directory(tmp_path, src, gpt2_tokenizer, monkeypatch):
    """Even a real output: `--out . --force` would rename the working directory away and delete it."""
    out = tmp_path / "out"
    tokenize_corpus([src], out, **_kw(gpt2_tokenizer))
    (out / "notes.txt").write_text("keep me")
    monkeypatch.chdir(out)
    with pytest.raises(DataError, match="is the working directory"):
        tokenize_corpus([src], ".", force=True, **_kw(gpt2_tokenizer))
    (out / "sub").mkdir()
    monkeypatch.chdir(out / "sub")
    with pytest.raises(DataError, match="holding the working directory"):  # `--out ..` from inside it
        tokenize_corpus([src], "..", force=True, **_kw(gpt2_tokenizer))
    assert (out / "notes.txt").read_text() == "keep me" and (out / "manifest.json").is_file()


def test_force_refuses_the_home_folder(tmp_path, src, gpt2_tokenizer, monkeypatch):
    home = _users_folder(tmp_path / "home", manifest=None)
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(DataError, match="is the home folder"):
        tokenize_corpus([src], "~", force=True, **_kw(gpt2_tokenizer))
    assert (home / "notes.txt").read_text() == "keep me"


def test_protected_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert protected_reason(Path("/")) == "a filesystem root"
    assert protected_reason(tmp_path) == "the working directory"
    assert protected_reason(tmp_path.parent) == "a folder holding the working directory"
    assert protected_reason(tmp_path / "h") == "the home folder"
    assert protected_reason(tmp_path / "new") is None


def test_cli_force_on_users_folder_is_one_error_line(tmp_path, src, gpt2_tokenizer):
    out = _users_folder(tmp_path / "mine")
    r = script(
        "tokenize_pile.py",
        "--input",
        src,
        "--tokenizer",
        gpt2_tokenizer,
        "--seq-len",
        "16",
        "--val-docs",
        "2",
        "--out",
        out,
        "--force",
        "-q",
        cwd=REPO,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and str(out) in lines[-1] and "not a tokenize_corpus output" in lines[-1]
    assert (out / "notes.txt").read_text() == "keep me"
