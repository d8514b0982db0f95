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

import torch
from torch import nn
from transformers.activations import AccurateGELUActivation, FastGELUActivation, GELUTanh, NewGELUActivation

from hfpretrain.kernels.gelu_bias import TWO_SQRT_2_OVER_PI, gelu_grad_bias

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
# gradient of c_fc. Here c_fc and the GELU are one autograd function: its forward is the stock addmm (bias in
# cuBLAS's epilogue) and GELU; its backward is kernels/gelu_bias.py (the input gradient and its column sums in one
# pass), then the two matmuls.


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
        if (
            isinstance(mlp, GPT2MLP)
            and isinstance(mlp.c_fc, Conv1D)
            and mlp.c_fc.bias is not None
            and (_is_tanh_gelu(mlp.act) or isinstance(mlp.act, SigmoidGELU))
        ):
            mlp.c_fc, mlp.act = LinearGELU(mlp.c_fc), nn.Identity()
            fused += 1
    return fused
