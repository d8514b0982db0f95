"""Next-token cross-entropy from the final hidden states, without HF's fp32 copies of the logits.

At a 151k vocabulary the logits of one micro-batch (22 x 2048 x 151,680 in fp32) take 27 GB;
HF's default loss builds them, upcasts them and keeps them for backward. Three ways around it:

* ``compiled``: the LM head and cross-entropy whole: the logits exist once, in bf16, and the head's
  matmuls run at full size. The fastest where one micro-batch's logits fit easily (see
  :func:`choose_fused_loss`). On a GPU it is :class:`_HeadCrossEntropy` (``kernels.fused_head``): one
  Triton kernel (kernels/cross_entropy.py) makes each token's loss and, in training, overwrites the logits
  with their gradient; backward is the head's two matmuls. Elsewhere (a CPU, ``kernels.fused_head=false``)
  a ``torch.compile``d head + cross-entropy.

* ``liger``: liger-kernel's fused linear cross-entropy (Triton, GPU only), which computes the
  gradient chunk by chunk inside the forward. It is kept outside ``torch.compile`` (it fails
  under compile with torch 2.11), which is why compilation is regional (decoder layers only).
* ``chunked``: plain PyTorch, the same idea as liger's kernel: per chunk of tokens, logits ->
  loss and the gradients at once, so only one chunk of logits is ever alive. Runs everywhere.

Both give the same value as HF's ``ForCausalLMLoss``: labels shifted left by one, the sum of
token losses divided by ``num_items_in_batch`` (the token count of the whole accumulated batch)
when given, else the mean.

``z_loss`` (``loss.z_loss``, training only) adds PaLM's auxiliary term ``z_loss * logsumexp(logits)**2`` per
token, which keeps the softmax normaliser near 1 (log near 0) and the logits from drifting: in all three paths
(liger's ``lse_square_scale``); HF's own loss (``fused_loss=none``) has no such term and is refused with it.

The trainer takes the final hidden states from :class:`HiddenStateTap`, a pre-hook on the LM head, and calls one
:class:`CausalLMLoss` built from the run's frozen :class:`LossSpec` (the recipe's loss settings and the fast path's
choice of implementation).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hfpretrain.kernels import uses_triton
from hfpretrain.kernels.cross_entropy import IGNORE_INDEX, cross_entropy_
from hfpretrain.models.memory import GIB

# ``auto`` compiles head + loss whole when one micro-batch's bf16 logits take at most this share of
# the GPU's memory; above it, liger's chunks keep memory flat. At 32k tokens x 151,680 (9.3 GiB, 6.6%
# of an H200) compiled was still 5-11% faster than liger at scale_12m..146m (docs/benchmarks.md). In training
# the logits exist once (their gradient is written over them: _HeadCrossEntropy), so a fifth of the GPU lets
# GPT-2 124M's 128 x 1024 (13.2 GB) run whole on an 80 GB GPU, as on an H200; at 65,536 x 151,680 (19.9 GB, 13%
# of an H200) whole was 8.6% faster than liger for scale_146m.
COMPILED_LOGITS_MEMORY_SHARE = 1 / 5


def choose_fused_loss(
    requested: str, logits_bytes: int | None = None, gpu_memory_bytes: int | None = None
) -> tuple[str, str]:
    """Return (implementation, reason). ``logits_bytes``: one micro-batch's bf16 logits;
    ``gpu_memory_bytes``: the GPU's memory (None: no GPU)."""
    has_liger = importlib.util.find_spec("liger_kernel") is not None
    if requested == "auto":
        if gpu_memory_bytes is None:
            return "chunked", "no CUDA GPU: chunked PyTorch cross-entropy"
        share = (logits_bytes or 0) / gpu_memory_bytes
        if logits_bytes is not None and share <= COMPILED_LOGITS_MEMORY_SHARE:
            return "compiled", (
                f"one micro-batch's logits take {logits_bytes / GIB:.1f} GiB "
                f"({share:.1%} of the GPU, at most {COMPILED_LOGITS_MEMORY_SHARE:.1%}): "
                "LM head + cross-entropy whole (in training on a GPU: the loss and its gradient "
                "in one kernel)"
            )
        if has_liger:
            return "liger", "logits too large to hold whole: liger-kernel's fused chunks"
        return "chunked", "logits too large to hold whole and liger-kernel missing: chunked PyTorch cross-entropy"
    if requested == "liger" and not (has_liger and torch.cuda.is_available()):
        raise RuntimeError("loss.implementation=liger needs liger-kernel (pip install -e .[gpu]) and a CUDA GPU")
    return requested, "set in the recipe"


