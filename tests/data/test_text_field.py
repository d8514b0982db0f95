"""--text-field: documents kept under another key than "text" (like run_clm.py's --text_column_name)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest
from forked import script

from hfpretrain.data import DataError, tokenize_corpus

from helpers import write_jsonl

REPO = Path(__file__).resolve().parents[2]
TEXTS = [f"document number {i}: " + "some words of text " * (5 + i % 7) for i in range(40)]


def _stream(out: Path, split: str) -> np.ndarray:
    return np.asarray(datasets.load_from_disk(str(out / split)).with_format("numpy")["input_ids"]).reshape(-1)


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_another_field_gives_the_same_blocks_as_text(tmp_path, gpt2_tokenizer):
    as_text = write_jsonl(tmp_path / "text.jsonl", [{"text": t, "meta": {"pile_set_name": "S"}} for t in TEXTS])
    as_content = write_jsonl(
        tmp_path / "content.jsonl", [{"content": t, "meta": {"pile_set_name": "S"}} for t in TEXTS]
    )
    kw = dict(tokenizer=gpt2_tokenizer, seq_len=32, val_docs=5)
    ref = tokenize_corpus([as_text], tmp_path / "ref", **kw)
    out = tokenize_corpus([as_content], tmp_path / "out", text_field="content", **kw)
    for split in ("train", "validation"):
        assert np.array_equal(_stream(ref, split), _stream(out, split))
    m = _manifest(out)
    assert m["text_field"] == "content" and m["train"]["skipped"] == {} and m["train"]["tokens_per_set"].keys() == {"S"}
    assert "text_field" not in _manifest(ref)
    # the default still reads "text": the first records have none, and the error names the fields and the flag
    with pytest.raises(
        DataError,
        match=r"no field 'text' in its first 5 records \(fields: content, meta\): .*"
        r"pass --text-field content",
    ):
        tokenize_corpus([as_content], tmp_path / "bad", tokenizer=gpt2_tokenizer, seq_len=32, val_inputs=[as_text])


def test_text_field_is_part_of_the_fingerprint_and_reads_parquet(tmp_path, gpt2_tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"body": t, "text": "not this one " * 5, "pile_set_name": "P"} for t in TEXTS]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    out = tmp_path / "out"
    kw = dict(tokenizer=gpt2_tokenizer, seq_len=16, val_docs=4)
    tokenize_corpus([tmp_path / "p.parquet"], out, **kw)
    default = _manifest(out)
    tokenize_corpus([tmp_path / "p.parquet"], out, text_field="body", **kw)  # not reused: another fingerprint
    body = _manifest(out)
    assert body["fingerprint"] != default["fingerprint"] and body["train"]["tokens"] > default["train"]["tokens"]
    assert body["train"]["documents"] + body["validation"]["documents"] == len(TEXTS)
    with pytest.raises(DataError, match="text_field must be a field name"):
        tokenize_corpus([tmp_path / "p.parquet"], tmp_path / "o2", text_field=" ", **kw)


def test_cli_text_field(tmp_path, gpt2_tokenizer):
    src = write_jsonl(tmp_path / "c.jsonl", [{"content": t} for t in TEXTS])
    r = script(
        "tokenize_pile.py",
        "--input",
        src,
        "--tokenizer",
        gpt2_tokenizer,
        "--seq-len",
        "32",
        "--val-docs",
        "5",
        "--out",
        tmp_path / "o",
        "--text-field",
        "content",
        "-q",
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = _manifest(tmp_path / "o")
    assert m["text_field"] == "content" and m["train"]["documents"] == len(TEXTS) - 5
    assert m["train"]["tokens_per_set"].keys() == {"unknown"}  # no meta.pile_set_name: one "unknown" set
