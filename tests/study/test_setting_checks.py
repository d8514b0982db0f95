"""Setting checks (spec ``setting_checks``): named recipe overrides trained once more on an arm's central size at one
budget, first seed, beside the grid (the sibling of ``lr_checks``): the spec's checks, the runs and their folders,
their rows kept out of every cell, fit and decision, and the report's table."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from hfpretrain.study.analysis import analyse_isoflop, cells, is_check, to_json
from hfpretrain.study.grid import (
    CELL,
    collect,
    expand,
    folder_runs,
    load_spec,
    lr_check_runs,
    multiplier_check_runs,
    plan_study,
    setting_check_runs,
    setting_overrides,
    write_results,
)
from hfpretrain.study.report import lr_check_lines, setting_check_lines, write_report

from test_analysis import ALPHA, BUDGETS, A, E, study
from test_study import MICRO

REPO = Path(__file__).resolve().parents[2]

AUX = {"aux0.01": {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.01"]}}


def _spec(**extra) -> dict:
    return {
        "recipe": "r.yaml",
        "sizes": ["a", "b", "c"],
        "flops": [1e14, 1e16],
        "seeds": [3, 5],
        "isoflop": {"tokens_per_param": 20},
        "arms": {"dense": [], "moe": ["moe.aux_loss_coef=0.001"]},
        "setting_checks": {"budget": 1e14, "settings": AUX},
        **extra,
    }


@pytest.mark.parametrize(
    "checks, key",
    [
        ([1e14], "setting_checks:"),  # not a mapping
        ({"budget": 1e14}, "setting_checks:"),  # no settings
        ({"budget": 1e14, "settings": AUX, "seed": 3}, "setting_checks:"),  # an unknown key
        ({"budget": 1e14, "settings": AUX, "seeds": [0]}, "setting_checks.seeds"),  # not one of the spec's seeds
        ({"budget": 1e14, "settings": AUX, "seeds": [3, 3]}, "setting_checks.seeds"),
        ({"budget": 1e14, "settings": AUX, "seeds": 3}, "setting_checks.seeds"),
        (
            [
                {"budget": 1e14, "settings": AUX},
                {"budget": 1e16, "settings": {"aux0.01": {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.1"]}}},
            ],
            "twice",
        ),
        ({"budget": 1e15, "settings": AUX}, "setting_checks.budget"),  # not one of the spec's budgets
        ({"budget": True, "settings": AUX}, "setting_checks.budget"),
        ({"budget": 1e14, "settings": {}}, "setting_checks.settings:"),
        ({"budget": 1e14, "settings": ["aux0.01"]}, "setting_checks.settings:"),
        ({"budget": 1e14, "settings": {"aux/0.01": AUX["aux0.01"]}}, "setting_checks.settings.aux/0.01:"),
        ({"budget": 1e14, "settings": {"aux__x": AUX["aux0.01"]}}, "setting_checks.settings.aux__x:"),  # "__" splits
        ({"budget": 1e14, "settings": {"aux_": AUX["aux0.01"]}}, "setting_checks.settings.aux_:"),
        ({"budget": 1e14, "settings": {"lr2": AUX["aux0.01"]}}, "setting_checks.settings.lr2:"),  # an LR check's
        ({"budget": 1e14, "settings": {"lr0.5": AUX["aux0.01"]}}, "setting_checks.settings.lr0.5:"),
        ({"budget": 1e14, "settings": {"seed1": AUX["aux0.01"]}}, "setting_checks.settings.seed1:"),
        ({"budget": 1e14, "settings": {0.01: AUX["aux0.01"]}}, "setting_checks.settings.0.01:"),
        ({"budget": 1e14, "settings": {"Aux": AUX["aux0.01"], "aux": AUX["aux0.01"]}}, "unique"),
        ({"budget": 1e14, "settings": {"x": {"arms": ["moe"]}}}, "setting_checks.settings.x:"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "seed": 0}}}, "setting_checks.settings.x:"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "arms": ["sparse"]}}}, "setting_checks.settings.x.arms"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "arms": []}}}, "setting_checks.settings.x.arms"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "arms": "moe"}}}, "setting_checks.settings.x.arms"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "arms": ["moe", "moe"]}}}, "settings.x.arms"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": []}}}, "settings.x.overrides"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": "moe.a=1"}}}, "settings.x.overrides"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": ["aux=0.1"]}}}, "settings.x.overrides"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": ["moe.aux"]}}}, "settings.x.overrides"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": [0.01]}}}, "settings.x.overrides"),
        # keys the study sets for every run: another budget, folder or seed pairing
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": ["training.max_steps=9"]}}}, "every run"),
        ({"budget": 1e14, "settings": {"x": {**AUX["aux0.01"], "overrides": ["training.seed=7"]}}}, "every run"),
        ({"budget": 1e14, "settings": {"x": {"arms": ["moe"], "overrides": ["training.output_dir=/x"]}}}, "every run"),
        (
            {
                "budget": 1e14,
                "settings": {"x": {"arms": ["moe"], "overrides": ["training.gradient_accumulation_steps=2"]}},
            },
            "every run",
        ),
    ],
)
def test_a_bad_setting_check_is_one_line_naming_its_key(checks, key):
    with pytest.raises(ValueError) as err:
        load_spec(_spec(setting_checks=checks))
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_cli_refuses_a_bad_setting_check_in_one_line(tmp_path):
    import subprocess
    import sys

    import yaml

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(setting_checks={"budget": 1e14, "settings": {"lr2": AUX["aux0.01"]}})))
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "study.py"), str(path), "--list"], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: setting_checks.settings.lr2:")


def test_a_spec_with_setting_checks_reads_back_its_own_dump():
    """spec.yaml of a study is the spec's to_dict(): the report re-reads it; YAML 1.1 reads 1.0e15 as a string."""
    spec = load_spec(_spec(setting_checks={"budget": "1.0e14", "settings": AUX}))
    assert spec.setting_checks == [{"budget": 1e14, "settings": AUX}]
    assert load_spec(spec.to_dict()).setting_checks == spec.setting_checks
    assert "setting_checks" not in load_spec(_spec(setting_checks=None)).to_dict()


