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
    try:
        return datasets.load_from_disk(str(folder))
    except (OSError, ValueError) as e:  # a truncated or overwritten Arrow file: pyarrow's message names no file
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{folder}: cannot read its Arrow files ({type(e).__name__}: {why}): the tokenized data "
            f"is damaged; tokenize it again (scripts/tokenize_pile.py --out {out})"
        ) from None


__all__ = ["tokenize_corpus", "DataError", "load_blocks"]
