"""GELU's tanh approximation written with a sigmoid, for compiled models (GPT-2's ``gelu_new``).

``0.5 * (1 + tanh(u)) == sigmoid(2u)``, so ``gelu_tanh(x) = x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3))``:
the same function, rounded differently in the last bits of fp32 (far below bf16's). What differs is the code
inductor generates: ``tanh`` becomes libdevice's accurate ``tanhf`` (tens of instructions per element), in the
forward and again in the backward, where ``sigmoid`` is one fast exponential and a reciprocal. At GPT-2 124M's
[131,072 x 3,072] activations the GELU kernels are not purely memory-bound because of it (measured:
docs/benchmarks.md, ninth session). Only compiled models are changed, where inductor writes the kernels and
where it was measured; an uncompiled evaluation or ``generate`` runs transformers' module as before.

Compiled too, GPT-2's MLP (``fuse_bias_gelu``, below): ``c_fc``'s bias gradient is summed by the kernel that
makes GELU's backward, one pass over the [tokens x 3,072] gradient fewer.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.activations import AccurateGELUActivation, FastGELUActivation, GELUTanh, NewGELUActivation

TWO_SQRT_2_OVER_PI = 2.0 * math.sqrt(2.0 / math.pi)
# transformers' modules for "gelu_new" (GPT-2), "gelu_pytorch_tanh" (Gemma and others), "gelu_fast", "gelu_accurate":
# the same approximation (gelu_fast's constant is sqrt(2/pi) to 10 digits); torch's nn.GELU(approximate="tanh") too
TANH_GELUS = (NewGELUActivation, GELUTanh, FastGELUActivation, AccurateGELUActivation)


def _is_tanh_gelu(module: nn.Module) -> bool:
    return type(module) in TANH_GELUS or (type(module) is nn.GELU and module.approximate == "tanh")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation of GELU, as ``x * sigmoid(2u)``."""
    return x * torch.sigmoid(TWO_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x)))


class SigmoidGELU(nn.Module):
    """gelu_tanh as a module, in place of transformers' tanh-GELU modules."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_tanh(x)


def use_sigmoid_gelu(model: nn.Module) -> int:
    """Replace each tanh-approximated GELU module of ``model`` (before ``torch.compile``, which traces the new
    one); returns how many were replaced (0 for SiLU models: Llama, Qwen3). No parameters or buffers change."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if _is_tanh_gelu(child):
                setattr(parent, name, SigmoidGELU())
                replaced += 1
    return replaced


# ---- GPT-2's MLP: c_fc's bias gradient summed in the GELU's backward ----------------------------------------------
#
# Stock, the backward makes GELU's input gradient in one pointwise kernel, then reads it all again to sum the bias
# gradient of c_fc ([131,072 x 3,072] bf16 per GPT-2 124M micro-batch: 2.5 ms of a 226 ms step on an H200,
# docs/benchmarks.md). Here c_fc and the GELU are one autograd function: its forward is the stock addmm (bias in
# cuBLAS's epilogue) and GELU; its backward makes the input gradient and column sums of it in one kernel, a tiny
# second sum adds those up, and the two matmuls follow.

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU wheel of torch comes without Triton
    triton = None

# rows per program, rows per iteration (ROWS a multiple of it), columns per program, warps: benchmarks/bench_gelu.py's
# sweep (the fastest in call 2 of the tenth session; ~10% from the fastest in another call, docs/benchmarks.md)
BIAS_GRAD_TILE = dict(ROWS=1024, BLOCK_M=32, BLOCK_N=256, num_warps=4)


def _gelu_grad_reference(grad: torch.Tensor, h: torch.Tensor):
    """GELU's input gradient at ``h`` (in h's dtype) and its sum over rows (fp32), in PyTorch."""
    h = h.float()
    s = torch.sigmoid(TWO_SQRT_2_OVER_PI * (h + 0.044715 * h * h * h))
    grad_h = grad.float() * (s + h * s * (1 - s) * TWO_SQRT_2_OVER_PI * (1 + 3 * 0.044715 * h * h))
    return grad_h.to(grad.dtype), grad_h.sum(0)


