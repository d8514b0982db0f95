"""Tokenize Pile-format text into packed training blocks (see docs/data.md).

    python scripts/tokenize_pile.py --input 'data/train-*.jsonl.zst' --val-input data/val.jsonl.zst \
        --tokenizer data/tokenizers/gpt2 --seq-len 1024 --out runs/data/gpt2-1024 --num-proc 4
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from hfpretrain.cli import error, os_error_line

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--input",
        nargs="+",
        help="train inputs: .jsonl files (plain or .zst/.gz/.bz2/.xz), .parquet/.txt "
        "files, globs, folders, datasets save_to_disk folders (FOLDER?split=NAME for one split), or a Hub "
        "dataset id with options: allenai/c4?name=en&split=train&data_files=en/c4-train.0000[0-3]-of-01024.json.gz "
        "(quote it)",
    )
    hub = p.add_argument_group("a Hub dataset, as run_clm.py names it (instead of --input ID?name=...&split=...)")
    hub.add_argument("--dataset-name", metavar="ID", help="Hub dataset id or a local dataset folder, e.g. allenai/c4")
    hub.add_argument("--dataset-config", metavar="NAME", help="its configuration, e.g. en")
    hub.add_argument("--split", default="train", help="the split to train on (default: train)")
    hub.add_argument(
        "--val-split",
        metavar="SPLIT",
        help="the split whose first --val-docs documents are the validation set (default: the train "
        "split's first documents, as without --val-input)",
    )
    p.add_argument("--blend", help='blend JSON: {"sources": [{"paths": [...], "epochs": 1.5}, ...]}')
    p.add_argument(
        "--val-input", nargs="+", help="validation inputs (default: the first --val-docs documents of --input)"
    )
    p.add_argument(
        "--val-docs",
        type=int,
        default=None,
        help="validation = the first N documents (default 10000; without --val-input, of an input of fewer "
        "than 100,000 documents: the first 10%% of them, said in one line)",
    )
    p.add_argument("--tokenizer", required=True, help="tokenizer folder or Hub id")
    p.add_argument("--seq-len", type=int, required=True, help="tokens per block")
    p.add_argument(
        "--pack",
        choices=["concat", "whole"],
        default="concat",
        help="how documents fill the blocks: concat (default: in order, cut at block ends) or whole (kept "
        "whole where they fit, order moved within 64 documents: for long-context blocks)",
    )
    p.add_argument("--out", required=True, help="output folder (train/, validation/, tokenizer/, manifest.json)")
    p.add_argument("--num-proc", type=int, default=1, help="processes for reading and tokenizing")
    p.add_argument("--max-docs", type=int, default=None, help="limit train documents (for testing)")
    p.add_argument(
        "--sets",
        nargs="+",
        default=None,
        metavar="SET",
        help="keep only documents of these pile_set_names (train and validation), e.g. --sets Books "
        "TechDocs Math: a high-quality subset of a mix for a curriculum phase",
    )
    p.add_argument(
        "--text-field",
        default="text",
        metavar="FIELD",
        help="the record field (jsonl key, parquet column) that holds the document (default: text), "
        "like run_clm.py's --text_column_name",
    )
    p.add_argument(
        "--eos-token",
        default=None,
        help="end-of-text token (default: <|endoftext|>/<|end_of_text|> if present, else eos)",
    )
    p.add_argument(
        "--on-bad", choices=["skip", "fail"], default="skip", help="bad input records: skip and count (default) or fail"
    )
    p.add_argument(
        "--max-bad-fraction",
        type=float,
        default=0.01,
        help="with --on-bad skip, fail above this fraction of bad records, or of bytes lost (bad records "
        "and the measured part of a cut .zst)",
    )
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="go on when a whole input file is lost: missing, a glob matching nothing, empty, unreadable, "
        "or a .zst cut short by an unknown amount (listed in manifest.json input_files); without "
        "it each is an error",
    )
    p.add_argument(
        "--txt-split",
        choices=["file", "paragraph"],
        default="file",
        help=".txt inputs: one document per file (default) or per blank-line-separated paragraph",
    )
    p.add_argument(
        "--encoder",
        choices=["auto", "hf", "tiktoken"],
        default="auto",
        help="tokenizer backend: auto (default: tiktoken if installed and exact for this tokenizer, else HF), hf, tiktoken; same ids",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if a finished output with the same fingerprint exists (only an output of this "
        "tool is ever replaced; never another folder, the working directory, home or a root)",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.dataset_name:
        if args.input or args.blend:
            p.error("--dataset-name replaces --input and --blend: give one of them")
        args.input = [hub_spec(args.dataset_name, args.dataset_config, args.split)]
        if args.val_split:
            if args.val_input:
                p.error("--val-split replaces --val-input: give one of them")
            args.val_input = [hub_spec(args.dataset_name, args.dataset_config, args.val_split)]
    elif args.dataset_config or args.val_split or args.split != "train":
        p.error("--dataset-config, --split and --val-split go with --dataset-name")
    return args


def hub_spec(name: str, config: str | None, split: str) -> str:
    """The --input spelling of run_clm's --dataset_name/--dataset_config_name and a split."""
    return f"{name}?" + "&".join([*([f"name={config}"] if config else []), f"split={split}"])


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.quiet:
        import datasets

        datasets.disable_progress_bars()
    from hfpretrain.data import DataError, tokenize_corpus

    try:
        out = tokenize_corpus(
            inputs=args.input,
            out=args.out,
            tokenizer=args.tokenizer,
            seq_len=args.seq_len,
            val_inputs=args.val_input,
            val_docs=args.val_docs,
            num_proc=args.num_proc,
            max_docs=args.max_docs,
            force=args.force,
            on_bad=args.on_bad,
            max_bad_fraction=args.max_bad_fraction,
            eos_token=args.eos_token,
            blend=args.blend,
            encoder=args.encoder,
            sets=args.sets,
            text_field=args.text_field,
            txt_split=args.txt_split,
            allow_missing=args.allow_missing,
            pack=args.pack,
        )
    except DataError as e:  # bad input, flags or output folder: one line, nothing written
        return error(e)
    except OSError as e:  # the build itself failed (disk full, a file vanished): one line
        return error(os_error_line(e), 1)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
