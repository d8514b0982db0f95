"""Train a byte-level BPE tokenizer on Pile-format text (see docs/data.md).

python scripts/train_tokenizer.py --input 'data/train-*.jsonl.zst' --vocab-size 8192 --out runs/tok8k
python scripts/tokenize_pile.py --tokenizer runs/tok8k ...      # then use it like any other
"""

from __future__ import annotations

import argparse
import logging
import sys

from hfpretrain.cli import error, os_error_line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--input", nargs="+", required=True, help=".jsonl/.jsonl.zst/.parquet files, globs, folders or a Hub id"
    )
    p.add_argument("--vocab-size", type=int, required=True, help="tokens in all, bytes and <|endoftext|> included")
    p.add_argument("--out", required=True, help="output folder (AutoTokenizer.from_pretrained loads it)")
    p.add_argument("--max-docs", type=int, default=None, help="train on the first N documents only")
    p.add_argument("--min-frequency", type=int, default=2, help="merges seen fewer times are not learned")
    p.add_argument(
        "--text-field",
        default="text",
        metavar="FIELD",
        help="the record field (jsonl key, parquet column) that holds the document (default: text)",
    )
    p.add_argument(
        "--txt-split",
        choices=["file", "paragraph"],
        default="file",
        help=".txt inputs: one document per file (default) or per blank-line-separated paragraph",
    )
    p.add_argument(
        "--on-bad",
        choices=["skip", "fail"],
        default="skip",
        help="bad input records: skip and count (default) or fail (as tokenize)",
    )
    p.add_argument(
        "--max-bad-fraction",
        type=float,
        default=0.01,
        help="fail above this fraction of bad records, or of bytes lost (as tokenize)",
    )
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="go on when a whole input file is lost: missing, empty, unreadable, or a .zst cut short by an "
        "unknown amount (as tokenize); without it each is an error",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into --out even if it holds other files (those of the same names are replaced)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from hfpretrain.data import DataError
    from hfpretrain.data.train_tokenizer import train_tokenizer

    try:
        print(
            train_tokenizer(
                args.input,
                args.vocab_size,
                args.out,
                args.max_docs,
                args.min_frequency,
                on_bad=args.on_bad,
                max_bad_fraction=args.max_bad_fraction,
                allow_missing=args.allow_missing,
                text_field=args.text_field,
                txt_split=args.txt_split,
                force=args.force,
            )
        )
    except DataError as e:
        return error(e)
    except OSError as e:  # the training itself failed (disk full, a file vanished): one line
        return error(os_error_line(e), 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
