"""Run records read back right: wall time across resumed processes, a study folder re-read without its data,
stale bits per byte corrected (and none left in the committed vocabulary study)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hfpretrain.study.grid import folder_runs, load_spec, run_wall_time

REPO = Path(__file__).resolve().parents[2]
VOCAB = REPO / "results" / "study_gpu_vocab"


def _log(path: Path, events: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def _process(t0: float, start: int, end: int, runtime: float | None) -> list[dict]:
    events = [{"event": "config", "time": t0, "step": start}, {"event": "log", "time": t0 + 5, "step": end}]
    if runtime is not None:
        events.append({"event": "summary", "time": t0 + 7, "global_step": end, "train": {"train_runtime": runtime}})
    return events


def test_wall_time_sums_the_resumed_processes(tmp_path):
    # preempted at step 50 (its summary says 30 s), resumed from the checkpoint: 20 s more
    _log(tmp_path / "log.jsonl", _process(0, 0, 50, 30.0) + _process(100, 50, 100, 20.0))
    last = {"train": {"train_runtime": 20.0}}
    t = run_wall_time(tmp_path, last)
    assert (t["wall_time_s"], t["wall_time_all_s"], t["processes"], t["wall_time_partial"]) == (50.0, 50.0, 2, False)


def test_wall_time_of_a_restart_from_scratch_counts_only_the_attempt_behind_the_result(tmp_path):
    # killed before any checkpoint (no summary: 5 s from its config to its last event), then trained again from 0
    _log(tmp_path / "log.jsonl", _process(0, 0, 40, None) + _process(100, 0, 100, 60.0))
    t = run_wall_time(tmp_path, {"train": {"train_runtime": 60.0}})
    assert (t["wall_time_s"], t["wall_time_all_s"], t["wall_time_partial"]) == (60.0, 65.0, False)
    # resumed after a process killed without a summary: its part is a lower bound, flagged
    _log(tmp_path / "log.jsonl", _process(0, 0, 40, None) + _process(100, 40, 100, 60.0))
    t = run_wall_time(tmp_path, {"train": {"train_runtime": 60.0}})
    assert (t["wall_time_s"], t["wall_time_partial"]) == (65.0, True)


def test_stale_bits_per_byte_are_corrected_from_a_run_on_the_same_data(tmp_path):
    from hfpretrain.study.corrections import correct_study

    lineage = {"validation": {"tokenizer_sha256": "ab", "seq_len": 8, "train_blocks": 10, "train_tokens": 80,
                              "tokens_per_set": {"A": 80}}}

    def run(name, loss, plan, lineage=lineage):
        d = tmp_path / "runs" / "arm" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"final_eval": {"eval_loss": loss, "eval_bpb": 9.0}, "plan": plan}))
        _log(d / "log.jsonl", [{"event": "config", "time": 0, "step": 0, "lineage": lineage}])
        return d

    ref = run("new", 2.0, {"validation_text_bytes": 1000, "validation_tokens_per_byte": 0.25})
    old = run("old", 3.0, {"validation_tokens_per_byte": 0.5})
    [(d, change)] = correct_study(tmp_path)
    assert d == old and change["was"] == 9.0
    summary = json.loads((old / "summary.json").read_text())
    assert summary["final_eval"]["eval_bpb"] == pytest.approx(3.0 * 0.25 / math.log(2))
    assert summary["plan"]["validation_text_bytes"] == 1000
    assert "runs/arm/new" in summary["corrections"][0]["why"]
    assert json.loads((ref / "summary.json").read_text())["final_eval"]["eval_bpb"] == 9.0  # not stale: untouched
    assert correct_study(tmp_path) == []  # once
    run("other", 3.0, {"validation_tokens_per_byte": 0.5}, {"validation": {**lineage["validation"], "train_blocks": 11}})
    with pytest.raises(ValueError, match="no run on the same data"):
        correct_study(tmp_path)


def _summaries():
    return sorted([*VOCAB.glob("runs/*/*/summary.json"), *VOCAB.glob("best*/summary.json")])


def test_the_committed_vocabulary_runs_carry_bits_per_byte_of_the_text():
    ratio = {}
    for path in _summaries():
        s = json.loads(path.read_text())
        plan, final = s["plan"], s["final_eval"]
        assert plan.get("validation_text_bytes") == 23_378_053, path
        ratio.setdefault(plan["shape"]["vocab_size"], plan["validation_tokens_per_byte"])
        assert plan["validation_tokens_per_byte"] == ratio[plan["shape"]["vocab_size"]], path
        assert final["eval_bpb"] == pytest.approx(final["eval_loss"] * ratio[plan["shape"]["vocab_size"]] / math.log(2))
    assert len(ratio) == 2 and len(_summaries()) == 50
    assert json.loads((VOCAB / "best" / "summary.json").read_text())["final_eval"]["eval_bpb"] == pytest.approx(1.275, abs=5e-4)


def test_a_committed_study_is_read_back_from_its_folders_without_its_data():
    spec = load_spec(VOCAB / "spec.yaml")
    runs = folder_runs(spec, VOCAB)
    assert len(runs) == 48 and all(r.done for r in runs)
    assert [r.arm for r in runs[:1]] == [next(iter(spec.arms))]
    assert {r.seed for r in runs} == {0, 1, 2}
    assert {r.budget for r in runs} == set(spec.budgets)
