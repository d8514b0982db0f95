"""Packer unit tests: exact conservation, eos placement and per-segment sets on Arrow batches."""

import numpy as np
import pyarrow as pa

from hfpretrain.data.pack import Packer

EOS = 9


def _batch(docs, sets):
    docs = [d + [EOS] for d in docs]
    return pa.table({"input_ids": pa.array(docs, type=pa.large_list(pa.uint16())), "set": sets})


def test_packer_carries_remainder_across_batches_and_conserves_tokens():
    p = Packer(seq_len=4, eos_id=EOS, dtype=np.uint16, set_index={})
    t1 = p(_batch([[1, 2], [3, 4, 5, 6, 7]], ["A", "B"]))  # 3 + 6 = 9 tokens -> 2 blocks, carry 1
    t2 = p(_batch([[8]], ["A"]))  # carry 1 + 2 = 3 -> 0 blocks, carry 3
    t3 = p(_batch([[1, 1, 1, 1, 1]], ["C"]))  # 3 + 6 = 9 -> 2 blocks, carry 1
    blocks = np.concatenate([np.array(t["input_ids"].to_pylist(), dtype=np.int64).reshape(-1, 4) for t in (t1, t2, t3) if t.num_rows])
    assert blocks.shape == (4, 4)
    stream = [1, 2, EOS, 3, 4, 5, 6, 7, EOS, 8, EOS, 1, 1, 1, 1, 1, EOS]
    assert blocks.reshape(-1).tolist() == stream[:16]
    assert p.tokens == 17 == p.blocks * 4 + p.dropped_tail_tokens
    assert p.dropped_tail_tokens == 1 and p.documents == 4
    assert p.tokens_per_set == {"A": 5, "B": 6, "C": 6}
    # set_ids: one entry per document segment of each block
    sets = [s for t in (t1, t2, t3) if t.num_rows for s in t["set_ids"].to_pylist()]
    assert sets == [[0, 1], [1], [1, 0, 2], [2]]
    assert t1.schema.field("input_ids").type == pa.list_(pa.uint16(), 4)
