"""The tiktoken encoder gives the HF tokenizer's ids exactly, or the pipeline says why it uses HF."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest

from hfpretrain.data import DataError, tokenize_corpus
from hfpretrain.data import encoders
from hfpretrain.data.encoders import (
    HFEncoder,
    TiktokenEncoder,
    Unsupported,
    choose_encoder,
    first_difference,
    tiktoken_spec,
)
from hfpretrain.data.tokenizer import load_tokenizer

from helpers import read_zst_texts

pytest.importorskip("tiktoken")

TRICKY = [
    "a literal <|endoftext|> and <|end_of_text|> and <|im_end|> in text<|endoftext|>",
    '<think>reasoning</think> <tool_call>{"a": 1}</tool_call><|fim_prefix|>x<|fim_suffix|>',
    "non-NFC: e\u0301te\u0301 A\u030a \u212b caf\u00e9 >\u0338 <think>\u0338",
    "emoji: 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️",
    "CJK: 我们今天去北京。日本語のテキスト。한국어 텍스트",
    "long whitespace:" + " " * 200 + "\t" * 50 + "\n" * 30 + "end" + " " * 17,
    "windows\r\nlines\r\n\r\n\rx",
    "digits 1234567890123 3.14159 1,000,000 ٣٤٥ ①②",
    "contractions: IT'S I'M WE'VE THEY'LL HE'D YOU'RE DON'T it's 'S 'Ll",
    "unicode spaces:\u00a0\u1680\u2000\u2003\u200b\u2028\u2029\u202f\u205f\u3000\ufeff|\x1c\x1d\x1e\x1f\x85|",
    "  leading and trailing  ",
    "",
    "\x00\x01\x7f control",
    "Straße ΑΒΓΔ ﬁﬂ ² ½ 𝐀𝐁 𐍈",
    "def f(x):\n\tif x:\n        return {'a': [1, 2]}  # comment\n",
    "a" * 5000,
    "xyz " * 2000,
]


@pytest.fixture(scope="module")
def corpus(mini_train):
    return [r["text"] for r in read_zst_texts(mini_train)] + TRICKY


def _json(data_root, name):
    return load_tokenizer(str(data_root / "tokenizers" / name)).backend_tokenizer.to_str()


@pytest.mark.parametrize(
    "name",
    [
        "gpt2",
        pytest.param("qwen3", marks=pytest.mark.full_data("Qwen3 tokenizer")),
        pytest.param("llama3", marks=pytest.mark.full_data("Llama 3 tokenizer")),
    ],
)
def test_tiktoken_ids_equal_hf_on_mini_corpus_and_tricky_text(data_root, corpus, name):
    tj = _json(data_root, name)
    assert choose_encoder(tj)[0] == "tiktoken"
    hf, tk = HFEncoder(tj).encode(corpus), TiktokenEncoder(tj).encode(corpus)
    assert first_difference(corpus, hf, tk) is None
    assert sum(map(len, tk)) > 100_000  # the corpus was really encoded


@pytest.mark.full_data("Qwen3 tokenizer")
def test_conversion_details(data_root):
    gpt2, qwen3 = tiktoken_spec(_json(data_root, "gpt2")), tiktoken_spec(_json(data_root, "qwen3"))
    assert gpt2["pat_str"] == encoders.GPT2_PATTERN and not gpt2["nfc"] and gpt2["added"] == {}
    assert gpt2["mergeable_ranks"][b" the"] == 262 and b"<|endoftext|>" not in gpt2["mergeable_ranks"]
    assert len(gpt2["mergeable_ranks"]) == 50256
    assert qwen3["nfc"] and qwen3["added"]["<think>"] == 151667 and "<|endoftext|>" not in qwen3["added"]
    assert r"\p{N}" in qwen3["pat_str"]


def test_unsupported_normalizer_and_pretokenizer_fall_back(data_root):
    j = json.loads(_json(data_root, "gpt2"))
    lower = json.dumps({**j, "normalizer": {"type": "Lowercase"}})
    assert choose_encoder(lower) == ("hf", "normalizer Lowercase")
    with pytest.raises(Unsupported, match="normalizer Lowercase"):
        choose_encoder(lower, "tiktoken")
    prefix = json.dumps({**j, "pre_tokenizer": {**j["pre_tokenizer"], "add_prefix_space": True}})
    assert "add_prefix_space" in choose_encoder(prefix)[1]
    shuffled = dict(j)
    shuffled["model"] = {**j["model"], "merges": j["model"]["merges"][::-1]}
    assert "merge order" in choose_encoder(json.dumps(shuffled))[1]
    assert choose_encoder(json.dumps(j), "hf") == ("hf", "requested")


def test_sentencepiece_tokenizer_falls_back(data_root):
    """Llama 2's tokenizer is SentencePiece (Metaspace-style, byte_fallback): HF, with the reason.
    Llama 2 itself needs the sentencepiece package to load; the same layout is built here too."""
    from tokenizers import Tokenizer, models, normalizers

    vocab = {"<unk>": 0, "<0x41>": 1, "▁": 2, "a": 3, "b": 4, "ab": 5, "▁ab": 6}
    tok = Tokenizer(models.BPE(vocab, [("a", "b"), ("▁", "ab")], unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    name, why = choose_encoder(tok.to_str())
    assert name == "hf" and "byte_fallback" in why
    try:
        llama2 = _json(data_root, "llama2")
    except DataError:  # no sentencepiece package here
        return
    name, why = choose_encoder(llama2)
    assert name == "hf" and why


def test_missing_tiktoken_falls_back(data_root, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_tiktoken(name, *a, **kw):
        if name == "tiktoken":
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_tiktoken)
    assert choose_encoder(_json(data_root, "gpt2")) == ("hf", "tiktoken is not installed")


def _stream(out, split):
    return np.asarray(datasets.load_from_disk(str(out / split)).with_format("numpy")["input_ids"]).reshape(-1)


def _run(tmp_path, data_root, name, encoder):
    mix = data_root / "pretrain" / "mix"
    return tokenize_corpus(
        [mix / "mini_train.jsonl.zst"],
        tmp_path / f"{name}-{encoder}",
        data_root / "tokenizers" / name,
        seq_len=64,
        val_inputs=[mix / "mini_val.jsonl.zst"],
        val_docs=50,
        encoder=encoder,
    )


@pytest.mark.full_data("Qwen3 tokenizer")
def test_pipeline_output_is_the_same_with_either_encoder(tmp_path, data_root):
    hf, tk = _run(tmp_path, data_root, "qwen3", "hf"), _run(tmp_path, data_root, "qwen3", "auto")
    mh, mt = (json.loads((p / "manifest.json").read_text()) for p in (hf, tk))
    assert mh["tokenizer"]["encoder"] == {"name": "hf", "reason": "requested"}
    assert mt["tokenizer"]["encoder"]["name"] == "tiktoken"
    assert mh["fingerprint"] == mt["fingerprint"]
    for split in ("train", "validation"):
        assert mh[split]["tokens"] == mt[split]["tokens"] and mh[split]["tokens_per_set"] == mt[split]["tokens_per_set"]
        assert np.array_equal(_stream(hf, split), _stream(tk, split))
    with pytest.raises(DataError, match="encoder must be one of"):
        _run(tmp_path, data_root, "qwen3", "fast")


def test_worker_mismatch_reruns_with_hf(tmp_path, data_root, monkeypatch):
    """A difference in a worker's first documents (not in the start-up sample) -> the whole run uses HF."""
    from hfpretrain.data import pipeline

    real = TiktokenEncoder.encode
    monkeypatch.setattr(pipeline, "choose_encoder", lambda tj, req: ("tiktoken", "forced by the test"))
    monkeypatch.setattr(TiktokenEncoder, "encode", lambda self, texts: [x[:-1] for x in real(self, texts)])
    out = _run(tmp_path, data_root, "gpt2", "auto")
    enc = json.loads((out / "manifest.json").read_text())["tokenizer"]["encoder"]
    assert enc["name"] == "hf" and enc["reason"].startswith("tiktoken fell back: tiktoken differs from HF")
    monkeypatch.undo()
    ref = _run(tmp_path, data_root, "gpt2", "hf")
    assert np.array_equal(_stream(out, "train"), _stream(ref, "train"))
