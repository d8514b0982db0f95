"""Rotary embeddings read from a table, for compiled decoders (Llama, Qwen3).

transformers computes the rotary cos/sin at every forward, from the position ids (``pos * inv_freq``, then
``cos`` and ``sin``). Eagerly that is one small kernel. Compiled with the whole decoder (``model.compile=decoder``
or ``model``), inductor inlines the tiny cos/sin tensors into their consumers: every layer's q/k-norm and rotary
kernels recompute ``cos`` and ``sin`` for each element of q and k, batch and heads included. On an H200 those
kernels took 8.6 ms of scale_53m's 87 ms step (GPT-2 vocabulary, seq 1024); reading a table, 4.9 ms, and the step
ran 1.5% faster (docs/benchmarks.md, eighth session). With ``compile=layers`` the rotary embedding runs eagerly
and this does not arise.

``tabulate_rotary`` computes cos and sin once for every position up to ``max_position_embeddings`` (or the
training length, where that is longer: transformers' forward extrapolates there too), with the model's own
formula, as non-persistent buffers (checkpoints are unchanged), and makes the module's forward an index into
them: inside the graph a gather, read from cache, instead of a transcendental per element. Only rope types whose
frequencies never change are tabulated (not ``dynamic`` or ``longrope``, which rescale with length). Positions
past the table (an in-memory ``generate`` beyond it) fail with an index error, where transformers' forward would
extrapolate; evaluation blocks are the training length, and lm-eval truncates to ``max_position_embeddings``.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # inv_freq fixed at init


def _rotary_module(model: nn.Module) -> nn.Module | None:
    """The model's shared rotary embedding (``model.model.rotary_emb`` in Llama/Qwen3), if it has one."""
    found = [m for m in model.modules() if hasattr(m, "inv_freq") and hasattr(m, "attention_scaling")]
    return found[0] if len(found) == 1 else None


def _from_table(self, x: torch.Tensor, position_ids: torch.Tensor):
    """The tabulated module's forward: what transformers' would return, read from the tables."""
    return self.cos_table[position_ids].to(x.dtype), self.sin_table[position_ids].to(x.dtype)


def tabulate_rotary(model: nn.Module, min_length: int = 0) -> bool:
    """Make the model's rotary embedding read cos/sin from tables of ``max(max_position_embeddings, min_length)``
    positions (before ``torch.compile``, which traces the new forward). Returns whether it did: False for a model
    without rotary embeddings (GPT-2) or with a rope type whose frequencies change with the sequence length."""
    rotary = _rotary_module(model)
    if rotary is None or getattr(rotary, "rope_type", "default") not in STATIC_ROPE_TYPES:
        return False
    length = max(int(model.config.max_position_embeddings), int(min_length))
    with torch.no_grad():
        positions = torch.arange(length, device=rotary.inv_freq.device, dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        rotary.register_buffer("cos_table", emb.cos() * rotary.attention_scaling, persistent=False)
        rotary.register_buffer("sin_table", emb.sin() * rotary.attention_scaling, persistent=False)
    rotary.forward = functools.partial(_from_table, rotary)  # a partial pickles (a bound method would not)
    return True
