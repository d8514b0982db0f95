"""Fixtures for the evaluation/generation tests.

``tiny_checkpoint`` is a real (tiny) causal LM trained for a few dozen steps so it is not random,
saved with ``save_pretrained`` next to the GPT-2 tokenizer. Until the project's Trainer-based
fixture replaces it, it is built with transformers + plain torch. Returns the checkpoint dir.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TRAIN_TEXT = [
    "Question: What do plants need to make food?\nAnswer: sunlight",
    "Question: Which gas do animals breathe in?\nAnswer: oxygen",
    "Question: What is the boiling point of water?\nAnswer: one hundred degrees",
    "The sun is a star. Plants use sunlight, water and carbon dioxide to make sugar.",
    "Rocks are made of minerals. Water freezes when it is cold and boils when it is hot.",
    "Animals need food, water and air. Predators eat other animals such as rabbits.",
]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, gpt2_tokenizer) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(gpt2_tokenizer))
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    ids = [tok(t + tok.eos_token)["input_ids"] for t in TRAIN_TEXT]
    width = max(map(len, ids))
    batch = torch.full((len(ids), width), tok.eos_token_id)
    labels = torch.full((len(ids), width), -100)
    for i, row in enumerate(ids):
        batch[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.tensor(row)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(30):
        loss = model(input_ids=batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    model.eval()
    out = tmp_path_factory.mktemp("tiny_ckpt") / "checkpoint"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "train_losses.json").write_text(json.dumps(losses))
    return out
