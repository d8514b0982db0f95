"""Row-wise log-sum-exp and target logit of the logits: the reduction of the compiled cross-entropy.

``row_lse(logits, targets) -> (lse, picked)``, both fp32 per row: ``lse = logsumexp(logits[i])`` and
``picked = logits[i, targets[i]]``, so a token's loss is ``lse - picked``. A custom op with its own gradient,
``softmax * d_lse + onehot * d_picked``, one elementwise pass over the logits that inductor generates.

Why a kernel of our own (one H200, benchmarks/bench_row_lse.py, docs/benchmarks.md): inductor's fused
log-softmax reduction read 32k rows of a 50k vocabulary at 1.46 TB/s (2.26 ms per micro-batch, 3.5% of a GPT-2
124M step): two exponentials per element (online softmax) and a comparison of every column to find the target.
This kernel reads each row once, rescales its running sum once per block (one exponential per element) and
loads the target's logit directly: 0.95 ms (3.47 TB/s), 2.4x faster; loss and gradient together 2.73 ms
against 4.22 (1.55x).
At Qwen3's 151,936 columns the forward is as fast (3.16 ms against 8.20), but the gradient pass that inductor
generates took 32 ms against 9 for its own loss's: so the kernel is used up to MAX_VOCAB columns, where it was
measured faster, and larger vocabularies keep inductor's loss.
On CUDA the kernel is Triton, registered with ``torch.library.triton_op`` so that ``torch.compile`` places it
inside the loss's graph; elsewhere (a CPU, no Triton) it is two PyTorch calls.
``HFPRETRAIN_ROW_LSE=0`` uses inductor's reduction instead (A/B benchmarks, bisecting a numeric change); it is read
when the loss is compiled, so set it before the process's first training step.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU wheel of torch comes without Triton
    triton = None

BLOCK = 4096  # columns per iteration: 8 KB of bf16 per row in flight
MAX_VOCAB = 65536  # measured faster at 50,304 columns, slower overall at 151,936 (above)


def enabled(logits: torch.Tensor) -> bool:
    """Use the kernel for these logits: a CUDA tensor, Triton present, at most MAX_VOCAB columns, not switched off."""
    return (logits.is_cuda and triton is not None and logits.shape[-1] <= MAX_VOCAB
            and os.environ.get("HFPRETRAIN_ROW_LSE", "1") != "0")


def _reference(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.float()
    return torch.logsumexp(x, dim=-1), x.gather(1, targets[:, None]).squeeze(1)


if triton is not None:
    @triton.jit
    def _row_lse_kernel(logits_ptr, targets_ptr, lse_ptr, picked_ptr, n_cols, row_stride,
                        BLOCK_COLS: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * row_stride
        cols = tl.arange(0, BLOCK_COLS)
        log2e: tl.constexpr = 1.4426950408889634
        m = tl.full((), float("-inf"), tl.float32)  # running max (in log2 units)
        s = tl.zeros((), tl.float32)  # running sum of 2^(x - m)
        for start in range(0, n_cols, BLOCK_COLS):
            x = tl.load(base + start + cols, mask=start + cols < n_cols, other=float("-inf")).to(tl.float32) * log2e
            m_new = tl.maximum(m, tl.max(x, 0))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block of -inf so far: 2^(-inf - -inf) is NaN
            s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift), 0)
            m = m_new
        tl.store(lse_ptr + row, (m + tl.log2(s)) / log2e)
        target = tl.load(targets_ptr + row)
        in_range = (target >= 0) & (target < n_cols)  # else NaN: the run's non-finite check stops it, naming the step
        tl.store(picked_ptr + row, tl.load(base + target, mask=in_range, other=float("nan")).to(tl.float32))

    @torch.library.triton_op("hfpretrain::row_lse", mutates_args=())
    def row_lse(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not logits.is_cuda:  # compile traces this body whatever the device: branch here, not by dispatch key
            return _reference(logits, targets)
        torch._check(logits.dim() == 2 and logits.stride(1) == 1, lambda: "row_lse: 2-D logits with unit column stride")
        n_rows, n_cols = logits.shape
        lse = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
        picked = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
        torch.library.wrap_triton(_row_lse_kernel)[(n_rows,)](
            logits, targets, lse, picked, n_cols, logits.stride(0), BLOCK_COLS=BLOCK, num_warps=8)
        return lse, picked
else:
    @torch.library.custom_op("hfpretrain::row_lse", mutates_args=())
    def row_lse(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _reference(logits, targets)

    @row_lse.register_fake
    def _row_lse_fake(logits, targets):
        return logits.new_empty(logits.shape[0], dtype=torch.float32), logits.new_empty(logits.shape[0],
                                                                                        dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    logits, targets = inputs
    ctx.save_for_backward(logits, targets, output[0])


def gradient(logits, targets, lse, d_lse, d_picked) -> torch.Tensor:
    """d lse / d logits = softmax; d picked / d logits = onehot(target): pointwise, one kernel under compile."""
    onehot = torch.arange(logits.shape[1], device=logits.device)[None, :] == targets[:, None]
    grad = torch.exp(logits.float() - lse[:, None]) * d_lse[:, None] + torch.where(onehot, d_picked[:, None], 0.0)
    return grad.to(logits.dtype)


def _backward(ctx, d_lse, d_picked):
    logits, targets, lse = ctx.saved_tensors
    return gradient(logits, targets, lse, d_lse, d_picked), None


row_lse.register_autograd(_backward, setup_context=_setup_context)
