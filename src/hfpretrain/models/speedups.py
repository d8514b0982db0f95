"""Everything done to a built model to make it train faster, in one place and in the order it must happen.

``apply_speedups(model, Speedups(...), seq_len)`` runs, each only where it applies:

1. fp8 (``model.precision``): the decoder's linears as torchao float8 matmuls (models/fp8.py), before compile,
   which traces them;
2. the residual stream's dtype (``model.residual_dtype``: a hook, models/residual.py), before compile too;
3. compiled decoder/model only: rotary cos/sin from a table (``kernels.rope_table``, models/rotary.py);
4. compiled only: GPT-2's MLP with c_fc's bias gradient in GELU's backward (``kernels.bias_gelu``) and the tanh
   GELU as a sigmoid (``kernels.gelu_sigmoid``), models/gelu.py;
4b. MoE with grouped_mm: the experts' weights cast to the autocast dtype before their grouped matmuls
   (``kernels.experts_autocast``) and the routed rows moved by gathers only (``kernels.experts_gather``,
   :func:`gathered_grouped_mm`);
4c. MoE with sonicmoe and ``kernels.experts_autocast``: sonic-moe's fused kernels on the autocast dtype's copy of
   the weights (models/sonic.py's ``sonicmoe_autocast_traced``; transformers' own backend takes bf16 weights only);
5. ``torch.compile`` at the chosen scope (``model.compile``).

State-dict names never change: checkpoints load with plain ``from_pretrained``. Which of these a run takes is
resolved from the recipe (training/fast_path.py), logged with its reason, and saved with the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from .experts import ExpertsInDtype
from .fp8 import convert_to_fp8
from .gelu import fuse_bias_gelu, use_sigmoid_gelu
from .residual import cast_residual_stream, decoder_layers
from .rotary import tabulate_rotary

logger = logging.getLogger("hfpretrain")


@dataclass(frozen=True)
class Speedups:
    """What ``apply_speedups`` does to a model: the resolved values of the recipe's keys."""

    precision: str = "bf16"  # bf16 | fp8 | fp8_rowwise
    fp8_emulate: bool = False
    fp8_fast_accum: str = "all"
    residual_dtype: str = "float32"  # float32 | bfloat16
    compile: str = "none"  # none | decoder | layers | model
    compile_backend: str = "inductor"
    compile_mode: str = "default"
    rope_table: bool = True
    bias_gelu: bool = True
    gelu_sigmoid: bool = True
    experts_implementation: str | None = None  # MoE: transformers' experts backend (None: a dense model)
    experts_autocast: bool = True
    experts_gather: bool = True
    # sequence parallelism: the first decoder layer sees every position, the others 1/tp; compiled per layer (one
    # code object), dynamo's automatic dynamic shapes would give every later layer one graph with a symbolic sequence
    # length. Compiled whole (decoder, model) the two shapes are in one graph: nothing to do there.
    static_shapes: bool = False


@dataclass
class Applied:
    """How many modules each speed-up changed (0: it did not apply)."""

    fp8_modules: int = 0
    residual_hook: bool = False
    rope_table: bool = False
    bias_gelu_mlps: int = 0
    sigmoid_gelus: int = 0
    experts_autocast: bool = False
    experts_gather: bool = False
    compiled_modules: int = 0
    static_shapes: bool = False  # the layers compiled one graph per input shape (Speedups.static_shapes)


