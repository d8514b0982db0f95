"""GELU's backward with the bias gradient of the matmul before it, in one pass (GPT-2's MLP: models/gelu.py).

``gelu_grad_bias(grad, h) -> (grad_h, grad_bias)``: GELU's (tanh approximation) input gradient at ``h`` and its
sum over rows, the bias gradient of ``h = x @ W + b``. Stock, inductor writes GELU's gradient and then reads all
of it again for the bias ([131,072 x 3,072] bf16 per GPT-2 124M micro-batch: 1.014 ms on an H200; this kernel
0.680 ms, the MLP's forward + backward 6.453 vs 6.581 ms: docs/benchmarks.md). A custom op, so that
``torch.compile`` places the kernel inside the backward graph.
"""

from __future__ import annotations

import math

import torch

from . import register_op, tl, triton

TWO_SQRT_2_OVER_PI = 2.0 * math.sqrt(2.0 / math.pi)
# rows per program, rows per iteration (ROWS a multiple of it), columns per program, warps: benchmarks/bench_gelu.py's
# sweep (the fastest on an H200; ~10% from the fastest in another call, docs/benchmarks.md)
BIAS_GRAD_TILE = dict(ROWS=1024, BLOCK_M=32, BLOCK_N=256, num_warps=4)


def gelu_grad_reference(grad: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GELU's input gradient at ``h`` (in grad's dtype) and its sum over rows (fp32), in PyTorch."""
    h = h.float()
    s = torch.sigmoid(TWO_SQRT_2_OVER_PI * (h + 0.044715 * h * h * h))
    grad_h = grad.float() * (s + h * s * (1 - s) * TWO_SQRT_2_OVER_PI * (1 + 3 * 0.044715 * h * h))
    return grad_h.to(grad.dtype), grad_h.sum(0)


if triton is not None:

    @triton.jit
    def _gelu_grad_bias_kernel(
        grad_ptr,
        h_ptr,
        out_ptr,
        partial_ptr,
        n_rows,
        n_cols,
        ROWS: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        """ROWS rows x BLOCK_N columns: GELU's input gradient written, and its column sums over those rows."""
        tl.static_assert(ROWS % BLOCK_M == 0)  # else programs overlap and count rows twice
        c: tl.constexpr = 1.5957691216057308  # 2 sqrt(2/pi)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        total = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)  # summed over rows once, after the loop
        first = tl.program_id(0) * ROWS
        for start in range(0, ROWS, BLOCK_M):
            rows = first + start + tl.arange(0, BLOCK_M)
            ok = (rows < n_rows)[:, None] & col_ok[None, :]
            offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
            g = tl.load(grad_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
            h = tl.load(h_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
            s = tl.sigmoid(c * (h + 0.044715 * h * h * h))
            grad_h = g * (s + h * s * (1.0 - s) * c * (1.0 + 3.0 * 0.044715 * h * h))
            tl.store(out_ptr + offsets, grad_h.to(out_ptr.dtype.element_ty), mask=ok)
            total += grad_h
        tl.store(partial_ptr + tl.program_id(0) * n_cols + cols, tl.sum(total, 0), mask=col_ok)


def _launch(grad: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    grad, h = grad.contiguous(), h.contiguous()
    n_rows, n_cols = h.shape
    tile = BIAS_GRAD_TILE
    grid = (triton.cdiv(n_rows, tile["ROWS"]), triton.cdiv(n_cols, tile["BLOCK_N"]))
    grad_h = torch.empty_like(grad)
    partial = torch.empty(grid[0], n_cols, device=h.device, dtype=torch.float32)
    torch.library.wrap_triton(_gelu_grad_bias_kernel)[grid](grad, h, grad_h, partial, n_rows, n_cols, **tile)
    return grad_h, partial.sum(0)


def _fake(grad, h):
    return torch.empty_like(grad), h.new_empty(h.shape[-1], dtype=torch.float32)


gelu_grad_bias = register_op("gelu_grad_bias", gelu_grad_reference, _launch, _fake)
