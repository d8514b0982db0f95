"""The LM head's cross-entropy per token in one Triton kernel; in training, its gradient written over the logits.

``cross_entropy_(logits, targets, z_loss, tile, write_grad)``: one program per row reads the row once for its
log-sum-exp (one exponential per element, the running sum rescaled once per block) and loads the target's logit
directly; with ``write_grad`` it reads the row again and overwrites it with the gradient of the summed loss,
``softmax - onehot`` (times ``1 + 2 z lse`` with PaLM's z-loss; zero for an ignored token).

Why (one H200, benchmarks/bench_loss_kernel.py, docs/benchmarks.md): for 131,072 x 50,304 bf16 logits (GPT-2 124M's
micro-batch) loss and gradient take 9.2 ms, where inductor's log-softmax reduction and its gradient pass took
3.6 + 12.5 ms and wrote a second logits-sized tensor; 14.3 ms for 65,536 x 151,936 (Qwen3's vocabulary).
Without the gradient (evaluation) it is the first read alone: 0.95 ms where inductor's reduction took 2.26
(two exponentials per element and a comparison of every column to find the target). The second read mostly
misses L2; keeping fewer rows in flight so that it would hit L2 starved the memory system instead.
"""

from __future__ import annotations

import torch

from . import tl, triton, uses_triton

IGNORE_INDEX = -100  # a token with this target adds no loss and no gradient
# (columns per iteration, warps) up to TILE_SPLIT_VOCAB columns and above: the fastest of bench_loss_kernel.py's
# sweeps (docs/benchmarks.md): 16,384 columns were 6% (H200) and 15% (H100) faster than 8,192 at GPT-2's 50,304
# and 6% slower at Qwen3's 151,936.
LOSS_TILES = ((16384, 8), (8192, 8))
TILE_SPLIT_VOCAB = 65536


def loss_tile(n_cols: int) -> tuple[int, int]:
    """LOSS_TILES' (columns per iteration, warps) for rows of ``n_cols``, no wider than the row."""
    block, warps = LOSS_TILES[0] if n_cols <= TILE_SPLIT_VOCAB else LOSS_TILES[1]
    return min(block, 1 << max(n_cols - 1, 0).bit_length()), warps


MAX_TILE_COLS = 1 << 20  # Triton's largest block (TRITON_MAX_TENSOR_NUMEL)
MAX_WARPS = 32  # a block of 1,024 threads


def check_tile(tile) -> tuple[int, int]:
    """``kernels.loss_tile``: two powers of two (columns per iteration up to 2^20, warps up to 32) that Triton can
    launch, else ValueError naming the key: at load, not at the first GPU step after output_dir is written."""
    ok = (
        isinstance(tile, (list, tuple))
        and len(tile) == 2
        and all(isinstance(v, int) and v > 0 for v in tile)
        and not any(v & (v - 1) for v in tile)
        and tile[0] <= MAX_TILE_COLS
        and tile[1] <= MAX_WARPS
    )
    if not ok:
        raise ValueError(
            f"kernels.loss_tile={tile!r}: want two powers of two, [columns, warps] with columns <= "
            f"{MAX_TILE_COLS} and warps <= {MAX_WARPS} (e.g. [8192, 8]), or null for the default by "
            "vocabulary"
        )
    return int(tile[0]), int(tile[1])


