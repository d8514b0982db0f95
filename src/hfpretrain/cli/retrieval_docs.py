"""Synthetic retrieval documents (Pile-format jsonl.zst) for a context-extension phase's mixture.

    hfpretrain retrieval-docs --input SHARDS... --tokenizer TOK --out retrieval.jsonl.zst [--documents 2000]
        [--min-tokens 1024] [--max-tokens 15000] [--min-facts 1] [--max-facts 4] [--repeat-share 0]
        [--statement-share 0] [--early-share 0] [--seed 0]

Corpus text from --input (Pile-format files, as `hfpretrain tokenize` reads them) with made-up facts hidden at
random depths and asked for at the end (hfpretrain/data/retrieval.py says why); for --repeat-share of the
documents the haystack is a few of the corpus's sentences repeated instead, and for --statement-share a few
made-up statements ("The lake is cold.") repeated; --early-share of the facts go in the haystack's first quarter,
the farthest from their questions (at uniform depths a document of the phase's length asks few from near its
length back). Then tokenize the file at the phase's length, `--pack whole`, and name the output in the extension
recipe's data.sources and data.mixture (recipes/best_small_16k.yaml). Keep --max-tokens under that length, so
that no document is split from its questions. Each row's meta records the arguments (`made_by`): a run's report
(scripts/report.py) prints the command that makes the file again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", nargs="+", required=True, help="Pile-format .jsonl/.jsonl.zst files or globs")
    p.add_argument("--tokenizer", required=True, help="the tokenizer the documents are measured with (folder)")
    p.add_argument("--out", required=True, help="the .jsonl.zst file to write")
    p.add_argument("--documents", type=int, default=2000)
    p.add_argument("--min-tokens", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=15000)
    p.add_argument("--min-facts", type=int, default=1, help="facts per document: at least this many")
    p.add_argument("--max-facts", type=int, default=4, help="facts per document: at most this many")
    p.add_argument(
        "--repeat-share",
        type=float,
        default=0.0,
        help="the share of documents whose haystack is a few sentences repeated",
    )
    p.add_argument(
        "--statement-share",
        type=float,
        default=0.0,
        help="the share of documents whose haystack is a few made-up statements repeated",
    )
    p.add_argument(
        "--early-share",
        type=float,
        default=0.0,
        help="the share of facts hidden in the haystack's first quarter (the rest anywhere)",
    )
    p.add_argument("--seed", type=int, default=0)
    argv = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_args(argv)
    if not a.out.endswith(".jsonl.zst"):
        return error(f"--out {a.out}: name a .jsonl.zst file")
    from hfpretrain.data.retrieval import MAX_FACTS, retrieval_documents

    if a.documents < 1 or not 1 <= a.min_facts <= a.max_facts <= MAX_FACTS or not 0 < a.min_tokens <= a.max_tokens:
        return error(
            f"need --documents >= 1, 1 <= --min-facts <= --max-facts <= {MAX_FACTS} and "
            "0 < --min-tokens <= --max-tokens"
        )
    if not 0 <= a.repeat_share <= 1:
        return error(f"--repeat-share {a.repeat_share}: a share, 0 to 1")
    if a.statement_share < 0 or a.repeat_share + a.statement_share > 1:
        return error(f"--statement-share {a.statement_share}: a share, 0 to 1 with --repeat-share {a.repeat_share}")
    if not 0 <= a.early_share <= 1:
        return error(f"--early-share {a.early_share}: a share, 0 to 1")

    import zstandard

    from hfpretrain.data.read import DataError, expand_inputs, generate_records
    from hfpretrain.data.tokenizer import load_tokenizer

    files = expand_inputs(a.input)
    missing = [f for f in files if f["kind"] == "missing"]
    if missing:
        return error(f"--input {missing[0]['path']}: {missing[0]['error']}")
    try:
        tokenizer = load_tokenizer(a.tokenizer)
    except DataError as e:
        return error(str(e))
    texts = (row["text"] for row in generate_records(files) if not row["skip"])
    count = lambda batch: [len(ids) for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]]  # noqa: E731
    out = Path(a.out)
    partial = out.with_name(out.name + ".partial")  # the file appears whole or not at all
    try:
        with zstandard.open(partial, "wt", encoding="utf-8") as f:
            for text in retrieval_documents(
                texts,
                count,
                a.documents,
                a.min_tokens,
                a.max_tokens,
                min_facts=a.min_facts,
                max_facts=a.max_facts,
                repeat_share=a.repeat_share,
                statement_share=a.statement_share,
                early_share=a.early_share,
                seed=a.seed,
            ):
                # made_by: the arguments, so that a run's report can say how to make the file again
                f.write(json.dumps({"text": text, "meta": {"pile_set_name": "Retrieval", "made_by": argv}}) + "\n")
    except (DataError, ValueError) as e:
        partial.unlink(missing_ok=True)
        return error(f"--input {' '.join(a.input)}: {e}")
    os.replace(partial, out)
    print(f"{out}: {a.documents} documents of {a.min_tokens:,} to {a.max_tokens:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
