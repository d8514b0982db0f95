"""Train a byte-level BPE tokenizer on Pile-format text (GPT-2's scheme, in-domain vocabulary).

At small model sizes the LM head is most of the FLOPs: an 8k in-domain vocabulary instead of
GPT-2's 50k buys compute for the trunk and, trained on the corpus, keeps text-per-token high.
The result is a folder that ``AutoTokenizer.from_pretrained`` and ``tokenize_pile.py`` load,
with ``<|endoftext|>`` as its one special token (the end-of-text id every packed block uses).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..outdir import output_problem
from .read import DataError, expand_inputs, generate_records

logger = logging.getLogger(__name__)

EOT = "<|endoftext|>"


def _texts(inputs, max_docs: int | None, on_bad: str, counts: dict):
    for row in generate_records(expand_inputs(inputs), on_bad=on_bad, limit=max_docs):
        if row["skip"]:
            counts["bad"] += 1
            if row["skip"] == "missing_file":
                raise DataError(f"{row['where'].rsplit(':', 1)[0]}: no such file (tokenizer training input)")
            continue
        counts["documents"] += 1
        counts["bytes"] += len(row["text"].encode("utf-8"))
        yield row["text"]


def train_tokenizer(inputs, vocab_size: int, out: str | Path, max_docs: int | None = None,
                    min_frequency: int = 2, on_bad: str = "skip") -> Path:
    """Train on the documents of ``inputs`` (files, globs, folders, Hub ids); save to ``out``.

    ``vocab_size`` counts the 256 byte tokens and ``<|endoftext|>``; make it a multiple of 128
    and the model needs no vocabulary padding.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 257 + 1:
        raise DataError(f"--vocab-size {vocab_size}: needs more than the 256 byte tokens and {EOT}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: exists and is not a folder")
    problem = output_problem(out)  # before training: a tokenizer that cannot be saved is lost
    if problem:
        raise DataError(f"--out {out}: {problem}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    counts = {"documents": 0, "bytes": 0, "bad": 0}
    tok.train_from_iterator(_texts(inputs, max_docs, on_bad, counts), trainer=trainer)
    if counts["documents"] == 0:
        raise DataError(f"{', '.join(map(str, inputs))}: no documents to train a tokenizer on")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOT, bos_token=EOT, unk_token=None,
                                   model_max_length=1 << 30)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    info = {"vocab_size": tok.get_vocab_size(), "requested_vocab_size": vocab_size, "min_frequency": min_frequency,
            "inputs": [str(i) for i in inputs], "max_docs": max_docs, **counts}
    (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    logger.info("tokenizer: %d tokens from %d documents (%d bytes) -> %s", info["vocab_size"], counts["documents"],
                counts["bytes"], out)
    return out
