"""Attention backend choice: flash_attention_2 when usable, else SDPA without a mask, else eager.

The choice and the reason are returned (and logged by :func:`hfpretrain.models.build_model` in one
line). Passing anything other than ``"auto"`` forces that backend; forcing ``flash_attention_2``
where it cannot run is refused with the reason, rather than silently falling back.

``sdpa_packed`` is transformers' own SDPA attention with one change, in the mask: training blocks
are packed and never padded, so the mask is plain causal and SDPA's ``is_causal=True`` says it all.
transformers builds a dense ``[B, 1, S, S]`` mask under ``torch.compile`` (it cannot prove the
padding mask empty, or the position ids free of packed documents, while tracing), and with a mask
SDPA cannot use its flash kernel: it runs the memory-efficient kernel over every block of the
S x S square, masked half included. Any call that is not a full causal square without padding
(generation with a cache, a padded lm-eval batch, sliding-window layers) gets transformers' mask
as usual; the name is not saved in checkpoints (``config.json`` leaves ``_attn_implementation``
out), so a checkpoint loads with plain transformers.
"""

from __future__ import annotations

import importlib.util

import torch

KNOWN_IMPLEMENTATIONS = ("flash_attention_2", "sdpa_packed", "sdpa", "flex_attention", "eager")
PACKED_SDPA = "sdpa_packed"


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


def packed_causal_mask(*args, **kwargs):
    """transformers' SDPA mask, except for a full causal square with no padding, no cache and only
    full-attention layers: no mask (None), so that the attention calls SDPA with ``is_causal=True``.

    Under ``torch.compile`` transformers also reads the model's own position ids as possibly packed
    documents (it cannot check them while tracing) and adds a document mask; a block here is one
    causal sequence by design, documents separated by end-of-text, so that mask is dropped too.
    """
    from transformers.masking_utils import sdpa_mask

    layer_types = getattr(kwargs.get("config"), "layer_types", None) or []
    if (kwargs.get("attention_mask") is None and kwargs.get("q_length") == kwargs.get("kv_length")
            and not kwargs.get("q_offset") and not kwargs.get("kv_offset")
            and all(t == "full_attention" for t in layer_types)):
        return None
    return sdpa_mask(*args, **kwargs)


def register_packed_sdpa() -> None:
    """Make ``attn_implementation="sdpa_packed"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(PACKED_SDPA, packed_causal_mask)


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
        if requested in ("sdpa", PACKED_SDPA) and not _sdpa_available():
            raise ValueError(f"{requested} was forced but torch has no scaled_dot_product_attention")
        return requested, "forced by config"
    flash_ok, flash_why = _flash_attn_importable()
    cuda = _cuda_available()
    if flash_ok and cuda:
        return "flash_attention_2", "auto: flash-attn imports and a CUDA GPU is present"
    why = flash_why if not flash_ok else "no CUDA GPU"
    if _sdpa_available():
        return PACKED_SDPA, f"auto: {why}; torch sdpa, causal without a mask (packed blocks)"
    return "eager", f"auto: {why}; torch has no sdpa"
