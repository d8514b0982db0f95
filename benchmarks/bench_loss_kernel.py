#!/usr/bin/env python
"""The loss kernel on one GPU (kernels/cross_entropy.py), on bf16 logits of one micro-batch (32,768 or 131,072
tokens; GPT-2's and Qwen3's padded vocabularies): loss and gradient in one kernel, in place, against fp32
PyTorch, the kernel alone for each tiling (kernels.loss_tile), and the whole GPT-2 124M head + loss forward +
backward, loss._HeadCrossEntropy (kernels.fused_head) against the compiled path.
    source .carry/setup.sh && python benchmarks/bench_loss_kernel.py
"""

import gc
import statistics

import torch
import torch.nn.functional as F


def timed(fn, *args, backward=False, reps=20, setup=None):
    """Median ms of ``fn(*args)`` (and its backward) over ``reps`` runs after 3 warm-ups; ``setup`` runs before
    each, untimed."""
    times = []
    for i in range(reps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if backward:
            args[0].grad = None  # no accumulation pass into an old gradient
        if setup:
            setup()
        start.record()
        out = fn(*args)
        if backward:
            out.backward()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def fused_kernel(n, vocab):
    """kernels.cross_entropy.cross_entropy_: checked, then timed alone; then the whole head + loss of a GPT-2 124M micro-batch
    (hidden 768), both ways."""
    from hfpretrain.training.loss import IGNORE_INDEX, _HeadCrossEntropy, compiled_cross_entropy_sum
    from hfpretrain.kernels.cross_entropy import cross_entropy_ as loss_and_gradient_
    from hfpretrain.kernels.cross_entropy import loss_tile

    gc.collect()
    torch.cuda.empty_cache()
    if torch.cuda.mem_get_info()[0] < 2.5 * n * vocab * 2:  # the logits, their working copy, the checks
        print(f"  fused loss+gradient {n} x {vocab}: skipped, too large for the free GPU memory")
        return
    torch.manual_seed(1)
    source = (4 * torch.randn(n, vocab, device="cuda")).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (n,), device="cuda")
    targets[::97] = IGNORE_INDEX
    gib = source.numel() * 2 / 2**30
    ref = source[:4096].float()
    keep = targets[:4096] != IGNORE_INDEX
    lse = torch.logsumexp(ref, -1)
    ref_loss = (
        F.cross_entropy(ref, targets[:4096], ignore_index=IGNORE_INDEX, reduction="none") + 1e-4 * lse.square() * keep
    )
    probs = torch.softmax(ref, -1) * (1 + 2e-4 * lse)[:, None]
    probs[keep.nonzero()[:, 0], targets[:4096][keep]] -= 1
    probs[~keep] = 0
    work = source.clone()
    # loss_tile's choice first, then other tilings (columns per iteration, warps). Measured and dropped (2026-11-24, H200s):
    # the whole row held in one block (read once; its registers spill: 1.2-1.6x slower), L2 eviction hints (0.3%),
    # a persistent grid of 1-8 programs per SM (fewer rows in flight, so that a row's second read finds it in L2:
    # 5-40% slower) and a running sum per column lane (within 4%, either way).
    for tile in (loss_tile(vocab), (4096, 8), (4096, 4), (8192, 8), (8192, 4), (16384, 8), (2048, 4)):
        work.copy_(source)
        loss = loss_and_gradient_(work, targets, 1e-4, tile)
        err_loss = (loss[:4096] - ref_loss).abs().max().item()
        err_grad = (work[:4096].float() - probs).abs().max().item()
        assert err_loss < 2e-3 and err_grad < 1e-2, (tile, err_loss, err_grad)
        ms = timed(
            loss_and_gradient_, work, targets, 0.0, tile, reps=10, setup=lambda: work.copy_(source)
        )  # in place: fresh logits for every run
        print(
            f"  fused loss+gradient {n} x {vocab}, {tile[0]:5d} columns x {tile[1]:2d} warps: {ms:6.2f} ms "
            f"({2 * gib * 2**30 / ms / 1e9:5.2f} TB/s read once + written); "
            f"max |loss - ref| {err_loss:.1e}, max |grad - ref| {err_grad:.1e}"
        )
    del work, source
    torch.cuda.empty_cache()
    if vocab > 65536:
        return
    hidden = torch.randn(n, 768, device="cuda", requires_grad=True)
    weight = (0.02 * torch.randn(vocab, 768, device="cuda")).requires_grad_()
    compiled = compiled_cross_entropy_sum()

    def step(fn):
        hidden.grad = weight.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fn(hidden, weight, targets, 0.0)
        out.backward()
        return out

    def fused(h, w, t, z):
        return _HeadCrossEntropy.apply(h, w, t, z, None, True)

    for name, fn in (("compiled (inductor)", compiled), ("fused (_HeadCrossEntropy)", fused)):
        out = step(fn)
        grads = hidden.grad.clone(), weight.grad.clone()
        ms = timed(lambda: step(fn))
        print(
            f"  head + loss, forward + backward, {name:42s} {ms:7.2f} ms  loss {out.item():.6e}  "
            f"|grad h| {grads[0].norm():.4e} |grad w| {grads[1].norm():.4e}"
        )
    del hidden, weight
    torch.cuda.empty_cache()


if __name__ == "__main__":
    for n, vocab in ((32768, 50304), (131072, 50304), (65536, 151936)):
        fused_kernel(n, vocab)
