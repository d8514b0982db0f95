"""The document mask's attention alone, forward + backward, on real packed blocks: SDPA causal (no mask, its flash
kernel), SDPA with the dense block-causal mask transformers builds, and flex attention with a block mask (compiled,
as transformers' integration runs it). Prints milliseconds per call, the block mask's build time and sparsity, and
the compile time of the first call, so that a slow training step can be placed (kernel, mask, or compilation).

    python benchmarks/bench_doc_attention.py out/mix6_bpe8k_16k --batch 4 --heads 8 --head-dim 128 [--out r.json]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from hfpretrain.data.order import document_positions
from cuda_timing import cuda_ms  # benchmarks/ (the script's folder)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", help="a tokenized folder (scripts/tokenize_pile.py): its first train blocks")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    from datasets import load_from_disk
    manifest = json.load(open(f"{a.data}/manifest.json"))
    eos = int(manifest["tokenizer"]["eos_token_id"])
    ids = torch.tensor(load_from_disk(f"{a.data}/train")[: a.batch]["input_ids"], device="cuda")
    B, S = ids.shape
    doc = (document_positions(ids, eos) == 0).cumsum(-1)  # a document id per token
    q, k, v = (torch.randn(B, a.heads, S, a.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn_like(q)
    result = {"data": a.data, "batch": B, "seq_len": S, "heads": a.heads, "head_dim": a.head_dim,
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}

    def step(attend):
        def run():
            out = attend()
            out.backward(grad)
        return run

    result["sdpa_causal_ms"] = cuda_ms(step(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), a.repeat)
    dense = (doc[:, None, :, None] == doc[:, None, None, :]) & torch.ones(S, S, dtype=torch.bool,
                                                                          device="cuda").tril()
    result["sdpa_dense_mask_ms"] = cuda_ms(step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)),
                                         a.repeat)
    del dense

    def document_causal(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    build = torch.compile(create_block_mask)
    t = time.perf_counter()
    block_mask = build(document_causal, B, None, S, S, device="cuda")
    torch.cuda.synchronize()
    result["block_mask_first_s"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(a.repeat):
        block_mask = build(document_causal, B, None, S, S, device="cuda")
    torch.cuda.synchronize()
    result["block_mask_ms"] = (time.perf_counter() - t) / a.repeat * 1e3
    result["block_mask_sparsity"] = block_mask.sparsity() / 100
    causal_mask = build(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, B, None, S, S, device="cuda")
    flex = torch.compile(flex_attention)
    for name, mask in (("flex_document", block_mask), ("flex_causal", causal_mask)):
        t = time.perf_counter()
        step(lambda: flex(q, k, v, block_mask=mask))()
        torch.cuda.synchronize()
        result[f"{name}_first_s"] = time.perf_counter() - t
        result[f"{name}_ms"] = cuda_ms(step(lambda: flex(q, k, v, block_mask=mask)), a.repeat)
    print(json.dumps(result, indent=1))
    if a.out:
        json.dump(result, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
