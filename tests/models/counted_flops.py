"""The FLOPs torch counts for one forward + backward of a causal LM, per token (the formula tests' reference)."""

import torch
from torch.utils.flop_counter import FlopCounterMode


def counted_flops_per_token(model, ids: torch.Tensor) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops() / ids.numel()