def _plan_of(arm, size):
    n = {"a": 1e5, "b": 1e6, "c": 1e7}[size]
    return {"flops_per_token": 6 * n, "parameters": {"non_embedding": n}, "flops_per_token_head": 0}


def test_setting_checks_take_the_lr_checks_central_size_with_the_first_seed(tmp_path):
    spec = load_spec(
        _spec(
            lr_checks={"budget": 1e14, "factors": [2]},
            setting_checks={
                "budget": 1e14,
                "settings": {**AUX, "wd_0.3": {"arms": ["dense", "moe"], "overrides": ["training.weight_decay=0.3"]}},
            },
        )
    )
    grid = expand(spec, tmp_path)
    checks = setting_check_runs(spec, grid, _plan_of)
    # D/N at 1e14 FLOPs (6N per token): a 1.7e3, b 16.7, c 0.17: b is nearest 20; seed 3 is the spec's first
    assert [r.name for r in checks] == [
        "dense/b__c1.00e+14__wd_0.3__seed3",
        "moe/b__c1.00e+14__aux0.01__seed3",
        "moe/b__c1.00e+14__wd_0.3__seed3",
    ]
    assert setting_check_runs(spec, grid[::-1], _plan_of) == checks  # the spec's first seed, in any order
    lr = {r.arm: r.size for r in lr_check_runs(spec, grid, _plan_of)}
    assert {r.arm: r.size for r in checks} == lr == {"dense": "b", "moe": "b"}
    assert all(r.seed == 3 and r.lr_factor is None and r.budget == 1e14 for r in checks)
    assert [r.setting for r in checks] == ["wd_0.3", "aux0.01", "wd_0.3"]
    for r in checks:
        assert r.out_dir == tmp_path / "runs" / r.name
        assert f"training.output_dir={r.out_dir}" in r.overrides and r.overrides[-1].startswith("training.output_dir=")
    centre = next(g for g in grid if g.name == "moe/b__c1.00e+14__seed3")
    assert checks[1].overrides[:-1] == centre.overrides[:-1]  # the grid run's overrides; the setting's come later
    assert setting_overrides(spec, checks[1]) == ["moe.aux_loss_coef=0.01"]
    assert setting_overrides(spec, centre) == []
    # the central size follows the target: at 1e16, D/N of b is 1.7e3 and of c 16.7: c is nearest 20
    spec.setting_checks[0]["budget"] = 1e16
    assert {r.size for r in setting_check_runs(spec, grid, _plan_of)} == {"c"}


