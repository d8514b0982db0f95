"""An export's tokenizer as llama.cpp's GGUF converter reads it: the hash it keys on and the pre-tokenizer name.

llama.cpp's convert_hf_to_gguf.py names a BPE vocabulary's pre-tokenizer by sha256(str(ids of a probe text)); a
vocabulary trained with train-tokenizer is in no table, so the export says which hash to register under which name.
These tests use real files: a tokenizer trained by the project's code on the embedded sample, tiny exports.
"""

from __future__ import annotations

import ast
import json
from hashlib import sha256

import pytest

from hfpretrain.cli.export import main
from hfpretrain.eval.gguf import CHKTXT, GPT2, NOTE_FILE, check_tokenizer, console_line, is_gpt2_scheme, note
from hfpretrain.eval.llama_cpp_hashes import LLAMA_CPP_PRE_HASHES

# sha256 of the probe text's UTF-8, from chktxt in llama.cpp's get_vocab_base_pre() (conversion/base.py, llama.cpp
# as vendored in llama-cpp-python 0.3.36; MIT, The ggml authors): an edit of CHKTXT (an editor dropping its
# invisible U+200D / U+FE0F) would change every hash.
CHKTXT_SHA256 = "a36179c1e2b1cfcfbfad1dc779addad2ffc778201e4cf0d538bddeafa2c526da"
# GPT-2's entry in the converter's table, copied from llama.cpp's get_vocab_base_pre() (same source):
#   if chkhsh == "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454":
#       # ref: https://huggingface.co/openai-community/gpt2
#       res = "gpt-2"
GPT2_CHKHSH = "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454"
# llama.cpp's split regex for "gpt-2" (LLAMA_VOCAB_PRE_TYPE_GPT2 in src/llama-vocab.cpp, same source); text it does
# not match stays a piece of its own, as llama.cpp's unicode_regex_split keeps it.
LLAMA_CPP_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"


def converter_hash(folder) -> str:
    """The converter's computation, written out here as it is there (not through hfpretrain.eval.gguf)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    chktok = tokenizer.encode(CHKTXT)
    return sha256(str(chktok).encode()).hexdigest()


def llama_cpp_gpt2_split(text: str) -> list[str]:
    import regex

    pieces, pos = [], 0
    for m in regex.finditer(LLAMA_CPP_GPT2_REGEX, text):
        pieces += [text[pos : m.start()]] * (m.start() > pos) + [m.group()]
        pos = m.end()
    return pieces + [text[pos:]] * (pos < len(text))


def file_split(folder, text: str) -> list[str]:
    """``text`` split by the pre-tokenizer ``tokenizer.json`` declares (its pieces as spans of ``text``)."""
    from tokenizers import Tokenizer

    pre = Tokenizer.from_file(str(folder / "tokenizer.json")).pre_tokenizer
    return [text[a:b] for _, (a, b) in pre.pre_tokenize_str(text)]


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory, mini_train):
    """A tiny Llama checkpoint with a 512-token vocabulary trained by ``train_tokenizer`` and a model card."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from hfpretrain.data.train_tokenizer import train_tokenizer

    base = tmp_path_factory.mktemp("gguf")
    tok = AutoTokenizer.from_pretrained(
        str(train_tokenizer([mini_train], vocab_size=512, out=base / "tok", max_docs=100))
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            tie_word_embeddings=True,
        )
    )
    out = base / "checkpoint"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "README.md").write_text("---\nlicense: unknown\n---\n# tiny\n\nA tiny model.\n")
    return out


def test_the_probe_text_is_llama_cpps():
    assert sha256(CHKTXT.encode()).hexdigest() == CHKTXT_SHA256 and len(CHKTXT) == 350
    assert LLAMA_CPP_PRE_HASHES[GPT2_CHKHSH] == GPT2


