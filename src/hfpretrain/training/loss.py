"""Next-token cross-entropy from the final hidden states, without materialising all logits.

At a 151k vocabulary the logits of one micro-batch (22 x 2048 x 151,680 in fp32) take 27 GB;
HF's default loss builds them, upcasts them and keeps them for backward. Two ways around it:

* ``liger``: liger-kernel's fused linear cross-entropy (Triton, GPU only), which computes the
  gradient chunk by chunk inside the forward. It is kept outside ``torch.compile`` (it fails
  under compile with torch 2.11), which is why compilation is regional (decoder layers only).
* ``chunked``: plain PyTorch; each chunk of tokens computes logits -> loss under activation
  checkpointing, so only one chunk of logits is alive at a time. Runs everywhere.

Both give the same value as HF's ``ForCausalLMLoss``: labels shifted left by one, the sum of
token losses divided by ``num_items_in_batch`` (the token count of the whole accumulated batch)
when given, else the mean.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100


def choose_fused_loss(requested: str) -> tuple[str, str]:
    """Return (implementation, reason)."""
    has_liger = importlib.util.find_spec("liger_kernel") is not None
    if requested == "auto":
        if has_liger and torch.cuda.is_available():
            return "liger", "liger-kernel is installed and a CUDA GPU is present"
        return "chunked", "liger-kernel or CUDA missing: chunked PyTorch cross-entropy"
    if requested == "liger" and not (has_liger and torch.cuda.is_available()):
        raise RuntimeError("model.fused_loss=liger needs liger-kernel (pip install -e .[gpu]) and a CUDA GPU")
    return requested, "set in the recipe"


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def _chunk_loss_sum(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight).float()
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")


def chunked_cross_entropy_sum(hidden, weight, targets, chunk_tokens: int = 8192) -> torch.Tensor:
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_tokens):
        sl = slice(start, start + chunk_tokens)
        total = total + checkpoint(_chunk_loss_sum, hidden[sl], weight, targets[sl], use_reentrant=False)
    return total


_liger_loss = None


def liger_cross_entropy_sum(hidden, weight, targets) -> torch.Tensor:
    global _liger_loss
    if _liger_loss is None:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        _liger_loss = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="sum")
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    return _liger_loss(weight, hidden, targets)


def causal_lm_loss(hidden, weight, labels, num_items_in_batch=None, impl="chunked", chunk_tokens=8192):
    targets = shift_labels(labels)
    if impl == "liger":
        total = liger_cross_entropy_sum(hidden, weight, targets)
    else:
        total = chunked_cross_entropy_sum(hidden, weight, targets, chunk_tokens)
    if num_items_in_batch is None:
        return total / (targets != IGNORE_INDEX).sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch
