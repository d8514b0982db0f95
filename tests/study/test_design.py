"""Study design on real dry runs and a real IsoFLOP micro study on CPU (2 arms, 2 budgets, seeds, rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfpretrain.study.design import IsoFlop, Rules, check_plan, format_plan, pick_sizes
from hfpretrain.study.grid import load_spec, plan_study, run_study
from hfpretrain.study.report import analyse

REPO = Path(__file__).resolve().parents[2]


def _size(h: int) -> dict:
    return {"name": f"h{h}", "config": "tiny", "fields": {"hidden_size": h, "intermediate_size": 3 * h}}


# N* = sqrt(C / (6 · ratio)) with FLOPs/token ≈ 6N: 3.3e10 centres on h32, 1.3e11 on h64.
ISO = {
    "name": "iso",
    "recipe": str(REPO / "recipes" / "tiny_cpu.yaml"),
    "sizes": [_size(16), _size(32), _size(64), _size(128)],
    "flops": [3.3e10, 1.3e11],
    "isoflop": {"tokens_per_param": 0.002, "sizes_per_budget": 3},
    "seeds": [0, 1],
    "seed_budgets": [3.3e10],
    "rules": {"warmup_fraction": 0.2, "lr": 3e-3, "lr_width": 32, "lr_power": 1.0, "min_steps": 8},
    "arms": {"tied": [], "untied": ["model.overrides.tie_word_embeddings=false"]},
    "overrides": [
        "training.per_device_train_batch_size=4",
        "training.per_device_eval_batch_size=16",
        "training.logging_steps=1",
        "training.save_strategy=no",
        "training.eval_steps=100000",
        "training.disable_tqdm=true",
        "training.report_to=none",
        "training.dataloader_num_workers=0",
        "evaluation.eval_tokens=2048",
        "evaluation.final_eval_tokens=2048",
    ],
}


@pytest.fixture(scope="module", autouse=True)
def one_dry_run_per_shape():
    """plan_study's dry runs (``pretrain(..., dry_run=True)``: a pure resolution, nothing written) done once per
    recipe and override list in this file: the plan tests below plan the same 8 (arm, size) shapes four times (32 dry
    runs of ~1.5 s, each loading and checking the tokenizer). Each caller gets its own copy of the real document;
    training runs (no dry_run) pass through."""
    import copy

    import hfpretrain.training as training

    real, done = training.pretrain, {}

    def pretrain(recipe_path, overrides=None, dry_run=False, **kwargs):
        if not dry_run or kwargs:
            return real(recipe_path, overrides, dry_run=dry_run, **kwargs)
        key = (str(recipe_path), tuple(overrides or ()))
        if key not in done:
            done[key] = real(recipe_path, overrides, dry_run=True)
        return copy.deepcopy(done[key])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "pretrain", pretrain)
        yield


def _spec(mini_blocks, **changes):
    return load_spec({**ISO, **changes, "overrides": [f"data.path={mini_blocks}", *ISO["overrides"]]})


def test_pick_sizes_centres_on_the_target_ratio():
    costs = [(f"s{i}", 6 * n, n) for i, n in enumerate([1e6, 2e6, 4e6, 8e6, 16e6])]
    iso = IsoFlop(tokens_per_param=20, sizes_per_budget=3)
    # N* = sqrt(C / (6 · 20)): C = 1.2e16 -> N* = 1e7 (between s3 and s4: s3 is nearer in log)
    assert pick_sizes(costs, 1.2e16, iso) == ["s2", "s3", "s4"]
    assert pick_sizes(costs, 1.2e14, iso) == ["s0", "s1", "s2"]  # optimum below the grid: clamped, flagged later
    assert pick_sizes(costs, 1.92e15, iso) == ["s1", "s2", "s3"]  # N* = 4e6 = s2, centred


def test_plan_applies_isoflop_seeds_and_rules(mini_blocks):
    planned = [p for _, p in plan_study(_spec(mini_blocks), "/tmp/unused")]
    by_budget = {}
    for p in planned:
        by_budget.setdefault(p.budget, set()).add(p.size)
    assert by_budget == {3.3e10: {"h16", "h32", "h64"}, 1.3e11: {"h32", "h64", "h128"}}
    assert {p.seed for p in planned if p.budget == 3.3e10} == {0, 1}
    assert {p.seed for p in planned if p.budget == 1.3e11} == {0}
    assert len(planned) == 2 * (3 * 2 + 3)
    for p in planned:
        width = int(p.size[1:])
        assert p.learning_rate == pytest.approx(3e-3 * 32 / width, rel=1e-5)
        assert p.warmup_steps == max(1, round(0.2 * p.steps))
        assert p.steps >= 8 or p.batch_tokens == 128  # min_steps halves the batch down to one block
        assert p.flops == pytest.approx(p.budget, rel=0.25)  # rounding to whole steps
    assert any(p.batch_tokens < 512 for p in planned)  # some small budget got a smaller batch
    errors, warnings = check_plan(planned, Rules.from_dict(ISO["rules"]))
    assert errors == [] and warnings  # 0.002 tokens per parameter is far from compute-optimal: said so
    text = format_plan(planned, errors, warnings)
    assert "tied/h16__c3.30e+10__seed1" in text and "GPU time unknown" in text
    # isoflop.extra: one arm's cell grows past its window (its optimum at the edge), the other's does not;
    # the budget key as YAML reads 1.3e11 (a string)
    iso = {**ISO["isoflop"], "extra": {"untied": {"1.3e11": ["h16"]}}}
    extended = [p for _, p in plan_study(_spec(mini_blocks, isoflop=iso), "/tmp/unused")]
    cells = lambda runs: {(p.arm, p.size, p.budget) for p in runs}  # noqa: E731
    assert cells(extended) - cells(planned) == {("untied", "h16", 1.3e11)}
    assert (
        len(extended) == len(planned) + 1
        and load_spec(_spec(mini_blocks, isoflop=iso).to_dict()).isoflop == _spec(mini_blocks, isoflop=iso).isoflop
    )  # spec.yaml reads back the same
    # an intermediate size outside every window (window: false): the windows stay as they were, and only the cell
    # whose extra names it trains it
    sizes = [*ISO["sizes"][:2], {**_size(48), "window": False}, *ISO["sizes"][2:]]
    iso = {**ISO["isoflop"], "extra": {"tied": {3.3e10: ["h48"]}}}
    between = _spec(mini_blocks, sizes=sizes, isoflop=iso)
    with_it = [p for _, p in plan_study(between, "/tmp/unused")]
    assert cells(with_it) - cells(planned) == {("tied", "h48", 3.3e10)} and len(with_it) == len(planned) + 2
    assert [s.window for s in load_spec(between.to_dict()).sizes] == [True, True, False, True, True]
    assert "window" not in str(_spec(mini_blocks).to_dict()["sizes"])  # the default is not written
    with pytest.raises(ValueError, match="window: false needs an IsoFLOP grid"):
        load_spec({**{k: v for k, v in ISO.items() if k not in ("isoflop", "seed_budgets")}, "sizes": sizes})
    with pytest.raises(ValueError, match="window is true or false"):
        load_spec({**ISO, "sizes": [{**_size(48), "window": "no"}]})


def test_plan_errors_stop_the_study_before_training(mini_blocks, tmp_path):
    spec = _spec(mini_blocks, rules={"max_passes": 0.001, "warmup_fraction": 0.2})
    with pytest.raises(ValueError, match="reads the training data"):
        run_study(spec, tmp_path / "s")
    spec = _spec(mini_blocks, rules={})  # the recipe's warmup (tiny_cpu: 30 steps) is longer than these runs
    with pytest.raises(ValueError, match="warmup"):
        run_study(spec, tmp_path / "s")
    assert not (tmp_path / "s" / "runs").exists()
    with pytest.raises(ValueError, match="isoflop needs a compute grid"):
        load_spec({**{k: v for k, v in ISO.items() if k != "flops"}, "steps": [3]})
    with pytest.raises(ValueError, match="rules: unknown keys"):
        load_spec({**ISO, "rules": {"warmup": 3}})
    for extra in ({"wide": {3.3e10: ["h16"]}}, {"tied": {5e10: ["h16"]}}, {"tied": {3.3e10: ["h999"]}}, ["h16"]):
        with pytest.raises(ValueError, match="isoflop.extra"):
            load_spec({**ISO, "isoflop": {**ISO["isoflop"], "extra": extra}})


def test_isoflop_micro_study_and_its_report(mini_blocks_bpe1k, tmp_path):
    # a 1k vocabulary at a quarter of the budgets: steps of the order GPT-2's tokenizer gave at the full ones, each
    # 4x cheaper without a 50k-row head (the moving window is test_plan_applies_isoflop_seeds_and_rules' part)
    spec = _spec(mini_blocks_bpe1k, flops=[8e9, 3.3e10], seed_budgets=[8e9])
    out = tmp_path / "study"
    rows = run_study(spec, out)
    assert len(rows) == 18 and all(r["val_bpb"] and r["device"] == "cpu" for r in rows)
    result = analyse(spec, rows, out, n_planned=18)
    iso = result["isoflop"]
    assert iso["y"] == "val_bpb" and iso["noise"]["cells"] == 6 and iso["intervals"] is not None
    assert set(iso["gap"]["untied"]) == {8e9, 3.3e10}
    saved = json.loads((out / "analysis.json").read_text())
    assert saved["baseline"] == "tied" and "untied @ 3.3e+10" in saved["optima"]
    assert (out / "isoflop.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    for section in (
        "## Runs",
        "## IsoFLOP analysis",
        "### untied vs tied",
        "## Discussion",
        "Noise floor per budget",
        "![IsoFLOP curves and per-budget optima](isoflop.png)",
        "## Caveats",
    ):
        assert section in report, section
    assert "One seed per run" not in report and "no `rules`" not in report
    assert "| cpu |" in report
