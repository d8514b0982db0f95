"""The model card in final/: the resolved recipe inline, the scores once `hfpretrain eval` has computed them, and
load lines that name where the model is (the checkpoint, an export, a Hub repo id)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def final(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny checkpoint with the card a training run writes."""
    from transformers import AutoConfig

    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.model_card import write_model_card

    folder = tmp_path_factory.mktemp("run") / "final"
    shutil.copytree(tiny_checkpoint, folder)
    recipe = load_recipe(REPO / "recipes" / "tiny_cpu.yaml", ["training.max_steps=30"])
    plan = {
        "parameters": {"total": 3_300_000, "non_embedding": 100_000},
        "seq_len": 128,
        "tokens_per_step": 2048,
        "samples_per_step": 16,
        "train_blocks": 480,
        "flops_per_token": 2e7,
        "world_size": 1,
        "device": "cpu",
    }
    summary = {"global_step": 30, "final_eval": {"eval_loss": 6.1, "eval_bpb": 2.2, "eval_tokens": 4096}}
    write_model_card(
        folder,
        AutoConfig.from_pretrained(folder),
        plan,
        summary,
        recipe,
        {"tokenizer": {"name_or_path": "gpt2"}, "fingerprint": "abc123"},
    )
    return folder


def test_card_has_the_recipe_and_says_how_to_score(final):
    import yaml

    card = (final / "README.md").read_text()
    recipe = yaml.safe_load(card.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert recipe["training"]["max_steps"] == 30 and recipe["model"]["config"] == "tiny"  # resolved, overrides in
    assert f'model="{final}"' in card and f"Not scored yet: `hfpretrain eval {final}`" in card


def test_eval_puts_its_scores_in_the_card_and_export_points_at_the_copy(final, data_root, tmp_path, monkeypatch):
    from hfpretrain.eval import evaluate_checkpoint
    from hfpretrain.eval import export as export_module

    results = evaluate_checkpoint(
        final,
        tasks=["arc_easy"],
        limit=2,
        dtype="float32",
        device="cpu",
        out_dir=final / "eval",
        data_root=data_root,
        scoring="lm_eval",
    )
    assert results["hfpretrain"]["model_card"] == str(final / "README.md")
    card = (final / "README.md").read_text()
    assert "| arc_easy | 2 |" in card and "Not scored yet" not in card and "# Evaluation: `" not in card

    out = export_module.export_checkpoint(final, tmp_path / "export")
    exported = (out / "README.md").read_text()
    assert f'model="{out}"' in exported and str(final) not in exported and "| arc_easy | 2 |" in exported

    monkeypatch.setattr(export_module, "push", lambda folder, repo_id, private=False: None)  # no Hub here
    out = export_module.export_checkpoint(final, tmp_path / "hub", push_to_hub="someone/tiny")
    assert 'model="someone/tiny"' in (out / "README.md").read_text()


def test_a_card_from_before_the_sections_gets_its_path_replaced():
    from hfpretrain.eval.card import refresh_card

    old = (
        '| final validation loss | 6 |\n\ngenerate = pipeline("text-generation", model="final")\n\nScores: `lm_eval '
        "--model hf --model_args pretrained=final --tasks arc_easy` (or `python scripts/evaluate.py final`, ...)"
    )
    new = refresh_card(old, "user/model")
    assert new == old.replace('"final"', '"user/model"').replace("=final ", "=user/model ").replace(
        "py final`", "py user/model`"
    )
    assert "| final validation loss |" in new
