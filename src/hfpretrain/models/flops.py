"""Training FLOPs per token under one named formula.

    total  = 6 · N_matmul + 12 · L · d_attn · S
    causal = 6 · N_matmul +  6 · L · d_attn · S

N_matmul counts every weight that enters a matmul — attention and MLP projections and the LM
head — and excludes the input (and position) embeddings, which are lookups. The factor 6 is
2 FLOPs per multiply-add × (1 forward + 2 backward). The attention term counts QKᵀ and AV
(2 · 2 · S · d_attn per token per layer forward, ×3 for fwd+bwd) with d_attn = n_heads · head_dim
and S the sequence length; ``causal`` halves it for kernels that skip the masked half
(flash-attention), ``total`` is what dense kernels (eager, or sdpa's math path) execute.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn
from transformers import PretrainedConfig

FORMULA = "6*N_matmul + 12*L*d_attn*S (lm_head in N_matmul, input embedding excluded)"


@dataclass(frozen=True)
class FlopsPerToken:
    total: float
    causal: float
    matmul_params: int
    attention: float  # the 12·L·d_attn·S term
    head: float = 0.0  # the LM head's share of 6·N_matmul (6·V·d): the part that grows with the vocabulary
    formula: str = FORMULA

    def as_dict(self) -> dict:
        return asdict(self)


def _is_matmul_module(module: nn.Module) -> bool:
    if isinstance(module, nn.Linear):
        return True
    return type(module).__name__ == "Conv1D"  # GPT-2's transposed linear


def matmul_params(config_or_model) -> int:
    """Weights that take part in a matmul (LM head included, even when tied to the embedding)."""
    from hfpretrain.models.params import meta_model

    model = config_or_model if isinstance(config_or_model, nn.Module) else meta_model(config_or_model)
    return sum(m.weight.numel() for m in model.modules() if _is_matmul_module(m))


def attention_dims(config: PretrainedConfig) -> tuple[int, int]:
    """(num layers, d_attn = n_heads · head_dim) for any family."""
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(layers), int(heads * head_dim)


def flops_per_token(config: PretrainedConfig, seq_len: int) -> FlopsPerToken:
    from hfpretrain.models.params import meta_model

    model = meta_model(config)
    n = matmul_params(model)
    head = 6.0 * model.get_output_embeddings().weight.numel()
    layers, d_attn = attention_dims(config)
    attn = 12.0 * layers * d_attn * seq_len
    return FlopsPerToken(total=6.0 * n + attn, causal=6.0 * n + attn / 2, matmul_params=n, attention=attn, head=head)
