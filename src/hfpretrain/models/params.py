"""Parameter counts: total, embedding, non-embedding (tied and untied LM heads handled), and active.

``embedding`` = token embedding + learned position embedding (GPT-2) + the LM head when it is a
separate (untied) matrix; ``non_embedding`` = everything else (attention, MLP, norms). A config is
counted on the meta device, so no weights are allocated.

``active`` is what one token uses: for a Mixture-of-Experts model the routed experts count at
``num_experts_per_tok / num_experts`` of their weights (a token goes through its top-k experts only),
while attention, norms, the router and shared experts count in full; for a dense model
``active == total``. ``active_non_embedding`` = ``active - embedding``. In transformers 5 the routed
experts of a layer are 3-D parameters (``gate_up_proj`` [E, 2·I, d], ``down_proj`` [E, d, I]) of a
module with a ``num_experts`` attribute; the router is a 2-D ``weight`` [E, d] of a module with one.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class ParamCounts:
    total: int
    embedding: int
    non_embedding: int
    active: int  # per token: routed experts at top_k/E; == total for a dense model
    active_non_embedding: int

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def is_sparse(self) -> bool:
        return self.active != self.total

    def __str__(self) -> str:
        text = (
            f"{self.total / 1e6:,.1f}M total, {self.embedding / 1e6:,.1f}M embedding, "
            f"{self.non_embedding / 1e6:,.1f}M non-embedding"
        )
        if self.is_sparse:
            text += f", {self.active / 1e6:,.1f}M active ({self.active_non_embedding / 1e6:,.1f}M active non-embedding)"
        return text


def meta_model(config: PretrainedConfig) -> PreTrainedModel:
    """The model for ``config`` built on the meta device (shapes only, no memory). Callers only read it: one
    resolution asks for the same shape several times (parameters, FLOPs, memory, the tensor-parallel plan), so the
    last few are kept, keyed by the config's full JSON."""
    return _meta_model(type(config), config.to_json_string(use_diff=False))


@functools.lru_cache(maxsize=8)
def _meta_model(config_class: type, config_json: str) -> PreTrainedModel:
    config = config_class.from_dict(json.loads(config_json))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def _num_experts(module: nn.Module) -> int:
    n = getattr(module, "num_experts", None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def routed_expert_params(model: nn.Module) -> list[nn.Parameter]:
    """The routed experts' weights: 3-D parameters [num_experts, ...] of an experts module (all layers)."""
    out = []
    for module in model.modules():
        n = _num_experts(module)
        if n:
            out += [p for p in module.parameters(recurse=False) if p.ndim == 3 and p.shape[0] == n]
    return out


def router_params(model: nn.Module) -> list[nn.Parameter]:
    """The routers' weights: a 2-D ``weight`` [num_experts, hidden] of a module that is not an ``nn.Linear``
    (Qwen3-MoE's and GLM-4-MoE's routers apply it with ``F.linear``; all experts' logits are computed)."""
    out = []
    for module in model.modules():
        n = _num_experts(module)
        w = getattr(module, "weight", None)
        if n and isinstance(w, nn.Parameter) and w.ndim == 2 and w.shape[0] == n and not isinstance(module, nn.Linear):
            out.append(w)
    return out


def experts_per_token(model: nn.Module) -> int | None:
    """``num_experts_per_tok`` of an MoE model (None for a dense one)."""
    config = getattr(model, "config", None)
    k = getattr(config, "num_experts_per_tok", None)
    return int(k) if k and routed_expert_params(model) else None


def active_numel(p: nn.Parameter, top_k: int) -> int:
    """The part of a routed-expert weight one token uses: top_k of its num_experts slices."""
    return p.numel() // p.shape[0] * top_k


def count_params(config_or_model: PretrainedConfig | nn.Module) -> ParamCounts:
    model = config_or_model if isinstance(config_or_model, nn.Module) else meta_model(config_or_model)
    seen: set[int] = set()
    total = 0
    for p in model.parameters():  # parameters() already yields a tied tensor once
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    emb_params: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding):  # token and learned-position embeddings
            emb_params[id(module.weight)] = module.weight.numel()
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is not None and getattr(out, "weight", None) is not None:
        emb_params[id(out.weight)] = out.weight.numel()  # same id as the input embedding when tied
    embedding = sum(emb_params.values())
    active = total
    top_k = experts_per_token(model)
    if top_k:
        active -= sum(p.numel() - active_numel(p, top_k) for p in routed_expert_params(model))
    return ParamCounts(
        total=total,
        embedding=embedding,
        non_embedding=total - embedding,
        active=active,
        active_non_embedding=active - embedding,
    )
