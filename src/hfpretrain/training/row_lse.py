"""The loss's row kernels: the log-sum-exp and target logit of each row of the logits, and, in training, the
loss and its gradient in one pass.

``row_lse(logits, targets) -> (lse, picked)``, both fp32 per row: ``lse = logsumexp(logits[i])`` and
``picked = logits[i, targets[i]]``, so a token's loss is ``lse - picked``. A custom op with its own gradient,
``softmax * d_lse + onehot * d_picked``, one elementwise pass over the logits that inductor generates. The
compiled head + loss uses it for evaluation (no gradient) and wherever loss.py's fused path is off.

Why a kernel of our own (one H200, benchmarks/bench_row_lse.py, docs/benchmarks.md): inductor's fused
log-softmax reduction read 32k rows of a 50k vocabulary at 1.46 TB/s (2.26 ms per micro-batch, 3.5% of a GPT-2
124M step): two exponentials per element (online softmax) and a comparison of every column to find the target.
This kernel reads each row once, rescales its running sum once per block (one exponential per element) and
loads the target's logit directly: 0.95 ms (3.47 TB/s), 2.4x faster; loss and gradient together 2.73 ms
against 4.22 (1.55x).
At Qwen3's 151,936 columns the forward is as fast (3.16 ms against 8.20), but the gradient pass that inductor
generates took 32 ms against 9 for its own loss's: so the kernel is used up to MAX_VOCAB columns, where it was
measured faster, and larger vocabularies keep inductor's loss.

``loss_and_gradient_(logits, targets, z_loss)``: each token's loss, with the logits overwritten by the gradient
of the summed loss (training; loss._HeadCrossEntropy). One program per row reads the row for its log-sum-exp,
then reads it again and writes the gradient over it: 9.2 ms for 131,072 x 50,304 bf16 logits on an H200
(LOSS_TILES; 9.9 at 4,096 columns per iteration in the same run), where the log-sum-exp above and inductor's
gradient pass took 3.6 + 12.5 ms, and no second logits-sized tensor. Any vocabulary (14.3 ms for 65,536 x
151,936). The second read mostly misses L2 (about 3 passes of DRAM traffic at ~4.2 TB/s); keeping fewer rows in
flight so that it would hit L2 starved the memory system instead (bench_row_lse.py's notes).

On CUDA the kernels are Triton (``row_lse`` registered with ``torch.library.triton_op`` so that ``torch.compile``
places it inside the loss's graph); elsewhere (a CPU, no Triton) the same arithmetic in PyTorch.
``HFPRETRAIN_ROW_LSE=0`` uses inductor's reduction instead of ``row_lse`` (A/B benchmarks, bisecting a numeric
change); it is read when the loss is compiled, so set it before the process's first training step.
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
IGNORE_INDEX = -100  # loss.py's; a token with this target adds no loss and no gradient
MAX_VOCAB = 65536  # measured faster at 50,304 columns, slower overall at 151,936 (above)
# loss_and_gradient_'s kernel: (columns per iteration, warps) up to MAX_VOCAB columns and above, the fastest of
# benchmarks/bench_row_lse.py's sweeps (docs/benchmarks.md, tenth session): 16,384 columns, four iterations a pass
# at GPT-2's 50,304, were 6% (H200) and 15% (H100) faster than 8,192; at Qwen3's 151,936 they were 6% slower.
LOSS_TILES = ((16384, 8), (8192, 8))


def enabled(logits: torch.Tensor) -> bool:
    """Use the kernel for these logits: a CUDA tensor, Triton present, at most MAX_VOCAB columns, not switched off."""
    return (logits.is_cuda and triton is not None and logits.shape[-1] <= MAX_VOCAB
            and os.environ.get("HFPRETRAIN_ROW_LSE", "1") != "0")


def _reference(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.float()
    return torch.logsumexp(x, dim=-1), x.gather(1, targets[:, None]).squeeze(1)


if triton is not None:
    @triton.jit
    def _row_lse2(base, n_cols, BLOCK_COLS: tl.constexpr):
        """log2-sum-2^x of one row of logits scaled to log2 units (x * log2 e): one read of the row, its running
        sum rescaled once per block."""
        cols = tl.arange(0, BLOCK_COLS)
        m = tl.full((), float("-inf"), tl.float32)  # running max (in log2 units)
        s = tl.zeros((), tl.float32)  # running sum of 2^(x - m)
        for start in range(0, n_cols, BLOCK_COLS):
            x = tl.load(base + start + cols, mask=start + cols < n_cols, other=float("-inf")).to(tl.float32)
            x = x * 1.4426950408889634
            m_new = tl.maximum(m, tl.max(x, 0))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block of -inf so far: 2^(-inf - -inf) is NaN
            s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift), 0)
            m = m_new
        return m + tl.log2(s)

    @triton.jit
    def _target_logit(base, target, n_cols):
        """The row's logit at ``target``; NaN out of range: the run's non-finite check stops it, naming the step."""
        in_range = (target >= 0) & (target < n_cols)
        return tl.load(base + target, mask=in_range, other=float("nan")).to(tl.float32)

    @triton.jit
    def _row_lse_kernel(logits_ptr, targets_ptr, lse_ptr, picked_ptr, n_cols, row_stride,
                        BLOCK_COLS: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * row_stride
        tl.store(lse_ptr + row, _row_lse2(base, n_cols, BLOCK_COLS) / 1.4426950408889634)
        tl.store(picked_ptr + row, _target_logit(base, tl.load(targets_ptr + row), n_cols))

    @triton.jit
    def _loss_grad_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, row_stride, z_loss,
                          IGNORE: tl.constexpr, BLOCK_COLS: tl.constexpr):
        """One row: the token's loss, and the logits overwritten by its gradient (softmax - onehot, times
        1 + 2 z lse with a z-loss; zero for an ignored token). Two passes over the row: the log-sum-exp as in
        _row_lse_kernel, then the gradient, in place."""
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * row_stride
        cols = tl.arange(0, BLOCK_COLS)
        log2e: tl.constexpr = 1.4426950408889634
        lse2 = _row_lse2(base, n_cols, BLOCK_COLS)  # log2 units
        lse = lse2 / log2e
        target = tl.load(targets_ptr + row)
        keep = target != IGNORE
        picked = _target_logit(base, target, n_cols)
        tl.store(loss_ptr + row, tl.where(keep, lse - picked + z_loss * lse * lse, 0.0))
        scale = tl.where(keep, 1.0 + 2.0 * z_loss * lse, 0.0)
        hit = tl.where(keep, target, -1)
        for start in range(0, n_cols, BLOCK_COLS):
            c = start + cols
            x = tl.load(base + c, mask=c < n_cols, other=0.0).to(tl.float32)
            grad = tl.exp2(x * log2e - lse2) * scale - tl.where(c == hit, 1.0, 0.0)
            tl.store(base + c, grad.to(logits_ptr.dtype.element_ty), mask=c < n_cols)

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


def loss_tile(n_cols: int) -> tuple[int, int]:
    """LOSS_TILES' choice for rows of ``n_cols``, or ``HFPRETRAIN_LOSS_TILE=columns,warps`` (A/B benchmarks)."""
    if spec := os.environ.get("HFPRETRAIN_LOSS_TILE"):
        tile = tuple(int(v) for v in spec.split(",") if v.strip().isdigit())
        if len(tile) != 2 or tile[0] & (tile[0] - 1) or tile[1] & (tile[1] - 1):
            raise ValueError(f"HFPRETRAIN_LOSS_TILE={spec!r}: want two powers of two, columns,warps (e.g. 8192,8)")
        return tile
    block, warps = LOSS_TILES[0] if n_cols <= MAX_VOCAB else LOSS_TILES[1]
    return min(block, 1 << max(n_cols - 1, 0).bit_length()), warps  # no wider than the row