def test_checks_at_a_second_budget_take_its_central_size_with_the_seeds_named(tmp_path):
    """A list of entries: the first budget's checks as before, a second budget's with both seeds (the decision
    budget's, where one seed is not enough to judge a setting)."""
    aux = {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.01"]}
    spec = load_spec(
        _spec(
            lr_checks=[{"budget": 1e14, "factors": [2]}, {"budget": 1e16, "factors": [0.5], "seeds": [3]}],
            setting_checks=[
                {"budget": 1e14, "settings": {"aux0.01": aux}},
                {"budget": "1.0e16", "settings": {"aux0.01": aux}, "seeds": [3, 5]},
            ],
        )
    )
    assert load_spec(spec.to_dict()).setting_checks == spec.setting_checks
    grid = expand(spec, tmp_path)
    assert [r.name for r in lr_check_runs(spec, grid, _plan_of)] == [
        "dense/b__c1.00e+14__lr2__seed3",
        "moe/b__c1.00e+14__lr2__seed3",
        "dense/c__c1.00e+16__lr0.5__seed3",
        "moe/c__c1.00e+16__lr0.5__seed3",
    ]
    checks = setting_check_runs(spec, grid, _plan_of)
    assert [r.name for r in checks] == [
        "moe/b__c1.00e+14__aux0.01__seed3",
        "moe/c__c1.00e+16__aux0.01__seed3",
        "moe/c__c1.00e+16__aux0.01__seed5",
    ]
    assert all(setting_overrides(spec, r) == ["moe.aux_loss_coef=0.01"] for r in checks)
    lines = "\n".join(setting_check_lines(spec, [], "val_loss"))
    assert "aux0.01 on moe at 1e+14; aux0.01 on moe at 1e+16" in lines


@pytest.mark.parametrize(
    "extra, key",
    [
        ({"lr_checks": {"budget": 4e17, "factors": [2]}}, "lr_checks:"),  # neither a grid nor a check budget
        ({"lr_checks": {"budget": 1e17, "factors": [2], "arms": ["mlp"]}}, "lr_checks.arms"),
        ({"lr_checks": {"budget": 1e17, "factors": [2], "arms": "moe"}}, "lr_checks.arms"),
        ({"setting_checks": {"budget": 4e17, "settings": AUX}}, "setting_checks.budget"),
    ],
)
def test_a_check_outside_the_grid_and_the_multiplier_checks_is_one_line(extra, key):
    with pytest.raises(ValueError) as err:
        load_spec(_spec(multiplier_checks={"arm": "moe", "budget": 1e17, "sizes": ["a", "b", "c"]}, **extra))
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_checks_at_a_multiplier_checks_budget_sit_beside_its_runs(tmp_path):
    """An LR or setting check at a budget beyond the grid where a multiplier check measured the arm (the MoE study's
    3e16): its centre is among that check's sizes, it is no run of that check's cell, and the report sets it beside
    the check's run of its size and seed, judged by the σ that check's reading used."""
    spec = load_spec(
        _spec(
            multiplier_checks={"arm": "moe", "budget": 1e17, "sizes": ["a", "b", "c"]},
            lr_checks={"budget": 1e17, "factors": [0.5, 2], "arms": ["moe"]},
            setting_checks={"budget": "1.0e17", "settings": AUX},
        )
    )
    assert (
        load_spec(spec.to_dict()).lr_checks
        == spec.lr_checks
        == [{"budget": 1e17, "factors": [0.5, 2.0], "arms": ["moe"]}]
    )
    grid = expand(spec, tmp_path) + multiplier_check_runs(spec, tmp_path)
    lr, settings = lr_check_runs(spec, grid, _plan_of), setting_check_runs(spec, grid, _plan_of)
    # D/N at 1e17 FLOPs (6N per token): a 1.7e6, b 1.7e4, c 1.7e2: c is nearest 20
    assert [r.name for r in lr + settings] == [
        "moe/c__c1.00e+17__lr0.5__seed3",
        "moe/c__c1.00e+17__lr2__seed3",
        "moe/c__c1.00e+17__aux0.01__seed3",
    ]
    assert not any(r.multiplier_check for r in lr + settings)
    # read back from their folders: the check's own run, the checks the spec plans, not a dense LR check it does not
    out = tmp_path / "study"
    for name in ("moe/c__c1.00e+17__seed3", *(r.name for r in lr + settings), "dense/c__c1.00e+17__lr2__seed3"):
        _finished(out / "runs" / name, 2.0)
    found = folder_runs(spec, out)
    assert [(r.name, r.budget, r.multiplier_check, r.lr_factor, r.setting) for r in found] == [
        ("moe/c__c1.00e+17__lr0.5__seed3", 1e17, False, 0.5, None),
        ("moe/c__c1.00e+17__seed3", 1e17, True, None, None),
        ("moe/c__c1.00e+17__aux0.01__seed3", 1e17, False, None, "aux0.01"),
        ("moe/c__c1.00e+17__lr2__seed3", 1e17, False, 2.0, None),
    ]
    # without arms an LR check takes every arm measured there: the dense arm has no run at 1e17
    spec.lr_checks[0].pop("arms")
    assert [r.arm for r in lr_check_runs(spec, grid, _plan_of)] == ["moe", "moe"]

    def row(loss, **extra):
        return {"arm": "moe", "size": "c", "budget": 1e17, "seed": 3, "val_loss": loss, "learning_rate": 1e-3, **extra}

    rows = [
        row(2.0, multiplier_check=True),
        row(2.02, lr_factor=0.5),
        row(1.99, lr_factor=2.0),
        row(2.05, setting="aux0.01"),
    ]
    isoflop = {"budget_noise": {"budgets": {}}, "multiplier_checks": [{"budget": 1e17, "sigma": 0.01}]}
    text = "\n".join(lr_check_lines(spec, rows, "val_loss", isoflop))
    assert "×1: 2.0000" in text and "×2 by 0.0100, within 2√2·σ = 0.0283" in text
    text = "\n".join(setting_check_lines(spec, rows, "val_loss", isoflop))
    assert "| 2.0500 | 2.0000 | +0.0500 | 0.0100 |" in text
    assert "worse by 0.0500 bits/byte" not in text and "worse by 0.0500 nats, beyond 2√2·σ = 0.0283" in text


def test_the_plan_trains_a_setting_check_with_its_overrides_last(tmp_path):
    """plan_study, from dry runs without data (assumed data facts): the check's overrides come after the arm's and
    the rules' (the last value of a key wins), it is planned like its grid run, and the LR checks take its size."""
    spec = load_spec(
        {
            **{k: v for k, v in MICRO.items() if k != "steps"},
            "flops": [1e13],
            "isoflop": {"tokens_per_param": 20, "sizes_per_budget": 2},
            "seeds": [0, 1],
            "arms": {"a": [], "b": ["training.weight_decay=0.0"]},
            "rules": {"lr": 1e-3, "lr_width": 64, "warmup_fraction": 0.1, "min_steps": 1},
            "lr_checks": {"budget": 1e13, "factors": [0.5]},
            "setting_checks": {
                "budget": 1e13,
                "settings": {
                    "wd0.3": {"arms": ["b"], "overrides": ["training.weight_decay=0.3"]},
                    "warm0": {"arms": ["b"], "overrides": ["training.warmup_steps=0"]},
                },
            },
        }
    )
    planned = {run.name: (run, p) for run, p in plan_study(spec, tmp_path)}
    checks = [name for name, (run, _) in planned.items() if run.setting]
    assert checks == ["b/h32__c1.00e+13__wd0.3__seed0", "b/h32__c1.00e+13__warm0__seed0"]
    grid = {name: p for name, (run, p) in planned.items() if not run.setting and run.lr_factor is None}
    assert len(grid) == 8 and "b/h32__c1.00e+13__lr0.5__seed0" in planned
    # h32 is the size whose D/N is nearest 20 (in log) among b's first-seed runs
    first = [p for name, p in grid.items() if name.startswith("b/") and name.endswith("seed0")]
    assert min(first, key=lambda p: abs(math.log(p.tokens / p.params / 20))).size == "h32"
    ref = grid["b/h32__c1.00e+13__seed0"]
    wd, warm = planned[checks[0]][1], planned[checks[1]][1]
    assert (wd.steps, wd.tokens, wd.params, wd.learning_rate) == (ref.steps, ref.tokens, ref.params, ref.learning_rate)
    assert wd.overrides[-1] == "training.weight_decay=0.3" and "training.weight_decay=0.0" in wd.overrides
    assert "training.weight_decay=0.3" not in ref.overrides
    assert ref.warmup_steps > 0 and warm.warmup_steps == 0  # the rules' warmup is set, and the setting's wins


@pytest.mark.parametrize(
    "folder, parsed",
    [
        ("L3__c1.00e+15__aux0.01__seed0", ("L3", "c1.00e+15", None, "aux0.01", "0")),
        ("L3__c1.00e+15__aux0.0001", ("L3", "c1.00e+15", None, "aux0.0001", None)),
        ("L3__c1.00e+15__wd_0.1__seed1", ("L3", "c1.00e+15", None, "wd_0.1", "1")),
        ("L3__tok1.00e+06__a-b+c__seed2", ("L3", "tok1.00e+06", None, "a-b+c", "2")),
        ("L3__s100__lr_high__seed0", ("L3", "s100", None, "lr_high", "0")),
        ("L3__c1.00e+15__seed0", ("L3", "c1.00e+15", None, None, "0")),  # a grid run: seed0 is no setting
        ("L3__c1.00e+15", ("L3", "c1.00e+15", None, None, None)),
        ("L3__c1.00e+15__lr0.5__seed0", ("L3", "c1.00e+15", "0.5", None, "0")),
        ("L3__c1.00e+15__lr2", ("L3", "c1.00e+15", "2", None, None)),
    ],
)
def test_folder_names_read_back(folder, parsed):
    m = CELL.match(folder)
    assert (m["size"], m["label"], m["lr"], m["setting"], m["seed"]) == parsed


def _finished(folder: Path, loss: float, log: list[dict] | None = None) -> None:
    folder.mkdir(parents=True)
    plan = {"max_steps": 10, "parameters": {"total": 100, "non_embedding": 80}, "tokens_per_step": 64}
    summary = {"global_step": 10, "plan": {**plan, "flops_per_token": 600.0}, "final_eval": {"eval_loss": loss}}
    (folder / "summary.json").write_text(json.dumps(summary))
    if log:
        (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))


