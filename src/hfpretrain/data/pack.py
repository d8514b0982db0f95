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
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OTHER_SET = 255


class Packer:
    """Stateful ``Dataset.map`` function (arrow format, batched, one process)."""

    def __init__(self, seq_len: int, eos_id: int, dtype, set_index: dict[str, int]):
        if seq_len < 2:
            raise ValueError("seq_len must be >= 2")
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
        self.documents += len(lens)
        self.tokens += int(lens.sum())
        for name, n in zip(names, lens.tolist()):
            self.tokens_per_set[name] = self.tokens_per_set.get(name, 0) + n

        ids = np.concatenate([self.carry_ids, flat])
        tok_sets = np.concatenate([self.carry_sets, np.repeat(sets, lens)])
        n = len(ids) // self.seq_len
        cut = n * self.seq_len
        self.carry_ids = ids[cut:].copy()
        self.carry_sets = tok_sets[cut:].copy()
        self.blocks += n
        blocks = ids[:cut].reshape(n, self.seq_len)
        bsets = tok_sets[:cut].reshape(n, self.seq_len)
        starts = np.zeros((n, self.seq_len), dtype=bool)
        starts[:, 0] = True
        starts[:, 1:] = blocks[:, :-1] == self.eos_id
        seg_sets = bsets[starts]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(starts.sum(axis=1), out=offsets[1:])
        ids_arr = pa.FixedSizeListArray.from_arrays(pa.array(blocks.reshape(-1)), self.seq_len)
        sets_arr = pa.ListArray.from_arrays(pa.array(offsets), pa.array(seg_sets, type=pa.uint8()))
        return pa.table({"input_ids": ids_arr, "set_ids": sets_arr})

    @property
    def dropped_tail_tokens(self) -> int:
        return int(len(self.carry_ids))
