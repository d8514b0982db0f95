"""FP8 training of the decoder's linear layers with torchao (``model.precision: fp8 | fp8_rowwise``).

torchao's ``convert_to_float8_training`` swaps ``nn.Linear`` modules for ``Float8Linear``: the matmuls run in
float8 (e4m3 forward, e5m2 gradients) with dynamic scales per tensor (``fp8``) or per row (``fp8_rowwise``:
more accurate, a little slower), while the weights, the optimizer and everything outside the matmuls stay in
the training dtype. So a checkpoint is an ordinary bf16/fp32 one that loads without torchao.

Which layers: the decoder's linears only. The LM head, the embeddings and the norms stay in bf16 (the head's
logits are where the loss is most sensitive to rounding, and at small sizes it is the largest matmul, so this
is the conservative default); a linear whose in/out features are not multiples of 16 is skipped (float8
matmuls need them). Needs a GPU of compute capability >= 8.9 (Ada, Hopper, Blackwell); ``emulate`` runs the
same casts on any device, for tests and debugging only (no speed-up).
"""

from __future__ import annotations

import dataclasses
import logging

from torch import nn

logger = logging.getLogger(__name__)

RECIPES = {"fp8": "tensorwise", "fp8_rowwise": "rowwise"}  # model.precision -> torchao recipe name
PRECISIONS = ("bf16", *RECIPES)


def check_fp8_available(precision: str, emulate: bool = False) -> None:
    """One line, before any work, if this precision cannot run here."""
    if precision not in RECIPES:
        return
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise ValueError(
            f"model.precision={precision} needs torchao: pip install 'hfpretrain[fp8]' (torchao >= 0.18)"
        ) from None
    if emulate:
        return
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            f"model.precision={precision} needs a CUDA GPU of compute capability >= 8.9 (Ada, Hopper, "
            "Blackwell); this machine has none (model.fp8_emulate=true only checks numerics, slowly)"
        )
    cc = torch.cuda.get_device_capability()
    if cc < (8, 9):
        raise ValueError(
            f"model.precision={precision} needs compute capability >= 8.9; "
            f"{torch.cuda.get_device_name()} has {cc[0]}.{cc[1]}: use model.precision=bf16"
        )


def fp8_unsupported(config) -> str | None:
    """Why torchao's float8 would convert none of this model's layers (None: it converts them)."""
    if config.model_type == "gpt2":
        return "GPT-2's layers are transformers' Conv1D, which torchao's float8 does not convert"
    return None


def fp8_module_filter(head: nn.Module):
    """torchao's ``module_filter_fn``: the decoder's linears with dimensions that are multiples of 16."""

    def keep(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear) or module is head:
            return False
        return module.in_features % 16 == 0 and module.out_features % 16 == 0

    return keep


# model.fp8_fast_accum -> the matmuls that accumulate fast; each choice adds the next gradient's matmuls
FAST_ACCUM = {
    "forward": "the forward's matmuls",
    "input_grad": "the forward's and input gradients' matmuls",
    "all": "all matmuls",
}


def convert_to_fp8(model: nn.Module, precision: str, emulate: bool = False, fast_accum: str = "all") -> int:
    """Convert ``model``'s decoder linears in place; return how many were converted (0 for bf16).
    ``fast_accum``: the matmuls that accumulate fast (FAST_ACCUM): the forward's only, as torchao's recipes do;
    also the input gradients' (their sums run over a model width, like the forward's); or all, the weight
    gradients' too (sums over every token of the micro-batch, where the lower precision rounds most). ``all`` is
    the default: on an H200 it made the 1.8B step 2.6% faster than ``forward`` (``input_grad``: 0.7%), and over
    300 steps its loss stayed within 0.44% of bf16's (docs/benchmarks.md, ninth session). Both were measured with
    tensorwise scaling; ``fp8_rowwise`` takes the same setting, not measured with it."""
    if precision not in RECIPES:
        return 0
    if fast_accum not in FAST_ACCUM:
        raise ValueError(f"model.fp8_fast_accum={fast_accum!r}: one of {', '.join(FAST_ACCUM)}")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.config import Float8GemmConfig

    config = Float8LinearConfig.from_recipe_name(RECIPES[precision])
    if emulate:
        config = dataclasses.replace(config, emulate=True)
    if fast_accum in ("input_grad", "all"):
        config = dataclasses.replace(config, gemm_config_grad_input=Float8GemmConfig(use_fast_accum=True))
    if fast_accum == "all":
        config = dataclasses.replace(config, gemm_config_grad_weight=Float8GemmConfig(use_fast_accum=True))
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    convert_to_float8_training(model, module_filter_fn=fp8_module_filter(model.get_output_embeddings()), config=config)
    converted = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    if not converted:  # a silent no-op otherwise: bf16 speed under an fp8 label
        raise ValueError(
            f"model.precision={precision}: none of this model's layers can run in float8 (torchao "
            "converts nn.Linear with dimensions that are multiples of 16; GPT-2's layers are transformers' "
            "Conv1D): use a Qwen3/Llama config or model.precision=bf16"
        )
    logger.info(
        "fp8 (%s scaling%s%s): %d of %d linear layers in float8 (LM head and layers with dimensions not "
        "multiples of 16 stay in the training dtype)",
        RECIPES[precision],
        ", emulated" if emulate else "",
        f", fast accumulation in {FAST_ACCUM[fast_accum]}",
        converted,
        len(linears),
    )
    return converted
