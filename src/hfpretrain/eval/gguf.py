"""What llama.cpp's GGUF converter needs from an export's tokenizer, said in the export when it is not there.

llama.cpp's ``convert_hf_to_gguf.py`` names a BPE vocabulary's pre-tokenizer (the GGUF key ``tokenizer.ggml.pre``,
which picks the regex llama.cpp splits text with) by a hash: ``get_vocab_base_pre()`` encodes a fixed probe text
(:data:`CHKTXT`) with ``AutoTokenizer.from_pretrained(model_dir)``, takes ``sha256(str(ids))`` (``chkhsh``) and
looks it up in a table of known tokenizers. A zoo tokenizer (GPT-2, Qwen3, Llama 3) is in that table. A vocabulary
trained with ``hfpretrain train-tokenizer`` is new, so its hash can never be there and the converter stops with
"BPE pre-tokenizer was not recognized", although its pre-tokenizer is GPT-2's (byte-level BPE, GPT-2's split regex,
no normalizer: llama.cpp's ``gpt-2``). Registering the hash under that name is all the converter needs.

:func:`check_tokenizer` computes the hash as the converter does and, when the table
(:data:`~hfpretrain.eval.llama_cpp_hashes.LLAMA_CPP_PRE_HASHES`) lacks it, names the pre-tokenizer from
``tokenizer.json`` (``gpt-2`` where it is GPT-2's scheme, else none: that is a choice for a person);
:func:`note` is the ``GGUF.md`` the export then carries, with the registration line and the commands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from hfpretrain.eval.llama_cpp_hashes import LLAMA_CPP_PRE_HASHES

# The probe text of llama.cpp's converter, verbatim: CHK_TXT in convert_hf_to_gguf_update.py, chktxt in the
# get_vocab_base_pre() it generates (conversion/base.py; convert_hf_to_gguf.py in llama.cpp before 2026).
# Source: https://github.com/ggml-org/llama.cpp (as vendored in llama-cpp-python 0.3.36), MIT licence,
# Copyright (c) 2023-2026 The ggml authors.
CHKTXT = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"  # noqa: E501

GPT2 = "gpt-2"  # llama.cpp's name for GPT-2's pre-tokenizer (LLAMA_VOCAB_PRE_TYPE_GPT2 in src/llama-vocab.cpp)
NOTE_FILE = "GGUF.md"


@dataclass(frozen=True)
class GgufTokenizer:
    """``chkhsh`` as the converter computes it; ``known``: the name its table gives that hash (None: not in it);
    ``pre``: the llama.cpp pre-tokenizer that splits as ``tokenizer.json`` does, where we can tell (``gpt-2``)."""

    chkhsh: str
    known: str | None
    pre: str | None


def chkhsh(folder) -> str:
    """The converter's hash of the tokenizer in ``folder``: sha256 of ``str()`` of the ids of :data:`CHKTXT`,
    encoded by ``AutoTokenizer.from_pretrained(folder)`` with its default special tokens, as
    ``get_vocab_base_pre()`` does."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(folder)).encode(CHKTXT)
    return sha256(str(ids).encode()).hexdigest()


def is_gpt2_scheme(spec: dict) -> bool:
    """``tokenizer.json`` (parsed) splits text as llama.cpp's ``gpt-2`` pre-tokenizer: a BPE model (merges applied to
    every word, no byte fallback), no normalizer, and a ByteLevel pre-tokenizer with GPT-2's regex and no prefix
    space. (llama.cpp's regex is GPT-2's: ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)``.)"""
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer") or {}
    return (
        model.get("type") == "BPE"
        and not model.get("byte_fallback")
        and not model.get("ignore_merges")
        and spec.get("normalizer") is None
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space", False)
    )


