#!/usr/bin/env python
"""The compiled loss's row reduction on one GPU: training/row_lse.py's Triton kernel against inductor's fused
log-softmax, on bf16 logits of one micro-batch (32,768 tokens; GPT-2's and Qwen3's padded vocabularies).
Checks the values first, then times the loss forward and forward + backward of each (CUDA events, median of 20).
    source .carry/setup.sh && python benchmarks/bench_row_lse.py
"""

import statistics

import torch
import torch.nn.functional as F

from hfpretrain.training.row_lse import _reference, row_lse


def ours(logits, targets):
    lse, picked = row_lse(logits, targets)
    return (lse - picked).sum()


def inductor(logits, targets):
    return F.cross_entropy(logits.float(), targets, reduction="sum")


def timed(fn, *args, backward=False, reps=20):
    times = []
    for i in range(reps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if backward:
            args[0].grad = None  # no accumulation pass into an old gradient
        start.record()
        out = fn(*args)
        if backward:
            out.backward()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    for vocab in (50304, 151936):
        n = 32768
        logits = (4 * torch.randn(n, vocab, device="cuda")).to(torch.bfloat16)
        targets = torch.randint(0, vocab, (n,), device="cuda")
        lse, picked = row_lse(logits, targets)
        ref_lse, ref_picked = _reference(logits, targets)
        err = (lse - ref_lse).abs().max().item(), (picked - ref_picked).abs().max().item()
        gib = logits.numel() * 2 / 2**30
        print(f"vocab {vocab}: {n} x {vocab} bf16 logits ({gib:.1f} GiB); max |lse - ref| {err[0]:.2e}, "
              f"max |picked - ref| {err[1]:.2e}")
        assert err[0] < 1e-3 and err[1] == 0
        for name, fn in (("row_lse", ours), ("inductor", inductor)):
            compiled = torch.compile(fn)
            fwd = timed(compiled, logits, targets)
            leaf = logits.detach().requires_grad_()
            both = timed(compiled, leaf, targets, backward=True)
            loss_ours, loss_ref = ours(logits, targets).item(), inductor(logits, targets).item()
            print(f"  {name:9s} forward {fwd:6.2f} ms ({gib * 2**30 / fwd / 1e9:5.2f} TB/s read)   "
                  f"forward + backward {both:6.2f} ms   (loss sums {loss_ours:.6e} vs {loss_ref:.6e})")
        del logits


if __name__ == "__main__":
    main()