def test_a_finished_check_is_done_read_back_and_written_with_its_setting(tmp_path):
    spec = load_spec(_spec(setting_checks={"budget": 1e14, "settings": {**AUX, "aux0.0001": AUX["aux0.01"]}}))
    out = tmp_path / "study"
    runs = out / "runs"
    _finished(runs / "moe" / "b__c1.00e+14__seed3", 3.0)
    _finished(runs / "moe" / "b__c1.00e+14__aux0.01__seed3", 2.9)
    _finished(runs / "moe" / "b__c1.00e+14__aux0.1__seed3", 2.5)  # a setting this spec does not name: left out
    planned = setting_check_runs(spec, expand(spec, out), _plan_of)
    assert [(r.name, r.done) for r in planned] == [
        ("moe/b__c1.00e+14__aux0.01__seed3", True),  # resumable: a finished check is not trained again
        ("moe/b__c1.00e+14__aux0.0001__seed3", False),
    ]
    found = folder_runs(spec, out)
    assert [(r.name, r.setting) for r in found] == [
        ("moe/b__c1.00e+14__seed3", None),
        ("moe/b__c1.00e+14__aux0.01__seed3", "aux0.01"),
    ]
    same = ("name", "out_dir", "budget", "seed", "setting", "lr_factor")
    assert [getattr(found[1], k) for k in same] == [getattr(planned[0], k) for k in same]  # the same run
    rows = collect(found)
    assert [r.get("setting") for r in rows] == [None, "aux0.01"] and "setting" not in rows[0]
    assert [is_check(r) for r in rows] == [False, True]
    write_results(rows, out)
    table = list(csv.DictReader(open(out / "results.csv")))
    assert [t["setting"] for t in table] == ["", "aux0.01"]
    assert [r.get("setting") for r in json.loads((out / "results.json").read_text())] == [None, "aux0.01"]
    write_results(rows[:1], out)  # a study without setting checks keeps its files' columns
    assert "setting" not in open(out / "results.csv").readline()


