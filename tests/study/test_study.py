"""The study tooling: spec expansion, a real micro study end to end (resumable), the power-law fit.

The micro study is real: 2 widths of the tiny model × 2 step budgets × 1 arm on ``mini_blocks_bpe1k``,
a few CPU optimizer steps each, one small final evaluation.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from forked import script

from hfpretrain.study.fit import fit_arms, fit_power_law, frontier
from hfpretrain.study.grid import expand, load_spec, run_study
from hfpretrain.study.report import analyse, measure, verdict, write_report

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "src" / "hfpretrain" / "study" / "specs"

MICRO = {
    "name": "micro",
    "recipe": str(REPO / "recipes" / "tiny_cpu.yaml"),
    "sizes": [
        {"name": "h32", "config": "tiny", "fields": {"hidden_size": 32, "intermediate_size": 96}},
        {"name": "h64", "config": "tiny"},
    ],
    "steps": [3, 6],
    "overrides": [
        "training.per_device_train_batch_size=4",
        "training.per_device_eval_batch_size=16",
        "training.warmup_steps=1",
        "training.logging_steps=1",
        "training.save_strategy=no",
        "training.eval_steps=100000",
        "training.disable_tqdm=true",
        "training.report_to=none",
        "training.dataloader_num_workers=0",
        "evaluation.eval_tokens=2048",
        "evaluation.final_eval_tokens=4096",
    ],
}


def _one_size_study(tmp_path: Path, data: Path, steps: list[int]) -> tuple[dict, Path, Path]:
    """MICRO at its smallest size on ``data``: (spec, its YAML file, the study folder)."""
    import yaml

    spec = {
        **MICRO,
        "sizes": MICRO["sizes"][:1],
        "steps": steps,
        "overrides": [f"data.path={data}", *MICRO["overrides"]],
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    return spec, spec_path, tmp_path / "study"


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_example_specs_load_and_expand(path):
    spec = load_spec(path)
    runs = expand(spec, "/tmp/x")  # without dry runs: every size at every budget (an IsoFLOP grid picks later)
    assert len(runs) == len(spec.arms) * len(spec.sizes) * sum(len(spec.seeds_for(b)) for b in spec.budgets)
    assert len({r.out_dir for r in runs}) == len(runs)
    span = max(spec.budgets) / min(spec.budgets)
    if spec.budget_kind == "flops":
        assert span >= 10
    else:  # a token/step grid: compute spans sizes × budgets; checked for real in the CPU study
        assert span >= 5


def test_expand_is_deterministic(tmp_path):
    spec = load_spec({**MICRO, "arms": {"baseline": [], "untied": ["model.overrides.tie_word_embeddings=false"]}})
    a, b = expand(spec, tmp_path), expand(spec, tmp_path)
    assert a == b
    # budget by budget: a study stopped part-way has every arm of its smaller budgets
    assert [r.name for r in a] == [
        "baseline/h32__s3",
        "baseline/h64__s3",
        "untied/h32__s3",
        "untied/h64__s3",
        "baseline/h32__s6",
        "baseline/h64__s6",
        "untied/h32__s6",
        "untied/h64__s6",
    ]
    assert a[0].out_dir == tmp_path / "runs" / "baseline" / "h32__s3"
    # arm overrides come after the size's, the output dir last
    assert a[-1].overrides[-2:] == (
        "model.overrides.tie_word_embeddings=false",
        f"training.output_dir={tmp_path / 'runs/untied/h64__s6'}",
    )
    assert "model.overrides.hidden_size=32" in a[0].overrides


def test_spec_errors():
    with pytest.raises(ValueError, match="exactly one"):
        load_spec({**MICRO, "tokens": [1e5]})
    with pytest.raises(ValueError, match="unknown spec keys"):
        load_spec({**MICRO, "budget": [1]})
    with pytest.raises(ValueError, match="unique"):
        load_spec({**MICRO, "sizes": ["tiny", "tiny"]})
    for bad in ({"draws": -1}, {"draws": 2.5}, {"samples": 10}, [2000], {"frontier_draws": True}):
        with pytest.raises(ValueError, match="bootstrap:"):
            load_spec({**MICRO, "bootstrap": bad})


def test_the_bootstrap_draws_are_the_specs_and_read_back():
    """Default 300 and 100 draws, left out of the spec's dump (the committed specs read back unchanged); a spec's
    own are kept in its dump and a partial mapping takes the other default."""
    plain = load_spec(MICRO)
    assert plain.bootstrap == {"draws": 300, "frontier_draws": 100} and "bootstrap" not in plain.to_dict()
    more = load_spec({**MICRO, "bootstrap": {"draws": 2000}})
    assert more.bootstrap == {"draws": 2000, "frontier_draws": 100}
    assert load_spec(more.to_dict()).bootstrap == more.bootstrap


def test_fit_recovers_exact_power_law():
    c = np.logspace(12, 17, 8)
    fit = fit_power_law(c, 1.8 + 250.0 * c**-0.17)
    assert fit.E == pytest.approx(1.8, rel=1e-6)
    assert fit.A == pytest.approx(250.0, rel=1e-5)
    assert fit.alpha == pytest.approx(0.17, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0) and fit.rmse < 1e-8
    assert fit.predict(1e18) == pytest.approx(1.8 + 250.0 * 1e18**-0.17, rel=1e-6)


def test_fit_with_noise_is_close():
    rng = np.random.default_rng(0)
    c = np.logspace(12, 18, 12)
    clean = 2.0 + 500.0 * c**-0.2
    fit = fit_power_law(c, clean * np.exp(rng.normal(0, 0.005, c.size)))
    assert abs(fit.E - 2.0) < 0.15
    assert abs(fit.alpha - 0.2) < 0.05
    assert fit.r2 > 0.99
    # the fitted curve tracks the clean law within the noise level over the measured range
    assert np.max(np.abs(fit.predict(c) / clean - 1)) < 0.02


def test_fit_two_points_is_a_pure_power_law():
    fit = fit_power_law([1e12, 1e13], [4.0, 3.0])
    assert fit.fixed_E and fit.E == 0.0
    assert fit.alpha == pytest.approx(np.log10(4 / 3))
    with pytest.raises(ValueError):
        fit_power_law([1e12, 1e12], [4.0, 3.0])


def test_an_arm_with_one_budget_has_no_fit():
    """The sizes of one IsoFLOP budget (compute apart only by max_steps' rounding) give no L(C) slope: no fit,
    where it once ran alpha to ~1e3 and crashed the report with an OverflowError (a study stopped part-way)."""
    one_budget = [9.99e14, 1.0e15, 1.001e15, 1.0005e15]
    with pytest.raises(ValueError, match="one budget"):
        fit_power_law(one_budget, [1.72, 1.51, 1.81, 2.16])
    rows = [{"arm": "moe", "flops": c, "val_loss": v} for c, v in zip(one_budget, [1.72, 1.51, 1.81, 2.16])]
    assert fit_arms(rows)["moe"]["fit"] is None


def test_frontier_keeps_min_loss_per_bucket():
    rows = [
        {"run": "a", "flops": 1.0e12, "val_loss": 5.0},
        {"run": "b", "flops": 1.1e12, "val_loss": 4.5},
        {"run": "c", "flops": 1.0e13, "val_loss": 4.0},
        {"run": "d", "flops": 1.2e13, "val_loss": 4.8},
        {"run": "e", "flops": 1.0e14, "val_loss": 4.6},
    ]  # worse than a cheaper bucket: off the frontier
    assert [r["run"] for r in frontier(rows)] == ["b", "c"]


def _synthetic_rows():
    rows = []
    for arm, e in (("base", 2.0), ("better", 1.9)):
        for i, c in enumerate(np.logspace(12, 15, 4)):
            rows.append(
                {
                    "run": f"{arm}/{i}",
                    "arm": arm,
                    "size": f"s{i}",
                    "budget": float(i),
                    "params": 1000 * (i + 1),
                    "non_embedding_params": 500 * (i + 1),
                    "steps": 10,
                    "tokens": 1000,
                    "flops_per_token": c / 1000,
                    "flops": float(c),
                    "val_loss": float(e + 100 * c**-0.15),
                    "out_dir": "-",
                }
            )
    return rows


def test_report_has_table_fits_and_verdict(tmp_path):
    rows = _synthetic_rows()
    fits = fit_arms(rows)
    assert fits["better"]["fit"].E == pytest.approx(1.9, rel=1e-4)
    v = verdict(rows, fits)
    assert v["predicted"]["winner"] == "better" and v["predicted"]["margin"] == pytest.approx(0.1, rel=1e-3)
    spec = load_spec({**MICRO, "arms": {"base": [], "better": []}})
    text = write_report(spec, rows, fits, tmp_path / "report.md").read_text()
    assert "| run | seed | params |" in text and "better/3" in text
    assert "| arm | α | E | A |" in text and "0.1500" in text
    assert "**better** wins by 0.1000 nats" in text
    assert "## Caveats" in text


def test_bits_per_byte_decide_across_tokenizers(tmp_path):
    """When every run has bits per byte, the fits, the verdict and the report use them, not nats per token
    (a vocabulary ablation: "better" has more nats per token of its own tokenizer, but fewer bits per byte)."""
    rows = _synthetic_rows()
    for r in rows:
        r["val_bpb"] = r["val_loss"] / (2.0 if r["arm"] == "better" else 1.5)
        r["val_loss"] = r["val_loss"] + (1.0 if r["arm"] == "better" else 0.0)
    y = measure(rows)
    assert y == "val_bpb" and measure([{**rows[0], "val_bpb": None}, *rows[1:]]) == "val_loss"
    fits = fit_arms(rows, y=y)
    assert fits["better"]["fit"].E == pytest.approx(1.9 / 2.0, rel=1e-3)
    v = verdict(rows, fits, y)
    assert v["observed"]["winner"] == "better"
    spec = load_spec({**MICRO, "arms": {"base": [], "better": []}})
    text = write_report(spec, rows, fits, tmp_path / "report.md").read_text()
    assert "**Observed**" in text and "**better** wins by" in text and "bits/byte" in text and " nats (" not in text
    assert verdict(rows, fit_arms(rows))["observed"]["winner"] == "base"  # in nats the other arm "wins"


def test_micro_study_end_to_end_and_resumable(mini_blocks_bpe1k, tmp_path):
    mini_blocks = mini_blocks_bpe1k  # a 1k vocabulary: the runs train 4x faster than with GPT-2's 50k-row head
    spec = load_spec({**MICRO, "overrides": [f"data.path={mini_blocks}", *MICRO["overrides"]]})
    out = tmp_path / "study"
    rows = run_study(spec, out)
    assert len(rows) == 4 and all(np.isfinite(r["val_loss"]) for r in rows)
    assert {r["steps"] for r in rows} == {3, 6}
    assert all(r["tokens"] == r["steps"] * 4 * 128 for r in rows)
    by = {r["run"]: r for r in rows}
    assert by["baseline/h64__s6"]["flops"] == pytest.approx(2 * by["baseline/h64__s3"]["flops"])
    assert by["baseline/h32__s3"]["params"] < by["baseline/h64__s3"]["params"]
    assert by["baseline/h32__s3"]["non_embedding_params"] < by["baseline/h32__s3"]["params"]

    result = analyse(spec, rows, out, n_planned=4)
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [t["run"] for t in table] == [r["run"] for r in rows]
    assert json.loads((out / "results.json").read_text()) == rows
    assert (out / "loss_vs_flops.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert "baseline/h64__s6" in report and "![validation loss vs training FLOPs](loss_vs_flops.png)" in report
    assert result["fits"]["baseline"]["fit"] is not None

    # resumable: a second pass trains nothing and reads the same rows back
    mtimes = {p: p.stat().st_mtime for p in out.glob("runs/*/*/summary.json")}
    again = run_study(spec, out)
    assert again == rows
    assert {p: p.stat().st_mtime for p in out.glob("runs/*/*/summary.json")} == mtimes

    # the CLI regenerates the report from the finished runs
    spec_path = tmp_path / "micro.yaml"
    import yaml

    spec_path.write_text(yaml.safe_dump({**MICRO, "overrides": [f"data.path={mini_blocks}", *MICRO["overrides"]]}))
    (out / "report.md").unlink()
    cli = script("study.py", spec_path, "--out", out, "--report-only")  # forked: no fresh interpreter to import
    assert cli.returncode == 0, cli.stderr
    assert "4/4 runs finished" in cli.stdout and (out / "report.md").is_file()


def test_sigterm_stops_the_study_and_the_next_pass_resumes(mini_blocks_bpe1k, tmp_path):
    """SIGTERM (preemption, `timeout`) mid-run: the run saves a checkpoint and the study stops; the
    stopped run is not counted as finished, and the next pass continues it from its checkpoint."""
    import signal

    spec, spec_path, out = _one_size_study(tmp_path, mini_blocks_bpe1k, [2, 30])
    long_run = out / "runs" / "baseline" / "h32__s30"
    sys.path.insert(0, str(REPO / "tests" / "training"))
    from train_utils import sigterm_after_first_log

    returncode, output = sigterm_after_first_log(
        [sys.executable, str(REPO / "scripts" / "study.py"), str(spec_path), "--out", str(out)], long_run / "log.jsonl"
    )
    assert returncode == 0, output[-3000:]
    assert "the study stops here" in output and "1/2 runs finished" in output, output[-3000:]
    stopped = json.loads((long_run / "summary.json").read_text())["global_step"]
    assert 0 < stopped < 30 and (long_run / f"checkpoint-{stopped}").is_dir()
    assert [r.done for r in expand(load_spec(spec), out)] == [True, False]

    previous = signal.getsignal(signal.SIGTERM)
    try:
        rows = run_study(load_spec(spec), out)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [r["steps"] for r in rows] == [2, 30]
    starts = [json.loads(line) for line in (long_run / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in starts if e["event"] == "config"] == [0, stopped]  # resumed, not restarted


def test_frontier_buckets_hold_a_nominal_budget():
    """The runs of one nominal budget differ a little in compute (max_steps is rounded): those of the
    GPU pilot study, 9.964e14 and 1.002e15 for the 1e15 budget, share a bucket; the better one wins."""
    rows = [
        {"run": "12m", "flops": 9.964e14, "val_loss": 6.758},
        {"run": "7m", "flops": 1.002e15, "val_loss": 6.534},
        {"run": "27m", "flops": 1.005e15, "val_loss": 7.133},
        {"run": "7m_3e15", "flops": 2.999e15, "val_loss": 5.536},
    ]
    assert [r["run"] for r in frontier(rows)] == ["7m", "7m_3e15"]


def test_a_claimed_run_is_not_claimed_again(tmp_path):
    """``claim`` is what keeps --workers processes apart: a run held by one is skipped by the others,
    and free again once the holder lets go (or dies: the OS drops the lock)."""
    from hfpretrain.study.grid import claim

    run = expand(load_spec(MICRO), tmp_path)[0]
    with claim(run) as first:
        with claim(run) as second:
            assert first and not second
    with claim(run) as again:
        assert again


def test_workers_are_spread_over_every_visible_gpu():
    """``workers`` runs at a time on each GPU, round robin (the plan's first runs land on different GPUs),
    as CUDA_VISIBLE_DEVICES names them; on a CPU machine ``workers`` processes in all."""
    from hfpretrain.study.grid import worker_gpus

    assert worker_gpus(2, ["0", "1", "3"]) == ["0", "1", "3", "0", "1", "3"]
    assert worker_gpus(1, ["2"]) == ["2"]
    assert worker_gpus(3, []) == [None, None, None]


def test_workers_share_the_runs_and_train_each_once(mini_blocks_bpe1k, tmp_path):
    mini_blocks = mini_blocks_bpe1k
    spec, spec_path, out = _one_size_study(tmp_path, mini_blocks, [2, 3, 4])
    cli = script("study.py", spec_path, "--out", out, "--workers", "2")
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "3/3 runs finished" in cli.stdout
    logs = [(out / "logs" / f"worker{i}.log").read_text() for i in (0, 1)]
    trained = [line for log in logs for line in log.splitlines() if ": training (" in line]
    assert len(trained) == 3, logs  # every run once, by one worker or the other
    for log in out.glob("runs/*/*/log.jsonl"):
        events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
        assert events.count("config") == 1
    assert "at a time on each GPU (the spec's `workers`: 2," in (out / "report.md").read_text()

    # a run that reached its last step but was stopped before its final evaluation (SIGTERM then) is not done
    summary_path = next(out.glob("runs/*/*/summary.json"))
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps({**summary, "final_eval": {}}))
    assert sum(not r.done for r in expand(load_spec(spec), out)) == 1

    # a run folder without its recipe.yaml still reports its hyper-parameters (from log.jsonl's config event),
    # and bits per byte come from the data's text bytes
    from hfpretrain.study.grid import result_row

    run = expand(load_spec(spec), out)[0]
    before = result_row(run)
    (run.out_dir / "recipe.yaml").unlink()
    after = result_row(run)
    assert after == before and after["learning_rate"] is not None
    val = json.loads((mini_blocks / "manifest.json").read_text())["validation"]
    assert after["val_bpb"] == pytest.approx(after["val_loss"] * val["tokens"] / val["text_bytes"] / np.log(2))


def test_runs_pattern_trains_only_the_runs_it_names(mini_blocks_bpe1k, tmp_path):
    """--runs: a costly budget first, the rest in a later call; the report reads every finished run."""
    spec, spec_path, out = _one_size_study(tmp_path, mini_blocks_bpe1k, [2, 3])
    listed = script("study.py", spec_path, "--out", out, "--list", "--runs", "*__s3")
    assert listed.returncode == 0 and listed.stdout.split() == ["todo", "baseline/h32__s3"], listed.stdout
    # a fresh interpreter: training in a fork of this process (torch's threads already started) can hang
    cli = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "study.py"), str(spec_path), "--out", str(out), "--runs", "*__s3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "1/2 runs finished" in cli.stdout
    assert [r.done for r in expand(load_spec(spec), out)] == [False, True]
    none = script("study.py", spec_path, "--out", out, "--runs", "*__s9")
    assert none.returncode == 2 and none.stderr.strip().splitlines()[-1] == (
        "error: --runs *__s9: no run of the study matches (--list prints their names)"
    ), none.stderr


def test_done_needs_the_final_evaluation_only_when_the_run_evaluates(tmp_path):
    import yaml

    from hfpretrain.study.grid import Run

    run = Run(name="a/s", arm="a", size="s", budget_kind="steps", budget=3, out_dir=tmp_path, overrides=())
    summary = {"global_step": 3, "plan": {"max_steps": 3}, "final_eval": {}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({"training": {"eval_strategy": "steps"}}))
    assert not run.done  # stopped before its final evaluation
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({"training": {"eval_strategy": "no"}}))
    assert run.done  # it never evaluates: its last step is the end
    (tmp_path / "summary.json").write_text('{"global_st')  # torn (another worker writing): not done
    assert not run.done
