"""Whole-file losses are errors, not one bad record each (issue #20, data loss 5).

A missing file or a glob matching nothing next to a good file, a missing shard in a blend, a .zst cut in
half, an unreadable parquet file, an empty file and a file whose records are all bad each used to pass the
bad-record ceiling with a warning (exit 0). Now each stops the build with one line naming the file, unless
--allow-missing is given for the losses whose size is unknown; bytes lost count against max_bad_fraction;
the manifest's input_files records what was read and lost.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import zstandard

from hfpretrain.data import DataError, tokenize_corpus

from helpers import doc, write_jsonl


def _good(tmp_path: Path, n: int = 200, name: str = "good.jsonl") -> Path:
    return write_jsonl(tmp_path / name, [doc(f"a good document number {i} with words. " * 8) for i in range(n)])


def _varied_bytes(n: int = 2000) -> bytes:
    return b"".join(
        json.dumps(doc(" ".join(hashlib.sha256(f"{i}-{j}".encode()).hexdigest() for j in range(3)))).encode() + b"\n"
        for i in range(n)
    )


def _cut_zst(path: Path, streamed: bool = False) -> Path:
    """A .zst cut in half: with the frame's content size in its header (zstd's one-shot API, the zstd CLI on
    a file), or without it (a streaming compressor)."""
    data = _varied_bytes()
    if streamed:
        c = zstandard.ZstdCompressor().compressobj()
        full = c.compress(data) + c.flush()
    else:
        full = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(full[: len(full) // 2])
    return path


def _run(inputs, out, tok, **kw):
    kw.setdefault("val_docs", 5)
    return tokenize_corpus([str(i) for i in inputs], out, tok, seq_len=32, **kw)


def _nothing_left(tmp_path: Path, out: Path) -> None:
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("case", ["missing_file", "empty_glob"])
def test_missing_input_next_to_good_file_is_an_error(tmp_path, gpt2_tokenizer, case):
    good = _good(tmp_path)
    lost = tmp_path / "nope.jsonl" if case == "missing_file" else tmp_path / "shard-*.jsonl.zst"
    out = tmp_path / "out"
    with pytest.raises(DataError, match=rf"{lost.name.replace('*', '[*]')}:0: missing_file .*--allow-missing"):
        _run([good, lost], out, gpt2_tokenizer)
    _nothing_left(tmp_path, out)
    # explicitly allowed: built, and the loss is on record
    m = json.loads((_run([good, lost], out, gpt2_tokenizer, allow_missing=True) / "manifest.json").read_text())
    assert m["input_files"]["inputs"]["lost_files"] == [
        {"path": str(lost), "reason": "missing_file", "bytes_lost": None}
    ]
    assert m["train"]["skipped"] == {"missing_file": 1}


def test_missing_validation_input_is_an_error(tmp_path, gpt2_tokenizer):
    good = _good(tmp_path)
    held_out = tmp_path / "held_out.jsonl"  # a file of its own: a train input as validation is refused first
    held_out.write_bytes(good.read_bytes())
    with pytest.raises(DataError, match=r"val\.jsonl:0: missing_file"):
        tokenize_corpus(
            [str(good)],
            tmp_path / "out",
            gpt2_tokenizer,
            seq_len=32,
            val_inputs=[str(held_out), str(tmp_path / "val.jsonl")],
        )


@pytest.mark.parametrize("weight", [1, 0.5])
def test_missing_shard_in_a_blend_is_an_error(tmp_path, gpt2_tokenizer, weight):
    _good(tmp_path)
    blend = tmp_path / "blend.json"
    blend.write_text(
        json.dumps({"sources": [{"paths": ["good.jsonl"]}, {"paths": ["shard-00001.jsonl.zst"], "weight": weight}]})
    )
    with pytest.raises(DataError, match=r"shard-00001\.jsonl\.zst:0: missing_file"):  # weight 0.5 was dropped silently
        tokenize_corpus(None, tmp_path / "out", gpt2_tokenizer, seq_len=32, val_docs=5, blend=blend)
    _nothing_left(tmp_path, tmp_path / "out")


def test_zst_cut_in_half_fails_on_the_bytes_lost(tmp_path, gpt2_tokenizer):
    good = _good(tmp_path)
    cut = _cut_zst(tmp_path / "cut.jsonl.zst")
    out = tmp_path / "out"
    # before: one bad record out of ~750 (0.1% < 1%), exit 0
    with pytest.raises(
        DataError,
        match=r"inputs: [\d,]+ of [\d,]+ bytes lost \((\d\d)\.\d% > max_bad_fraction 1\.0%\); "
        rf".*{cut.name}: truncated_zst, [\d,]+ bytes lost",
    ):
        _run([good, cut], out, gpt2_tokenizer)
    _nothing_left(tmp_path, out)
    m = json.loads((_run([good, cut], out, gpt2_tokenizer, max_bad_fraction=0.9) / "manifest.json").read_text())
    files = m["input_files"]["inputs"]
    (lost,) = files["lost_files"]
    full = len(_varied_bytes())
    # the bytes of the documents lost: the size the frame header declares minus the complete lines before the cut
    readable = zstandard.ZstdDecompressor().decompressobj().decompress(cut.read_bytes())
    assert lost["reason"] == "truncated_zst" and lost["bytes_lost"] == full - (readable.rfind(b"\n") + 1)
    assert 0.3 * full < lost["bytes_lost"] < 0.9 * full  # about half, and the block being decoded at the cut
    assert files["bytes_lost"] == lost["bytes_lost"]


def test_zst_cut_without_a_recorded_size_needs_allow_missing(tmp_path, gpt2_tokenizer):
    good = _good(tmp_path)
    cut = _cut_zst(tmp_path / "streamed.jsonl.zst", streamed=True)
    with pytest.raises(DataError, match=rf"{cut.name}: truncated_zst: .*no size recorded.*--allow-missing"):
        _run([good, cut], tmp_path / "out", gpt2_tokenizer)
    m = json.loads(
        (_run([good, cut], tmp_path / "out", gpt2_tokenizer, allow_missing=True) / "manifest.json").read_text()
    )
    assert m["input_files"]["inputs"]["lost_files"] == [
        {"path": str(cut), "reason": "truncated_zst", "bytes_lost": None}
    ]


def test_file_with_only_bad_records_next_to_larger_good_files(tmp_path, gpt2_tokenizer):
    good = _good(tmp_path, n=500)
    bad = write_jsonl(tmp_path / "bad.jsonl", [b"{not json", {"meta": {}}, doc("  ")])  # 3 of 503 records: 0.6% < 1%
    with pytest.raises(DataError, match=rf"{bad}: all 3 records are bad \(first: {bad}:1: malformed_json\)"):
        _run([good, bad], tmp_path / "out", gpt2_tokenizer)
    with pytest.raises(DataError, match="all 3 records are bad"):  # not a matter of the ceiling
        _run([good, bad], tmp_path / "out", gpt2_tokenizer, max_bad_fraction=1.0, allow_missing=True)
    _nothing_left(tmp_path, tmp_path / "out")


def test_empty_file_is_a_lost_file(tmp_path, gpt2_tokenizer):
    good = _good(tmp_path)
    empty = tmp_path / "empty.jsonl.zst"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=rf"{empty}: empty_file: holds no records"):
        _run([good, empty], tmp_path / "out", gpt2_tokenizer)
    m = json.loads(
        (_run([good, empty], tmp_path / "out", gpt2_tokenizer, allow_missing=True) / "manifest.json").read_text()
    )
    assert m["input_files"]["inputs"]["lost_files"][0]["reason"] == "empty_file"


def test_truncated_parquet_is_a_lost_file(tmp_path, gpt2_tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = _good(tmp_path)
    pq.write_table(pa.Table.from_pylist([doc(f"parquet row {i} " * 10) for i in range(50)]), tmp_path / "p.parquet")
    cut = tmp_path / "cut.parquet"
    cut.write_bytes((tmp_path / "p.parquet").read_bytes()[:300])
    with pytest.raises(DataError, match=rf"{cut}: unreadable_file: .*--allow-missing"):  # was a pyarrow traceback
        _run([good, cut], tmp_path / "out", gpt2_tokenizer)
    m = json.loads(
        (_run([good, cut], tmp_path / "out", gpt2_tokenizer, allow_missing=True) / "manifest.json").read_text()
    )
    assert m["train"]["skipped"] == {"unreadable_file": 1}


def test_accounting_with_two_reader_processes(tmp_path, gpt2_tokenizer):
    files = [_good(tmp_path, n=60, name=f"g{i}.jsonl") for i in range(4)]
    val = _good(tmp_path, n=10, name="val.jsonl")
    out = tokenize_corpus(
        [str(f) for f in files] + [str(tmp_path / "gone.jsonl")],
        tmp_path / "out",
        gpt2_tokenizer,
        seq_len=32,
        val_inputs=[str(val)],
        num_proc=2,
        allow_missing=True,
    )
    m = json.loads((out / "manifest.json").read_text())
    acc = m["input_files"]["inputs"]
    assert acc["files_read"] == 5 and acc["bytes_read"] == sum(f.stat().st_size for f in files)
    assert [x["path"] for x in acc["lost_files"]] == [str(tmp_path / "gone.jsonl")]
    assert m["input_files"]["val_inputs"]["files_read"] == 1 and m["train"]["documents"] == 240
    assert m["train"]["records_read"] == 241  # 240 documents and the missing file, not the per-file rows
