"""MoE experts on sonic-moe's fused kernels (CuTe DSL, Hopper and newer), from a local copy or the Hub.

transformers 5.17 has a ``sonicmoe`` experts backend (integrations/sonicmoe.py) that takes the kernel from the Hub
(kernels-community/sonic-moe, revision ``ep-support``) through the ``kernels`` package; neither reaches the GPU
machine. The kernel is pure Python on top of nvidia-cutlass-dsl, apache-tvm-ffi and Triton (kernel-builder's
``torch-noarch``: no compiled op of its own), so its source directory ``sonic_moe/`` can be put on the path as it is
(benchmarks/sonic_kit.sh carries it with the wheels). :func:`load_sonicmoe` imports it from there where it is on
the path, else takes transformers' loader (the ``kernels`` package and the Hub), after checking for a Hopper GPU.

Its grouped GEMMs gather the tokens' rows as they load them (no permuted copy of the hidden states), apply SwiGLU in
the up projection's epilogue, and in the backward compute the activation's gradient and the routing weights'
gradient in the down projection's epilogue: the three costs that keep our ``grouped_mm`` backend at ~71% of the dense
twin's tokens/s (docs/benchmarks.md, "MoE against its dense twin, profiled").

Two experts functions are registered with transformers' experts interface (models/speedups.py registers ours the
same way):

- ``sonicmoe_autocast``: under autocast, the weights' autocast-dtype copy (a differentiable cast, as
  ``grouped_mm_gather_autocast`` does: fp32 master weights get fp32 gradients) and the hidden states in that dtype;
  the kernel call is opaque to torch.compile (a graph break around the experts, whose kernels are their own);
- ``sonicmoe_autocast_traced``: the same, traced by dynamo (sonic-moe registers its kernels as torch custom ops with
  fake implementations): no graph break on an H200 (benchmarks/gpu_sonic_check.py), 3.8 ms for one layer's forward
  and backward compiled against 6.3 ms opaque; what ``model.experts_implementation: sonicmoe`` runs.

:func:`load_sonicmoe` also hands a local copy to transformers' own ``sonicmoe`` backend (its ``_SONICMOE`` global,
which its loader returns before looking for the ``kernels`` package or the Hub), so that backend runs the same
kernels, on weights that must already be in bf16.

Layouts (checked on a CPU against transformers' eager loop with a pure-torch model of the kernel's contract,
tests/models/test_sonic.py; on the GPU against ``grouped_mm_gather_autocast``, benchmarks/gpu_sonic_check.py):
transformers' Qwen3-MoE-style experts keep ``gate_up_proj`` as [E, 2I, H], gate rows first then up rows
(``is_concatenated``: ``_default_apply_gate`` chunks the output in two, gate first), and ``down_proj`` as [E, H, I].
sonic-moe wants ``w1`` of shape (2I, H, E) with stride order (2, 0, 1) and ``w2`` of shape (H, I, E), the same
stride order: ``permute(1, 2, 0)`` of the contiguous parameters, no copy. Its default gate/up layout is interleaved
(gate_0, up_0, gate_1, ...); ``concat_layout=True`` reads [gate; up], transformers' layout.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from .experts import ExpertsInDtype

# transformers' config.hidden_act -> sonic-moe's gated epilogue (its kernels have gated activations only)
ACT_MAP = {"silu": "swiglu", "gelu": "geglu"}
# The torch.library namespace sonic-moe's custom ops are registered under here. kernel-builder generates a
# ``sonic_moe/_ops.py`` with a build-unique one; the source directory lacks it: :func:`_provide_ops`.
OPS_NAMESPACE = "_sonic_moe_hfpretrain"

_SONICMOE = None  # the loaded SonicKernel
# the families whose experts it was checked on (tests/models/test_sonic.py, the GPU runs): others may gate their
# experts otherwise (GPT-OSS's clamped gate), which its fused SwiGLU epilogue would silently replace
SONIC_MODEL_TYPES = ("qwen3_moe",)


OPS_SOURCE = f'''"""Written by hfpretrain (models/sonic.py): the module kernel-builder generates for a built kernel."""
import torch

ops = torch.ops.{OPS_NAMESPACE}


def add_op_namespace_prefix(op_name: str) -> str:
    return f"{OPS_NAMESPACE}::{{op_name}}"
'''


def _provide_ops(folder: str) -> None:
    """``sonic_moe/_ops.py``, written into the package where it can be (QuACK's compile workers, forked from a
    server process, import the package again and need the file), else a module in sys.modules (this process only:
    those workers then fail, and QuACK compiles in-process instead)."""
    path = os.path.join(folder, "_ops.py")
    if os.path.exists(path) or "sonic_moe._ops" in sys.modules:
        return
    tmp = f"{path}.{os.getpid()}.tmp"  # one per process: ranks of one launch write it at once
    try:
        with open(tmp, "w") as f:
            f.write(OPS_SOURCE)
        os.replace(tmp, path)
    except OSError:
        module = types.ModuleType("sonic_moe._ops")
        module.ops = getattr(torch.ops, OPS_NAMESPACE)
        module.add_op_namespace_prefix = lambda name: f"{OPS_NAMESPACE}::{name}"
        sys.modules["sonic_moe._ops"] = module


def _cutlass_on_path() -> None:
    """nvidia-cutlass-dsl puts its ``cutlass`` package on sys.path from a .pth file, which Python reads in
    site-packages only, not in a PYTHONPATH folder (``pip install --target``): do what the .pth does."""
    if importlib.util.find_spec("cutlass") is not None:
        return
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is None or not spec.submodule_search_locations:
        return
    packages = os.path.join(list(spec.submodule_search_locations)[0], "dsl_packages")
    if os.path.isdir(packages) and packages not in sys.path:
        sys.path.append(packages)  # where the .pth would put it: after everything else
        # QuACK's compile workers are started processes that do not inherit sys.path: only PYTHONPATH reaches them
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), packages) if p)


@dataclass(frozen=True)
class SonicKernel:
    """sonic-moe's entry point and its activation enum, from the local copy or from transformers' Hub loader."""

    moe_general_routing_inputs: Callable
    activation_type: type


def _check_gpu() -> None:
    """ImportError (one line) unless a CUDA GPU of compute capability 9 or newer is here: the kernels are Hopper's
    (transformers' loader checks the same; the local copy would otherwise fail inside its first JIT compile)."""
    if not torch.cuda.is_available():
        raise ImportError("sonic-moe needs a CUDA GPU (Hopper or newer); none is available")
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        raise ImportError(f"sonic-moe needs a Hopper (SM90) or newer GPU; this one is SM{major}{minor}")


def _load_local() -> SonicKernel:
    """The ``sonic_moe`` package on the path (the kit of benchmarks/sonic_kit.sh), handed to transformers' backend."""
    spec = importlib.util.find_spec("sonic_moe")
    _cutlass_on_path()
    for name in ("cutlass", "tvm_ffi", "triton"):
        if importlib.util.find_spec(name) is None:
            dist = {"cutlass": "nvidia-cutlass-dsl", "tvm_ffi": "apache-tvm-ffi"}.get(name, name)
            raise ImportError(f"sonic-moe needs {dist} ({name} is not importable)")
    _provide_ops(list(spec.submodule_search_locations)[0])
    try:
        import sonic_moe
        from sonic_moe.enums import ActivationType
    except Exception as error:  # the first line of whatever stopped the import
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ImportError(f"sonic-moe failed to import: {type(error).__name__}: {first}") from error
    try:
        from transformers.integrations import sonicmoe as hf_sonicmoe

        hf_sonicmoe._SONICMOE = hf_sonicmoe.SonicMoE(
            activation_type_enum=ActivationType, moe_general_routing_inputs=sonic_moe.moe_general_routing_inputs
        )
    except (ImportError, AttributeError, TypeError):  # a transformers without (this form of) the backend
        pass
    return SonicKernel(sonic_moe.moe_general_routing_inputs, ActivationType)


def _load_from_hub() -> SonicKernel:
    """transformers' own loader: the ``kernels`` package and kernels-community/sonic-moe from the Hub."""
    import transformers

    try:
        from transformers.integrations.sonicmoe import load_sonicmoe_kernel
    except ImportError:
        raise ImportError(f"transformers {transformers.__version__} has no sonicmoe experts backend") from None
    try:
        kernel = load_sonicmoe_kernel()
    except Exception as error:  # ImportError for a missing part; the Hub's errors when it cannot be reached
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ImportError(first.split(" Use a different")[0].rstrip(".")) from error
    return SonicKernel(kernel.moe_general_routing_inputs, kernel.activation_type_enum)


def local_copy() -> bool:
    """Whether a local ``sonic_moe`` package is on the path (benchmarks/sonic_kit.sh's kit)."""
    return importlib.util.find_spec("sonic_moe") is not None


def load_sonicmoe() -> SonicKernel:
    """sonic-moe's kernel, once: the local copy where ``sonic_moe`` is on the path, else transformers' Hub loader.
    ImportError with one line naming the missing part (a Hopper GPU, the package, nvidia-cutlass-dsl, ...)."""
    global _SONICMOE
    if _SONICMOE is None:
        _check_gpu()
        _SONICMOE = _load_local() if local_copy() else _load_from_hub()
    return _SONICMOE


def sonic_weights(experts) -> tuple[torch.Tensor, torch.Tensor]:
    """(w1, w2) as sonic-moe reads them: views of ``gate_up_proj`` [E, 2I, H] as (2I, H, E) and of ``down_proj``
    [E, H, I] as (H, I, E), stride order (2, 0, 1) (transposed experts, [E, H, 2I] and [E, I, H]: permute(2, 1, 0),
    as transformers' backend does)."""
    perm = (2, 1, 0) if experts.is_transposed else (1, 2, 0)
    return experts.gate_up_proj.permute(*perm), experts.down_proj.permute(*perm)


def sonic_routing(top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
    """(router_scores, token_indices, expert_indices), flat, in (token, choice) order: token indices int32 and sorted
    ascending (the kernel's requirement), the routing weights in fp32 (the kernel casts them to fp32 anyway; passing
    them so keeps their gradient fp32 too)."""
    tokens, k = top_k_index.shape
    token_idx = torch.arange(tokens, device=top_k_index.device, dtype=torch.int32).repeat_interleave(k)
    return top_k_weights.reshape(-1).float(), token_idx, top_k_index.reshape(-1).int()


def sonic_experts(experts, hidden_states, top_k_index, top_k_weights, kernel=None):
    """The experts' forward on sonic-moe's ``moe_general_routing_inputs``: out[t] = sum over t's choices of
    weight * down(act(gate) * up) of its expert. ``kernel``: the module (tests pass a pure-torch model of it)."""
    if not experts.has_gate:
        raise ValueError("sonicmoe needs gated experts (gate_up_proj)")
    if getattr(experts, "has_post_expert_norm", False):  # transformers 5.24 refuses it in its backend too
        raise ValueError("sonicmoe: no kernel for experts with a post-expert norm")
    act = getattr(experts.config, "hidden_act", "silu")
    if act not in ACT_MAP:
        raise ValueError(f"sonicmoe: no fused epilogue for hidden_act={act!r} (one of {sorted(ACT_MAP)})")
    w1, w2 = sonic_weights(experts)
    if w1.dtype not in (torch.bfloat16, torch.float16) or hidden_states.dtype != w1.dtype:
        raise ValueError(
            f"sonicmoe: weights {w1.dtype} and hidden states {hidden_states.dtype} must be the same 16-bit dtype "
            "(use sonicmoe_autocast under autocast)"
        )
    kernel = kernel if kernel is not None else load_sonicmoe()
    scores, token_idx, expert_ids = sonic_routing(top_k_index, top_k_weights)
    bias = (None, None)
    if experts.has_bias:  # in the weights' dtype (the autocast view casts the 3-D weights only)
        bias = (experts.gate_up_proj_bias.to(w1.dtype), experts.down_proj_bias.to(w1.dtype))
    out, _ = kernel.moe_general_routing_inputs(
        hidden_states.contiguous(),
        scores,
        token_idx,
        expert_ids,
        w1,
        bias[0],
        w2,
        bias[1],
        E=experts.num_experts,
        stream_id=None,  # unused by the kernel (its signature keeps it); transformers passes None too
        activation_type=getattr(kernel.activation_type, ACT_MAP[act].upper()),
        is_inference_mode_enabled=not torch.is_grad_enabled(),
        concat_layout=experts.is_concatenated,
    )
    return out


_opaque_sonic_experts = torch.compiler.disable(sonic_experts)


def sonic_experts_forward(self, hidden_states, top_k_index, top_k_weights, traced: bool = False, kernel=None):
    """Registered experts function: under autocast, the weights' (differentiable) autocast-dtype copy and the hidden
    states in that dtype, the output back in the hidden states' dtype (as models/speedups.py's
    ``grouped_experts_forward``); ``traced``: dynamo traces the kernel call instead of breaking the graph there."""
    run = sonic_experts if traced else _opaque_sonic_experts
    device = hidden_states.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        experts = ExpertsInDtype(self, dtype) if self.down_proj.dtype != dtype else self
        out = run(experts, hidden_states.to(dtype), top_k_index, top_k_weights, kernel=kernel)
        return out.to(hidden_states.dtype)
    return run(self, hidden_states, top_k_index, top_k_weights, kernel=kernel)


EXPERTS_FUNCTIONS = {"sonicmoe_autocast": False, "sonicmoe_autocast_traced": True}  # name -> traced


def _register() -> None:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    for name, traced in EXPERTS_FUNCTIONS.items():
        ALL_EXPERTS_FUNCTIONS.register(name, partial(sonic_experts_forward, traced=traced))


_register()