def liger_chunk(tokens: int, vocab_size: int, hidden_size: int, mem_const: int = 1) -> int:
    """liger's chunk of tokens (liger_kernel/ops/fused_linear_cross_entropy.py, 0.8.5): its logits
    are about ``mem_const`` times as large as the hidden states."""
    inc_factor = -(-vocab_size // (mem_const * hidden_size))
    return min(1 << (-(-tokens // inc_factor) - 1).bit_length(), tokens)


@functools.lru_cache(maxsize=64)
def liger_chunk_mem_const(tokens: int, vocab_size: int, hidden_size: int, min_chunk_tokens: int) -> int:
    """The smallest ``chunk_mem_const`` that makes liger's chunks at least ``min_chunk_tokens`` long.

    With liger's default (1), a small model with a large vocabulary (hidden 320, 151,680 tokens)
    gets chunks of 64 tokens, 256 rounds of kernels per step: a launch-bound step, 3.9x slower
    than with 1024-token chunks on an H100 (docs/benchmarks.md).
    """
    mem_const = 1
    while liger_chunk(tokens, vocab_size, hidden_size, mem_const) < min(min_chunk_tokens, tokens):
        mem_const += 1
    return mem_const


def loss_chunk_tokens(
    impl: str, tokens: int, vocab_size: int, hidden_size: int, chunk_tokens: int, liger_min_chunk_tokens: int = 0
) -> int | None:
    """Tokens whose logits exist at once (liger: its own chunk sizing, above); ``none``
    materialises all of them (None)."""
    if impl in ("none", "compiled"):
        return None
    if impl == "liger":
        mem_const = liger_chunk_mem_const(tokens, vocab_size, hidden_size, liger_min_chunk_tokens)
        return liger_chunk(tokens, vocab_size, hidden_size, mem_const)
    return chunk_tokens


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def _matmul_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmuls run in: autocast's when it is on, else the hidden states' own."""
    device = hidden.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Sum of token cross-entropies of ``hidden @ weight.T``, one chunk of tokens at a time.

    The gradients are computed in the forward pass (softmax minus one-hot, per chunk), as liger's
    kernel does, so backward only scales them: three matmuls per chunk, no recomputation, and only
    one chunk of logits alive. Matmuls run in the autocast dtype when autocast is on; the softmax
    and the accumulation of the weight gradient are fp32.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_tokens, z_loss=0.0):
        dtype = _matmul_dtype(hidden)
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            needs_grad = hidden.requires_grad or weight.requires_grad
            grad_h = torch.empty_like(h) if needs_grad else None
            grad_w = torch.zeros_like(weight, dtype=torch.float32) if needs_grad else None
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, h.shape[0], chunk_tokens):
                h_c, t_c = h[start : start + chunk_tokens], targets[start : start + chunk_tokens]
                logits = (h_c @ w.T).float()
                keep = t_c != IGNORE_INDEX
                safe_t = t_c.clamp(min=0)
                lse = torch.logsumexp(logits, dim=-1)
                per_token = lse - logits.gather(1, safe_t[:, None]).squeeze(1)
                if z_loss:
                    per_token = per_token + z_loss * lse.square()
                total += (per_token * keep).sum()
                if needs_grad:
                    probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
                    if z_loss:  # d(z * lse^2)/dlogits = 2 z lse * softmax
                        probs.mul_((1.0 + 2.0 * z_loss * lse)[:, None])
                    probs[torch.arange(len(t_c), device=t_c.device), safe_t] -= 1.0
                    grad = probs.masked_fill_(~keep[:, None], 0.0).to(dtype)
                    grad_h[start : start + chunk_tokens] = grad @ w
                    grad_w += (grad.T @ h_c).float()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.hidden_dtype, ctx.weight_dtype = hidden.dtype, weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        return ((grad_h * grad_out).to(ctx.hidden_dtype), (grad_w * grad_out).to(ctx.weight_dtype), None, None, None)


def chunked_cross_entropy_sum(hidden, weight, targets, chunk_tokens: int = 8192, z_loss: float = 0.0) -> torch.Tensor:
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, targets, chunk_tokens, z_loss)


def liger_cross_entropy_sum(hidden, weight, targets, min_chunk_tokens: int = 0, z_loss: float = 0.0) -> torch.Tensor:
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    mem_const = liger_chunk_mem_const(hidden.shape[0], weight.shape[0], weight.shape[1], min_chunk_tokens)
    extra = {"chunk_mem_const": mem_const} if mem_const > 1 else {}  # liger >= 0.8.5
    return liger_fused_linear_cross_entropy(
        hidden, weight, targets, ignore_index=IGNORE_INDEX, reduction="sum", lse_square_scale=z_loss, **extra
    )


def _head_cross_entropy_sum(hidden, weight, targets, z_loss: float = 0.0):
    logits = F.linear(hidden, weight).float()  # under autocast: a bf16 matmul; the upcast fuses into the loss
    total = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
    if z_loss:
        total = total + z_loss * (torch.logsumexp(logits, dim=-1).square() * (targets != IGNORE_INDEX)).sum()
    return total


class _HeadCrossEntropy(torch.autograd.Function):
    """The LM head and the summed cross-entropy on a GPU, the logits' gradient made in the forward pass.

    One cuBLAS matmul makes the bf16 logits; one Triton kernel (kernels/cross_entropy.py) makes each token's
    loss and, when a gradient is wanted, overwrites its row of logits with the loss's gradient; backward is the
    two matmuls of the head, scaled by the incoming gradient after them. Against inductor's compiled loss (a
    reduction kernel, then a gradient kernel that reads the logits again and writes a second tensor as large) it
    is one kernel instead of two and the second tensor is never made. It is not compiled: ``model.compile_backend``
    does not reach it (``kernels.fused_head=false`` brings back the compiled path, to bisect a numeric change).
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, z_loss, tile, write_grad):
        dtype = _matmul_dtype(hidden)
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            logits = h @ w.T
            total = cross_entropy_(logits, targets, z_loss, tile, write_grad=write_grad).sum()
        if write_grad:
            ctx.save_for_backward(h, w, logits)  # logits now holds d total / d logits
        ctx.dtypes = hidden.dtype, weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):
        h, w, grad_logits = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        grad_h = grad_w = None
        if ctx.needs_input_grad[0]:  # scaled in place: no second fp32 copy beside the activations still alive
            grad_h = (grad_logits @ w).float().mul_(grad_total).to(hidden_dtype)
        if ctx.needs_input_grad[1]:
            grad_w = (grad_logits.T @ h).float().mul_(grad_total).to(weight_dtype)
        return grad_h, grad_w, None, None, None, None


@functools.lru_cache(maxsize=4)
def compiled_cross_entropy_sum(backend: str = "inductor", mode: str = "default"):
    """The LM head + cross-entropy as one compiled function (one per compile backend and mode)."""
    return torch.compile(_head_cross_entropy_sum, backend=backend, mode=None if mode == "default" else mode)


@dataclass(frozen=True)
class LossSpec:
    """How a run computes its loss: the recipe's settings, resolved (the plan builds it)."""

    impl: str  # "compiled" | "liger" | "chunked" | "none" (the fast path's fused_loss; none: HF's own loss)
    chunk_tokens: int = 8192  # loss.chunk_tokens (chunked)
    liger_min_chunk_tokens: int = 1024  # loss.liger_min_chunk_tokens (liger)
    z_loss: float = 0.0  # loss.z_loss, in training only
    fused_head: bool = True  # kernels.fused_head: the compiled path's Triton kernel on a GPU
    tile: tuple[int, int] | None = None  # kernels.loss_tile: that kernel's (columns, warps); None: by vocabulary
    compile_backend: str = "inductor"  # model.compile_backend (the compiled path off a GPU kernel)
    compile_mode: str = "default"  # the fast path's compile mode


def causal_lm_loss(
    hidden,
    weight,
    labels,
    num_items_in_batch=None,
    spec: LossSpec = LossSpec("chunked"),
    training: bool = True,
    shifted: bool = False,
):
    """The summed next-token loss over ``num_items_in_batch`` (else the mean), as ``spec`` says; the z-loss in
    ``training`` only (an evaluation reports cross-entropy). ``shifted``: ``labels`` are already each position's
    next token (context parallelism hands each rank its chunks of the shifted labels)."""
    z_loss = spec.z_loss if training else 0.0
    targets = labels if shifted else shift_labels(labels)
    if spec.impl == "compiled":
        hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
        if spec.fused_head and uses_triton(hidden):
            write_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)  # else evaluation
            total = _HeadCrossEntropy.apply(hidden, weight, targets.contiguous(), z_loss, spec.tile, write_grad)
        else:  # a CPU, or kernels.fused_head=false
            total = compiled_cross_entropy_sum(spec.compile_backend, spec.compile_mode)(hidden, weight, targets, z_loss)
    elif spec.impl == "liger":
        total = liger_cross_entropy_sum(hidden, weight, targets, spec.liger_min_chunk_tokens, z_loss)
    else:
        total = chunked_cross_entropy_sum(hidden, weight, targets, spec.chunk_tokens, z_loss)
    if num_items_in_batch is None:
        return total / (targets != IGNORE_INDEX).sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