def apply_speedups(model: nn.Module, speedups: Speedups, seq_len: int) -> Applied:
    """Apply ``speedups`` to ``model`` in place (the order matters: module swaps before compile traces them)."""
    s, done = speedups, Applied()
    done.fp8_modules = convert_to_fp8(model, s.precision, s.fp8_emulate, s.fp8_fast_accum)
    done.residual_hook = cast_residual_stream(model, s.residual_dtype)
    compiled = s.compile != "none"
    # Compiled whole, the rotary embedding is inside the graph, where its cos/sin would be recomputed in every
    # layer's kernels.
    if s.rope_table and s.compile in ("decoder", "model") and tabulate_rotary(model, seq_len):
        done.rope_table = True
        logger.info("rotary cos/sin read from a table (models/rotary.py)")
    if s.bias_gelu and compiled and (n := fuse_bias_gelu(model)):
        done.bias_gelu_mlps = n
        logger.info(
            "MLP c_fc + GELU as one function, c_fc's bias gradient summed in GELU's backward, in %d "
            "layers (models/gelu.py)",
            n,
        )
    # Compiled, tanh would be libdevice's accurate tanhf per element, forward and backward.
    if s.gelu_sigmoid and compiled and (n := use_sigmoid_gelu(model)):
        done.sigmoid_gelus = n
        logger.info("GELU (tanh approximation) computed as x * sigmoid(2u) in %d modules (models/gelu.py)", n)
    if (s.experts_autocast or s.experts_gather) and s.experts_implementation == "grouped_mm":
        model.set_experts_implementation(experts_function_name(s.experts_gather, s.experts_autocast))
        done.experts_autocast, done.experts_gather = s.experts_autocast, s.experts_gather
        logger.info(
            "experts: grouped matmuls%s%s (models/speedups.py)",
            " on the autocast dtype's copy of their weights" if s.experts_autocast else "",
            ", rows moved by gathers only" if s.experts_gather else "",
        )
    if s.experts_autocast and s.experts_implementation == "sonicmoe":  # from the local copy or the Hub
        from .sonic import load_sonicmoe

        load_sonicmoe()
        # traced: no graph break under compile, 3.8 ms a layer's forward and backward against 6.3 opaque (one H200)
        model.set_experts_implementation("sonicmoe_autocast_traced")
        done.experts_autocast = True
        logger.info("experts: sonic-moe's kernels on the autocast dtype's copy of their weights (models/sonic.py)")
    done.static_shapes = s.static_shapes and s.compile == "layers"
    done.compiled_modules = compile_model(model, s.compile, s.compile_backend, s.compile_mode, done.static_shapes)
    return done


def compile_model(
    model, scope: str, backend: str = "inductor", mode: str = "default", static_shapes: bool = False
) -> int:
    """Compile in place (state-dict names unchanged) and return how many modules were compiled.

    ``decoder``: the base model (embeddings, layers, final norm), leaving the LM head and the
    fused loss outside, where liger's kernel must stay; ``layers``: each decoder layer (regional,
    one graph reused by all layers: the fastest compile); ``model``: everything. ``static_shapes``: one graph
    per input shape (``dynamic=False``) in place of dynamo's automatic dynamic shapes.
    """
    if scope == "none":
        return 0
    # Dynamo's caches are per process and keyed by code, not by model: after 8 models of other
    # shapes (a study trains many in one process) it hits its recompile limit and silently runs
    # eager. Each run starts from a clean slate, as a fresh process would.
    torch._dynamo.reset()
    options = {"backend": backend, "mode": None if mode == "default" else mode}
    if static_shapes:
        options["dynamic"] = False
    if scope in ("model", "decoder"):
        (model if scope == "model" else model.base_model).compile(**options)
        return 1
    try:
        blocks = decoder_layers(model)
    except ValueError as err:
        raise ValueError(f"model.compile=layers: {err}") from None
    for block in blocks:
        block.compile(**options)
    return len(blocks)


# ---- MoE: the experts' grouped matmuls --------------------------------------------------------------------------
#
# Autocast casts an nn.Linear's fp32 weight to bf16 for its matmul; transformers' grouped expert matmuls are no
# autocast op, and compiled with fp32 master weights transformers takes its fallback (integrations/moe.py
# _can_use_grouped_mm: "not supported in torch.compile with dtypes other than bf16"): one fp32 matmul per expert, on
# CUDA cores (profiled on an H100: fp32 sgemm kernels under grouped_mm_fallback, half of the step). Seen with its
# weights in the autocast dtype, the experts take torch's grouped_mm; the cast is differentiable, so the fp32
# weights get their gradients as a Linear's do (``kernels.experts_autocast``).
#
# Around the two grouped matmuls, transformers' forward sends each token to its k experts by indexing, whose
# backward is a scatter-add (index_put with accumulate), and masks the rows of expert-parallel "sentinel" tokens
# three times (masked_fill on every routed row, forward and backward) although a single GPU has none. Profiled on
# an H100 (the ~1B MoE shape, results/moe_2026-11-26b/), those copies took more GPU time than the difference
# between the grouped and the dense matmuls. :func:`gathered_grouped_mm` moves the rows by gathers only, in both
# directions (a permutation's inverse is known), and masks nothing (``kernels.experts_gather``).


def experts_function_name(gather: bool, autocast: bool) -> str:
    """The name registered with transformers' experts interface for these two kernels' choices."""
    return "grouped_mm" + ("_gather" if gather else "") + ("_autocast" if autocast else "")