if triton is not None:
    @triton.jit
    def _gelu_grad_bias_kernel(grad_ptr, h_ptr, out_ptr, partial_ptr, n_rows, n_cols,
                               ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
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

    @torch.library.triton_op("hfpretrain::gelu_grad_bias", mutates_args=())
    def gelu_grad_bias(grad: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not grad.is_cuda:  # compile traces this body whatever the device: branch here, not by dispatch key
            return _gelu_grad_reference(grad, h)
        grad, h = grad.contiguous(), h.contiguous()
        n_rows, n_cols = h.shape
        tile = BIAS_GRAD_TILE
        grid = (triton.cdiv(n_rows, tile["ROWS"]), triton.cdiv(n_cols, tile["BLOCK_N"]))
        grad_h = torch.empty_like(grad)
        partial = torch.empty(grid[0], n_cols, device=h.device, dtype=torch.float32)
        torch.library.wrap_triton(_gelu_grad_bias_kernel)[grid](grad, h, grad_h, partial, n_rows, n_cols, **tile)
        return grad_h, partial.sum(0)
else:
    @torch.library.custom_op("hfpretrain::gelu_grad_bias", mutates_args=())
    def gelu_grad_bias(grad: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _gelu_grad_reference(grad, h)

    @gelu_grad_bias.register_fake
    def _gelu_grad_bias_fake(grad, h):
        return torch.empty_like(grad), h.new_empty(h.shape[-1], dtype=torch.float32)


class _LinearGELU(torch.autograd.Function):
    """``gelu_tanh(x @ weight + bias)`` for 2-D ``x``, all in one dtype; backward: gelu_grad_bias, then the two
    matmuls."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        h = torch.addmm(bias, x, weight)  # the stock Conv1D's op: the bias added in cuBLAS's epilogue, one rounding
        ctx.save_for_backward(x, weight, h)
        return gelu_tanh(h.float()).to(h.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, weight, h = ctx.saved_tensors
        grad_h, grad_bias = gelu_grad_bias(grad, h)
        grad_x = grad_h @ weight.T if ctx.needs_input_grad[0] else None
        grad_weight = x.T @ grad_h if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight, grad_bias.to(h.dtype)


class LinearGELU(nn.Module):
    """GPT-2's ``c_fc`` (a transformers ``Conv1D``: ``x @ weight + bias``) and the tanh GELU after it, as one module
    holding the same ``weight`` and ``bias``: the state dict's keys and the function are unchanged."""

    def __init__(self, linear: nn.Module):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.nf = linear.nf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the dtype the stock addmm computes in under autocast (its casts, made here, so that the function saves
        # the bf16 input it multiplies, not the fp32 one before the cast)
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        out = _LinearGELU.apply(x.reshape(-1, x.shape[-1]).to(dtype), self.weight.to(dtype), self.bias.to(dtype))
        return out.view(*x.shape[:-1], self.nf)


def fuse_bias_gelu(model: nn.Module) -> int:
    """In each GPT-2 MLP of ``model`` whose activation is a tanh GELU, ``c_fc`` becomes a LinearGELU and ``act`` the
    identity (before ``torch.compile``); returns how many MLPs changed. Parameters are the same objects."""
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP
    from transformers.pytorch_utils import Conv1D

    fused = 0
    for mlp in model.modules():
        if (isinstance(mlp, GPT2MLP) and isinstance(mlp.c_fc, Conv1D) and mlp.c_fc.bias is not None
                and (_is_tanh_gelu(mlp.act) or isinstance(mlp.act, SigmoidGELU))):
            mlp.c_fc, mlp.act = LinearGELU(mlp.c_fc), nn.Identity()
            fused += 1
    return fused