if triton is not None:

    @triton.jit
    def _cross_entropy_kernel(
        logits_ptr,
        targets_ptr,
        loss_ptr,
        n_cols,
        row_stride,
        z_loss,
        IGNORE: tl.constexpr,
        BLOCK_COLS: tl.constexpr,
        WRITE_GRAD: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * row_stride
        cols = tl.arange(0, BLOCK_COLS)
        log2e: tl.constexpr = 1.4426950408889634
        # log2-sum-2^x of the row in log2 units: one read, the running sum rescaled once per block
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.zeros((), tl.float32)
        for start in range(0, n_cols, BLOCK_COLS):
            x = tl.load(base + start + cols, mask=start + cols < n_cols, other=float("-inf")).to(tl.float32)
            x = x * log2e
            m_new = tl.maximum(m, tl.max(x, 0))
            shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block of -inf so far: 2^(-inf - -inf) is NaN
            s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift), 0)
            m = m_new
        lse2 = m + tl.log2(s)
        lse = lse2 / log2e
        target = tl.load(targets_ptr + row)
        keep = target != IGNORE
        # the target's logit; NaN out of range: the run's non-finite check stops it, naming the step
        in_range = (target >= 0) & (target < n_cols)
        picked = tl.load(base + target, mask=in_range & keep, other=float("nan")).to(tl.float32)
        tl.store(loss_ptr + row, tl.where(keep, lse - picked + z_loss * lse * lse, 0.0))
        if WRITE_GRAD:
            scale = tl.where(keep, 1.0 + 2.0 * z_loss * lse, 0.0)
            hit = tl.where(keep, target, -1)
            for start in range(0, n_cols, BLOCK_COLS):
                c = start + cols
                x = tl.load(base + c, mask=c < n_cols, other=0.0).to(tl.float32)
                grad = tl.exp2(x * log2e - lse2) * scale - tl.where(c == hit, 1.0, 0.0)
                tl.store(base + c, grad.to(logits_ptr.dtype.element_ty), mask=c < n_cols)


def _reference_(logits: torch.Tensor, targets: torch.Tensor, z_loss: float, write_grad: bool) -> torch.Tensor:
    """The kernel's arithmetic in PyTorch (fp32), for a CPU or without Triton."""
    n_cols = logits.shape[1]
    keep = targets != IGNORE_INDEX
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    in_range = (targets >= 0) & (targets < n_cols)  # else NaN, as the kernel gives
    picked = x.gather(1, targets.clamp(0, n_cols - 1)[:, None]).squeeze(1).where(in_range, float("nan"))
    if write_grad:
        grad = torch.exp(x - lse[:, None]) * torch.where(keep, 1.0 + 2.0 * z_loss * lse, 0.0)[:, None]
        rows = (keep & in_range).nonzero()[:, 0]
        grad[rows, targets[rows]] -= 1.0
        logits.copy_(grad)
    return torch.where(keep, lse - picked + z_loss * lse.square(), 0.0)


def cross_entropy_(
    logits: torch.Tensor,
    targets: torch.Tensor,
    z_loss: float = 0.0,
    tile: tuple[int, int] | None = None,
    write_grad: bool = True,
) -> torch.Tensor:
    """Each token's loss (fp32; 0 where ``targets`` is IGNORE_INDEX, NaN for a target out of range); with
    ``write_grad``, ``logits`` overwritten by the gradient of their sum. ``tile``: (columns per iteration, warps),
    loss_tile's if None."""
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError("cross_entropy_: 2-D logits with unit column stride")
    n_rows, n_cols = logits.shape
    if targets.shape != (n_rows,) or not targets.is_contiguous() or targets.device != logits.device:
        raise ValueError(
            f"cross_entropy_: targets must be {n_rows} contiguous ids on {logits.device}, got "
            f"{tuple(targets.shape)} on {targets.device}"
        )
    if not uses_triton(logits):
        return _reference_(logits, targets, z_loss, write_grad)
    block, num_warps = tile or loss_tile(n_cols)
    loss = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    with torch.cuda.device(logits.device):  # the launch goes to the current device: make it the logits'
        _cross_entropy_kernel[(n_rows,)](
            logits,
            targets,
            loss,
            n_cols,
            logits.stride(0),
            float(z_loss),
            IGNORE=IGNORE_INDEX,
            BLOCK_COLS=block,
            WRITE_GRAD=write_grad,
            num_warps=num_warps,
        )
    return loss
