"""The residual stream's dtype under autocast (``model.residual_dtype``).

Under bf16 autocast with fp32 weights (``training.bf16: true``) the embeddings come out in fp32, and every
residual add keeps the stream there (a bf16 branch plus an fp32 stream is fp32): each norm reads fp32, each
add writes fp32, and the backward carries fp32 gradients from layer to layer. At small widths these
memory-bound kernels are a quarter of a step (docs/benchmarks.md, the GPT-2 124M kernel table).

``bfloat16`` casts the stream once, where it enters the first decoder layer: from there the adds, the
norms' inputs and the gradients between layers are bf16, as in Megatron-LM's default and in torchtitan
(FSDP2 with bf16 parameters). The weights, the optimizer state and the checkpoints stay fp32, the norms
still compute their statistics in fp32, and the rotary tables are made from the embeddings before the cast.
What rounds more: the stream itself, and Llama/Qwen3's RMSNorm, which returns ``weight * x.to(input dtype)``
and so rounds the normalised value to bf16 before its weight. The hook acts wherever the trained model runs
under bf16 autocast, in-process evaluation and the lm-eval callback included (accelerate wraps the model's
forward in autocast); a checkpoint loaded with ``from_pretrained`` has no hook, and without bf16 autocast (fp32
or fp16 training, a CPU run) it does nothing.

Under ``model.compile=layers`` the first layer compiles a graph of its own (its input is fp32, the others'
bf16): one more graph to compile, once.
"""

from __future__ import annotations

import torch
from torch import nn

RESIDUAL_DTYPES = ("auto", "float32", "bfloat16")  # model.residual_dtype's values (training/config.py checks them)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's decoder layers: its longest ``ModuleList`` (``h`` in GPT-2, ``layers`` in Llama/Qwen3), which must
    hold ``config.num_hidden_layers`` modules where the model has a config."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__}: found no ModuleList of decoder layers")
    layers = max(lists, key=len)
    expected = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if expected is not None and len(layers) != expected:
        raise ValueError(
            f"{type(model).__name__}: its longest ModuleList has {len(layers)} modules, not the config's "
            f"{expected} decoder layers"
        )
    return layers


def _to_bf16_under_autocast(module, args, kwargs):
    """Forward pre-hook of the first decoder layer: its hidden states in bf16 when bf16 autocast is on."""
    hidden = args[0] if args else kwargs["hidden_states"]
    device = hidden.device.type  # bf16 only: an fp16 stream could overflow, and fp16 training keeps fp32 here
    if not torch.is_autocast_enabled(device) or torch.get_autocast_dtype(device) != torch.bfloat16:
        return None
    hidden = hidden.to(torch.bfloat16)
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def cast_residual_stream(model: nn.Module, dtype: str) -> bool:
    """For ``dtype == "bfloat16"``, make the stream bf16 under bf16 autocast from the first decoder layer on (a forward
    pre-hook; before ``torch.compile``, which traces it). Returns whether the hook was added."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"model.residual_dtype={dtype!r}: choose float32 or bfloat16 (auto is resolved earlier)")
    if dtype == "float32":
        return False
    decoder_layers(model)[0].register_forward_pre_hook(_to_bf16_under_autocast, with_kwargs=True)
    return True
