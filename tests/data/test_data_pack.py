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
    blocks = np.concatenate(
        [np.array(t["input_ids"].to_pylist(), dtype=np.int64).reshape(-1, 4) for t in (t1, t2, t3) if t.num_rows]
    )
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


def _pack(mode: str, docs: list[list[int]], seq_len: int, batch: int = 7):
    p = Packer(seq_len=seq_len, eos_id=EOS, dtype=np.uint16, set_index={}, mode=mode, total_documents=len(docs))
    tables = [
        p(_batch(docs[i : i + batch], [f"S{len(d) % 3}" for d in docs[i : i + batch]]))
        for i in range(0, len(docs), batch)
    ]
    blocks = np.concatenate(
        [np.array(t["input_ids"].to_pylist(), dtype=np.int64).reshape(-1, seq_len) for t in tables if t.num_rows]
    )
    sets = [s for t in tables if t.num_rows for s in t["set_ids"].to_pylist()]
    return p, blocks, sets


def test_whole_packing_keeps_documents_whole_and_conserves_tokens():
    """Random documents (a few longer than a block): whole mode cuts far fewer of those that fit a block than concat,
    gives a document longer than a block whole blocks of its own, loses no token and reorders only within the
    window; the manifest's length statistics agree with the documents."""
    rng = np.random.default_rng(0)
    seq_len = 64
    lengths = [int(n) for n in rng.integers(2, 40, 300)] + [150, 200]
    order = rng.permutation(len(lengths))
    docs = [[int(10 + k)] * (lengths[i] - 1) for k, i in enumerate(order)]  # document k: id 10 + k, then EOS
    concat, concat_blocks, _ = _pack("concat", docs, seq_len)
    whole, blocks, sets = _pack("whole", docs, seq_len)
    assert whole.tokens == concat.tokens == whole.blocks * seq_len + whole.dropped_tail_tokens
    assert whole.dropped_tail_tokens < seq_len and whole.blocks == concat.blocks
    c, w = concat.length_stats(), whole.length_stats()
    assert c["split_short"] > 50 and w["split_short"] <= c["split_short"] // 4
    assert w["split_short_tokens"] < c["split_short_tokens"] // 4
    assert w["longer_than_block"] == 2 and w["max"] == 200 and w["documents"] == 302
    assert sum(b["documents"] for b in w["histogram"].values()) == 302
    assert sum(b["tokens"] for b in w["histogram"].values()) == whole.tokens
    # every token of every document is in the blocks, none twice: what is missing is the dropped tail
    flat = blocks.reshape(-1)
    counts = np.bincount(flat, minlength=10 + len(docs))
    assert all(counts[10 + k] <= len(doc) for k, doc in enumerate(docs))
    missing = sum(len(doc) - counts[10 + k] for k, doc in enumerate(docs)) + len(docs) - counts[EOS]
    assert missing == whole.dropped_tail_tokens
    # the long documents: one of them takes whole blocks
    assert any((row == row[0]).all() and row[0] >= 10 for row in blocks)
    # documents move at most a window away from their place
    first_seen = [np.flatnonzero(flat == 10 + k)[0] // seq_len for k in range(len(docs)) if (flat == 10 + k).any()]
    assert max(abs(a - b) for a, b in zip(first_seen, sorted(first_seen))) < 64
    assert len(sets) == len(blocks)
