"""Attention backend choice: flash_attention_2 when usable, else sdpa, else eager.

The choice and the reason are returned (and logged by :func:`hfpretrain.models.build_model` in one
line). Passing anything other than ``"auto"`` forces that backend; forcing ``flash_attention_2``
where it cannot run is refused with the reason, rather than silently falling back.
"""

from __future__ import annotations

import importlib.util

import torch

KNOWN_IMPLEMENTATIONS = ("flash_attention_2", "sdpa", "eager")


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _flash_attn_importable() -> tuple[bool, str]:
    if importlib.util.find_spec("flash_attn") is None:
        return False, "flash-attn is not installed"
    try:
        import flash_attn  # noqa: F401
    except Exception as exc:  # broken build, ABI mismatch, ...
        return False, f"flash-attn fails to import ({type(exc).__name__}: {exc})"
    return True, "flash-attn imports"


def _sdpa_available() -> bool:
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


def choose_attn_implementation(requested: str = "auto") -> tuple[str, str]:
    """Return ``(implementation, reason)`` for ``requested`` ("auto" or a backend name)."""
    requested = (requested or "auto").strip()
    if requested != "auto":
        if requested not in KNOWN_IMPLEMENTATIONS:
            raise ValueError(
                f"unknown attention implementation {requested!r}; choose 'auto' or one of {KNOWN_IMPLEMENTATIONS}"
            )
        if requested == "flash_attention_2":
            ok, why = _flash_attn_importable()
            if not ok:
                raise ValueError(f"flash_attention_2 was forced but {why}")
            if not _cuda_available():
                raise ValueError("flash_attention_2 was forced but no CUDA GPU is available")
        if requested == "sdpa" and not _sdpa_available():
            raise ValueError("sdpa was forced but torch has no scaled_dot_product_attention")
        return requested, "forced by config"
    flash_ok, flash_why = _flash_attn_importable()
    cuda = _cuda_available()
    if flash_ok and cuda:
        return "flash_attention_2", "auto: flash-attn imports and a CUDA GPU is present"
    why = flash_why if not flash_ok else "no CUDA GPU"
    if _sdpa_available():
        return "sdpa", f"auto: {why}; torch sdpa available"
    return "eager", f"auto: {why}; torch has no sdpa"
