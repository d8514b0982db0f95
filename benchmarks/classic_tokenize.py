"""Benchmark: this pipeline vs the classic ``run_clm.py`` recipe on the same input and tokenizer.

The classic recipe (transformers/examples/pytorch/language-modeling/run_clm.py), reimplemented:
``load_dataset("json")`` -> ``map(tokenizer(texts))`` (input_ids + attention_mask as Python
lists, end-of-text appended per document so both streams are the same) -> ``map(group_texts)``
(Python ``chain`` concatenation per batch of 1000 documents, cut into blocks, ``labels`` copied)
-> ``save_to_disk``. Both runs get the same ``num_proc``; both are timed end to end (read,
tokenize, pack, write). The token streams are compared: the classic per-document stream
(before grouping) must equal this pipeline's blocks followed by its dropped tail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from itertools import chain
from pathlib import Path

import numpy as np

from hfpretrain.data.manifest import dir_bytes


def classic_run_clm(files, tokenizer_dir, seq_len, out, num_proc, eos_id, cache_dir):
    import datasets
    from transformers import AutoTokenizer

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    raw = datasets.load_dataset("json", data_files=[str(f) for f in files], split="train", cache_dir=str(cache_dir))

    def tokenize_function(examples):
        output = tok(examples["text"])
        for ids, mask in zip(output["input_ids"], output["attention_mask"]):
            ids.append(eos_id)
            mask.append(1)
        return output

    tokenized = raw.map(
        tokenize_function, batched=True, num_proc=num_proc, remove_columns=raw.column_names, desc="classic tokenize"
    )

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
        total_length = len(concatenated[list(examples.keys())[0]])
        total_length = (total_length // seq_len) * seq_len
        result = {k: [t[i : i + seq_len] for i in range(0, total_length, seq_len)] for k, t in concatenated.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    lm = tokenized.map(group_texts, batched=True, num_proc=num_proc, desc="classic group_texts")
    lm.save_to_disk(str(out))
    wall = time.time() - t0
    doc_tokens = int(sum(len(x) for x in tokenized.with_format("arrow")["input_ids"].to_pylist()))
    return {"wall_s": wall, "tokens": doc_tokens, "blocks": len(lm), "tokenized": tokenized}


def _cpu_s() -> float:
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def run_benchmark(files, tokenizer_dir, seq_len=1024, num_proc=2, workdir=None, val_docs=100, encoder="auto"):
    """Run both on ``files`` (the first ``val_docs`` documents become our validation split and are
    included in our token count and time; the classic recipe tokenizes all of them as train).
    ``encoder`` is ours (see :mod:`.encoders`); the classic recipe always uses the HF tokenizer."""
    import datasets

    from hfpretrain.data.pipeline import tokenize_corpus

    work = Path(workdir or tempfile.mkdtemp(prefix="bench-tok-"))
    work.mkdir(parents=True, exist_ok=True)
    ours_out = work / "ours"
    c0, t0 = _cpu_s(), time.time()
    tokenize_corpus(
        [str(f) for f in files],
        ours_out,
        tokenizer_dir,
        seq_len=seq_len,
        val_docs=val_docs,
        num_proc=num_proc,
        force=True,
        encoder=encoder,
    )
    ours_wall = time.time() - t0
    ours_cpu = _cpu_s() - c0
    import json

    m = json.loads((ours_out / "manifest.json").read_text())
    eos_id = m["tokenizer"]["eos_token_id"]
    ours_tokens = m["train"]["tokens"] + m["validation"]["tokens"]

    c0 = _cpu_s()
    classic = classic_run_clm(files, tokenizer_dir, seq_len, work / "classic", num_proc, eos_id, work / "classic_cache")
    classic_cpu = _cpu_s() - c0

    # same token stream: classic documents in order == our validation docs then train docs
    classic_stream = np.fromiter(
        chain.from_iterable(classic["tokenized"].with_format("arrow")["input_ids"].to_pylist()), dtype=np.int64
    )
    ours = []
    for split in ("validation", "train"):
        ds = datasets.load_from_disk(str(ours_out / split)).with_format("numpy")
        ours.append((np.asarray(ds["input_ids"]).reshape(-1), m[split]["tokens"]))
    n_val = m["validation"]["tokens"]
    same = (
        len(classic_stream) == ours_tokens
        and np.array_equal(classic_stream[: len(ours[0][0])], ours[0][0])
        and np.array_equal(classic_stream[n_val : n_val + len(ours[1][0])], ours[1][0])
    )
    itemsize = np.dtype(m["dtype"]).itemsize
    ours_bytes = dir_bytes(ours_out / "train") + dir_bytes(ours_out / "validation")
    bare = (m["train"]["block_tokens"] + m["validation"]["block_tokens"]) * itemsize
    classic_bytes = dir_bytes(work / "classic")
    result = {
        "inputs": [str(f) for f in files],
        "tokenizer": str(tokenizer_dir),
        "seq_len": seq_len,
        "num_proc": num_proc,
        "documents": m["train"]["documents"] + m["validation"]["documents"],
        "tokens": ours_tokens,
        "same_token_stream": bool(same),
        "encoder": m["tokenizer"]["encoder"],
        "ours_wall_s": round(ours_wall, 2),
        "ours_tokens_per_s": round(ours_tokens / ours_wall),
        "classic_wall_s": round(classic["wall_s"], 2),
        "classic_tokens_per_s": round(classic["tokens"] / classic["wall_s"]),
        "ours_cpu_s": round(ours_cpu, 2),
        "classic_cpu_s": round(classic_cpu, 2),
        "cpu_speedup": round(classic_cpu / ours_cpu * ours_tokens / classic["tokens"], 2),
        "speedup": round(classic["wall_s"] / ours_wall * ours_tokens / classic["tokens"], 2),
        "ours_bytes": ours_bytes,
        "bare_id_bytes": bare,
        "ours_bytes_vs_bare": round(ours_bytes / bare - 1, 4),
        "classic_bytes": classic_bytes,
        "classic_blocks": classic["blocks"],
        "classic_dropped_tokens": classic["tokens"] - classic["blocks"] * seq_len,
        "ours_dropped_tokens": m["train"]["dropped_tail_tokens"] + m["validation"]["dropped_tail_tokens"],
    }
    if workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return result


def format_result(r: dict) -> str:
    return "\n".join(
        [
            f"input: {', '.join(os.path.basename(x) for x in r['inputs'])}; {r['documents']:,} documents, {r['tokens']:,} tokens; "
            f"tokenizer {r['tokenizer']}; seq_len {r['seq_len']}; num_proc {r['num_proc']}",
            f"same token stream: {r['same_token_stream']}; our encoder: {r['encoder']['name']} ({r['encoder']['reason']})",
            "| pipeline | wall s | tokens/s | CPU s | output bytes | bytes vs bare ids | tokens dropped |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| hfpretrain tokenize_corpus | {r['ours_wall_s']} | {r['ours_tokens_per_s']:,} | {r['ours_cpu_s']} | {r['ours_bytes']:,} | "
            f"{r['ours_bytes_vs_bare']:+.2%} | {r['ours_dropped_tokens']:,} |",
            f"| classic run_clm.py recipe | {r['classic_wall_s']} | {r['classic_tokens_per_s']:,} | {r['classic_cpu_s']} | {r['classic_bytes']:,} | "
            f"{r['classic_bytes'] / r['bare_id_bytes'] - 1:+.2%} | {r['classic_dropped_tokens']:,} |",
            f"speedup (tokens/s, wall): {r['speedup']}x; (tokens per CPU-second): {r['cpu_speedup']}x",
        ]
    )