def _moe_study():
    """test_analysis' planted IsoFLOP study, two arms, two seeds with noise; the checks at 1e15 on size x0.8."""
    rows = study({"dense": (E, A, ALPHA), "moe": (E, A * 2 ** (-ALPHA), ALPHA)}, seeds=2, sigma=0.01)
    for r in rows:  # what the report's run table reads
        r["run"] = f"{r['arm']}/{r['size']}__c{r['budget']:.2e}__seed{r['seed']}"
        r["tokens"], r["out_dir"] = r["flops"] / (6 * r["params"]), "-"
    spec = load_spec(
        {
            "recipe": "r.yaml",
            "sizes": ["x0.25", "x0.8", "x2.5"],
            "flops": BUDGETS,
            "seeds": [0, 1],
            "arms": {"dense": [], "moe": ["moe.aux_loss_coef=0.001"]},
            "setting_checks": {
                "budget": 1e15,
                "settings": {
                    "aux0.01": {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.01"]},
                    "aux0.0001": {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.0001"]},
                    "wd0.3": {"arms": ["dense"], "overrides": ["training.weight_decay=0.3"]},
                },
            },
            "decision": {"comparisons": [{"name": "moe", "arm": "moe", "baseline": "dense"}], "criterion": "gap"},
        }
    )
    return spec, rows


def _grid_run(rows, arm):
    return next(r for r in rows if (r["arm"], r["budget"], r["size"], r["seed"]) == (arm, 1e15, "x0.8", 0))


def _check(rows, arm, setting, loss, out_dir="-"):
    run = f"{arm}/x0.8__c1.00e+15__{setting}__seed0"
    return {**_grid_run(rows, arm), "run": run, "setting": setting, "val_loss": loss, "out_dir": str(out_dir)}


def test_setting_checks_stay_out_of_the_cells_the_fits_and_the_decision():
    from hfpretrain.study.report import study_verdicts

    spec, rows = _moe_study()
    with_checks = rows + [_check(rows, "moe", "aux0.01", 1.0), _check(rows, "dense", "wd0.3", 9.0)]
    assert cells(with_checks) == cells(rows)
    a, b = analyse_isoflop(rows, n_boot=20), analyse_isoflop(with_checks, n_boot=20)
    for key in ("optima", "budget_noise", "noise", "gap", "multiplier", "intervals", "fits", "nd"):
        assert json.dumps(to_json(a)[key], sort_keys=True) == json.dumps(to_json(b)[key], sort_keys=True), key
    assert json.dumps(study_verdicts(spec, a), default=str) == json.dumps(study_verdicts(spec, b), default=str)
    # without the exclusion the check would be a third seed of its cell
    assert cells([{**r, "setting": None} for r in with_checks]) != cells(rows)


def test_the_report_puts_each_check_beside_its_grid_run_with_the_budgets_sigma(tmp_path):
    spec, rows = _moe_study()
    isoflop = analyse_isoflop(rows, n_boot=0)
    sigma = isoflop["budget_noise"]["budgets"][1e15]["sigma"]
    moe, dense = _grid_run(rows, "moe"), _grid_run(rows, "dense")

    def load(high, dead):
        return [{"event": "log", "step": s, "expert_load_max_mean": high + s, "dead_experts": dead} for s in (0, 1)]

    # the grid run's config event (the recipe it trained with: where the table reads the grid's value), then its
    # last logging window: 6.00, 5.0%
    config = {"event": "config", "step": 0, "recipe": {"moe": {"aux_loss_coef": 0.002}}}
    _finished(tmp_path / "grid", moe["val_loss"], [config, *load(5.0, 0.05)])
    moe["out_dir"] = str(tmp_path / "grid")
    _finished(tmp_path / "aux0.01", 0, load(0.2, 0.0))
    checks = [
        _check(rows, "moe", "aux0.01", moe["val_loss"] - 3 * sigma, tmp_path / "aux0.01"),
        _check(rows, "moe", "aux0.0001", moe["val_loss"] + 0.5 * sigma),
        _check(rows, "dense", "wd0.3", dense["val_loss"] + 3 * sigma),
    ]
    text = "\n".join(setting_check_lines(spec, rows + checks[::-1], "val_loss", isoflop))
    table = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert table[0][:6] == ["| arm", "size", "budget", "seed", "setting", "overrides"]
    # the spec's order: arms, then settings
    assert [(t[0], t[4]) for t in table[1:]] == [("| dense", "wd0.3"), ("| moe", "aux0.01"), ("| moe", "aux0.0001")]
    dense_row, better, within = table[1:]
    assert dense_row[5] == "`training.weight_decay=0.3` (grid: –)"  # its grid run has no log here
    assert better[5] == "`moe.aux_loss_coef=0.01` (grid: 0.002)"  # the grid run's recipe, not the spec's 0.001
    assert better[6:10] == [
        f"{moe['val_loss'] - 3 * sigma:.4f}",
        f"{moe['val_loss']:.4f}",
        f"{-3 * sigma:+.4f}",
        f"{sigma:.4f}",
    ]
    assert better[10:] == ["1.20 / 6.00", "0.0% / 5.0% |"]
    assert within[10:] == ["– / 6.00", "– / 5.0% |"]
    assert dense_row[10:] == ["– / –", "– / – |"]
    assert "the last logging window of each run's log" in text
    band = 2 * 2**0.5 * sigma  # a difference of two runs' 95% band
    assert f"**aux0.01** (moe x0.8 at 1e+15): better by {3 * sigma:.4f} nats, beyond 2√2·σ = {band:.4f}: " in text
    within_band = (
        f"{0.5 * sigma:+.4f} nats, within 2√2·σ = {band:.4f}: no effect this one-seed check can tell from noise."
    )
    assert f"**aux0.0001** (moe x0.8 at 1e+15): {within_band}" in text
    assert f"**wd0.3** (dense x0.8 at 1e+15): worse by {3 * sigma:.4f} nats, beyond 2√2·σ" in text

    # no run logged the experts' load: the note says so
    moe["out_dir"] = "-"
    text = "\n".join(setting_check_lines(spec, rows + checks[1:], "val_loss", isoflop))
    assert "Experts' load: not available" in text and "max/mean: the worst layer" not in text

    # no grid run to compare with, or no seed pairs for σ: said, not judged
    lone = [r for r in rows if r is not moe]
    assert "its grid run (same arm, size, budget and seed) has no result" in "\n".join(
        setting_check_lines(spec, lone + checks[:1], "val_loss", isoflop)
    )
    one_seed = [r for r in rows if r["seed"] == 0]
    assert "no σ at this budget (no seed pairs): not judged" in "\n".join(
        setting_check_lines(spec, one_seed + checks[:1], "val_loss")
    )

    # in the report, after the run table; none finished yet: a line saying which are planned; no checks: nothing
    report = write_report(spec, rows + checks, {}, tmp_path / "report.md", isoflop=isoflop).read_text()
    assert report.index("| run | seed |") < report.index("## Setting checks") < report.index("## Caveats")
    assert (
        "None finished yet (spec setting_checks: aux0.01 on moe at 1e+15; aux0.0001 on moe at 1e+15; wd0.3 on dense at 1e+15)"
        in ("\n".join(setting_check_lines(spec, rows, "val_loss")))
    )
    spec.setting_checks = []
    assert setting_check_lines(spec, rows, "val_loss") == []


def test_the_moe_studys_checks_take_l3_at_1e15_by_the_committed_runs_plans():
    """gpu_moe.yaml's checks (added after its 32 runs, run 2026-11-29): each arm's central size at 1e15 from the plans
    the committed runs were trained with (a dry run on the real data gives the same figures; without the data it assumes
    another vocabulary and picks another size): L3 (D/N 13.2 dense, 13.1 MoE; L2's is 56)."""
    spec = load_spec(REPO / "src" / "hfpretrain" / "study" / "specs" / "gpu_moe.yaml")
    assert spec.lr_checks == [{"budget": 1e15, "factors": [0.5, 2.0]}]
    assert spec.setting_checks == [
        {
            "budget": 1e15,
            "settings": {
                "aux0.01": {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.01"]},
                "aux0.0001": {"arms": ["moe"], "overrides": ["moe.aux_loss_coef=0.0001"]},
            },
        }
    ]
    folder = REPO / "results" / "study_gpu_moe"
    found = folder_runs(spec, folder)
    grid = [r for r in found if not r.setting and r.lr_factor is None]
    assert len(grid) == 32 and len(found) == 38
    plans = {(r.arm, r.size): json.loads((r.out_dir / "summary.json").read_text())["plan"] for r in grid}

    def plan_of(arm, size):
        return plans[arm, size]

    checks = lr_check_runs(spec, grid, plan_of) + setting_check_runs(spec, grid, plan_of)
    assert [r.name for r in checks] == [
        "dense/L3__c1.00e+15__lr0.5__seed0",
        "dense/L3__c1.00e+15__lr2__seed0",
        "moe/L3__c1.00e+15__lr0.5__seed0",
        "moe/L3__c1.00e+15__lr2__seed0",
        "moe/L3__c1.00e+15__aux0.01__seed0",
        "moe/L3__c1.00e+15__aux0.0001__seed0",
    ]
    assert all(r.done for r in checks)  # the six folders committed beside the grid
    assert sorted(r.name for r in found if r.setting or r.lr_factor) == sorted(r.name for r in checks)
    # the committed study's spec.yaml holds the same checks (and, unlike the shipped spec, no decision.noise: that
    # rule was named after the grid's runs)
    committed = load_spec(folder / "spec.yaml")
    assert committed.setting_checks == spec.setting_checks and committed.lr_checks == spec.lr_checks
