"""The inputs people have beside the Pile's .jsonl.zst: JSON lines compressed with gzip, bzip2 or xz (C4 and most
web dumps are .json.gz), and ``datasets`` ``save_to_disk`` folders (what ``map``/``filter`` leave behind). Each
gives the blocks the same documents give as plain .jsonl; each broken case is one line naming the file."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import datasets
import numpy as np
import pytest

from hfpretrain.data import DataError, tokenize_corpus

from helpers import doc, lines_of, write_jsonl

DOCS = [doc(f"document {i}: " + "a few words of text " * (3 + i % 7), set_name=f"set{i % 3}") for i in range(60)]
KW = dict(seq_len=32, val_docs=5)


def _jsonl_bytes(records) -> bytes:
    return b"".join(line + b"\n" for line in lines_of(records))


def _stream(out: Path, split: str) -> np.ndarray:
    return np.asarray(datasets.load_from_disk(str(out / split)).with_format("numpy")["input_ids"]).reshape(-1)


def _same_blocks(a: Path, b: Path) -> None:
    for split in ("train", "validation"):
        assert np.array_equal(_stream(a, split), _stream(b, split)), split
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    assert ma["train"]["tokens_per_set"] == mb["train"]["tokens_per_set"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, gpt2_tokenizer) -> Path:
    base = tmp_path_factory.mktemp("reference")
    return tokenize_corpus([write_jsonl(base / "docs.jsonl", DOCS)], base / "out", tokenizer=gpt2_tokenizer, **KW)


@pytest.mark.parametrize(
    "suffix, module", [(".jsonl.gz", gzip), (".json.gz", gzip), (".jsonl.bz2", bz2), (".jsonl.xz", lzma)]
)
def test_compressed_json_lines_give_the_plain_files_blocks(tmp_path, gpt2_tokenizer, reference, suffix, module):
    path = tmp_path / f"docs{suffix}"
    path.write_bytes(module.compress(_jsonl_bytes(DOCS)))
    _same_blocks(tokenize_corpus([path], tmp_path / "out", tokenizer=gpt2_tokenizer, **KW), reference)
    # a folder of them is read too
    _same_blocks(tokenize_corpus([tmp_path], tmp_path / "from_folder", tokenizer=gpt2_tokenizer, **KW), reference)


def test_a_cut_gzip_file_is_a_lost_file(tmp_path, gpt2_tokenizer):
    good = write_jsonl(tmp_path / "good.jsonl", DOCS)
    whole = gzip.compress(_jsonl_bytes(DOCS * 20))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=rf"{cut}: truncated_file: is cut short or corrupt.*--allow-missing"):
        tokenize_corpus([good, cut], tmp_path / "out", tokenizer=gpt2_tokenizer, **KW)
    assert not (tmp_path / "out").exists()
    out = tokenize_corpus([good, cut], tmp_path / "out", tokenizer=gpt2_tokenizer, allow_missing=True, **KW)
    lost = json.loads((out / "manifest.json").read_text())["input_files"]["inputs"]["lost_files"]
    assert lost == [{"path": str(cut), "reason": "truncated_file", "bytes_lost": None}]


def test_save_to_disk_folders_are_inputs(tmp_path, gpt2_tokenizer, reference):
    rows = {"text": [d["text"] for d in DOCS], "meta": [d["meta"] for d in DOCS]}
    one = tmp_path / "saved"
    datasets.Dataset.from_dict(rows).save_to_disk(str(one))
    _same_blocks(tokenize_corpus([one], tmp_path / "out", tokenizer=gpt2_tokenizer, **KW), reference)

    splits = tmp_path / "saved_dict"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows),
            "validation": datasets.Dataset.from_dict({k: v[:5] for k, v in rows.items()}),
        }
    ).save_to_disk(str(splits))
    out = tokenize_corpus(
        [splits],
        tmp_path / "out_dict",
        tokenizer=gpt2_tokenizer,
        seq_len=32,
        val_inputs=[f"{splits}?split=validation"],
        val_docs=5,
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["train"]["documents"] == 60 and m["validation"]["documents"] == 5


def test_broken_save_to_disk_folders_are_named_in_one_line(tmp_path, gpt2_tokenizer):
    splits = tmp_path / "saved_dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a document"]})}).save_to_disk(str(splits))
    with pytest.raises(DataError, match=rf"{splits}: no split 'test' \(splits: train\): name one with"):
        tokenize_corpus([f"{splits}?split=test"], tmp_path / "out", tokenizer=gpt2_tokenizer, **KW)
    other = tmp_path / "no_text"
    datasets.Dataset.from_dict({"body": ["a document"] * 3}).save_to_disk(str(other))
    with pytest.raises(DataError, match=rf"{other}: no field 'text' .*pass --text-field body"):
        tokenize_corpus([other], tmp_path / "out", tokenizer=gpt2_tokenizer, **KW)
    broken = tmp_path / "broken"
    datasets.Dataset.from_dict({"text": ["a document"]}).save_to_disk(str(broken))
    (broken / "state.json").write_text("{not json")  # what another datasets version or a cut copy leaves
    with pytest.raises(DataError, match=rf"{broken}: cannot load it as a datasets save_to_disk folder"):
        tokenize_corpus([broken], tmp_path / "out", tokenizer=gpt2_tokenizer, **KW)
    assert not (tmp_path / "out").exists()


def test_run_clm_dataset_flags(tmp_path, gpt2_tokenizer, capsys):
    from hfpretrain.cli.tokenize_pile import main

    rows = {"text": [d["text"] for d in DOCS]}
    splits = tmp_path / "saved_dict"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows),
            "validation": datasets.Dataset.from_dict({"text": rows["text"][:7]}),
        }
    ).save_to_disk(str(splits))
    common = ["--tokenizer", str(gpt2_tokenizer), "--seq-len", "32", "-q"]
    assert (
        main(
            [
                "--dataset-name",
                str(splits),
                "--val-split",
                "validation",
                "--val-docs",
                "7",
                "--out",
                str(tmp_path / "out"),
                *common,
            ]
        )
        == 0
    )
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["train"]["documents"] == 60 and m["validation"]["documents"] == 7
    # offline, a Hub id is one line naming it, as with --input ID?name=...
    assert main(["--dataset-name", "allenai/c4", "--dataset-config", "en", "--out", str(tmp_path / "c4"), *common]) == 2
    assert "allenai/c4?name=en&split=train: cannot load it as a Hub dataset" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # --split without --dataset-name: argparse's one line, exit 2
        main(["--input", str(splits), "--split", "validation", "--out", str(tmp_path / "x"), *common])
    assert stop.value.code == 2 and "--split and --val-split go with --dataset-name" in capsys.readouterr().err
    assert not (tmp_path / "c4").exists() and not (tmp_path / "x").exists()
