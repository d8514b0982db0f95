"""Models and accounting: the config zoo, attention backend choice, parameter/FLOP counts,
peak-FLOPs table, memory estimator and the compute planner.

Each piece lives in a small module; this package re-exports the public API.
"""

from hfpretrain.models.backend import KNOWN_IMPLEMENTATIONS, choose_attn_implementation
from hfpretrain.models.flops import FORMULA, MOE_FORMULA, FlopsPerToken, flops_per_token, matmul_params
from hfpretrain.models.hardware import GPU_PEAK_FLOPS, canonical_gpu, detect_peak_flops, device_name, peak_flops
from hfpretrain.models.memory import MemoryEstimate, MoeShape, TrainingLayout, estimate_memory, moe_shape
from hfpretrain.models.params import ParamCounts, count_params, meta_model
from hfpretrain.models.planner import Plan, PlanRequest, chinchilla_optimal, plan
from hfpretrain.models.zoo import (
    CONFIG_DIR,
    build_model,
    is_moe,
    load_config,
    moe_config_dict,
    moe_name,
    num_routed_experts,
    pad_vocab,
    scaling_config_dict,
    scaling_name,
    zoo_names,
)

__all__ = [
    "CONFIG_DIR",
    "FORMULA",
    "GPU_PEAK_FLOPS",
    "KNOWN_IMPLEMENTATIONS",
    "MOE_FORMULA",
    "FlopsPerToken",
    "MemoryEstimate",
    "MoeShape",
    "TrainingLayout",
    "ParamCounts",
    "Plan",
    "PlanRequest",
    "build_model",
    "canonical_gpu",
    "chinchilla_optimal",
    "choose_attn_implementation",
    "count_params",
    "detect_peak_flops",
    "device_name",
    "estimate_memory",
    "flops_per_token",
    "is_moe",
    "load_config",
    "matmul_params",
    "meta_model",
    "moe_config_dict",
    "moe_name",
    "moe_shape",
    "num_routed_experts",
    "pad_vocab",
    "peak_flops",
    "plan",
    "scaling_config_dict",
    "scaling_name",
    "zoo_names",
]
