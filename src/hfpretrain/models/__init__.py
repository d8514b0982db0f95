"""Models and accounting: the config zoo, attention backend choice, parameter/FLOP counts,
peak-FLOPs table, memory estimator and the compute planner.

Each piece lives in a small module; this package re-exports the public API, each name imported on first use:
the zoo and the parameter counts load transformers' model code (seconds), which a recipe check does not need.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CONFIG_DIR": "zoo",
    "FORMULA": "flops",
    "GPU_PEAK_FLOPS": "hardware",
    "KNOWN_IMPLEMENTATIONS": "backend",
    "MOE_FORMULA": "flops",
    "FlopsPerToken": "flops",
    "MemoryEstimate": "memory",
    "MoeShape": "memory",
    "TrainingLayout": "memory",
    "ParamCounts": "params",
    "Plan": "planner",
    "PlanRequest": "planner",
    "attention_backend": "zoo",
    "build_model": "zoo",
    "canonical_gpu": "hardware",
    "chinchilla_optimal": "planner",
    "choose_attn_implementation": "backend",
    "count_params": "params",
    "detect_peak_flops": "hardware",
    "device_name": "hardware",
    "estimate_memory": "memory",
    "flops_per_token": "flops",
    "is_moe": "zoo",
    "load_config": "zoo",
    "matmul_params": "flops",
    "meta_model": "params",
    "moe_config_dict": "zoo",
    "moe_name": "zoo",
    "moe_shape": "memory",
    "num_routed_experts": "zoo",
    "pad_vocab": "zoo",
    "peak_flops": "hardware",
    "plan": "planner",
    "scaling_config_dict": "zoo",
    "scaling_name": "zoo",
    "zoo_names": "zoo",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