def test_a_trained_vocabulary_export_names_its_hash_and_gpt2(trained_checkpoint, tmp_path, capsys):
    out = tmp_path / "export"
    assert main([str(trained_checkpoint), "--out", str(out)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gguf:")]
    expected = converter_hash(out)  # what convert_hf_to_gguf.py computes on the export
    assert expected not in LLAMA_CPP_PRE_HASHES  # the converter would stop: "BPE pre-tokenizer was not recognized"
    gguf = check_tokenizer(out)
    assert (gguf.chkhsh, gguf.known, gguf.pre) == (expected, None, GPT2)
    assert err == [console_line(gguf, out)] and expected in err[0] and '"gpt-2"' in err[0]

    # what the converter keys on: tokenizer.json's normalizer and pre-tokenizer are GPT-2's byte-level scheme, and
    # split the probe text exactly as llama.cpp's "gpt-2" regex does
    spec = json.loads((out / "tokenizer.json").read_text())
    assert spec["normalizer"] is None and spec["model"]["type"] == "BPE"
    assert {k: spec["pre_tokenizer"][k] for k in ("type", "add_prefix_space", "use_regex")} == {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "use_regex": True,
    }
    assert is_gpt2_scheme(spec)
    assert file_split(out, CHKTXT) == llama_cpp_gpt2_split(CHKTXT)

    # GGUF.md: the hash, the name, the update script's entry (a Python dict) and the two lines of get_vocab_base_pre()
    text = (out / NOTE_FILE).read_text()
    entry = next(line for line in text.splitlines() if line.lstrip().startswith('{"name"'))
    parsed = ast.literal_eval(entry.strip().rstrip(",").replace("TOKENIZER_TYPE.BPE", "'BPE'"))
    assert parsed == {"name": "gpt-2", "tokt": "BPE", "repo": str(out), "chkhsh": expected}
    assert f'if chkhsh == "{expected}":\n            res = "gpt-2"' in text
    assert f"python convert_hf_to_gguf.py {out} --outfile model.gguf" in text
    card = (out / "README.md").read_text()
    assert "<!-- hfpretrain:gguf -->" in card and expected in card and f"({NOTE_FILE})" in card

    assert main([str(trained_checkpoint), "--out", str(out)]) == 0  # again into the same export: one section
    assert (out / "README.md").read_text().count("<!-- hfpretrain:gguf -->") == 1


def test_a_gpt2_zoo_export_is_in_the_converters_table_and_says_nothing(
    tiny_checkpoint, gpt2_tokenizer, tmp_path, capsys
):
    assert converter_hash(gpt2_tokenizer) == GPT2_CHKHSH
    out = tmp_path / "export"
    assert main([str(tiny_checkpoint), "--out", str(out)]) == 0
    assert "gguf" not in capsys.readouterr().err and not (out / NOTE_FILE).exists()
    gguf = check_tokenizer(out)
    assert (gguf.chkhsh, gguf.known, gguf.pre) == (GPT2_CHKHSH, GPT2, GPT2)
    # the scheme reported for a trained vocabulary is GPT-2's own: its tokenizer.json passes the same check
    assert is_gpt2_scheme(json.loads((gpt2_tokenizer / "tokenizer.json").read_text()))
    assert file_split(gpt2_tokenizer, CHKTXT) == llama_cpp_gpt2_split(CHKTXT)


def test_another_pre_tokenizer_gets_the_hash_but_no_name(trained_checkpoint, tmp_path, capsys):
    """A byte-level BPE with a prefix space is not llama.cpp's "gpt-2": the hash is said, no name is guessed."""
    spec = json.loads((trained_checkpoint / "tokenizer.json").read_text())
    assert is_gpt2_scheme(spec)
    for change in (
        {"pre_tokenizer": {**spec["pre_tokenizer"], "add_prefix_space": True}},
        {"normalizer": {"type": "NFC"}},
        {"model": {**spec["model"], "ignore_merges": True}},
    ):
        assert not is_gpt2_scheme({**spec, **change})
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text((trained_checkpoint / name).read_text())
    spec["pre_tokenizer"]["add_prefix_space"] = True
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    gguf = check_tokenizer(folder)
    assert gguf.chkhsh == converter_hash(folder) and gguf.known is None and gguf.pre is None
    assert "not GPT-2's" in console_line(gguf, folder)
    text = note(gguf, str(folder))  # the registration, with the name left to a person
    assert f'"name": "NAME", "tokt": TOKENIZER_TYPE.BPE, "repo": "{folder}", "chkhsh": "{gguf.chkhsh}"' in text
