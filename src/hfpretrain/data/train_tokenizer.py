"""Train a byte-level BPE tokenizer on Pile-format text (GPT-2's scheme, in-domain vocabulary).

At small model sizes the LM head is most of the FLOPs: an 8k in-domain vocabulary instead of
GPT-2's 50k buys compute for the trunk and, trained on the corpus, keeps text-per-token high.
The result is a folder that ``AutoTokenizer.from_pretrained`` and ``tokenize_pile.py`` load,
with ``<|endoftext|>`` as its one special token (the end-of-text id every packed block uses).

The input is read as ``tokenize_corpus`` reads it, under the same policy (:mod:`.pipeline`): a missing file,
a ``.zst`` cut short by an unknown amount, an empty or unreadable file or one whose records are all bad is an
error (``allow_missing`` goes on without it); bad records and measured losses count against
``max_bad_fraction``; a wrong ``text_field`` stops on the first records, naming the fields there are. (It used
to train on the first half of a truncated ``.zst`` and exit 0, where ``tokenize`` refused the same file.)

Only a new or empty folder, or an earlier output of this function (``training.json`` with its ``format``), is
written, unless ``force``: it used to overwrite a user's ``tokenizer.json`` in any folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..outdir import listing, output_problem, read_marker
from .pipeline import (
    DEFAULT_MAX_BAD_FRACTION,
    MAX_BAD_EXAMPLES,
    check_bad,
    check_files,
    check_missing,
    configure_sources,
    file_accounting,
)
from .read import FILE_ROW, POLICIES, DataError, expand_inputs, generate_records

logger = logging.getLogger(__name__)

EOT = "<|endoftext|>"
FORMAT = "hfpretrain.tokenizer"  # training.json["format"]: the folder is an output of train_tokenizer


def _texts(sources, max_docs: int | None, on_bad: str, counts: dict, max_bad_fraction: float, allow_missing: bool):
    rows, stats = [], {"records_read": 0, "skipped": {}, "bad_examples": []}
    for row in generate_records(sources, on_bad=on_bad, limit=max_docs, file_rows=True):
        if row["skip"] == FILE_ROW:  # a file read to its end (or to the limit): a whole-file loss stops here
            rows.append(row["text"])
            check_files(file_accounting(rows[-1:]), "inputs", 1.0, allow_missing)
            continue
        stats["records_read"] += 1
        if row["skip"]:
            counts["bad"] += 1
            stats["skipped"][row["skip"]] = stats["skipped"].get(row["skip"], 0) + 1
            if len(stats["bad_examples"]) < MAX_BAD_EXAMPLES:
                stats["bad_examples"].append({"where": row["where"], "reason": row["skip"]})
            continue
        counts["documents"] += 1
        counts["bytes"] += len(row["text"].encode("utf-8"))
        yield row["text"]
    check_files(file_accounting(rows), "inputs", max_bad_fraction, allow_missing)  # bytes lost in all
    check_bad(stats, max_bad_fraction, "inputs")


def _refuse_foreign(out: Path) -> None:
    if not out.is_dir() or not any(out.iterdir()):
        return
    if read_marker(out / "training.json", FORMAT) is None:
        raise DataError(
            f"--out {out} is not empty ({listing(out)}) and not an output of train-tokenizer (no training.json "
            f"with format {FORMAT!r}); nothing was written: choose a new or empty folder, or pass --force "
            "to write into it (files of the same names are replaced)"
        )


def train_tokenizer(
    inputs,
    vocab_size: int,
    out: str | Path,
    max_docs: int | None = None,
    min_frequency: int = 2,
    on_bad: str = "skip",
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION,
    allow_missing: bool = False,
    text_field: str = "text",
    txt_split: str = "file",
    force: bool = False,
) -> Path:
    """Train on the documents of ``inputs`` (files, globs, folders, Hub ids); save to ``out``.

    ``vocab_size`` counts the 256 byte tokens and ``<|endoftext|>``; make it a multiple of 128
    and the model needs no vocabulary padding.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    if vocab_size < 257 + 1:
        raise DataError(f"--vocab-size {vocab_size}: needs more than the 256 byte tokens and {EOT}")
    if on_bad not in POLICIES:
        raise DataError(f"on_bad must be one of {POLICIES}, got {on_bad!r}")
    if not 0 <= max_bad_fraction <= 1:
        raise DataError(f"--max-bad-fraction must be between 0 and 1, got {max_bad_fraction}")
    if max_docs is not None and max_docs < 1:
        raise DataError(f"--max-docs must be >= 1, got {max_docs}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out}: exists and is not a folder")
    problem = output_problem(out, makes="tokenizer")  # before training: a tokenizer that cannot be saved is lost
    if problem:
        raise DataError(f"--out {out}: {problem}")
    if not force:
        _refuse_foreign(out)
    sources = expand_inputs(inputs)
    configure_sources(sources, text_field, txt_split)
    check_missing(sources, allow_missing)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    counts = {"documents": 0, "bytes": 0, "bad": 0}
    try:
        tok.train_from_iterator(
            _texts(sources, max_docs, on_bad, counts, max_bad_fraction, allow_missing), trainer=trainer
        )
    except Exception as e:  # the iterator's DataError, as the tokenizers library passes it on
        cause = e
        while cause is not None and not isinstance(cause, DataError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise DataError(str(cause)) from None
    if counts["documents"] == 0:
        raise DataError(f"{', '.join(map(str, inputs))}: no documents to train a tokenizer on")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOT, bos_token=EOT, unk_token=None, model_max_length=1 << 30
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    info = {
        "format": FORMAT,
        "vocab_size": tok.get_vocab_size(),
        "requested_vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "inputs": [str(i) for i in inputs],
        "max_docs": max_docs,
        "text_field": text_field,
        **counts,
    }
    (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    logger.info(
        "tokenizer: %d tokens from %d documents (%d bytes) -> %s",
        info["vocab_size"],
        counts["documents"],
        counts["bytes"],
        out,
    )
    return out