def check_tokenizer(folder) -> GgufTokenizer | None:
    """What the converter keys on for the tokenizer in ``folder``; None where it hashes none: no ``tokenizer.json``
    or not a byte-level BPE (a SentencePiece vocabulary, byte fallback: read from ``tokenizer.model`` instead)."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        return None
    h = chkhsh(folder)
    return GgufTokenizer(h, LLAMA_CPP_PRE_HASHES.get(h), GPT2 if is_gpt2_scheme(spec) else None)


def console_line(tok: GgufTokenizer, where) -> str:
    """One line for the console: the hash the converter will not recognise, and the name to register it under."""
    if tok.pre:
        return (
            f"gguf: llama.cpp's convert_hf_to_gguf.py does not know this tokenizer; register chkhsh {tok.chkhsh} "
            f'as "{tok.pre}" (how: {Path(where) / NOTE_FILE})'
        )
    return (
        f"gguf: llama.cpp's convert_hf_to_gguf.py does not know this tokenizer (chkhsh {tok.chkhsh}) and its "
        f"pre-tokenizer is not GPT-2's: see {Path(where) / NOTE_FILE}"
    )


def note(tok: GgufTokenizer, where: str, hub: bool = False) -> str:
    """``GGUF.md``: why llama.cpp's converter stops on this tokenizer, the hash and name to register, and the
    commands; ``where`` names the export (its folder as given, or the Hub repo id when ``hub``)."""
    folder = Path(where).name if hub else where
    fetch = f"hf download {where} --local-dir {folder}\n" if hub else ""
    head = (
        f"# GGUF (llama.cpp)\n\n"
        f"llama.cpp's `convert_hf_to_gguf.py` names a BPE vocabulary's pre-tokenizer (`tokenizer.ggml.pre`) by a "
        f"hash: it encodes a fixed probe text with this tokenizer and looks `sha256(str(ids))` up in the table of "
        f"`get_vocab_base_pre()`. This tokenizer is in no such table (a vocabulary trained with `hfpretrain "
        f'train-tokenizer` is new), so the converter stops with "BPE pre-tokenizer was not recognized".\n\n'
        f"- chkhsh: `{tok.chkhsh}`\n"
    )
    name = tok.pre or "NAME"
    if tok.pre:
        head += (
            f"- pre-tokenizer: `{tok.pre}` (`tokenizer.json`: byte-level BPE with GPT-2's split regex, no normalizer)\n"
        )
    else:
        head += (
            "- pre-tokenizer: not GPT-2's byte-level scheme (see `normalizer` and `pre_tokenizer` in "
            "`tokenizer.json`): for NAME below, pick the llama.cpp pre-tokenizer that splits text the same way "
            "(`src/llama-vocab.cpp`)\n"
        )
    return (
        head
        + f"""
In a llama.cpp checkout, add this line to `pre_computed_hashes` in `convert_hf_to_gguf_update.py`:

```python
    {{"name": "{name}", "tokt": TOKENIZER_TYPE.BPE, "repo": "{where}", "chkhsh": "{tok.chkhsh}"}},
```

and run `python convert_hf_to_gguf_update.py --check-missing`, which writes it into `get_vocab_base_pre()` without
downloading anything; or add the two lines it writes there yourself (`conversion/base.py`; `convert_hf_to_gguf.py`
in older llama.cpp), beside the other `if chkhsh == ...`:

```python
        if chkhsh == "{tok.chkhsh}":
            res = "{name}"
```

Then, from the llama.cpp checkout (`llama-completion` is `llama-cli` in builds before it was split off):

```bash
{fetch}python convert_hf_to_gguf.py {folder} --outfile model.gguf
llama-completion -m model.gguf -no-cnv -p "The history of" -n 40
```
"""
    )


def card_section(tok: GgufTokenizer) -> str:
    """The model card's short GGUF section (between ``<!-- hfpretrain:gguf -->`` comments), pointing at GGUF.md."""
    what = (
        f"register its tokenizer's hash `{tok.chkhsh}` as `{tok.pre}`"
        if tok.pre
        else f"register its tokenizer's hash `{tok.chkhsh}` under the llama.cpp pre-tokenizer that splits as it does"
    )
    return (
        f"<!-- hfpretrain:gguf -->\n## GGUF (llama.cpp)\n\nBefore llama.cpp's `convert_hf_to_gguf.py` converts this "
        f"model, {what} (the tokenizer is not in the converter's table): [{NOTE_FILE}]({NOTE_FILE}) says how."
        f"\n<!-- /hfpretrain:gguf -->\n"
    )
