"""Load the tokenizer, pick the end-of-text token, and tokenize Arrow batches of documents.

The end-of-text token is chosen as: the ``eos_token`` override if given, else a token named
``<|endoftext|>`` (GPT-2, Qwen) or ``<|end_of_text|>`` (Llama 3) if the vocabulary has one,
else ``tokenizer.eos_token``. (Qwen3's config says eos = ``<|im_end|>``, the chat turn end; base
pretraining uses ``<|endoftext|>``.)

Documents get the ids of the Rust backend's ``encode_batch_fast`` (no offsets), without the
tokenizer's own special tokens, and with ``encode_special_tokens = True`` so that a literal
``<|endoftext|>`` inside raw text is encoded as text: the end-of-text id then appears only at
the end of documents, and document boundaries can be recovered from it. The same ids come from
tiktoken where it can run the tokenizer exactly (faster; see :mod:`.encoders`).
"""

from __future__ import annotations

import hashlib
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..integrity import tokenizer_problem
from ..paths import MissingDataError, resolve
from .encoders import EncoderMismatch, build_encoder, first_difference
from .read import DataError

CHECK_DOCS = 200  # per process, encoded by both backends when tiktoken runs
EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>")


def load_tokenizer(name):
    from transformers import AutoTokenizer

    try:
        path = resolve(name, bare_hub_ids=True)
    except MissingDataError as e:
        raise DataError(f"tokenizer {name}: {e}") from None
    problem = (
        tokenizer_problem(path, "name a tokenizer folder (save_pretrained's, or a tokenized data folder's tokenizer/)")
        if Path(path).is_dir()
        else None
    )
    if problem:  # which file, and what to do: not the library's internal text
        raise DataError(f"tokenizer {name}: {problem}")
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - one line for the user
        raise DataError(f"tokenizer {name}: cannot be loaded ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not getattr(tok, "is_fast", False):
        raise DataError(f"tokenizer {name}: a fast (Rust) tokenizer is needed (tokenizer.json)")
    return tok


def pick_eos(tok, override: str | None = None) -> tuple[str, int]:
    vocab = tok.get_vocab()
    if override:
        if override not in vocab:
            raise DataError(f"--eos-token {override!r} is not in the vocabulary of {tok.name_or_path}")
        return override, vocab[override]
    for name in EOT_NAMES:
        if name in vocab:
            return name, vocab[name]
    if tok.eos_token is not None and tok.eos_token_id is not None:
        return tok.eos_token, int(tok.eos_token_id)
    raise DataError(f"tokenizer {tok.name_or_path}: no end-of-text token found; pass --eos-token")


def tokenizer_sha256(tokenizer_json: str) -> str:
    return hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest()


def ids_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 65535 else np.uint32


class BatchTokenizer:
    """``Dataset.map`` function (arrow format, batched): rows (text, set, skip, where) ->
    good documents only, as (input_ids: list<uint16|uint32> ending in eos, set: string).

    ``encoder``: ``"hf"`` or ``"tiktoken"`` (see :mod:`.encoders`; pick it with
    :func:`.encoders.choose_encoder`). With tiktoken, the first :data:`CHECK_DOCS` documents each
    process sees are also encoded by HF; a difference raises :class:`.encoders.EncoderMismatch`.
    Holds the tokenizer as its JSON string so it pickles cheaply into worker processes.
    """

    def __init__(self, tokenizer_json: str, eos_id: int, dtype, encoder: str = "hf"):
        self.tokenizer_json = tokenizer_json
        self.eos_id = int(eos_id)
        self.dtype = np.dtype(dtype)
        self.encoder = encoder
        self._enc = None

    def __getstate__(self):
        return {**self.__dict__, "_enc": None}

    def _encode(self, texts: list[str]) -> list[list[int]]:
        if self._enc is None:
            self._enc = build_encoder(self.encoder, self.tokenizer_json)
            if self.encoder != "hf":
                head = texts[:CHECK_DOCS]
                diff = first_difference(
                    head, build_encoder("hf", self.tokenizer_json).encode(head), self._enc.encode(head)
                )
                if diff:
                    raise EncoderMismatch(f"{self.encoder} differs from HF: {diff}")
        return self._enc.encode(texts) if texts else []

    def __call__(self, table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        good = pc.equal(table.column("skip"), "")
        table = table.filter(good)
        ids = self._encode(table.column("text").to_pylist())
        eos = [self.eos_id]
        lens = np.fromiter((len(x) + 1 for x in ids), dtype=np.int64, count=len(ids))
        total = int(lens.sum())
        flat = np.fromiter(chain.from_iterable(chain(x, eos) for x in ids), dtype=self.dtype, count=total)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))
        return pa.table({"input_ids": arr, "set": table.column("set")})