class CausalLMLoss:
    """One run's loss, ``loss(hidden, weight, labels, num_items_in_batch, training)``: :func:`causal_lm_loss` with
    the run's :class:`LossSpec`."""

    def __init__(self, spec: LossSpec):
        if spec.impl == "none":
            raise ValueError("LossSpec(impl='none') is HF's own loss, computed by the model: no CausalLMLoss")
        self.spec = spec

    def __call__(self, hidden, weight, labels, num_items_in_batch=None, training: bool = True, shifted: bool = False):
        return causal_lm_loss(hidden, weight, labels, num_items_in_batch, self.spec, training, shifted)


class HiddenStateTap:
    """Forward pre-hook on the LM head: keeps its input (final hidden states) and hands the head an
    empty sequence, so the model's forward computes no logits while the trainer computes the loss itself.
    Going through the model's own forward keeps DDP/DeepSpeed/compile wrappers in the loop. A tensor-parallel
    head (a DTensor weight, whose sharding propagation divides by the sequence length) gets one position."""

    def __init__(self, head: torch.nn.Module):
        self.hidden = None
        self.active = False
        self.keep = 1 if hasattr(head.weight, "device_mesh") else 0
        head.register_forward_pre_hook(self)

    def __call__(self, module, args):
        if not self.active:
            return None
        self.hidden = args[0]
        return (args[0][:, : self.keep],)


