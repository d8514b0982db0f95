"""Token encoders for :class:`.tokenizer.BatchTokenizer`: the HF ``tokenizers`` BPE, or the same
BPE run by ``tiktoken`` (4-6x less CPU on this corpus, same ids).

Both give the ids of ``Tokenizer.encode_batch_fast(texts, add_special_tokens=False)`` with
``encode_special_tokens = True``: special tokens in raw text are plain text (tiktoken's
``encode_ordinary``); non-special added tokens (Qwen3's ``<think>``, ``<tool_call>``, ...) are
still split out first, on the raw text, as HF does.

tiktoken can stand in only for a byte-level BPE (GPT-2, Qwen3, Llama 3; not SentencePiece such as
Llama 2) whose token ids are in merge order, because tiktoken merges by rank = id.
:func:`tiktoken_spec` converts ``tokenizer.json`` or says why it cannot. tiktoken also merges pairs
that HF's merge list does not name (GPT-2 and Qwen3 list one merge per token) and looks whole
pieces up first; that BPE gives the same result is known for these vocabularies but not provable
from the file, so :func:`choose_encoder` compares both on :data:`SAMPLE` and
``BatchTokenizer`` compares each worker's first documents (:class:`EncoderMismatch` on any
difference: the pipeline then reruns with HF).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata

ENCODERS = ("auto", "hf", "tiktoken")
BPE_CACHE_WORDS = 1 << 20
# tokenizers' ByteLevel(use_regex=True) split pattern (pre_tokenizers/byte_level.rs)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# Edge cases of regex dialects (onig vs fancy-regex), NFC and added tokens, checked at start-up.
SAMPLE = [
    "Hello world! It'S 'll 'LL don't we've",
    "<|endoftext|> inside text<|endoftext|>",
    "<think>x</think><tool_call>{}</tool_call>",
    "<|im_start|>user\n<|im_end|>",
    "e\u0301 \u212b A\u030a >\u0338",
    "emoji 👍🏽👨‍👩‍👧 🇫🇷",
    "中文字符和日本語のテキスト、한국어",
    "tabs\t\tand    spaces     \n\n\n  end   ",
    "a\r\nb\r\n\r\n",
    "1234567890 3.14159 1,000,000",
    "\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u200b\u2028\u3000\ufeff",
    "def f(x):\n    return x  # comment\n",
    "   leading",
    "trailing   ",
    "",
    " ",
    "\u0000\u0001 nul",
    "Straße ΑΒΓ ﬁ ① ² ½ ٣ ߀",
    "\U0001d400\U0001d7ce \U00010000",
    "x" * 3000,
    "ab " * 500,
]


class Unsupported(Exception):
    """Why tiktoken cannot run this tokenizer exactly (the run uses HF)."""


class EncoderMismatch(RuntimeError):
    """tiktoken and HF gave different ids for the same text."""


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte -> printable unicode table, inverted (unicode char -> byte)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _split_pattern(pt) -> str:
    if not pt:
        raise Unsupported("no pre-tokenizer")
    if pt["type"] == "ByteLevel":
        if pt.get("add_prefix_space") or not pt.get("use_regex", True):
            raise Unsupported("ByteLevel pre-tokenizer with add_prefix_space or without its regex")
        return GPT2_PATTERN
    subs = pt.get("pretokenizers") or []
    if (
        pt["type"] == "Sequence"
        and [p["type"] for p in subs] == ["Split", "ByteLevel"]
        and subs[0].get("behavior") == "Isolated"
        and not subs[0].get("invert")
        and "Regex" in subs[0].get("pattern", {})
        and not subs[1].get("add_prefix_space")
        and not subs[1].get("use_regex", True)
    ):
        return subs[0]["pattern"]["Regex"]
    raise Unsupported(f"pre-tokenizer {json.dumps(pt)[:80]} is not Split(regex)+ByteLevel or ByteLevel")


def tiktoken_spec(tokenizer_json: str) -> dict:
    """``{pat_str, mergeable_ranks, nfc, added}`` for ``tiktoken.Encoding``, or :class:`Unsupported`."""
    j = json.loads(tokenizer_json)
    m = j.get("model") or {}
    if m.get("type") != "BPE":
        raise Unsupported(f"model {m.get('type')} is not BPE")
    if m.get("dropout") or m.get("byte_fallback") or m.get("continuing_subword_prefix") or m.get("end_of_word_suffix"):
        raise Unsupported("BPE with dropout, byte_fallback or subword prefix/suffix (not byte-level BPE)")
    if j.get("truncation") or j.get("padding"):
        raise Unsupported("truncation or padding is set")
    norm = (j.get("normalizer") or {}).get("type")
    if norm not in (None, "NFC"):
        raise Unsupported(f"normalizer {norm}")
    pat = _split_pattern(j.get("pre_tokenizer"))

    byte_of = _byte_decoder()
    vocab = m["vocab"]
    if any(ch not in vocab for ch in byte_of):
        raise Unsupported("not byte-level: the vocabulary lacks some of the 256 byte symbols")
    reachable = {vocab[ch] for ch in byte_of}
    last = -1
    for merge in m["merges"]:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        r = vocab.get(a + b)
        if r is None or a not in vocab or b not in vocab:
            raise Unsupported(f"merge {a!r} {b!r} is not in the vocabulary")
        if r < last:  # tiktoken merges by rank = id: ids must follow the merge order
            raise Unsupported(f"token ids are not in merge order (merge {a!r} {b!r})")
        last = r
        reachable.add(r)
    # without ignore_merges HF BPE never emits a token no merge builds (GPT-2's <|endoftext|>)
    keep = set(vocab.values()) if m.get("ignore_merges") else reachable
    try:
        ranks = {bytes(byte_of[c] for c in t): i for t, i in vocab.items() if i in keep}
    except KeyError:
        raise Unsupported("a vocabulary entry is not byte-level") from None

    added = {}
    for t in j.get("added_tokens") or []:
        if t.get("special"):
            continue  # encode_special_tokens=True: plain text, as in encode_ordinary
        if t.get("single_word") or t.get("lstrip") or t.get("rstrip") or (norm and t.get("normalized")):
            raise Unsupported(f"added token {t['content']!r} has single_word/lstrip/rstrip/normalized")
        added[t["content"]] = t["id"]
    return {"pat_str": pat, "mergeable_ranks": ranks, "nfc": norm == "NFC", "added": added}


class HFEncoder:
    name = "hf"

    def __init__(self, tokenizer_json: str):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_str(tokenizer_json)
        self._tok.encode_special_tokens = True
        # BPE's word cache defaults to 10k words and thrashes on a varied corpus; 1M words
        # (bounded) saves ~5-10% CPU for GPT-2 BPE here. Same ids.
        resize = getattr(self._tok.model, "_resize_cache", None)
        if resize is not None:
            resize(BPE_CACHE_WORDS)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)] if texts else []


class TiktokenEncoder:
    name = "tiktoken"

    def __init__(self, tokenizer_json: str):
        import tiktoken

        spec = tiktoken_spec(tokenizer_json)
        self._enc = tiktoken.Encoding(
            "hfpretrain", pat_str=spec["pat_str"], mergeable_ranks=spec["mergeable_ranks"], special_tokens={}
        )
        self._nfc = spec["nfc"]
        self._added = spec["added"]
        # leftmost-longest, like HF's added-token matcher
        self._added_re = (
            re.compile("|".join(map(re.escape, sorted(self._added, key=len, reverse=True)))) if self._added else None
        )

    def _piece(self, text: str) -> list[int]:
        # NFC's quick check makes this ~free on already-normalized text
        return self._enc.encode_ordinary(unicodedata.normalize("NFC", text) if self._nfc else text)

    def _one(self, text: str) -> list[int]:
        if self._added_re is None or self._added_re.search(text) is None:
            return self._piece(text)
        ids, pos = [], 0
        for mt in self._added_re.finditer(text):
            ids += self._piece(text[pos : mt.start()])
            ids.append(self._added[mt.group()])
            pos = mt.end()
        return ids + self._piece(text[pos:])

    def encode(self, texts: list[str]) -> list[list[int]]:
        # one thread: datasets' worker processes already use the cores
        return [self._one(t) for t in texts]


def first_difference(texts, a, b) -> str | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            k = next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            return f"text {i} ({texts[i][:40]!r}...) differs at token {k}: {x[k : k + 3]} vs {y[k : k + 3]}"
    return None if len(a) == len(b) else "different number of texts"


def choose_encoder(tokenizer_json: str, requested: str = "auto") -> tuple[str, str]:
    """(encoder name, why) for ``requested`` in :data:`ENCODERS`. ``"tiktoken"`` that cannot run
    exactly raises :class:`Unsupported`; ``"auto"`` then says why it uses HF."""
    if requested not in ENCODERS:
        raise ValueError(f"encoder must be one of {ENCODERS}, got {requested!r}")
    if requested == "hf":
        return "hf", "requested"
    try:
        import tiktoken
    except ImportError:
        if requested == "tiktoken":
            raise Unsupported("tiktoken is not installed") from None
        return "hf", "tiktoken is not installed"
    try:
        fast = build_encoder("tiktoken", tokenizer_json)
        diff = first_difference(SAMPLE, build_encoder("hf", tokenizer_json).encode(SAMPLE), fast.encode(SAMPLE))
        if diff:
            raise Unsupported(f"tiktoken differs from HF on the start-up sample: {diff}")
    except Unsupported as e:
        if requested == "tiktoken":
            raise
        return "hf", str(e)
    return "tiktoken", (
        f"tiktoken {tiktoken.__version__}: byte-level BPE with ids in merge order; "
        f"same ids as HF on the {len(SAMPLE)}-text sample"
    )


@functools.lru_cache(maxsize=4)
def build_encoder(name: str, tokenizer_json: str):
    """Cached: the main process builds both for :func:`choose_encoder`, and forked ``map`` workers
    inherit them (Qwen3's conversion takes ~0.5 s)."""
    return TiktokenEncoder(tokenizer_json) if name == "tiktoken" else HFEncoder(tokenizer_json)
