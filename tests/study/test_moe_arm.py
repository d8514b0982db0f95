"""An architecture ablation in the study grid: a size whose MoE arm has its own config (experts in place of the
dense arm's MLP at the same width and depth), expanded and trained for real on CPU."""

from __future__ import annotations

import pytest

from hfpretrain.study.design import ratio_params
from hfpretrain.study.grid import expand, load_spec, run_study

from test_study import MICRO

# tiny.json's attention; 8 experts of a quarter of its SwiGLU width (192), top-2: half the dense FFN active
MOE = {
    "config": "qwen3_moe_109m_a21m",
    "fields": {
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "tie_word_embeddings": True,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 48,
    },
}


def _spec(data=None, **extra):
    return load_spec(
        {
            **MICRO,
            "sizes": [{"name": "h64", "config": "tiny", "fields": {"hidden_size": 64}, "arms": {"moe": MOE}}],
            "steps": [2],
            "arms": {"dense": [], "moe": []},
            "overrides": ([f"data.path={data}"] if data else []) + MICRO["overrides"],
            **extra,
        }
    )


def test_an_arm_gets_its_own_version_of_a_size(tmp_path):
    dense, moe = expand(_spec(), tmp_path)
    assert "model.config=tiny" in dense.overrides and "model.overrides.num_experts=8" not in dense.overrides
    assert "model.config=qwen3_moe_109m_a21m" in moe.overrides and "model.config=tiny" not in moe.overrides
    # the size's own fields apply to both; the arm's are merged over them
    assert "model.overrides.hidden_size=64" in moe.overrides and "model.overrides.num_experts=8" in moe.overrides
    with pytest.raises(ValueError, match=r"size h64: arms \['sparse'\] are not among the spec's arms"):
        load_spec({**MICRO, "sizes": [{"name": "h64", "config": "tiny", "arms": {"sparse": MOE}}]})
    with pytest.raises(ValueError, match="arms.moe must be a mapping of config, fields, overrides"):
        load_spec({**MICRO, "arms": {"moe": []}, "sizes": [{"name": "h64", "arms": {"moe": {"cfg": "x"}}}]})


def test_moe_and_dense_arms_train_and_compare_by_active_parameters(mini_blocks_bpe1k, tmp_path):
    rows = {r["run"]: r for r in run_study(_spec(mini_blocks_bpe1k), tmp_path / "study")}
    dense, moe = rows["dense/h64__s2"], rows["moe/h64__s2"]
    assert dense["tokens"] == moe["tokens"] == 2 * 4 * 128
    assert moe["params"] > dense["params"]  # every expert counts in the total
    # N for tokens per parameter is what a token pays for: the active count
    plan = {"parameters": {"non_embedding": 10_000, "active_non_embedding": 4_000}, "flops_per_token_head": 600}
    assert ratio_params(plan) == 4_100
    assert ratio_params({"parameters": {"non_embedding": 10_000}, "flops_per_token_head": 600}) == 10_100


def test_second_moe_study_dense_arm_is_the_vocabulary_studys_8k_arm():
    """gpu_moe2's dense runs are results/study_gpu_vocab2/runs/bpe_8k, copied, not rerun: that holds only while
    every dense run of the one spec has exactly the overrides of its namesake in the other (output folder aside),
    and the MoE arm differs from it in the model's config and aux weight alone."""
    from test_study import SPECS

    moe2, vocab2 = load_spec(SPECS / "gpu_moe2.yaml"), load_spec(SPECS / "gpu_vocab2.yaml")
    same = ("budgets", "seeds", "rules", "recipe", "overrides")
    assert [getattr(moe2, k) for k in same] == [getattr(vocab2, k) for k in same]
    iso = ("tokens_per_param", "sizes_per_budget")
    assert [getattr(moe2.isoflop, k) for k in iso] == [getattr(vocab2.isoflop, k) for k in iso]
    # the same windows: the dense arm's extras are sizes no window picks (L3w at 8e14, 2026-11-30; L2w, 2026-12-01),
    # whose runs sit in the vocabulary study's folder, which that study's spec does not read (its sizes lack them)
    assert "bpe_8k" not in vocab2.isoflop.extra and moe2.isoflop.extra["dense"] == {8e14: ["L2w", "L3w"]}
    assert [s.name for s in moe2.sizes if not s.window] == ["L2w", "L3w"]
    assert not {"L2w", "L3w"} & {s.name for s in vocab2.sizes}

    def runs(spec, arm):
        return {
            r.name.split("/", 1)[1]: [o for o in r.overrides if not o.startswith("training.output_dir=")]
            for r in expand(spec)
            if r.arm == arm
        }

    dense, bpe_8k, moe = runs(moe2, "dense"), runs(vocab2, "bpe_8k"), runs(moe2, "moe")
    assert {k: v for k, v in dense.items() if k in bpe_8k} == bpe_8k and len(bpe_8k) == 88
    # beyond the shared runs only the decision budget's added seed (its runs sit in the vocabulary study's folder,
    # which that study's spec does not read: grid.folder_runs keeps the seeds a spec plans)
    assert set(dense) - set(bpe_8k) == {f"{s.name}__c2.50e+16__seed2" for s in moe2.sizes} | {
        f"{size}__c{b:.2e}__seed{seed}" for size in ("L2w", "L3w") for b in moe2.budgets for seed in (0, 1)
    }
    for name, overrides in moe.items():
        differ = {o.split("=")[0] for o in set(overrides) ^ set(dense[name])}
        assert differ == {"model.config", "model.overrides.moe_intermediate_size", "moe.aux_loss_coef"}, name