class _PermuteRows(torch.autograd.Function):
    """``x[order]`` for a permutation ``order`` of x's rows with inverse ``inverse``: the gradient is gathered back
    (``grad[inverse]``), where autograd's indexing backward would scatter-add it."""

    @staticmethod
    def forward(ctx, x, order, inverse):
        ctx.save_for_backward(inverse)
        return x[order]

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return grad[inverse], None, None


class _RepeatRows(torch.autograd.Function):
    """``x[order // k]``: each row of x taken k times, in the order of a permutation ``order`` of range(len(x) * k)
    with inverse ``inverse``; the gradient of each row's k copies is gathered back and summed."""

    @staticmethod
    def forward(ctx, x, order, inverse, k: int):
        ctx.save_for_backward(inverse)
        ctx.k = k
        return x[order // k]

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        return grad[inverse].view(-1, ctx.k, grad.shape[-1]).sum(dim=1), None, None, None


def gathered_grouped_mm(experts, hidden_states, top_k_index, top_k_weights):
    """transformers' grouped_mm experts forward (integrations/moe.py), its routed rows moved by gathers only and
    weighed before the down projection where that has no bias."""
    from transformers.integrations.moe import _grouped_linear

    tokens, k = top_k_index.shape
    # (token, choice) rows grouped by expert. The keys as int16: a radix sort makes a pass per key byte, 2 instead
    # of int64's 8 (profiled on an H200: the sort's passes were 1% of the ~1B MoE shape's step)
    keys = top_k_index.reshape(-1)
    expert_ids, order = torch.sort(keys.to(torch.int16) if experts.num_experts <= 2**15 else keys)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    # histc, not bincount: no wait for the GPU; integer input on CUDA (deterministic), float elsewhere (supported)
    ids = expert_ids.int() if expert_ids.is_cuda else expert_ids.float()
    offsets = torch.cumsum(
        torch.histc(ids, bins=experts.num_experts, min=0, max=experts.num_experts - 1), dim=0, dtype=torch.int32
    )

    def linear(x, name):
        bias = getattr(experts, f"{name}_bias")[expert_ids.long()] if experts.has_bias else None
        return _grouped_linear(x, getattr(experts, name), offsets, bias=bias, is_transposed=experts.is_transposed)

    rows = _RepeatRows.apply(hidden_states, order, inverse, k)
    if experts.has_gate:
        rows = experts._apply_gate(linear(rows, "gate_up_proj"))
    else:
        rows = experts.act_fn(linear(rows, "up_proj"))
    if experts.has_bias:  # the routing weight scales the down projection's bias too: weigh its output
        rows = _PermuteRows.apply(linear(rows, "down_proj"), inverse, order)  # back to (token, choice) order
        return (rows.view(tokens, k, -1) * top_k_weights.unsqueeze(-1)).sum(dim=1)
    # Without a bias the down projection is linear, so each row can be weighed before it (compiled: in the
    # activation's kernel). Autograd then keeps no down-projection output (hidden width) for the weights' gradient:
    # 4.0 GiB less at the ~1B shape, at the same speed (an H200, docs/benchmarks.md).
    weights = _PermuteRows.apply(top_k_weights.reshape(-1), order, inverse)
    rows = linear((rows * weights.unsqueeze(-1)).to(rows.dtype), "down_proj")
    rows = _PermuteRows.apply(rows, inverse, order)  # back to (token, choice) order
    return rows.view(tokens, k, -1).sum(dim=1, dtype=torch.promote_types(rows.dtype, top_k_weights.dtype))


def grouped_experts_forward(
    self, hidden_states, top_k_index, top_k_weights, gather: bool = True, autocast: bool = True
):
    """The experts' forward with grouped matmuls: :func:`gathered_grouped_mm` (``gather``) or transformers' own,
    under autocast on the autocast dtype's copy of the weights (``autocast``)."""
    from transformers.integrations.moe import grouped_mm_experts_forward

    forward = gathered_grouped_mm if gather else grouped_mm_experts_forward
    device = hidden_states.device.type
    if autocast and torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        if self.down_proj.dtype != dtype:  # every experts module has it (gate_up_proj: gated ones only)
            out = forward(ExpertsInDtype(self, dtype), hidden_states.to(dtype), top_k_index, top_k_weights)
            return out.to(hidden_states.dtype)
    return forward(self, hidden_states, top_k_index, top_k_weights)


def _register() -> None:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    for gather in (False, True):
        for autocast in (False, True):
            if gather or autocast:  # neither: transformers' own grouped_mm
                ALL_EXPERTS_FUNCTIONS.register(
                    experts_function_name(gather, autocast),
                    partial(grouped_experts_forward, gather=gather, autocast=autocast),
                )


_register()
