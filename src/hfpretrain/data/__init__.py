"""Data pipeline: Pile-format text -> packed, tokenized training blocks (Arrow) + manifest.

Public API::

    from hfpretrain.data import tokenize_corpus, DataError, load_blocks
"""

from .pipeline import tokenize_corpus
from .read import DataError


def load_blocks(out, split: str = "train"):
    """``datasets.load_from_disk(out / split)``: rows of ``input_ids`` (seq_len ids) and ``set_ids``."""
    from pathlib import Path

    import datasets

    folder = Path(out) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} does not exist: run scripts/tokenize_pile.py --out {out} first")
    return datasets.load_from_disk(str(folder))


__all__ = ["tokenize_corpus", "DataError", "load_blocks"]
