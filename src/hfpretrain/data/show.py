"""Render example training batches from a tokenize_corpus output, for eyes and reports.

Each block is decoded segment by segment (segments end at the end-of-text id), each segment
labelled with its source set name; a block's first segment is marked ``(cont.)`` when it
continues a document from the previous block. Summary statistics come from the manifest plus
the blocks shown.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _short(text: str, max_chars: int | None) -> str:
    text = text.replace("\n", "⏎")
    if max_chars is not None and len(text) > max_chars:
        half = max_chars // 2
        return text[:half] + f" … [{len(text) - 2 * half} chars] … " + text[-half:]
    return text


def render_batches(
    out, split: str = "train", num_batches: int = 2, batch_size: int = 4, max_chars: int | None = 240
) -> str:
    """Return the text that ``scripts/show_batches.py`` prints: the first ``num_batches`` batches
    of ``batch_size`` consecutive blocks of ``split``, then summary statistics."""
    import datasets
    from transformers import AutoTokenizer

    out = Path(out)
    manifest = json.loads((out / "manifest.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    ds = datasets.load_from_disk(str(out / split))
    sets = manifest["sets"]
    eos_id = manifest["tokenizer"]["eos_token_id"]
    eos = manifest["tokenizer"]["eos_token"]
    seq_len = manifest["seq_len"]
    n = min(len(ds), num_batches * batch_size)
    rows = ds.with_format("numpy")[:n]
    ids = np.asarray(rows["input_ids"]).reshape(n, seq_len)
    set_ids = rows["set_ids"]

    lines = [
        f"{out} [{split}]: {len(ds)} blocks x {seq_len} tokens ({manifest['dtype']}); "
        f"tokenizer {manifest['tokenizer']['name_or_path']} (eos {eos!r} = {eos_id}); "
        f"labels = input_ids (shifted inside the model)"
    ]
    seg_total = 0
    set_tokens: dict[str, int] = {}
    for b in range(0, n, batch_size):
        batch = ids[b : b + batch_size]
        lines.append("")
        lines.append(
            f"=== batch {b // batch_size}: input_ids shape {tuple(batch.shape)}, "
            f"{int((batch == eos_id).sum())} end-of-text tokens ==="
        )
        for r in range(len(batch)):
            i = b + r
            row = batch[r]
            cut = np.flatnonzero(row == eos_id) + 1
            bounds = [0] + [int(c) for c in cut if c < seq_len] + [seq_len]
            segs = [row[s:e] for s, e in zip(bounds[:-1], bounds[1:])]
            names = [sets[int(k)] if int(k) < len(sets) else f"set{int(k)}" for k in np.asarray(set_ids[i]).tolist()]
            cont = i > 0 and int(ds[i - 1]["input_ids"][-1]) != eos_id
            seg_total += len(segs)
            lines.append(
                f"--- block {i}: {len(segs)} segment(s), document starts at "
                f"{[s for s in bounds[:-1] if s > 0 or not cont]}"
            )
            for k, seg in enumerate(segs):
                name = names[k] if k < len(names) else "?"
                set_tokens[name] = set_tokens.get(name, 0) + len(seg)
                ended = len(seg) and int(seg[-1]) == eos_id
                body = tok.decode(seg[:-1] if ended else seg, skip_special_tokens=False)
                tag = f"[{name}{' (cont.)' if k == 0 and cont else ''} | {len(seg)} tok]"
                lines.append(f"  {tag} {_short(body, max_chars)}{' ' + eos if ended else ' …'}")

    m = manifest[split]
    lines.append("")
    lines.append(f"=== summary ({split}) ===")
    lines.append(
        f"documents {m['documents']:,} (read {m['records_read']:,}, skipped {m['skipped'] or 0}); "
        f"tokens {m['tokens']:,} = {m['blocks']:,} blocks x {seq_len} + {m['dropped_tail_tokens']} dropped tail"
    )
    lines.append(
        f"mean tokens/document {m['tokens'] / max(m['documents'], 1):,.1f}; "
        f"bytes {m['bytes']:,} ({m['bytes_overhead']:+.2%} vs bare ids)"
    )
    lines.append(f"shown: {n} blocks, {seg_total} segments, {seg_total / max(n, 1):.2f} segments/block")
    total = sum(m["tokens_per_set"].values())
    lines.append("tokens per set (split | shown blocks):")
    for name, t in sorted(m["tokens_per_set"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:<14} {t:>12,} {t / total:7.2%} | {set_tokens.get(name, 0):>8,}")
    return "\n".join(lines)
