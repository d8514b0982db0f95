"""Peak dense tensor FLOP/s per GPU and dtype (vendor datasheets, no sparsity), and MFU's denominator.

``fp32`` is plain FP32 (no TF32); ``tf32`` is listed separately. ``None`` = the GPU has no such
tensor-core path. Detect from ``torch.cuda.get_device_name()``; pass an explicit number to override.
"""

from __future__ import annotations

T = 1e12
# name: {dtype: FLOP/s}
GPU_PEAK_FLOPS: dict[str, dict[str, float | None]] = {
    "B200": {"fp8": 4500 * T, "bf16": 2250 * T, "fp16": 2250 * T, "tf32": 1100 * T, "fp32": 80 * T},
    "H200": {"fp8": 1979 * T, "bf16": 989 * T, "fp16": 989 * T, "tf32": 494.5 * T, "fp32": 67 * T},
    "H100-SXM": {"fp8": 1979 * T, "bf16": 989 * T, "fp16": 989 * T, "tf32": 494.5 * T, "fp32": 67 * T},
    "H100-NVL": {"fp8": 1671 * T, "bf16": 835 * T, "fp16": 835 * T, "tf32": 417.5 * T, "fp32": 60 * T},
    "H100-PCIe": {"fp8": 1513 * T, "bf16": 756 * T, "fp16": 756 * T, "tf32": 378 * T, "fp32": 51 * T},
    "A100": {"fp8": None, "bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
    "L40S": {"fp8": 733 * T, "bf16": 362 * T, "fp16": 362 * T, "tf32": 183 * T, "fp32": 91.6 * T},
    "A6000": {"fp8": None, "bf16": 154.8 * T, "fp16": 154.8 * T, "tf32": 77.4 * T, "fp32": 38.7 * T},
    "V100": {"fp8": None, "bf16": None, "fp16": 125 * T, "tf32": None, "fp32": 15.7 * T},
}

# Memory per GPU in bytes (decimal GB as sold: B200 180 GB in HGX/DGX B200, H200 141 GB, ...).
GPU_MEMORY_BYTES: dict[str, int] = {
    "B200": 180 * 10**9,
    "H200": 141 * 10**9,
    "H100-SXM": 80 * 10**9,
    "H100-NVL": 94 * 10**9,
    "H100-PCIe": 80 * 10**9,
    "A100": 80 * 10**9,
    "L40S": 48 * 10**9,
    "A6000": 48 * 10**9,
    "V100": 32 * 10**9,
}


def gpu_memory_bytes(device_name: str) -> int:
    return GPU_MEMORY_BYTES[canonical_gpu(device_name)]


_DTYPE_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "tf32": "tf32",
    "fp8": "fp8",
    "float8": "fp8",
}


def canonical_gpu(device_name: str) -> str:
    """Map a table key or a ``torch.cuda.get_device_name()`` string to a table key."""
    name = device_name.upper().replace("_", " ").replace("-", " ")
    for key in GPU_PEAK_FLOPS:
        if name == key.upper().replace("-", " "):
            return key
    if "B200" in name or "GB200" in name:
        return "B200"
    if "H200" in name:
        return "H200"
    if "H100" in name:
        if "PCIE" in name:
            return "H100-PCIe"
        if "NVL" in name:
            return "H100-NVL"
        return "H100-SXM"  # "NVIDIA H100 80GB HBM3" is the SXM part
    if "A100" in name:
        return "A100"
    if "L40S" in name:
        return "L40S"
    if "A6000" in name and "ADA" not in name:
        return "A6000"
    if "V100" in name:
        return "V100"
    raise ValueError(
        f"unknown GPU {device_name!r}; known: {', '.join(GPU_PEAK_FLOPS)} (or pass peak FLOP/s explicitly)"
    )


def peak_flops(device_name: str, dtype: str = "bf16") -> float:
    """Peak dense FLOP/s of one ``device_name`` GPU for ``dtype`` (fp8/bf16/fp16/tf32/fp32)."""
    key = canonical_gpu(device_name)
    dt = _DTYPE_ALIASES.get(str(dtype).lower())
    if dt is None:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(set(_DTYPE_ALIASES.values()))}")
    value = GPU_PEAK_FLOPS[key][dt]
    if value is None:
        raise ValueError(f"{key} has no dense {dt} tensor-core path")
    return float(value)


def device_name() -> str:
    """What runs this process: the GPU's name (e.g. "NVIDIA H200"), or "cpu"."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def detect_peak_flops(dtype: str = "bf16") -> float | None:
    """Peak FLOP/s of the current CUDA device; None on CPU or an unknown GPU (``logging.peak_flops`` sets one)."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        return peak_flops(torch.cuda.get_device_name(), dtype)
    except ValueError:
        return None
