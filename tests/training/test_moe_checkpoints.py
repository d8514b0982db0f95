"""MoE checkpoints as users load them: a tiny Qwen3-MoE and GLM-4-MoE trained by the recipe path, then
transformers' pipeline generating with the KV cache (the same tokens as without it) and lm-eval scoring them."""

from __future__ import annotations

import pytest
import torch

from hfpretrain.eval.harness import evaluate_checkpoint

SHAPE = {
    "model.overrides.num_hidden_layers": "2",
    "model.overrides.hidden_size": "64",
    "model.overrides.num_attention_heads": "2",
    "model.overrides.num_key_value_heads": "2",
    "model.overrides.head_dim": "32",
    "model.overrides.moe_intermediate_size": "32",
    "model.overrides.num_experts_per_tok": "2",
    "training.max_steps": "3",
    "training.save_steps": "3",
}
FAMILIES = {
    "qwen3_moe": {"model.config": "qwen3_moe_109m_a21m", "model.overrides.num_experts": "4"},
    "glm4_moe": {
        "model.config": "glm4_moe_101m_a24m",
        "model.overrides.n_routed_experts": "4",
        "model.overrides.intermediate_size": "64",
        "moe.bias_update_rate": "0.01",
    },
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def moe_checkpoint(request, mini_blocks, tmp_path_factory):
    from train_utils import run_pretrain

    out = tmp_path_factory.mktemp(request.param) / "run"
    run_pretrain(mini_blocks, out, {**SHAPE, **FAMILIES[request.param]})
    return request.param, out / "final"


def test_pipeline_generates_with_the_kv_cache(moe_checkpoint):
    from transformers import pipeline

    family, folder = moe_checkpoint
    generator = pipeline("text-generation", model=str(folder), device="cpu")
    assert generator.model.config.model_type == family
    ids = generator.tokenizer("The history of", return_tensors="pt").input_ids
    settings = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": generator.tokenizer.eos_token_id}
    cached = generator.model.generate(ids, return_dict_in_generate=True, **settings)
    assert cached.past_key_values is not None  # None when generate() runs without the cache
    plain = generator.model.generate(ids, use_cache=False, **settings)
    assert torch.equal(cached.sequences, plain)
    assert generator("The history of", **settings)[0]["generated_text"].startswith("The history of")


def test_lm_eval_scores_the_checkpoint(moe_checkpoint, data_root, tmp_path):
    _, folder = moe_checkpoint
    res = evaluate_checkpoint(
        folder,
        tasks=("arc_easy",),
        limit=4,
        batch_size=4,
        dtype="float32",
        device="cpu",
        out_dir=tmp_path,
        data_root=data_root,
    )
    assert 0.0 <= res["results"]["arc_easy"]["acc,none"] <= 1.0
    assert res["n-samples"]["arc_easy"]["effective"] == 4
