"""The document mask's attention alone, forward + backward, on real packed blocks: SDPA causal (no mask, its flash
kernel), SDPA with the dense block-causal mask transformers builds, flex attention with a block mask (compiled,
as transformers' integration runs it), and the variable-length kernels over the documents' cumulative lengths
(PyTorch's flash varlen, and cuDNN's ragged attention through the op nested tensors use), each checked against flex.
Prints milliseconds per call, the block mask's build time and sparsity, and the compile time of the first call, so
that a slow training step can be placed (kernel, mask, or compilation).

    python benchmarks/bench_doc_attention.py out/mix6_bpe8k_16k --batch 4 --heads 8 --head-dim 128 [--out r.json]
    python benchmarks/bench_doc_attention.py out/mix6_bpe8k_16k --row-len 2048 --batch 32 ...   # the same as 2k rows
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
    ap.add_argument("--kv-heads", type=int, default=0, help="grouped-query attention: key/value heads (0: --heads)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument(
        "--eager-mask",
        action="store_true",
        help="build the block mask eagerly (its compile took minutes at 16k on an H100)",
    )
    ap.add_argument("--skip-dense", action="store_true", help="leave out SDPA's dense mask (slow, much memory)")
    ap.add_argument(
        "--flex-options",
        nargs="*",
        default=[],
        metavar="JSON",
        help="flex attention kernel_options to time beside its defaults, e.g. '{\"USE_TMA\": true}'",
    )
    ap.add_argument(
        "--row-len",
        type=int,
        default=0,
        help="cut the blocks into rows of this many tokens (2048: 16k blocks as 2k rows; --batch counts the rows)",
    )
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    from datasets import load_from_disk

    manifest = json.load(open(f"{a.data}/manifest.json"))
    eos = int(manifest["tokenizer"]["eos_token_id"])
    train = load_from_disk(f"{a.data}/train")
    seq_len = len(train[0]["input_ids"])
    row_len = a.row_len or seq_len
    if seq_len % row_len:
        raise SystemExit(f"error: --row-len {row_len} does not divide {a.data}'s blocks of {seq_len} tokens")
    blocks = -(-a.batch * row_len // seq_len)
    ids = torch.tensor(train[:blocks]["input_ids"], device="cuda").reshape(-1, row_len)[: a.batch]
    B, S = ids.shape
    starts = document_positions(ids, eos) == 0
    doc = starts.cumsum(-1)  # a document id per token
    kv_heads = a.kv_heads or a.heads
    q, k, v = (
        torch.randn(B, h, S, a.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for h in (a.heads, kv_heads, kv_heads)
    )
    grad = torch.randn_like(q)
    result = {
        "data": a.data,
        "batch": B,
        "seq_len": S,
        "heads": a.heads,
        "kv_heads": kv_heads,
        "head_dim": a.head_dim,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }

    def step(attend):
        def run():
            out = attend()
            out.backward(grad)

        return run

    gqa = kv_heads != a.heads
    result["sdpa_causal_ms"] = cuda_ms(
        step(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)), a.repeat
    )
    if not a.skip_dense:
        dense = (doc[:, None, :, None] == doc[:, None, None, :]) & torch.ones(
            S, S, dtype=torch.bool, device="cuda"
        ).tril()
        result["sdpa_dense_mask_ms"] = cuda_ms(
            step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense, enable_gqa=gqa)), a.repeat
        )
        del dense

    def document_causal(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    build = create_block_mask if a.eager_mask else torch.compile(create_block_mask)
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

    def flex_on(mask, options=None):
        return flex(q, k, v, block_mask=mask, enable_gqa=gqa, kernel_options=options)

    for name, mask in (("flex_document", block_mask), ("flex_causal", causal_mask)):
        run = step(lambda: flex_on(mask))
        t = time.perf_counter()
        run()
        torch.cuda.synchronize()
        result[f"{name}_first_s"] = time.perf_counter() - t
        result[f"{name}_ms"] = cuda_ms(run, a.repeat)

    # The variable-length kernels take the blocks as one sequence of documents: (tokens, heads, head_dim) and the
    # documents' cumulative lengths; no mask, no skipped blocks, no partial ones.
    flat_start = starts.flatten().nonzero().flatten()
    cu = torch.cat([flat_start, flat_start.new_tensor([B * S])]).to(torch.int32)
    longest = int(cu.diff().max())
    result["documents"], result["longest_document"] = len(cu) - 1, longest

    def packed(x):
        return x.transpose(1, 2).reshape(B * S, x.shape[1], a.head_dim)

    def unpacked(x):
        return x.reshape(B, S, x.shape[1], a.head_dim).transpose(1, 2)

    def flash_varlen():
        from torch.nn.attention.varlen import varlen_attn

        return unpacked(varlen_attn(packed(q), packed(k), packed(v), cu, cu, longest, longest, window_size=(-1, 0)))

    def cudnn_varlen():
        repeat = a.heads // kv_heads  # cuDNN's ragged path takes no grouped keys
        kk, vv = (packed(x).repeat_interleave(repeat, dim=1) if repeat > 1 else packed(x) for x in (k, v))
        out = torch.ops.aten._cudnn_attention_forward(
            packed(q), kk, vv, None, cu, cu, longest, longest, True, 0.0, True, False
        )[0]
        return unpacked(out)

    def clear_grads():  # every timed call accumulates into them
        for x in (q, k, v):
            x.grad = None

    clear_grads()
    reference = flex_on(block_mask)
    reference.backward(grad)
    ref_grads = [x.grad.clone() for x in (q, k, v)]
    candidates = [
        (name + ("_compiled" if compiled else ""), torch.compile(fn) if compiled else fn)
        for name, fn in (("flash_varlen", flash_varlen), ("cudnn_varlen", cudnn_varlen))
        for compiled in (False, True)
    ]
    for options in map(json.loads, a.flex_options):
        candidates.append(
            (
                f"flex_document {json.dumps(options, sort_keys=True)}",
                lambda options=options: flex_on(block_mask, options),
            )
        )
    for key, f in candidates:
        try:
            clear_grads()
            out = f()
            out.backward(grad)
            diffs = [out - reference] + [x.grad - g for x, g in zip((q, k, v), ref_grads)]
            result[f"{key}_max_abs_diff"] = max(float(d.detach().abs().max()) for d in diffs)
            result[f"{key}_ms"] = cuda_ms(step(f), a.repeat)
        except Exception as exc:  # a kernel or option this torch lacks or refuses: say so, keep the others
            result[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    print(json.dumps(result, indent=1))
    if a.out:
        json.dump(result, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
