"""Validation loss per source set (``evaluation.per_set``): one more pass over the final evaluation's blocks.

Each block's ``set_ids`` names the set of each document segment (segments end after each end-of-text
id, see data/pack.py). A target token at position p belongs to segment (end-of-text ids before p), so its
loss is counted for that segment's set. Losses are per token, computed like the training loss: the final
hidden states times the output embedding, cross-entropy in fp32, a chunk of tokens at a time.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from hfpretrain.data.manifest import bits_per_byte
from hfpretrain.data.order import document_positions

CHUNK_TOKENS = 4096


def target_sets(ids: np.ndarray, set_ids: list, eos_id: int) -> np.ndarray:
    """(rows, seq_len - 1): the set index of each target token ids[:, 1:]."""
    segment = np.cumsum(ids == eos_id, axis=1)[:, :-1]  # end-of-text ids at positions < p, for p = 1..T-1
    return np.stack([np.asarray(s, dtype=np.int64)[np.minimum(seg, len(s) - 1)] for s, seg in zip(set_ids, segment)])


@torch.no_grad()
def token_losses(trainer, ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(rows, seq_len - 1) losses in nats of the trainer's model on ``ids`` (at ``position_ids``, if given)."""
    model = trainer.model
    unwrapped = trainer.accelerator.unwrap_model(model)
    tap = trainer._tap
    with trainer.accelerator.autocast():
        if tap is None:
            logits = model(input_ids=ids, position_ids=position_ids, use_cache=False).logits[:, :-1]
            return F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(
                ids.shape[0], -1
            )
        tap.active = True
        try:
            model(input_ids=ids, position_ids=position_ids, use_cache=False)
        finally:
            tap.active = False
        hidden, tap.hidden = tap.hidden, None
        weight = unwrapped.get_output_embeddings().weight
        h, targets = hidden[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
        out = torch.cat(
            [
                F.cross_entropy(
                    (h[a : a + CHUNK_TOKENS] @ weight.T).float(), targets[a : a + CHUNK_TOKENS], reduction="none"
                )
                for a in range(0, len(targets), CHUNK_TOKENS)
            ]
        )
    return out.view(ids.shape[0], -1)


def per_set_losses(
    trainer, blocks, n: int, set_names: list, eos_id: int, batch_size: int, document_mask: bool = False
) -> dict:
    """{set name: {"loss": mean nats per target token, "tokens": targets}} over the first ``n`` blocks."""
    model = trainer.model
    was_training = model.training
    model.eval()
    total = np.zeros(256, dtype=np.float64)  # set_ids are uint8
    count = np.zeros_like(total)
    device = trainer.args.device
    try:
        for a in range(0, n, batch_size):
            rows = blocks[a : min(a + batch_size, n)]
            ids = np.asarray(rows["input_ids"]).astype(np.int64)
            sets = target_sets(ids, rows["set_ids"], eos_id).ravel()
            batch = torch.from_numpy(ids).to(device)
            # the positions (and so the mask) the model trained with: model.document_mask's, when on
            positions = document_positions(batch, eos_id) if document_mask else None
            losses = token_losses(trainer, batch, positions).double().cpu().numpy().ravel()
            total += np.bincount(sets, weights=losses, minlength=len(total))[: len(total)]
            count += np.bincount(sets, minlength=len(total))[: len(total)]
    finally:
        model.train(was_training)
    names = list(set_names) + [f"set{i}" for i in range(len(set_names), len(total))]
    return {names[i]: {"loss": total[i] / count[i], "tokens": int(count[i])} for i in np.flatnonzero(count)}


def per_set_bits_per_byte(losses: dict, validation: dict) -> dict:
    """{set name: bits per byte}: each set's loss times its own tokens per byte of text (the manifest's
    validation ``tokens_per_set`` / ``text_bytes_per_set``); sets without a byte count are left out (an
    output tokenized before the per-set counts were recorded)."""
    tokens, text_bytes = validation.get("tokens_per_set") or {}, validation.get("text_bytes_per_set") or {}
    return {
        name: bits_per_byte(loss, tokens[name] / text_bytes[name])
        for name, loss in losses.items()
        if tokens.get(name) and text_bytes.get(name)
    }
