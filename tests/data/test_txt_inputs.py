"""Plain .txt inputs: one document per file, or one per blank-line paragraph (--txt-split), with the same
blocks as the same documents given as jsonl; a bad file is named with its line."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest

from hfpretrain.data import DataError, tokenize_corpus

from helpers import write_jsonl

PARAGRAPHS = [f"paragraph {i}: " + "some words of plain text " * (4 + i % 5) for i in range(30)]


def _stream(out: Path, split: str) -> np.ndarray:
    return np.asarray(datasets.load_from_disk(str(out / split)).with_format("numpy")["input_ids"]).reshape(-1)


def _books(tmp_path: Path) -> Path:
    folder = tmp_path / "books"
    folder.mkdir()
    for b in range(3):  # 10 paragraphs per file, separated by blank lines (one with spaces in it)
        (folder / f"book{b}.txt").write_text(
            "\n\n".join(PARAGRAPHS[10 * b : 10 * b + 5])
            + "\n  \n"
            + "\n\n".join(PARAGRAPHS[10 * b + 5 : 10 * b + 10])
            + "\n"
        )
    return folder


def test_paragraphs_and_files_match_the_same_documents_as_jsonl(tmp_path, gpt2_tokenizer):
    books = _books(tmp_path)
    kw = dict(tokenizer=gpt2_tokenizer, seq_len=32, val_docs=4)
    paragraphs = tokenize_corpus([books], tmp_path / "para", txt_split="paragraph", **kw)
    ref = tokenize_corpus(
        [write_jsonl(tmp_path / "p.jsonl", [{"text": t, "meta": {"pile_set_name": "books"}} for t in PARAGRAPHS])],
        tmp_path / "ref",
        **kw,
    )
    for split in ("train", "validation"):
        assert np.array_equal(_stream(paragraphs, split), _stream(ref, split))
    m = json.loads((paragraphs / "manifest.json").read_text())
    assert m["train"]["documents"] + m["validation"]["documents"] == 30
    assert set(m["train"]["tokens_per_set"]) == {"books"}  # the folder's name

    whole = tokenize_corpus([books], tmp_path / "files", tokenizer=gpt2_tokenizer, seq_len=32, val_docs=1)
    m = json.loads((whole / "manifest.json").read_text())
    assert m["train"]["documents"] + m["validation"]["documents"] == 3
    assert m["fingerprint"] != json.loads((paragraphs / "manifest.json").read_text())["fingerprint"]


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path, gpt2_tokenizer):
    books = _books(tmp_path)
    (books / "bad.txt").write_bytes(b"fine first line\nsecond \xff line\n")
    with pytest.raises(DataError, match=r"bad\.txt:2: non_utf8"):
        tokenize_corpus(
            [books], tmp_path / "out", tokenizer=gpt2_tokenizer, seq_len=32, val_docs=1, max_bad_fraction=0.0
        )
    with pytest.raises(DataError, match="txt_split must be 'file' or 'paragraph'"):
        tokenize_corpus([books], tmp_path / "out2", tokenizer=gpt2_tokenizer, seq_len=32, txt_split="lines")
