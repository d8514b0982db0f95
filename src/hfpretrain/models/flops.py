"""Training FLOPs per token under one named formula.

    total  = 6 · N_matmul + 12 · L · d_attn · S
    causal = 6 · N_matmul +  6 · L · d_attn · S

N_matmul counts every weight that enters a matmul — attention and MLP projections and the LM
head — and excludes the input (and position) embeddings, which are lookups. The factor 6 is
2 FLOPs per multiply-add × (1 forward + 2 backward). The attention term counts QKᵀ and AV
(2 · 2 · S · d_attn per token per layer forward, ×3 for fwd+bwd) with d_attn = n_heads · head_dim
and S the sequence length; ``causal`` halves it for kernels that skip the masked half
(flash-attention), ``total`` is what dense kernels (eager, or sdpa's math path) execute.

Mixture-of-Experts: N_matmul is the *active* count. Each token goes through its top-k routed experts,
so a layer's routed expert weights (3-D ``gate_up_proj``/``down_proj`` [E, ...] parameters in
transformers 5) count at top_k/E; shared experts, dense layers, attention and the LM head count in
full, and so does the router (a [E, d] ``F.linear`` computing every expert's logit). Routing itself
(softmax/sigmoid, top-k, gathers, the weighted sum) is not a matmul and is left out. Checked against
``torch.utils.flop_counter`` with transformers' eager expert loop (tests/models/test_moe.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn
from transformers import PretrainedConfig

FORMULA = "6*N_matmul + 12*L*d_attn*S (lm_head in N_matmul, input embedding excluded)"
MOE_FORMULA = (
    "6*N_active_matmul + 12*L*d_attn*S (routed experts at top_k/E; shared experts, router, attention "
    "and lm_head in full; input embedding excluded)"
)


@dataclass(frozen=True)
class FlopsPerToken:
    total: float
    causal: float
    matmul_params: int
    attention: float  # the 12·L·d_attn·S term
    head: float = 0.0  # the LM head's share of 6·N_matmul (6·V·d): the part that grows with the vocabulary
    formula: str = FORMULA
    routed: float = 0.0  # MoE: the routed experts' share of 6·N_matmul (6 · top_k/E · expert weights)
    router: float = 0.0  # MoE: the routers' share (6 · E · d per layer)
    matmul_params_all: int = 0  # every matmul weight, all experts included (== matmul_params for a dense model)

    def as_dict(self) -> dict:
        return asdict(self)


def _is_matmul_module(module: nn.Module) -> bool:
    if isinstance(module, nn.Linear):
        return True
    return type(module).__name__ == "Conv1D"  # GPT-2's transposed linear


def _matmul_parts(model: nn.Module) -> tuple[int, int, int, int]:
    """(linear weights, router weights, routed expert weights: active per token, all of them)."""
    from hfpretrain.models.params import active_numel, experts_per_token, routed_expert_params, router_params

    linear = sum(m.weight.numel() for m in model.modules() if _is_matmul_module(m))
    router = sum(p.numel() for p in router_params(model))
    experts = routed_expert_params(model)
    top_k = experts_per_token(model) or 0
    return (
        linear,
        router,
        sum(active_numel(p, top_k) for p in experts) if top_k else 0,
        sum(p.numel() for p in experts),
    )


def matmul_params(config_or_model, active: bool = True) -> int:
    """Weights that take part in a matmul (LM head included, even when tied to the embedding).

    MoE: ``active`` counts what one token multiplies (routed experts at top_k/E, routers in full);
    ``active=False`` every expert's weights (what autocast casts to bf16). Dense: the same either way."""
    from hfpretrain.models.params import meta_model

    model = config_or_model if isinstance(config_or_model, nn.Module) else meta_model(config_or_model)
    linear, router, routed_active, routed_all = _matmul_parts(model)
    return linear + router + (routed_active if active else routed_all)


def attention_dims(config: PretrainedConfig) -> tuple[int, int]:
    """(num layers, d_attn = n_heads · head_dim) for any family."""
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(layers), int(heads * head_dim)


def flops_per_token(config: PretrainedConfig, seq_len: int) -> FlopsPerToken:
    from hfpretrain.models.params import meta_model

    model = meta_model(config)
    linear, router, routed_active, routed_all = _matmul_parts(model)
    n = linear + router + routed_active
    head = 6.0 * model.get_output_embeddings().weight.numel()
    layers, d_attn = attention_dims(config)
    attn = 12.0 * layers * d_attn * seq_len
    moe = routed_all > 0
    return FlopsPerToken(
        total=6.0 * n + attn,
        causal=6.0 * n + attn / 2,
        matmul_params=n,
        attention=attn,
        head=head,
        formula=MOE_FORMULA if moe else FORMULA,
        routed=6.0 * routed_active,
        router=6.0 * router,
        matmul_params_all=linear + router + routed_all,
    )
