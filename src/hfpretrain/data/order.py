"""Training batches straight from the packed Arrow blocks written by ``tokenize_pile.py``.

The order of samples is a pure function of (seed, epoch, position): sample ``i`` of the run is
block ``permutation(seed, epoch = i // n_blocks)[i % n_blocks]``. A run is one long virtual
sequence of ``max_steps x samples_per_step`` samples, read in order by :class:`ResumableSampler`.
Resuming at optimizer step k starts that sampler at ``k x samples_per_step``: O(1), no replay of
consumed batches. With several processes, accelerate deals consecutive micro-batches of the
sequence to the ranks in turn, so ranks see disjoint blocks.
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # before atexit.register below: see kill_loader_workers
import signal
from functools import lru_cache
from pathlib import Path

import datasets
import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from . import load_blocks
from .manifest import MANIFEST, read_manifest
from .pack import segment_starts


def load_input_ids(path: str | Path, split: str) -> datasets.Dataset:
    """The ``input_ids`` column of a split of tokenize_pile.py's output, as numpy rows; refused when its rows are not
    the manifest's ``seq_len`` long (every length check before training reads the manifest, not the blocks)."""
    blocks = load_blocks(path, split)
    if "input_ids" not in blocks.column_names:
        raise ValueError(f"{Path(path) / split} has no input_ids column (columns: {blocks.column_names})")
    ids = blocks.select_columns(["input_ids"]).with_format("numpy")
    manifest = read_manifest(Path(path))
    if manifest and manifest.get("seq_len") and len(ids) and len(ids[0]["input_ids"]) != int(manifest["seq_len"]):
        raise ValueError(
            f"{Path(path) / split}: its blocks are {len(ids[0]['input_ids'])} tokens long, but "
            f"{Path(path) / MANIFEST} says seq_len {manifest['seq_len']}: the folder mixes two "
            f"tokenizations; tokenize it again (scripts/tokenize_pile.py --out {path})"
        )
    return ids


class ShuffledBlocks(Dataset):
    """A virtual sequence of ``length`` samples drawn epoch by epoch from a permutation of the blocks."""

    def __init__(self, blocks: datasets.Dataset, length: int, seed: int):
        if len(blocks) == 0:
            raise ValueError("the training split holds no blocks")
        self.blocks, self.length, self.seed = blocks, length, seed

    def __len__(self) -> int:
        return self.length

    @lru_cache(maxsize=2)
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.blocks))

    def block_index(self, i: int) -> int:
        n = len(self.blocks)
        return int(self._permutation(i // n)[i % n])

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        rows = self.blocks[[self.block_index(i) for i in indices]]["input_ids"]
        return list(np.asarray(rows))

    def __getitem__(self, i: int) -> np.ndarray:
        return self.__getitems__([i])[0]


class EvalBlocks(Dataset):
    """The first ``n`` validation blocks, in order: a fixed token budget for comparable losses."""

    def __init__(self, blocks: datasets.Dataset, n: int):
        self.blocks, self.n = blocks, min(n, len(blocks))

    def __len__(self) -> int:
        return self.n

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        return list(np.asarray(self.blocks[list(indices)]["input_ids"]))

    def __getitem__(self, i: int) -> np.ndarray:
        return self.__getitems__([i])[0]


class ResumableSampler(Sampler[int]):
    """Yields positions ``start, start+1, ...`` of the virtual sequence; ``start`` is set on resume."""

    def __init__(self, length: int):
        self.length, self.start = length, 0

    def __len__(self) -> int:
        return self.length - self.start

    def __iter__(self):
        return iter(range(self.start, self.length))


_worker_ignores_sigterm = False


def _ignore_sigterm_in_worker() -> None:
    """A cluster's SIGTERM (and ``timeout``'s) goes to every process of the job, a terminal's Ctrl-C
    (SIGINT) to every process of the foreground group; a data-loader worker killed by either takes the
    main process down mid-step. Workers ignore both, so the main process (PreemptionCallback) finishes
    the step, saves, and stops them itself."""
    global _worker_ignores_sigterm
    if not _worker_ignores_sigterm and torch.utils.data.get_worker_info() is not None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _worker_ignores_sigterm = True


def kill_loader_workers() -> None:
    """The other side of workers ignoring SIGTERM: Python's exit ends daemon children with SIGTERM,
    then waits for them. After a crash the loader never shut its workers down, so that wait lasted
    forever; kill them first. (Registered after multiprocessing's own exit hook, so it runs before.)"""
    if hasattr(signal, "SIGCHLD"):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # torch's handler would report each as a failure
    for child in multiprocessing.active_children():
        if child.daemon:
            child.kill()


_cleanup_installed = False


def install_worker_cleanup() -> None:
    """Register :func:`kill_loader_workers` once, when a run uses loader workers (not at import: a library
    user's process keeps its own exit behaviour and SIGCHLD handling)."""
    global _cleanup_installed
    if not _cleanup_installed:
        atexit.register(kill_loader_workers)
        _cleanup_installed = True


def collate_blocks(rows: list[np.ndarray], eos_id: int | None = None) -> dict[str, torch.Tensor]:
    """Stack blocks into ``input_ids`` and ``labels``; with ``eos_id`` (``model.document_mask``) also
    ``position_ids`` that restart after every end-of-text, from which transformers builds a block-causal mask
    (each document attends to itself only) and RoPE counts positions from each document's start."""
    _ignore_sigterm_in_worker()  # collation runs in the worker: its first batch sets this up
    # Causal LMs shift labels inside the loss, so labels are the inputs themselves (same tensor, no copy).
    ids = torch.from_numpy(np.stack(rows).astype(np.int64))
    batch = {"input_ids": ids, "labels": ids}
    if eos_id is not None:
        batch["position_ids"] = document_positions(ids, eos_id)
    return batch


def attended_length(blocks: datasets.Dataset, eos_id: int, sample: int = 1024) -> float:
    """Under the document mask, how far a token's attention reaches: the mean over tokens of the length of the
    document segment it sits in (sum n^2 / sum n over the segments, which start where :func:`document_positions`
    starts them), read from ``sample`` blocks spread evenly over ``blocks`` (an ``input_ids`` column as numpy rows).
    The length that the attention term of a FLOPs count takes in place of the block's."""
    rows = np.linspace(0, len(blocks) - 1, num=min(sample, len(blocks))).round().astype(int)
    ids = np.asarray(blocks[rows.tolist()]["input_ids"])
    starts = np.flatnonzero(segment_starts(ids, eos_id))  # every row opens with one: no segment spans two rows
    lengths = np.diff(starts, append=ids.size).astype(np.float64)
    return float((lengths**2).sum() / lengths.sum())


def document_positions(ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Per row, each token's offset from the start of its document; a document starts at the row's first
    token and after each ``eos_id`` (the end-of-text belongs to the document it ends)."""
    seq = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)
    starts = torch.zeros_like(ids, dtype=torch.bool)  # column 0 starts a document too: its seq is 0 anyway
    starts[:, 1:] = ids[:, :-1] == eos_id
    start_of_doc = (seq * starts).cummax(dim=-1).values
    return seq - start_of_doc
