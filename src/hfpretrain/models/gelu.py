"""GELU's tanh approximation written with a sigmoid, for compiled models (GPT-2's ``gelu_new``).

``0.5 * (1 + tanh(u)) == sigmoid(2u)``, so ``gelu_tanh(x) = x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3))``:
the same function, rounded differently in the last bits of fp32 (far below bf16's). What differs is the code
inductor generates: ``tanh`` becomes libdevice's accurate ``tanhf`` (tens of instructions per element), in the
forward and again in the backward, where ``sigmoid`` is one fast exponential and a reciprocal. At GPT-2 124M's
[131,072 x 3,072] activations the GELU kernels are not purely memory-bound because of it (measured:
docs/benchmarks.md, ninth session). Only compiled models are changed, where inductor writes the kernels and
where it was measured; an uncompiled evaluation or ``generate`` runs transformers' module as before.
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


class SigmoidGELU(nn.Module):
    """The tanh approximation of GELU, as ``x * sigmoid(2u)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(TWO_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x)))


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
