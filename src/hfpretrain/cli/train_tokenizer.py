"""Train a byte-level BPE tokenizer on Pile-format text (see docs/data.md).

    python scripts/train_tokenizer.py --input 'data/train-*.jsonl.zst' --vocab-size 8192 --out runs/tok8k
    python scripts/tokenize_pile.py --tokenizer runs/tok8k ...      # then use it like any other
"""

from __future__ import annotations

import argparse
import logging
import sys

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", nargs="+", required=True, help=".jsonl/.jsonl.zst/.parquet files, globs, folders or a Hub id")
    p.add_argument("--vocab-size", type=int, required=True, help="tokens in all, bytes and <|endoftext|> included")
    p.add_argument("--out", required=True, help="output folder (AutoTokenizer.from_pretrained loads it)")
    p.add_argument("--max-docs", type=int, default=None, help="train on the first N documents only")
    p.add_argument("--min-frequency", type=int, default=2, help="merges seen fewer times are not learned")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from hfpretrain.data import DataError
    from hfpretrain.data.train_tokenizer import train_tokenizer

    try:
        print(train_tokenizer(args.input, args.vocab_size, args.out, args.max_docs, args.min_frequency))
    except DataError as e:
        return error(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
