"""The project's own GPU kernels, each with the PyTorch code it replaces.

* ``cross_entropy.py``: the LM head's loss per token, and in training its gradient written over the logits, in
  one Triton kernel (the loss path of every GPU step; training/loss.py).
* ``gelu_bias.py``: GELU's backward for GPT-2's MLP with ``c_fc``'s bias gradient summed in the same pass
  (models/gelu.py).

A kernel runs on CUDA tensors when Triton is installed; everywhere else (a CPU, the CPU wheel of torch) the
PyTorch reference next to it computes the same thing. Every kernel has a test under Triton's CPU interpreter
(``TRITON_INTERPRET=1``, run by CI) and a CUDA test marked ``gpu`` (``benchmarks/gpu_tests.sh``), and stays only
while a same-call A/B on the shapes it serves shows a gain above noise (docs/benchmarks.md). Whether each one
runs is a recipe key (``kernels:``, training/config.py), never an environment variable.

This package imports nothing else from hfpretrain: models/ and training/ import it.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

try:
    import triton
    import triton.language as tl  # noqa: F401 - re-exported for the kernel modules
except ImportError:  # the CPU wheel of torch comes without Triton
    triton = None
    tl = None


def uses_triton(tensor: torch.Tensor) -> bool:
    """Run the Triton kernel for ``tensor``: it is on a CUDA GPU and Triton is installed."""
    return tensor.is_cuda and triton is not None


def register_op(name: str, reference: Callable, launch: Callable, fake: Callable) -> Callable:
    """``hfpretrain::name`` as a torch custom op that ``torch.compile`` places inside its graph: ``launch`` (which
    starts the Triton kernel through ``torch.library.wrap_triton``) for CUDA tensors with Triton installed,
    ``reference`` (the same arithmetic in PyTorch) otherwise. ``reference`` gives the op its typed signature;
    ``fake`` its output shapes for tracing."""
    if triton is not None:
        # compile traces this body whatever the device: branch here, not by dispatch key
        def body(*args):
            return launch(*args) if args[0].is_cuda else reference(*args)

        body.__signature__ = inspect.signature(reference)
        body.__annotations__ = reference.__annotations__
        body.__name__ = reference.__name__
        return torch.library.triton_op(f"hfpretrain::{name}", body, mutates_args=())
    op = torch.library.custom_op(f"hfpretrain::{name}", reference, mutates_args=())
    op.register_fake(fake)
    return op
