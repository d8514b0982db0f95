"""The tokenizer trainer: a byte-level BPE that AutoTokenizer and the data pipeline load as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from forked import script
from transformers import AutoTokenizer

from hfpretrain.data import DataError, tokenize_corpus
from hfpretrain.data.train_tokenizer import EOT, train_tokenizer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bpe512(mini_train, tmp_path_factory):
    return train_tokenizer([mini_train], vocab_size=512, out=tmp_path_factory.mktemp("tok") / "bpe512", max_docs=200)


def test_trained_tokenizer_loads_and_round_trips(bpe512):
    tok = AutoTokenizer.from_pretrained(bpe512)
    assert len(tok) == 512 and tok.eos_token == EOT and tok.convert_tokens_to_ids(EOT) == 0
    text = "def f(x):\n    return x ** 2  # naïve café, 日本語\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text  # byte-level: any text, no unknown token
    assert len(ids) < len(text.encode("utf-8"))  # merges were learned: fewer tokens than bytes
    info = json.loads((bpe512 / "training.json").read_text())
    assert info["documents"] == 200 and info["vocab_size"] == 512 and info["bytes"] > 0


def test_pipeline_tokenizes_with_it(bpe512, mini_train, mini_val, tmp_path):
    out = tokenize_corpus(
        inputs=[mini_train],
        val_inputs=[mini_val],
        out=tmp_path / "blocks",
        tokenizer=str(bpe512),
        seq_len=64,
        max_docs=50,
        val_docs=20,
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 512 and manifest["tokenizer"]["eos_token"] == EOT
    assert manifest["train"]["blocks"] > 0


def test_errors_are_one_line(tmp_path, mini_train):
    with pytest.raises(DataError, match=r"no-such.jsonl:0: missing_file .* pass --allow-missing"):  # tokenize's words
        train_tokenizer([tmp_path / "no-such.jsonl"], vocab_size=512, out=tmp_path / "t")
    with pytest.raises(DataError, match="vocab-size 100"):
        train_tokenizer([mini_train], vocab_size=100, out=tmp_path / "t")
    proc = script(
        "train_tokenizer.py", "--input", tmp_path / "none.jsonl", "--vocab-size", "512", "--out", tmp_path / "t"
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: ")