def loss_and_gradient_(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0,
                       tile: tuple[int, int] | None = None) -> torch.Tensor:
    """Each token's loss (fp32; 0 where ``targets`` is IGNORE_INDEX), with ``logits`` overwritten by the gradient
    of their sum, in one kernel where a loss kernel and then a gradient kernel write a second tensor as large.
    On CUDA with Triton, ``_loss_grad_kernel`` (one program per row) with ``tile`` = (columns per iteration,
    warps), loss_tile's if None; elsewhere the same in PyTorch."""
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError("loss_and_gradient_: 2-D logits with unit column stride")
    n_rows, n_cols = logits.shape
    if targets.shape != (n_rows,) or not targets.is_contiguous() or targets.device != logits.device:
        raise ValueError(f"loss_and_gradient_: targets must be {n_rows} contiguous ids on {logits.device}, got "
                         f"{tuple(targets.shape)} on {targets.device}")
    keep = targets != IGNORE_INDEX
    if not (logits.is_cuda and triton is not None):
        x = logits.float()
        lse = torch.logsumexp(x, dim=-1)
        in_range = (targets >= 0) & (targets < n_cols)  # else NaN, as the kernel gives
        picked = x.gather(1, targets.clamp(0, n_cols - 1)[:, None]).squeeze(1).where(in_range, float("nan"))
        grad = torch.exp(x - lse[:, None]) * torch.where(keep, 1.0 + 2.0 * z_loss * lse, 0.0)[:, None]
        rows = (keep & in_range).nonzero()[:, 0]
        grad[rows, targets[rows]] -= 1.0
        logits.copy_(grad)
        return torch.where(keep, lse - picked + z_loss * lse.square(), 0.0)
    block, num_warps = tile or loss_tile(n_cols)
    loss = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    with torch.cuda.device(logits.device):  # the launch goes to the current device: make it the logits'
        _loss_grad_kernel[(n_rows,)](logits, targets, loss, n_cols, logits.stride(0), float(z_loss),
                                     IGNORE=IGNORE_INDEX, BLOCK_COLS=block, num_warps=num_warps)
    return loss


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
