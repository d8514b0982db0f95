"""Pack tokenized documents into fixed-length training blocks.

Layout: **non-shifted blocks of exactly ``seq_len`` tokens** (not ``seq_len + 1``). Hugging Face
causal LMs shift labels inside the loss, so training uses ``labels = input_ids``; every token
lands in exactly one block, nothing is stored twice, and conservation is exact::

    sum(document tokens + 1 end-of-text) == blocks * seq_len + dropped_tail_tokens

(the cost: the first token of each block is never a prediction target, 1/seq_len of the data).

Packing is one sequential pass over the tokenized documents in order (``Dataset.map`` with a
single process), with a carried remainder of fewer than ``seq_len`` tokens between batches.
Memory is bounded by one map batch; the only tail dropped is the final remainder of a split.
Tokenization itself runs in parallel before this step.

Columns written per block:

* ``input_ids``: ``fixed_size_list<uint16|uint32>[seq_len]`` (no offsets, so bytes = bare ids).
* ``set_ids``: ``list<uint8>``, the set index of each document segment in the block, in order
  (segments are split after each end-of-text id; the first may continue the previous block's
  document). Names are ``manifest["sets"]``; index 255 means "other" when there are > 255 sets.
  A few bytes per block, so the total stays within a few percent of the bare ids.

Two ways to fill blocks (``mode``, ``tokenize_pile.py --pack``):

* ``concat`` (default): the documents in order, cut wherever a block ends; any document may be split.
* ``whole``: for long-context training, where a block holds many documents and a cut one loses its context.
  A document longer than a block in the window of the next :data:`WINDOW` documents fills each empty block with
  a block's worth of itself (one document over the whole context); otherwise a block starts with the oldest
  document and is filled best-fit (the longest whole document of the window that fits the room left, so that
  short ones remain for small rooms); only when none fits is one cut to fill it: a document longer than a block
  (cut anyway), else the shortest. The order changes only within the window, nothing is padded, and conservation
  is the same. A Python loop: slower
  than ``concat``, meant for the long-length outputs a context-extension phase reads.

Both count the documents' lengths (end-of-text included) for the manifest (:meth:`Packer.length_stats`): a
histogram by powers of two, percentiles, and how many documents a block boundary cut.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OTHER_SET = 255
PACK_MODES = ("concat", "whole")
WINDOW = 64  # documents a block may take from in whole mode: how far the order may move


def segment_starts(blocks: np.ndarray, eos_id: int) -> np.ndarray:
    """Where the document segments of each block start: its first token and every token after an end-of-text."""
    starts = np.zeros(blocks.shape, dtype=bool)
    starts[:, 0] = True
    starts[:, 1:] = blocks[:, :-1] == eos_id
    return starts


class Packer:
    """Stateful ``Dataset.map`` function (arrow format, batched, one process)."""

    def __init__(
        self,
        seq_len: int,
        eos_id: int,
        dtype,
        set_index: dict[str, int],
        mode: str = "concat",
        total_documents: int | None = None,
    ):
        if seq_len < 2:
            raise ValueError("seq_len must be >= 2")
        if mode not in PACK_MODES:
            raise ValueError(f"pack mode {mode!r} is not one of {PACK_MODES}")
        if mode == "whole" and total_documents is None:
            raise ValueError("whole packing needs total_documents: the last batch places the window's documents")
        self.mode = mode
        self.total_documents = total_documents
        self.pending: deque = deque()  # whole mode: [ids, set index] not placed yet (the window and beyond)
        self.block_parts: list = []  # whole mode: (ids, set index) pieces of the block being filled
        self.fill = 0
        self.lengths: list[np.ndarray] = []  # every document's length, per batch
        self.split_documents = 0  # documents a block boundary cut
        self.split_short_documents = 0  # ... of those that would have fitted in one block
        self.split_short_tokens = 0  # ... their tokens
        self.seq_len = int(seq_len)
        self.eos_id = int(eos_id)
        self.dtype = np.dtype(dtype)
        self.set_index = set_index  # shared between splits: name -> index, first-seen order
        self.carry_ids = np.zeros(0, dtype=self.dtype)
        self.carry_sets = np.zeros(0, dtype=np.uint8)
        self.documents = 0
        self.tokens = 0
        self.blocks = 0
        self.tokens_per_set: dict[str, int] = {}

    def _set_idx(self, names: list[str]) -> np.ndarray:
        out = np.empty(len(names), dtype=np.uint8)
        for i, n in enumerate(names):
            idx = self.set_index.get(n)
            if idx is None:
                idx = len(self.set_index) if len(self.set_index) < OTHER_SET else OTHER_SET
                if idx < OTHER_SET:
                    self.set_index[n] = idx
            out[i] = idx
        return out

    def __call__(self, table: pa.Table) -> pa.Table:
        col = table.column("input_ids").combine_chunks()
        lens = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = col.flatten().to_numpy(zero_copy_only=False).astype(self.dtype, copy=False)
        names = table.column("set").to_pylist()
        sets = self._set_idx(names)
        start = self.tokens  # the batch's first token in the stream of all documents
        self.documents += len(lens)
        self.tokens += int(lens.sum())
        self.lengths.append(lens.astype(np.int32))
        for name, n in zip(names, lens.tolist()):
            self.tokens_per_set[name] = self.tokens_per_set.get(name, 0) + n
        if self.mode == "whole":
            blocks, bsets = self._whole(flat, lens, sets)
        else:
            blocks, bsets = self._concat(flat, lens, sets, start)
        return self._table(blocks, bsets)

    def _concat(self, flat: np.ndarray, lens: np.ndarray, sets: np.ndarray, start: int):
        ends = start + np.cumsum(lens)  # one past each document's last token, in the stream
        crossed = (ends - lens) // self.seq_len != (ends - 1) // self.seq_len
        self.split_documents += int(crossed.sum())
        self.split_short_documents += int((crossed & (lens <= self.seq_len)).sum())
        self.split_short_tokens += int(lens[crossed & (lens <= self.seq_len)].sum())
        ids = np.concatenate([self.carry_ids, flat])
        tok_sets = np.concatenate([self.carry_sets, np.repeat(sets, lens)])
        n = len(ids) // self.seq_len
        cut = n * self.seq_len
        self.carry_ids = ids[cut:].copy()
        self.carry_sets = tok_sets[cut:].copy()
        return ids[:cut].reshape(n, self.seq_len), tok_sets[:cut].reshape(n, self.seq_len)

    def _whole(self, flat: np.ndarray, lens: np.ndarray, sets: np.ndarray):
        offsets = np.concatenate([[0], np.cumsum(lens)])
        for k in range(len(lens)):
            self.pending.append([flat[offsets[k] : offsets[k + 1]], int(sets[k]), False])  # ids, set, cut before
        final = self.documents >= self.total_documents
        done = []
        while self.pending and (final or len(self.pending) > WINDOW):
            room = self.seq_len - self.fill
            window = [self.pending[i] for i in range(min(WINDOW, len(self.pending)))]
            longer = next((i for i, doc in enumerate(window) if len(doc[0]) > self.seq_len), None)
            if self.fill == 0:  # a block starts with the oldest document: none waits longer than a block
                pick = None if longer is not None else 0
            else:  # then best fit: the longest that fits, so the short ones are left for the small rooms
                fits = [(len(doc[0]), -i) for i, doc in enumerate(window) if len(doc[0]) <= room]
                pick = -max(fits)[1] if fits else None
            if pick is not None:
                doc = window[pick]
                del self.pending[pick]
                self.block_parts.append((doc[0], doc[1]))
                self.fill += len(doc[0])
            else:
                # an empty block takes a block's worth of a document longer than one (one document over the whole
                # context); a partly filled one that no whole document fits takes a piece of such a document as
                # filler (it is cut anyway), else of the shortest (the least context lost)
                if longer is None:
                    longer = min(range(len(window)), key=lambda i: (len(window[i][0]), i))
                self._cut(window[longer], room)
            if self.fill == self.seq_len:
                done.append(self.block_parts)
                self.block_parts, self.fill = [], 0
        self.carry_ids = (
            np.concatenate([p[0] for p in self.block_parts]) if self.block_parts else np.zeros(0, dtype=self.dtype)
        )  # the partial block: the tail dropped at the end
        n = len(done)
        blocks = np.zeros((n, self.seq_len), dtype=self.dtype)
        bsets = np.zeros((n, self.seq_len), dtype=np.uint8)
        for b, parts in enumerate(done):
            blocks[b] = np.concatenate([p[0] for p in parts])
            bsets[b] = np.concatenate([np.full(len(p[0]), p[1], dtype=np.uint8) for p in parts])
        return blocks, bsets

    def _cut(self, doc: list, room: int) -> None:
        """Whole mode: the first ``room`` tokens of a pending ``doc`` complete the block; the rest stays pending."""
        if not doc[2]:
            doc[2] = True
            self.split_documents += 1
            if len(doc[0]) <= self.seq_len:
                self.split_short_documents += 1
                self.split_short_tokens += len(doc[0])
        self.block_parts.append((doc[0][:room], doc[1]))
        doc[0] = doc[0][room:]
        self.fill = self.seq_len

    def _table(self, blocks: np.ndarray, bsets: np.ndarray) -> pa.Table:
        n = len(blocks)
        self.blocks += n
        starts = segment_starts(blocks, self.eos_id)
        seg_sets = bsets[starts]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(starts.sum(axis=1), out=offsets[1:])
        ids_arr = pa.FixedSizeListArray.from_arrays(pa.array(blocks.reshape(-1)), self.seq_len)
        sets_arr = pa.ListArray.from_arrays(pa.array(offsets), pa.array(seg_sets, type=pa.uint8()))
        return pa.table({"input_ids": ids_arr, "set_ids": sets_arr})

    @property
    def dropped_tail_tokens(self) -> int:
        return int(len(self.carry_ids)) + sum(len(doc[0]) for doc in self.pending)

    def length_stats(self) -> dict:
        """The documents' lengths in tokens (end-of-text included), for the manifest: a histogram by powers of two
        (``"<=N"``: documents and tokens of length in (N/2, N]), percentiles, and the documents a block boundary
        cut (``split_short``, ``split_short_tokens``: of those no longer than a block, which whole packing tries to
        keep whole; a block that no whole document fills exactly still needs one cut, so it lowers the tokens cut
        more than the documents)."""
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int32)
        if not len(lengths):
            return {"documents": 0}
        bucket = np.ceil(np.log2(np.maximum(lengths, 1))).astype(int)
        histogram = {}
        for b in range(int(bucket.min()), int(bucket.max()) + 1):
            inside = bucket == b
            if inside.any():
                histogram[f"<={2**b}"] = {"documents": int(inside.sum()), "tokens": int(lengths[inside].sum())}
        p50, p90, p99 = (int(v) for v in np.percentile(lengths, [50, 90, 99], method="lower"))
        return {
            "documents": int(len(lengths)),
            "mean": round(float(lengths.mean()), 1),
            "p50": p50,
            "p90": p90,
            "p99": p99,
            "max": int(lengths.max()),
            "longer_than_block": int((lengths > self.seq_len).sum()),
            "tokens_in_longer_than_block": int(lengths[lengths > self.seq_len].sum()),
            "split": self.split_documents,
            "split_short": self.split_short_documents,
            "split_short_tokens": self.split_short_tokens,
            "histogram": histogram,
        }
