"""End-to-end tests of tokenize_corpus on real files, with the real GPT-2 tokenizer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import datasets
import numpy as np
import pytest
from transformers import AutoTokenizer

from hfpretrain.data import DataError, load_blocks, tokenize_corpus
from hfpretrain.data.tokenizer import ids_dtype, load_tokenizer, pick_eos

from helpers import doc, read_zst_texts, write_jsonl, write_zst

GPT2_EOS = 50256


def _stream(out: Path, split: str) -> np.ndarray:
    ds = datasets.load_from_disk(str(out / split)).with_format("numpy")
    return np.asarray(ds["input_ids"]).reshape(-1)


def _doc_ids(tokenizer_dir, texts):
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


# ---------------------------------------------------------------- the shared mini output
def test_layout_shapes_and_dtypes(mini_blocks):
    assert {p.name for p in mini_blocks.iterdir()} == {"train", "validation", "tokenizer", "manifest.json"}
    for split in ("train", "validation"):
        ds = datasets.load_from_disk(str(mini_blocks / split))
        assert ds.column_names == ["input_ids", "set_ids"]
        assert str(ds.data.schema.field("input_ids").type) == "fixed_size_list<item: uint16>[128]"
        arr = ds.with_format("numpy")[:8]["input_ids"]
        assert arr.shape == (8, 128)
        t = ds.with_format("torch")[:8]["input_ids"]
        assert tuple(t.shape) == (8, 128)
        assert int(arr.max()) < 50257
    assert AutoTokenizer.from_pretrained(str(mini_blocks / "tokenizer")).eos_token == "<|endoftext|>"


def test_manifest_keys_and_token_conservation(mini_blocks, mini_train, gpt2_tokenizer):
    m = _manifest(mini_blocks)
    for key in (
        "seq_len",
        "tokenizer",
        "fingerprint",
        "train",
        "validation",
        "inputs",
        "val_inputs",
        "wall_time_s",
        "tokens_per_s",
        "sets",
    ):
        assert key in m
    assert m["tokenizer"]["vocab_size"] == 50257 and m["tokenizer"]["eos_token_id"] == GPT2_EOS
    assert len(m["tokenizer"]["sha256"]) == 64 and m["inputs"][0]["size"] == mini_train.stat().st_size
    for split in ("train", "validation"):
        s = m[split]
        assert s["tokens"] == s["blocks"] * m["seq_len"] + s["dropped_tail_tokens"]
        assert 0 <= s["dropped_tail_tokens"] < m["seq_len"]
        assert sum(s["tokens_per_set"].values()) == s["tokens"]
        assert s["skipped"] == {}
        assert len(load_blocks(mini_blocks, split)) == s["blocks"]
        assert s["bytes_overhead"] < 0.05  # within 5% of the bare ids
    # independent count: tokenize the same 300 documents directly
    texts = [r["text"] for r in read_zst_texts(mini_train, 300)]
    ids = _doc_ids(gpt2_tokenizer, texts)
    assert m["train"]["documents"] == 300
    assert m["train"]["tokens"] == sum(len(x) + 1 for x in ids)


def test_eos_ends_every_document_and_stream_matches(mini_blocks, mini_val, gpt2_tokenizer):
    stream = _stream(mini_blocks, "validation")
    m = _manifest(mini_blocks)
    rows = read_zst_texts(mini_val, 100)
    expected = np.array([t for x in _doc_ids(gpt2_tokenizer, [r["text"] for r in rows]) for t in x + [GPT2_EOS]])
    assert len(expected) == m["validation"]["tokens"]
    assert np.array_equal(stream, expected[: len(stream)])
    # eos appears exactly once per document (the kept part)
    assert int((expected == GPT2_EOS).sum()) == 100
    # set_ids: one per segment, names match the documents' sets
    ds = datasets.load_from_disk(str(mini_blocks / "validation"))
    seq_len = m["seq_len"]
    blocks = stream.reshape(-1, seq_len)
    doc_of_token = np.repeat(
        np.arange(len(rows)), [len(x) + 1 for x in _doc_ids(gpt2_tokenizer, [r["text"] for r in rows])]
    )
    for i in range(0, len(blocks), 37):
        starts = [0] + [j + 1 for j in np.flatnonzero(blocks[i] == GPT2_EOS) if j + 1 < seq_len]
        names = [m["sets"][k] for k in ds[i]["set_ids"]]
        assert names == [rows[doc_of_token[i * seq_len + s]]["meta"]["pile_set_name"] for s in starts]


def test_default_validation_is_first_10000_documents(tmp_path, gpt2_tokenizer):
    val = write_jsonl(tmp_path / "val.jsonl", [doc(f"validation document number {i}.") for i in range(10_050)])
    train = write_jsonl(tmp_path / "train.jsonl", [doc(f"train document {i} " * 20) for i in range(200)])
    out = tokenize_corpus([train], tmp_path / "out", gpt2_tokenizer, seq_len=64, val_inputs=[val])
    m = _manifest(out)
    assert m["val_docs"] == 10_000
    assert m["validation"]["documents"] == 10_000 == m["validation"]["records_read"]
    stream = _stream(out, "validation")
    tok = AutoTokenizer.from_pretrained(str(gpt2_tokenizer))
    eos_at = np.flatnonzero(stream == GPT2_EOS)
    # the last complete document in the blocks is within the first 10,000 and in file order
    last_text = tok.decode(stream[eos_at[-2] + 1 : eos_at[-1]])
    n = int(last_text.split()[-1].rstrip("."))
    assert n == len(eos_at) - 1 < 10_000
    assert tok.decode(stream[: eos_at[0]]) == "validation document number 0."


def test_without_val_inputs_validation_is_held_out_from_inputs(tmp_path, gpt2_tokenizer):
    src = write_jsonl(tmp_path / "all.jsonl", [doc(f"doc {i} " + "word " * 40) for i in range(60)])
    out = tokenize_corpus([src], tmp_path / "out", gpt2_tokenizer, seq_len=32, val_docs=10, max_docs=30)
    m = _manifest(out)
    assert m["validation"]["documents"] == 10 and m["train"]["documents"] == 30
    tok = AutoTokenizer.from_pretrained(str(gpt2_tokenizer))
    assert tok.decode(_stream(out, "train")[:3]).startswith("doc 10 ")
    assert tok.decode(_stream(out, "validation")[:3]).startswith("doc 0 ")


def test_literal_eos_text_is_not_a_boundary(tmp_path, gpt2_tokenizer):
    src = write_jsonl(tmp_path / "a.jsonl", [doc("before <|endoftext|> after " * 30) for _ in range(4)])
    out = tokenize_corpus([src], tmp_path / "out", gpt2_tokenizer, seq_len=16, val_docs=1)
    m = _manifest(out)
    assert m["train"]["documents"] == 3
    kept = _stream(out, "train")
    assert int((kept == GPT2_EOS).sum()) <= 3


# ---------------------------------------------------------------- bad input
def _inputs_with_every_bad_case(tmp_path):
    good = [doc("a good document with several words in it. " * 5, "Good") for _ in range(20)]
    recs = good[:5] + [b"{not json", {"meta": {}}, b'{"text": "caf\xe9 bad bytes"}', doc("   \n ")] + good[5:]
    jsonl = write_jsonl(tmp_path / "bad.jsonl", recs)
    import hashlib

    varied = [
        doc(" ".join(hashlib.sha256(f"{i}-{j}".encode()).hexdigest() for j in range(3)), "Good") for i in range(2000)
    ]
    full = write_zst(tmp_path / "cut.jsonl.zst", varied)  # ~400 KB: several zstd blocks
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(full.read_bytes()[:-40])  # truncated zst: the frame never ends
    return jsonl, cut, tmp_path / "missing.jsonl.zst"


def test_each_bad_input_is_counted_and_reported(tmp_path, gpt2_tokenizer, caplog):
    jsonl, cut, missing = _inputs_with_every_bad_case(tmp_path)
    val = write_jsonl(tmp_path / "val.jsonl", [doc("validation text " * 30) for _ in range(5)])
    with caplog.at_level("WARNING"):
        out = tokenize_corpus(
            [jsonl, cut, missing],
            tmp_path / "out",
            gpt2_tokenizer,
            seq_len=32,
            val_inputs=[val],
            max_bad_fraction=0.5,
            allow_missing=True,
        )
    m = _manifest(out)
    files = m["input_files"]["inputs"]
    assert files["files_read"] == 3 and m["allow_missing"] is True
    lost = {x["reason"]: x for x in files["lost_files"]}
    assert lost["missing_file"] == {"path": str(missing), "reason": "missing_file", "bytes_lost": None}
    assert lost["truncated_zst"]["path"] == str(cut) and lost["truncated_zst"]["bytes_lost"] > 0
    assert files["bad_record_bytes"] > 0 and files["bytes_lost"] == lost["truncated_zst"]["bytes_lost"]
    assert m["train"]["skipped"] == {
        "malformed_json": 1,
        "missing_text": 1,
        "non_utf8": 1,
        "empty_document": 1,
        "truncated_zst": 1,
        "missing_file": 1,
    }
    where = {e["reason"]: e["where"] for e in m["train"]["bad_examples"]}
    assert where["malformed_json"] == f"{jsonl}:6" and where["missing_text"] == f"{jsonl}:7"
    assert where["non_utf8"] == f"{jsonl}:8" and where["empty_document"] == f"{jsonl}:9"
    assert where["truncated_zst"].startswith(f"{cut}:") and where["missing_file"] == f"{missing}:0"
    assert f"{jsonl}:6: malformed_json" in caplog.text
    assert 20 + 500 < m["train"]["documents"] < 20 + 2000  # jsonl's good docs + the readable part of the zst
    line = int(where["truncated_zst"].rsplit(":", 1)[1])
    assert m["train"]["documents"] == 20 + line - 1
    assert m["train"]["tokens"] == m["train"]["blocks"] * 32 + m["train"]["dropped_tail_tokens"]


@pytest.mark.parametrize("case", ["jsonl", "cut", "missing"])
def test_on_bad_fail_names_file_and_line(tmp_path, gpt2_tokenizer, case):
    files = dict(zip(["jsonl", "cut", "missing"], _inputs_with_every_bad_case(tmp_path)))
    val = write_jsonl(tmp_path / "val.jsonl", [doc("validation text " * 30) for _ in range(5)])
    out = tmp_path / "out"
    with pytest.raises(DataError, match=rf"{files[case].name}:\d+: \w+"):
        tokenize_corpus([files[case]], out, gpt2_tokenizer, seq_len=32, val_inputs=[val], on_bad="fail")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # nothing half-written left


def test_bad_fraction_ceiling(tmp_path, gpt2_tokenizer):
    jsonl, _, _ = _inputs_with_every_bad_case(tmp_path)  # 4 bad of 24 records
    with pytest.raises(DataError, match="max_bad_fraction"):
        tokenize_corpus([jsonl], tmp_path / "out", gpt2_tokenizer, seq_len=32, val_docs=2)


# ---------------------------------------------------------------- reuse, force, atomic replace
def test_fingerprint_reuse_and_force(tmp_path, gpt2_tokenizer):
    src = write_jsonl(tmp_path / "a.jsonl", [doc(f"document {i} " * 30) for i in range(30)])
    out = tmp_path / "out"
    kw = dict(tokenizer=gpt2_tokenizer, seq_len=32, val_docs=5)
    tokenize_corpus([src], out, **kw)
    m1 = _manifest(out)
    mtime = (out / "manifest.json").stat().st_mtime_ns
    tokenize_corpus([src], out, **kw)  # reused
    assert (out / "manifest.json").stat().st_mtime_ns == mtime
    tokenize_corpus([src], out, force=True, **kw)  # rebuilt
    m2 = _manifest(out)
    assert m2["created"] >= m1["created"] and (out / "manifest.json").stat().st_mtime_ns != mtime
    assert m2["fingerprint"] == m1["fingerprint"]
    tokenize_corpus([src], out, **{**kw, "seq_len": 16})  # different settings: rebuilt
    m3 = _manifest(out)
    assert m3["seq_len"] == 16 and m3["fingerprint"] != m1["fingerprint"]
    os.utime(src, ns=(1, 1))  # input changed (mtime): rebuilt
    tokenize_corpus([src], out, **{**kw, "seq_len": 16})
    assert _manifest(out)["fingerprint"] != m3["fingerprint"]
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_refuses_to_overwrite_foreign_folder(tmp_path, gpt2_tokenizer):
    src = write_jsonl(tmp_path / "a.jsonl", [doc("text " * 50) for _ in range(10)])
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    with pytest.raises(DataError, match="not a tokenize_corpus output"):
        tokenize_corpus([src], out, gpt2_tokenizer, seq_len=16, val_docs=2)
    assert (out / "precious.txt").read_text() == "keep"


# ---------------------------------------------------------------- formats, blends, tokenizers
def test_parquet_glob_and_blend(tmp_path, gpt2_tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [doc(f"parquet row {i} " * 10, "PQ") for i in range(20)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    write_zst(tmp_path / "z-1.jsonl.zst", [doc(f"zst row {i} " * 10, "Z") for i in range(20)])
    out = tokenize_corpus(
        [str(tmp_path / "*.parquet"), str(tmp_path / "z-*.jsonl.zst")],
        tmp_path / "o1",
        gpt2_tokenizer,
        seq_len=16,
        val_docs=4,
    )
    m = _manifest(out)
    assert m["train"]["documents"] + m["validation"]["documents"] == 40
    assert set(m["train"]["tokens_per_set"]) == {"PQ", "Z"}
    blend = tmp_path / "blend.json"
    blend.write_text(
        json.dumps({"sources": [{"paths": ["p.parquet"], "epochs": 2}, {"paths": ["z-*.jsonl.zst"], "weight": 0.5}]})
    )
    val = write_jsonl(tmp_path / "v.jsonl", [doc("val " * 40) for _ in range(3)])
    m = _manifest(tokenize_corpus(None, tmp_path / "o2", gpt2_tokenizer, seq_len=16, blend=blend, val_inputs=[val]))
    by_set = m["train"]["tokens_per_set"]
    assert by_set["PQ"] == 2 * sum(
        m2 for s, m2 in _manifest(out)["train"]["tokens_per_set"].items() if s == "PQ"
    ) + 2 * _manifest(out)["validation"]["tokens_per_set"].get("PQ", 0)
    assert 0 < m["train"]["documents"] - 40 < 20  # about half of the 20 zst rows
    assert m["inputs"][0]["epochs"] == 2.0 and m["inputs"][1]["epochs"] == 0.5


@pytest.mark.full_data("Qwen3 and Llama 3 tokenizers")
def test_eos_choice_for_qwen3_and_llama3(data_root):
    qwen = load_tokenizer(data_root / "tokenizers" / "qwen3")
    assert qwen.eos_token == "<|im_end|>"
    assert pick_eos(qwen) == ("<|endoftext|>", 151643)
    assert pick_eos(qwen, "<|im_end|>") == ("<|im_end|>", 151645)
    assert ids_dtype(len(qwen)) == np.uint32
    assert pick_eos(load_tokenizer(data_root / "tokenizers" / "llama3")) == ("<|end_of_text|>", 128001)
    with pytest.raises(DataError, match="not in the vocabulary"):
        pick_eos(qwen, "<nope>")


@pytest.mark.full_data("Qwen3 tokenizer")
def test_qwen3_blocks_are_uint32(tmp_path, data_root):
    src = write_jsonl(tmp_path / "a.jsonl", [doc("Hello world! " * 20) for _ in range(6)])
    out = tokenize_corpus([src], tmp_path / "out", data_root / "tokenizers" / "qwen3", seq_len=16, val_docs=2)
    ds = datasets.load_from_disk(str(out / "train"))
    assert str(ds.data.schema.field("input_ids").type) == "fixed_size_list<item: uint32>[16]"
    assert 151643 in np.asarray(ds.with_format("numpy")["input_ids"]).reshape(-1)
    assert _manifest(out)["tokenizer"]["eos_token_id"] == 151643


def test_missing_tokenizer_is_one_line_error(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [doc("x " * 50)])
    with pytest.raises(DataError, match="tokenizer .*does-not-exist"):
        tokenize_corpus([src], tmp_path / "out", tmp_path / "does-not-exist", seq_len=16)


def test_whole_packing_for_long_blocks(tmp_path, mini_train, mini_val, gpt2_tokenizer):
    """--pack whole on the mini corpus at 1,024 tokens: the same tokens and blocks as concat, less than half the
    tokens in cut documents, its own fingerprint; both manifests give the documents' length distribution."""
    kw = dict(
        inputs=[mini_train], val_inputs=[mini_val], tokenizer=gpt2_tokenizer, seq_len=1024, max_docs=300, val_docs=100
    )
    concat = _manifest(tokenize_corpus(out=tmp_path / "concat", **kw))
    whole = _manifest(tokenize_corpus(out=tmp_path / "whole", pack="whole", **kw))
    assert (concat["pack"], whole["pack"]) == ("concat", "whole") and concat["fingerprint"] != whole["fingerprint"]
    for split in ("train", "validation"):
        c, w = concat[split], whole[split]
        assert (c["tokens"], c["blocks"]) == (w["tokens"], w["blocks"])
        lengths = w["document_lengths"]
        cut = ("split", "split_short", "split_short_tokens")
        assert lengths == {**c["document_lengths"], **{k: lengths[k] for k in cut}}
        assert lengths["documents"] == c["documents"] and lengths["p50"] <= lengths["p90"] <= lengths["max"]
        assert sum(b["tokens"] for b in lengths["histogram"].values()) == c["tokens"]
        assert lengths["split_short_tokens"] < c["document_lengths"]["split_short_tokens"] / 2
    with pytest.raises(DataError, match="pack must be one of"):
        tokenize_corpus(out=tmp_path / "x", pack="tight", **kw)
