"""How far back a file of retrieval documents asks: questions per 1,000 tokens, by the distance in tokens from each
fact to its answer (measured as `hfpretrain long-context` measures it, in coarser bins for a 16k phase).

    hfpretrain retrieval-docs --input "$DATA_ROOT"/pretrain/mix/train-00000.jsonl.zst --tokenizer out/tok_bpe8k \
        --documents 80 --min-tokens 8192 --max-tokens 16000 --min-facts 16 --max-facts 48 --repeat-share 0.25 \
        --statement-share 0.25 --out /tmp/r.jsonl.zst
    python benchmarks/retrieval_distances.py /tmp/r.jsonl.zst --tokenizer out/tok_bpe8k
"""

import argparse
import bisect
import json

import zstandard
from transformers import AutoTokenizer

from hfpretrain.eval.long_context import tokenized_questions

EDGES = (4096, 8192, 12288, 14336)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--tokenizer", required=True)
    a = p.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(a.tokenizer)
    documents = [json.loads(line)["text"] for line in zstandard.open(a.file, "rt", encoding="utf-8")]
    tokens, per_bin = 0, [0] * (len(EDGES) + 1)
    for document in documents:
        ids, _, distances = tokenized_questions(tokenizer, document)
        tokens += len(ids)
        for distance in distances:
            per_bin[bisect.bisect_right(EDGES, distance)] += 1
    names = [f"<{EDGES[0]}"] + [f"{lo}-{hi}" for lo, hi in zip(EDGES, EDGES[1:])] + [f">={EDGES[-1]}"]
    print(
        f"{a.file}: {len(documents)} documents, {tokens / len(documents):,.0f} tokens each, "
        f"{1000 * sum(per_bin) / tokens:.2f} questions per 1,000 tokens; by distance: "
        + ", ".join(f"{name} {1000 * n / tokens:.3f}" for name, n in zip(names, per_bin))
    )


if __name__ == "__main__":
    main()
