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

``flex_attention_fa4`` is transformers' flex attention (its block mask, e.g. the document mask) run by
PyTorch's ``BACKEND: "FLASH"``: flash-attention 4's CuTe kernels (the ``flash-attn-4`` package) in place of the
Triton ones. On an H200 it ran the document mask's attention at 16k in 7.5% less time than Triton's (at 2k in 1.2%
more), and trained the 1.8B shape at 16k with 4.9% and 6.6% more tokens/s in two same-call A/Bs
(docs/benchmarks.md § Long context); an explicit choice only, as the package is a beta that ``auto`` never assumes.
"""

from __future__ import annotations

import importlib.util

import torch

PACKED_SDPA = "sdpa_packed"
FLEX_FA4 = "flex_attention_fa4"  # no "flash" in it: transformers reads such a name as a flash-attention kernel
KNOWN_IMPLEMENTATIONS = ("flash_attention_2", PACKED_SDPA, "sdpa", "flex_attention", FLEX_FA4, "eager")


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _flash_attn_importable() -> tuple[bool, str]:
    if importlib.util.find_spec("flash_attn") is None:
        return False, "flash-attn is not installed"
    try:
        import flash_attn
    except Exception as exc:  # broken build, ABI mismatch, ...
        return False, f"flash-attn fails to import ({type(exc).__name__}: {exc})"
    if not hasattr(flash_attn, "flash_attn_func"):  # flash-attn-4 alone: a namespace package of its cute kernels
        return False, "flash-attn (2) is not installed, only flash_attn.cute"
    return True, "flash-attn imports"


def _flash_cute_importable() -> tuple[bool, str]:
    try:
        found = importlib.util.find_spec("flash_attn.cute") is not None
    except ImportError:  # a flash_attn without the cute subpackage
        found = False
    if not found:
        return False, "flash-attn-4 (flash_attn.cute) is not installed"
    try:  # imported here, so that a broken install (e.g. its CuTe DSL missing) is one line now, not an inductor error
        importlib.import_module("flash_attn.cute")
    except Exception as exc:
        return False, f"flash-attn-4 fails to import ({type(exc).__name__}: {exc})"
    return True, "flash-attn-4 imports"


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
    if (
        kwargs.get("attention_mask") is None
        and kwargs.get("q_length") == kwargs.get("kv_length")
        and not kwargs.get("q_offset")
        and not kwargs.get("kv_offset")
        and all(t == "full_attention" for t in layer_types)
    ):
        return None
    return sdpa_mask(*args, **kwargs)


def register_packed_sdpa() -> None:
    """Make ``attn_implementation="sdpa_packed"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(PACKED_SDPA, packed_causal_mask)


def flex_fa4_attention_forward(module, query, key, value, attention_mask, **kwargs):
    """transformers' flex attention, its kernels chosen by PyTorch's ``BACKEND: "FLASH"`` (flash-attention 4)."""
    from transformers.integrations.flex_attention import flex_attention_forward

    options = {**(kwargs.pop("kernel_options", None) or {}), "BACKEND": "FLASH"}
    return flex_attention_forward(module, query, key, value, attention_mask, kernel_options=options, **kwargs)


def register_flex_fa4() -> None:
    """Make ``attn_implementation="flex_attention_fa4"`` known to transformers (idempotent): flex attention's
    block mask, flash-attention 4's kernels."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flex_attention_mask

    AttentionInterface.register(FLEX_FA4, flex_fa4_attention_forward)
    AttentionMaskInterface.register(FLEX_FA4, flex_attention_mask)


def choose_attn_implementation(requested: str = "auto") -> tuple[str, str]:
    """Return ``(implementation, reason)`` for ``requested`` ("auto" or a backend name)."""
    requested = (requested or "auto").strip()
    if requested != "auto":
        if requested not in KNOWN_IMPLEMENTATIONS:
            raise ValueError(
                f"unknown attention implementation {requested!r}; choose 'auto' or one of {KNOWN_IMPLEMENTATIONS}"
            )
        if requested in ("flash_attention_2", FLEX_FA4):  # a package's CUDA kernels: the package, then a GPU
            ok, why = _flash_attn_importable() if requested == "flash_attention_2" else _flash_cute_importable()
            if not ok:
                raise ValueError(f"{requested} was forced but {why}")
            if not _cuda_available():
                raise ValueError(f"{requested} was forced but no CUDA GPU is available")
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