def tensor_parallel_loss(loss: CausalLMLoss, hidden, weight, labels, num_items_in_batch, shifted: bool = False):
    """The training loss of a tensor-parallel group's shared batch, each rank running the LM head and loss over its
    share of the rows instead of all of them (the head is 18% of the 1.8B shape's FLOPs; computed whole on every
    rank it ran tp times over). ``weight`` is the head's vocabulary-sharded DTensor, gathered with a partial
    gradient (each rank's rows' part, reduce-scattered back into the shards); the hidden states, whole on every
    rank, get the gradient summed over the group; the value is the group's sum, the same on every rank, while each
    rank's backward runs through its own part. None where ``weight`` is not a DTensor on a one-dimensional mesh or
    the group does not divide the batch's rows: the caller then computes it whole."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    mesh = getattr(weight, "device_mesh", None)
    if mesh is None or mesh.ndim != 1 or num_items_in_batch is None or hidden.shape[0] % mesh.size():
        return None
    group = mesh.get_group()
    rows = hidden.shape[0] // mesh.size()
    start = mesh.get_local_rank() * rows
    # replicated forward, partial gradient: DTensor's backward all-reduces the ranks' parts of it
    hidden = DTensor.from_local(hidden, mesh, [Replicate()], run_check=False).to_local(grad_placements=[Partial()])
    hidden = hidden[start : start + rows]
    own = loss(
        hidden,
        weight.full_tensor(grad_placements=[Partial()]),
        labels[start : start + rows],
        num_items_in_batch,
        training=True,
        shifted=shifted,
    )
    total = own.detach().clone()
    torch.distributed.all_reduce(total, group=group)
    return own + (total - own.detach())


def sequence_parallel_loss(loss: CausalLMLoss, hidden, weight, labels, num_items_in_batch, shifted: bool = False):
    """The training loss under sequence parallelism (models/parallel.py): ``hidden`` is this rank's 1/tp of the
    positions (the final norm's output, split), so each rank runs the LM head and loss over its own positions, its
    share of the next-token labels (shifted whole first: a slice's last position predicts the next slice's first
    token). ``weight``, the head's vocabulary-sharded DTensor, is gathered with a partial gradient, as in
    :func:`tensor_parallel_loss`; the hidden states' gradient is this rank's alone. The value is the group's sum,
    the same on every rank."""
    from torch.distributed.tensor import Partial

    mesh = getattr(weight, "device_mesh", None)
    if mesh is None or mesh.ndim != 1:
        raise RuntimeError(
            "sequence parallelism: the LM head's weight is not split over the tensor-parallel mesh alone "
            f"({'a plain tensor' if mesh is None else f'a {mesh.ndim}-D mesh'}); set parallel.sequence_parallel=false"
        )
    if num_items_in_batch is None:
        raise ValueError("sequence_parallel_loss needs the step's label count (num_items_in_batch)")
    targets = labels if shifted else shift_labels(labels)
    span = hidden.shape[1]
    start = mesh.get_local_rank() * span
    own = loss(
        hidden,
        weight.full_tensor(grad_placements=[Partial()]),
        targets[:, start : start + span],
        num_items_in_batch,
        training=True,
        shifted=True,
    )
    total = own.detach().clone()
    torch.distributed.all_reduce(total, group=mesh.get_group())
    return own + (total - own.detach())
