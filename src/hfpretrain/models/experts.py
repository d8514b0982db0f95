"""An MoE experts module seen with its weights in another dtype: what the experts backends of models/speedups.py
(grouped_mm) and models/sonic.py (sonic-moe) run on under autocast, whose grouped kernels take 16-bit weights while
the master weights stay in float32 (the cast is differentiable, so they get float32 gradients)."""

from __future__ import annotations

import torch
from torch import nn

EXPERT_WEIGHTS = ("gate_up_proj", "down_proj", "gate_proj", "up_proj")


class ExpertsInDtype:
    """An experts module as transformers' experts functions read it, its 3-D weights in ``dtype``."""

    def __init__(self, module: nn.Module, dtype: torch.dtype):
        self._module, self._dtype = module, dtype

    def __getattr__(self, name: str):
        value = getattr(self._module, name)
        if name in EXPERT_WEIGHTS and isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(self._dtype)
        return value
