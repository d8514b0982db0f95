"""Parameter counts: total, embedding, non-embedding (tied and untied LM heads handled).

``embedding`` = token embedding + learned position embedding (GPT-2) + the LM head when it is a
separate (untied) matrix; ``non_embedding`` = everything else (attention, MLP, norms). A config is
counted on the meta device, so no weights are allocated.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class ParamCounts:
    total: int
    embedding: int
    non_embedding: int

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (f"{self.total / 1e6:,.1f}M total, {self.embedding / 1e6:,.1f}M embedding, "
                f"{self.non_embedding / 1e6:,.1f}M non-embedding")


def meta_model(config: PretrainedConfig) -> PreTrainedModel:
    """The model for ``config`` built on the meta device (shapes only, no memory)."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


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
    return ParamCounts(total=total, embedding=embedding, non_embedding=total - embedding)
