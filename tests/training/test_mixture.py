"""Weighted mixtures and phases (training/mixture.py), lineage (training/lineage.py) and tokenize --sets.

The sampler on its own: tokens per source within 1% of the weights (every prefix within 2 samples),
determinism from the seed, any position computed directly (a run of 10^12 samples), each source read epoch
by epoch and resumed where it stopped in a later phase. The recipe: bad names, weights and shares refused
at load with one line; outputs whose tokenizer or seq_len differ refused at start. Real tiny runs on the
mini corpus and its Books + TechDocs + Math subset: resume before, at and after a phase boundary repeats the
uninterrupted run bitwise; the warmup-stable-decay schedule decays over the last phase; tokens per source
in the log; lineage in log.jsonl, data.json, lineage.json and final/; W&B artifacts in an offline run; the
shipped recipes/curriculum_small.yaml trains.
"""

from __future__ import annotations

import json
import shutil
import time
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from forked import script

from hfpretrain.paths import using_embedded_data
from hfpretrain.training import RecipeError, load_recipe, pretrain
from hfpretrain.data.mixture import MixtureBlocks, MixtureSchedule, Source, build_pattern, quotas, resolve_phases
from train_utils import (
    wandb_records,
    PRETRAIN_SCRIPT,
    REPO,
    TINY_RECIPE,
    load_weights,
    read_log,
    run_pretrain,
    step_losses,
)

CURRICULUM = REPO / "recipes" / "curriculum_small.yaml"
# the high-quality subset: the embedded sample data (no DATA_ROOT) has no TechDocs, its Go code stands in
HQ_SETS = ["Books", "Code-Go", "Math"] if using_embedded_data() else ["Books", "Math", "TechDocs"]


# ---- the sampler on its own -------------------------------------------------------------------------


def _source(name: str, blocks: int) -> Source:
    return Source(
        name,
        f"/data/{name}",
        {"train": {"blocks": blocks}, "seq_len": 128, "fingerprint": name * 8, "tokenizer": {"sha256": "same"}},
    )


def _schedule(weights_per_phase, max_steps: int, samples_per_step: int, blocks=(1000, 37, 5000), shares=None):
    names = ["a", "b", "c"][: len(blocks)]
    sources = {n: _source(n, b) for n, b in zip(names, blocks)}
    specs = [{"mixture": w} for w in weights_per_phase]
    for spec, share in zip(specs, shares or []):
        spec["share"] = share
    data = SimpleNamespace(phases=specs if len(specs) > 1 else [], mixture=specs[0]["mixture"])
    return MixtureSchedule(sources, resolve_phases(data, max_steps), samples_per_step)


def test_weights_within_one_percent_per_phase():
    schedule = _schedule([{"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 1 / 3, "c": 2 / 3}], 1000, 32, shares=[0.7])
    located = np.array([schedule.locate(i)[0] for i in range(schedule.length)])
    for k, phase in enumerate(schedule.phases):
        part = located[phase.start_step * 32 : phase.end_step * 32]
        for s, name in enumerate(schedule.names):
            want = float(phase.weights.get(name, 0))
            seen = np.count_nonzero(part == s) / len(part)
            assert seen == pytest.approx(want, rel=0.01, abs=1e-12), (k, name)
            assert schedule.phase_samples(k).get(name, 0) == np.count_nonzero(part == s)
    # counts at any position, without walking the run, equal the walk's
    for n in (0, 1, 31, 32, 22399, 22400, 22401, 31999, 32000):
        assert schedule.samples_per_source(n) == {
            name: int(np.count_nonzero(located[:n] == s)) for s, name in enumerate(schedule.names)
        }


def test_every_prefix_within_two_samples():
    """The interleaving keeps each source's share in every prefix, not only over the whole run: a phase
    switched early or a run stopped anywhere still saw the weights (random weights, zeros included)."""
    rng = np.random.default_rng(0)
    for trial in range(60):
        w = rng.random(rng.integers(2, 7)) ** 3
        if trial % 3 == 0:
            w[rng.integers(len(w))] = 0
        fractions = [Fraction(x).limit_denominator(10**6) for x in w]
        fractions = [f / sum(fractions) for f in fractions]
        period, quota = quotas(fractions)
        assert sum(quota) == period and all((q > 0) == (f > 0) for q, f in zip(quota, fractions))
        seq = np.tile(build_pattern(quota, period).seq, 3)[: min(3 * period, 100_000)]
        for s, q in enumerate(quota):
            ideal = np.arange(1, len(seq) + 1) * q / period
            assert np.abs(np.cumsum(seq == s) - ideal).max() < 2, (trial, s)


def test_exact_periods():
    assert quotas([Fraction(7, 10), Fraction(3, 10)]) == (10, [7, 3])
    period, quota = quotas([Fraction(1, 3), Fraction(1, 2**22), 1 - Fraction(1, 3) - Fraction(1, 2**22)])
    assert period == 2**20 and sum(quota) == period and quota[1] == 1  # a tiny weight still drawn


class _Blocks:
    """A source's training split: row r of source s holds the id s*100000 + r."""

    def __init__(self, s: int, n: int):
        self.s, self.n = s, n

    def __len__(self):
        return self.n

    def __getitem__(self, rows):
        return {"input_ids": [[self.s * 100000 + r] for r in rows]}


def _dataset(schedule, seed):
    return MixtureBlocks(
        [_Blocks(s, schedule.sources[n].train_blocks) for s, n in enumerate(schedule.names)], schedule, seed
    )


def test_streams_epochs_and_phases():
    """Each source is read epoch by epoch (every block once per epoch, in a seed-dependent order), and a
    source used again in a later phase goes on where it stopped."""
    schedule = _schedule(
        [{"a": 0.2, "b": 0.8}, {"a": 1}, {"b": 1, "a": 1}], 60, 8, blocks=(50, 37), shares=[0.5, 0.25, 0.25]
    )
    data = _dataset(schedule, seed=1)
    streams = {0: [], 1: []}
    for i in range(schedule.length):
        s, j = schedule.locate(i)
        streams[s].append((j, data.block_index(i)[1]))
    for s, n in ((0, 50), (1, 37)):
        assert [j for j, _ in streams[s]] == list(range(len(streams[s])))  # no gap, no repeat, across phases
        blocks = [b for _, b in streams[s]]
        for e in range(len(blocks) // n):
            assert sorted(blocks[e * n : (e + 1) * n]) == list(range(n)), (s, e)
        assert len(blocks) > 2 * n  # read more than twice: epochs 0, 1 and 2 seen
        assert blocks[:n] != blocks[n : 2 * n]  # each epoch its own order


def test_deterministic_from_the_seed():
    schedule = _schedule([{"a": 0.5, "b": 0.25, "c": 0.25}], 40, 8)
    one, two, other = _dataset(schedule, 7), _dataset(schedule, 7), _dataset(schedule, 8)
    idx = list(range(schedule.length))
    rows = [int(r[0]) for r in one.__getitems__(idx)]
    assert rows == [int(r[0]) for r in two.__getitems__(idx)]
    assert rows == [int(one[i][0]) for i in idx]  # one at a time = in a batch, in order
    other_rows = [int(r[0]) for r in other.__getitems__(idx)]
    assert [r // 100000 for r in rows] == [r // 100000 for r in other_rows]  # same sources...
    assert rows != other_rows  # ...other blocks


def test_any_position_directly():
    """Resume is O(1): sample i is arithmetic on i. A run of 10^12 samples (10^9 steps of 1000) is positioned
    near its end as fast as at its start, and a fresh sampler agrees with one that walked there."""
    schedule = _schedule([{"a": 0.6, "b": 0.4}, {"b": 0.1, "c": 0.9}], 10**9, 1000, shares=[0.9])
    assert schedule.length == 10**12
    data = _dataset(schedule, 3)
    positions = [schedule.length - 1 - k * 999_983 for k in range(200)] + [9 * 10**11 + k for k in range(200)]
    t0 = time.perf_counter()
    for i in positions:
        data.block_index(i)  # the first call per (source, epoch) draws that epoch's permutation
    assert time.perf_counter() - t0 < 5
    fresh = _dataset(schedule, 3)
    assert [fresh.block_index(i) for i in positions] == [data.block_index(i) for i in positions]
    total = schedule.samples_per_source(schedule.length)
    assert total["a"] == 54 * 10**10 and total["c"] == 9 * 10**10
    s, j = schedule.locate(schedule.length - 1)
    assert schedule.names[s] in ("b", "c") and j < total[schedule.names[s]]


def test_phase_boundaries():
    def ends(specs, max_steps):
        data = SimpleNamespace(phases=specs, mixture={})
        return [(p.start_step, p.end_step) for p in resolve_phases(data, max_steps)]

    mix = {"mixture": {"a": 1}}
    third = 1 / 3
    assert ends([{**mix, "share": third}, {**mix, "share": third}, {**mix, "share": third}], 10) == [
        (0, 3),
        (3, 7),
        (7, 10),
    ]
    assert ends([{**mix, "share": 0.8}, mix], 300) == [(0, 240), (240, 300)]
    assert ends([{**mix, "steps": 7}, {**mix, "share": 0.5}, mix], 20) == [(0, 7), (7, 17), (17, 20)]
    with pytest.raises(ValueError, match="cover 8 steps but training.max_steps=10"):
        ends([{**mix, "share": 0.5}, {**mix, "share": 0.3}], 10)
    with pytest.raises(ValueError, match=r"data.phases\[1\] has no step"):
        ends([{**mix, "share": 0.99}, mix], 10)


# ---- the recipe --------------------------------------------------------------------------------------

SOURCES = ["data.sources.web=/w", "data.sources.books=/b"]


@pytest.mark.parametrize(
    "extra, expect",
    [
        (["data.mixture={web: 1, bookz: 1}"], "data.mixture: unknown source 'bookz' (did you mean 'books'?)"),
        (["data.mixture={web: -1, books: 2}"], "data.mixture.web: weight -1 is negative"),
        (["data.mixture={web: 0, books: 0}"], "data.mixture: the weights sum to 0"),
        (
            ["data.phases=[{mixture: {web: 1}, share: 0}, {mixture: {books: 1}}]"],
            r"data.phases[0].share=0 is outside (0, 1]",
        ),
        (["data.phases=[{mixture: {web: 1}, share: 1.5}, {mixture: {books: 1}}]"], "share=1.5 is outside (0, 1]"),
        (
            ["data.phases=[{mixture: {web: 1}}, {mixture: {books: 1}}]"],
            "data.phases[0]: only the last phase may leave out",
        ),
        (
            ["data.phases=[{mixture: {web: 1}, shares: 0.5}, {mixture: {books: 1}}]"],
            "unknown key 'shares' (did you mean 'share'?)",
        ),
        (
            ["data.phases=[{mixture: {web: 1}, share: 0.5, steps: 3}, {mixture: {books: 1}}]"],
            "share (fraction of max_steps) or steps, not both",
        ),
        (["data.mixture={web: 1}", "data.phases=[{mixture: {web: 1}}]"], "data.mixture and data.phases are both set"),
        ([], "data.sources needs data.mixture"),
        (
            ["data.mixture={web: 1}", "data.decay_in_last_phase=true"],
            "needs training.lr_scheduler_type=warmup_stable_decay",
        ),
        (
            [
                "data.mixture={web: 1}",
                "data.decay_in_last_phase=true",
                "training.lr_scheduler_type=warmup_stable_decay",
                "training.lr_scheduler_kwargs={num_decay_steps: 5}",
            ],
            "num_decay_steps is set by data.decay_in_last_phase",
        ),
    ],
)
def test_bad_mixtures_are_refused_at_load(extra, expect):
    with pytest.raises(RecipeError) as info:
        load_recipe(TINY_RECIPE, SOURCES + extra)
    assert expect in str(info.value) and "\n" not in str(info.value)


def test_mixture_without_sources_is_refused():
    with pytest.raises(RecipeError, match="data.mixture needs data.sources"):
        load_recipe(TINY_RECIPE, ["data.mixture={web: 1}"])


def test_data_path_defaults_to_the_first_source():
    recipe = load_recipe(
        None,
        ["data.sources.web=/w", "data.sources.books=/b", "data.mixture={web: 3, books: 1}", "training.max_steps=5"],
    )
    assert recipe.data.path == "/w"


def _fake_output(folder: Path, real: Path, **changes) -> Path:
    """A copy of ``real``'s manifest with some fields changed (a mixture checks manifests before any data)."""
    folder.mkdir()
    manifest = json.loads((real / "manifest.json").read_text())
    for key, value in changes.items():
        if key == "sha256":
            manifest["tokenizer"] = {**manifest["tokenizer"], "sha256": value, "name_or_path": "other-tokenizer"}
        else:
            manifest[key] = value
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_mismatched_outputs_are_refused(mini_blocks, tmp_path):
    def plan(other):
        return pretrain(
            TINY_RECIPE,
            [
                f"data.path={mini_blocks}",
                f"data.sources.mix={mini_blocks}",
                f"data.sources.other={other}",
                "data.mixture={mix: 1, other: 1}",
            ],
            dry_run=True,
        )

    with pytest.raises(ValueError) as info:
        plan(_fake_output(tmp_path / "tok", mini_blocks, sha256="0" * 64))
    assert "data.sources.other" in str(info.value) and "another tokenizer" in str(info.value)
    assert "other-tokenizer" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="data.sources.other=.* has seq_len 256, data.path=.* has 128"):
        plan(_fake_output(tmp_path / "len", mini_blocks, seq_len=256))
    # a source not tokenized yet: a dry run plans with assumed data and says which; a run stops on its key
    assert plan(tmp_path / "nowhere")["plan"]["assumed"]["why"].startswith("data.sources.other ")
    from hfpretrain.training.config import load_recipe
    from hfpretrain.training.resolve import read_data_facts

    recipe = load_recipe(
        TINY_RECIPE,
        [
            f"data.path={mini_blocks}",
            f"data.sources.mix={mini_blocks}",
            f"data.sources.other={tmp_path / 'nowhere'}",
            "data.mixture={mix: 1, other: 1}",
        ],
    )
    with pytest.raises(
        FileNotFoundError, match="^data.sources.other=.*nowhere does not exist: make it with `hfpretrain tokenize"
    ):
        read_data_facts(recipe)


# ---- tokenize --sets ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hq_blocks(tmp_path_factory, mini_train, mini_val, gpt2_tokenizer) -> Path:
    """The Books + TechDocs + Math documents of the mini corpus (the first 80 of them), gpt2, seq_len 128."""
    from hfpretrain.data import tokenize_corpus

    return tokenize_corpus(
        inputs=[mini_train],
        val_inputs=[mini_val],
        out=tmp_path_factory.mktemp("hq") / "hq",
        tokenizer=gpt2_tokenizer,
        seq_len=128,
        max_docs=80,
        val_docs=30,
        sets=HQ_SETS,
    )


def test_tokenize_keeps_only_the_named_sets(hq_blocks, mini_blocks):
    from hfpretrain.data.manifest import fingerprint

    manifest = json.loads((hq_blocks / "manifest.json").read_text())
    assert manifest["select_sets"] == HQ_SETS
    assert set(manifest["train"]["tokens_per_set"]) == set(HQ_SETS)
    assert set(manifest["validation"]["tokens_per_set"]) <= set(HQ_SETS)
    assert set(manifest["sets"]) <= set(HQ_SETS) and manifest["train"]["documents"] == 80
    assert (
        manifest["tokenizer"]["sha256"]
        == json.loads((mini_blocks / "manifest.json").read_text())["tokenizer"]["sha256"]
    )
    args = ([], None, "t", 0, 128, 10, None)
    assert fingerprint(*args) == fingerprint(*args, None) != fingerprint(*args, HQ_SETS)  # old outputs keep theirs


def test_tokenize_unknown_set_is_one_line(mini_train, gpt2_tokenizer, tmp_path):
    proc = script(
        "tokenize_pile.py",
        "-q",
        "--input",
        mini_train,
        "--tokenizer",
        gpt2_tokenizer,
        "--seq-len",
        "128",
        "--out",
        tmp_path / "x",
        "--max-docs",
        "20",
        "--val-docs",
        "3",
        "--sets",
        "Books",
        "Bookz",
        cwd=REPO,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: sets: no train document of Bookz")
    assert not (tmp_path / "x").exists()


# ---- dry run ---------------------------------------------------------------------------------------------


def test_dry_run_prints_the_phases(mini_blocks, hq_blocks, tmp_path):
    proc = script(
        PRETRAIN_SCRIPT.name,
        CURRICULUM,
        f"data.path={mini_blocks}",
        f"data.sources.mix={mini_blocks}",
        f"data.sources.hq={hq_blocks}",
        f"training.output_dir={tmp_path / 'run'}",
        "training.max_steps=1000",
        "--dry-run",
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout)["plan"]
    data = plan["data"]
    assert [(p["name"], p["start_step"], p["end_step"]) for p in data["phases"]] == [
        ("diverse", 0, 800),
        ("high_quality", 800, 1000),
    ]
    assert data["phases"][1]["starts_at_tokens"] == 800 * 16 * 128
    assert data["phases"][1]["sources"] == {
        "hq": {"weight": 1.0, "samples": 200 * 16, "tokens": 200 * 16 * 128, "share_of_tokens": 1.0}
    }
    hq_train = json.loads((hq_blocks / "manifest.json").read_text())["train"]["blocks"]
    assert data["sources"]["hq"]["passes"] == pytest.approx(200 * 16 / hq_train)
    assert plan["lr_schedule"]["num_decay_steps"] == 200 and plan["lr_schedule"]["decay_starts_at_step"] == 800
    table = proc.stderr
    assert "phase 1 (diverse): steps 0-800" in table and "starts at step 800 = token 1,638,400" in table
    assert "decay steps from step 800 (set by data.decay_in_last_phase)" in table
    mix_passes = data["sources"]["mix"]["passes"]
    assert mix_passes > 4 and "WARNING: more than 4 passes" in table  # 800 x 16 blocks of a 300-document corpus
    assert "data.sources.mix" in table and "is read" in table  # the log warning too
    assert not (tmp_path / "run").exists()


def test_document_mask_counts_each_sources_attended_length(mini_blocks, hq_blocks, tmp_path):
    """With the document mask, MFU's FLOPs take the mean attended length of the sources, weighted by the samples
    the run reads from each (plan.attended_flops)."""
    from hfpretrain.data.order import attended_length, load_input_ids

    plan = pretrain(
        str(CURRICULUM),
        [
            f"data.path={mini_blocks}",
            f"data.sources.mix={mini_blocks}",
            f"data.sources.hq={hq_blocks}",
            f"training.output_dir={tmp_path / 'run'}",
            "training.max_steps=1000",
            "model.document_mask=true",
        ],
        dry_run=True,
    )["plan"]
    eos = json.loads((mini_blocks / "manifest.json").read_text())["tokenizer"]["eos_token_id"]
    samples = {name: source["samples"] for name, source in plan["data"]["sources"].items()}
    lengths = {
        "mix": attended_length(load_input_ids(mini_blocks, "train"), eos),
        "hq": attended_length(load_input_ids(hq_blocks, "train"), eos),
    }
    assert lengths["mix"] != lengths["hq"]
    want = sum(samples[n] * lengths[n] for n in samples) / sum(samples.values())
    assert plan["attended_length"] == pytest.approx(want)
    assert plan["flops_per_token_attended"] < plan["flops_per_token"]


# ---- real runs: resume across the phase boundary, WSD over the last phase, lineage -------------------

# run_pretrain(..., recipe=CURRICULUM): the shipped recipe under the tests' common overrides (train_utils.BASE)
CURRICULUM_RUN = {
    "training.max_steps": "6",
    "training.save_strategy": "steps",
    "training.save_steps": "1",
    "training.save_total_limit": "null",
    "training.lr_scheduler_type": "warmup_stable_decay",
    "training.lr_scheduler_kwargs": "{min_lr_ratio: 0.1}",
    "training.warmup_steps": "1",
    "data.decay_in_last_phase": "true",
    # phase 1: steps 1-3, 3 of every 4 samples from the mix; phase 2: steps 4-6, the subset alone
    "data.phases": "[{name: mixed, mixture: {mix: 0.75, hq: 0.25}, steps: 3}, {name: hq, mixture: {hq: 1.0}}]",
}


def _mixture_overrides(mini_blocks, hq_blocks, extra=None) -> dict:
    return {"data.sources.mix": str(mini_blocks), "data.sources.hq": str(hq_blocks), **CURRICULUM_RUN, **(extra or {})}


@pytest.fixture(scope="module")
def curriculum_run(mini_blocks, hq_blocks, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("curriculum") / "run"
    run_pretrain(mini_blocks, out, _mixture_overrides(mini_blocks, hq_blocks), recipe=CURRICULUM)
    return out


@pytest.mark.parametrize("stop", [2, 3, 4], ids=["before", "at", "after"])
def test_resume_across_the_phase_boundary_is_exact(curriculum_run, mini_blocks, hq_blocks, tmp_path, stop):
    """Stopped at step 2 (phase 1), 3 (the boundary) or 4 (inside phase 2) and resumed: the remaining steps'
    losses and the final weights are bitwise the uninterrupted run's."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(curriculum_run / f"checkpoint-{stop}", run / f"checkpoint-{stop}")
    summary = run_pretrain(
        mini_blocks,
        run,
        _mixture_overrides(mini_blocks, hq_blocks, {"training.resume_from_checkpoint": "auto"}),
        recipe=CURRICULUM,
    )
    assert summary["global_step"] == 6
    ref, resumed = step_losses(curriculum_run), step_losses(run)
    assert sorted(resumed) == list(range(stop + 1, 7))
    assert [resumed[s] for s in resumed] == [ref[s] for s in resumed]  # bitwise
    a, b = load_weights(curriculum_run / "final"), load_weights(run / "final")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_tokens_per_source_and_the_decay(curriculum_run, mini_blocks, hq_blocks):
    logs = {e["step"]: e for e in read_log(curriculum_run) if e["event"] == "log" and "loss" in e}
    assert sorted(logs) == list(range(1, 7))
    for step, e in logs.items():
        mixed = min(step, 3) * 4
        assert e["tokens_seen/mix"] == mixed * 3 // 4 * 128 and e["data_phase"] == (1 if step <= 3 else 2)
        assert e["tokens_seen/hq"] == (mixed // 4 + max(step - 3, 0) * 4) * 128
        assert e["tokens_seen/mix"] + e["tokens_seen/hq"] == e["tokens_seen"]
    # warmup_stable_decay: stable at the peak through phase 1, decaying over the 3 steps of phase 2
    # (the log shows the rate each step used: step 1 is the warmup, step 4 starts the decay at the peak)
    lr = [logs[s]["learning_rate"] for s in range(1, 7)]
    assert lr[0] < 3e-3 and lr[1:4] == pytest.approx([3e-3] * 3, rel=1e-12) and lr[5] < lr[4] < lr[3]
    summary = json.loads((curriculum_run / "summary.json").read_text())
    assert summary["data"] == {"tokens_seen/mix": 9 * 128, "tokens_seen/hq": 15 * 128, "data_phase": 2}
    assert summary["plan"]["lr_schedule"]["decay_starts_at_step"] == 3


def test_lineage_everywhere(curriculum_run, mini_blocks, hq_blocks):
    record = json.loads((curriculum_run / "lineage.json").read_text())
    assert json.loads((curriculum_run / "final" / "lineage.json").read_text()) == record
    assert read_log(curriculum_run)[0]["lineage"] == record  # the config event
    for step in range(1, 7):
        data = json.loads((curriculum_run / f"checkpoint-{step}" / "data.json").read_text())
        assert data["lineage"] == record and data["mixture"].startswith("from step 0: 0.75×mix")
    for name, folder in (("mix", mini_blocks), ("hq", hq_blocks)):
        manifest = json.loads((folder / "manifest.json").read_text())
        src = record["sources"][name]
        assert src["path"] == str(folder.resolve()) and src["fingerprint"] == manifest["fingerprint"]
        assert src["tokenizer_sha256"] == manifest["tokenizer"]["sha256"] == record["tokenizer"]["sha256"]
        import hashlib

        assert src["manifest_sha256"] == hashlib.sha256((folder / "manifest.json").read_bytes()).hexdigest()
    assert record["sources"]["hq"]["select_sets"] == HQ_SETS
    assert [(p["name"], p["start_step"], p["end_step"], p["mixture"], p["tokens"]) for p in record["phases"]] == [
        ("mixed", 0, 3, {"mix": 0.75, "hq": 0.25}, {"mix": 9 * 128, "hq": 3 * 128}),
        ("hq", 3, 6, {"hq": 1.0}, {"hq": 12 * 128}),
    ]
    assert record["validation"]["path"] == str(mini_blocks.resolve())


def test_resuming_with_another_mixture_is_refused(curriculum_run, mini_blocks, hq_blocks, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(curriculum_run / "checkpoint-2", run / "checkpoint-2")
    other = "[{name: mixed, mixture: {mix: 0.5, hq: 0.5}, steps: 3}, {name: hq, mixture: {hq: 1.0}}]"
    with pytest.raises(ValueError) as info:
        run_pretrain(
            mini_blocks,
            run,
            _mixture_overrides(
                mini_blocks, hq_blocks, {"training.resume_from_checkpoint": "auto", "data.phases": other}
            ),
            recipe=CURRICULUM,
        )
    assert "data mixture (from step 0: 0.75×mix" in str(info.value) and "→ (from step 0: 0.5×mix" in str(info.value)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-2"]  # nothing written


def test_a_longer_last_phase_is_the_same_run(curriculum_run, mini_blocks, hq_blocks, tmp_path):
    """Raising max_steps lengthens the last phase (the samples so far are unchanged): the resume goes on (the
    schedule's decay is then over the longer last phase: the learning rate of later steps changes)."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(curriculum_run / "checkpoint-6", run / "checkpoint-6")
    summary = run_pretrain(
        mini_blocks,
        run,
        _mixture_overrides(
            mini_blocks, hq_blocks, {"training.resume_from_checkpoint": "auto", "training.max_steps": "8"}
        ),
        recipe=CURRICULUM,
    )
    assert summary["global_step"] == 8 and summary["data"]["tokens_seen/hq"] == (3 + 5 * 4) * 128


def test_plain_data_path_run_records_its_lineage(reference_run, mini_blocks):
    """The one-source recipe is unchanged (its data order is tested in test_train.py) and records lineage."""
    record = json.loads((reference_run / "lineage.json").read_text())
    assert record["sources"]["data"]["path"] == str(mini_blocks.resolve())
    assert record["phases"] == [
        {
            "index": 1,
            "name": "phase1",
            "start_step": 0,
            "end_step": 10,
            "mixture": {"data": 1.0},
            "samples": {"data": 40},
            "tokens": {"data": 40 * 128},
        }
    ]
    assert json.loads((reference_run / "checkpoint-5" / "data.json").read_text())["lineage"] == record
    assert (reference_run / "final" / "lineage.json").is_file()
    # the code that trained it: this checkout's sources, and summary.json says the same
    from hfpretrain.training.lineage import code_record

    assert record["code"]["source_sha256"] == code_record()["source_sha256"]
    assert json.loads((reference_run / "summary.json").read_text())["code"] == record["code"]


def test_the_code_record_names_the_sources_and_their_commit(tmp_path):
    """A SHA-256 of the package's sources, name and bytes, with or without git; the commit and whether the files
    differ from it only where git tracks that folder (a package installed inside another checkout is not its code)."""
    import subprocess

    from hfpretrain.training.lineage import code_record

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    first = code_record(pkg)
    assert first["git_commit"] is None and first["git_dirty"] is None
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert code_record(pkg)["source_sha256"] != first["source_sha256"]
    (pkg / "notes.txt").write_text("not code")
    assert code_record(pkg)["source_sha256"] == code_record(pkg)["source_sha256"]

    def git(*argv):
        subprocess.run(["git", "-C", str(pkg), *argv], check=True, capture_output=True)

    git("init", "-q")
    assert code_record(pkg)["git_commit"] is None  # a repository, but the package's files are not tracked
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code")
    head = subprocess.run(["git", "-C", str(pkg), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    clean = code_record(pkg)
    assert clean["git_commit"] == head and clean["git_dirty"] is False
    (pkg / "a.py").write_text("x = 4\n")
    assert code_record(pkg)["git_dirty"] is True


# ---- W&B artifacts, offline ---------------------------------------------------------------------------


def test_wandb_artifacts_offline(mini_blocks, hq_blocks, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    run_pretrain(
        mini_blocks,
        out,
        {
            "data.sources.mix": str(mini_blocks),
            "data.sources.hq": str(hq_blocks),
            "data.mixture": "{mix: 1, hq: 1}",
            "training.max_steps": "2",
            "training.report_to": "[wandb]",
            "logging.wandb_checkpoint_artifacts": "true",
            "training.save_strategy": "steps",
            "training.save_steps": "1",
        },
    )
    files = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, list(tmp_path.rglob("*"))
    artifacts = [r.artifact for r in wandb_records(files[0]) if r.WhichOneof("record_type") == "artifact"]
    datasets = {a.name: a for a in artifacts if a.type == "dataset"}
    assert set(datasets) == {f"data-{mini_blocks.name}", f"data-{hq_blocks.name}"}
    for name, folder in ((f"data-{mini_blocks.name}", mini_blocks), (f"data-{hq_blocks.name}", hq_blocks)):
        art = datasets[name]
        assert art.use_after_commit  # an input of the run (use_artifact, as wandb records it offline)
        entries = {e.path: e for e in art.manifest.contents}
        assert entries["manifest.json"].ref == ""  # uploaded: small, versions the data
        refs = [e for p, e in entries.items() if p.startswith("data/")]
        assert refs and all(e.ref.startswith(folder.resolve().as_uri() + "/") for e in refs)  # the folder, by reference
        assert (
            json.loads(art.metadata)["fingerprint"] == json.loads((folder / "manifest.json").read_text())["fingerprint"]
        )
    models = {tuple(sorted(set(a.aliases) - {"latest"})): a for a in artifacts if a.type == "model"}  # outputs
    assert set(models) == {("step-1",), ("step-2",), ("final", "step-2")}, list(models)
    for aliases, folder in ((("final", "step-2"), out / "final"), (("step-1",), out / "checkpoint-1")):
        art = models[aliases]
        assert art.name == "model-run" and not art.use_after_commit
        entries = {e.path: e for e in art.manifest.contents}
        assert {"config.json", "files/model.safetensors"} <= set(entries)
        assert entries["files/model.safetensors"].ref == (folder / "model.safetensors").resolve().as_uri()
        assert json.loads(art.metadata)["lineage"] == json.loads((out / "lineage.json").read_text())
    assert "lineage.json" in {e.path for e in models[("final", "step-2")].manifest.contents}


# ---- the shipped demonstration recipe ---------------------------------------------------------------------


def test_curriculum_small_recipe_trains(mini_blocks, hq_blocks, tmp_path):
    """recipes/curriculum_small.yaml as shipped, shortened to 5 steps of 4 blocks: phase 2 (the subset)
    is step 5, the WSD decay with it; the final evaluation reports the loss per validation set."""
    import signal

    out = tmp_path / "run"
    previous = signal.getsignal(signal.SIGTERM)  # PreemptionCallback installs its own: give pytest's back
    try:
        summary = pretrain(
            str(CURRICULUM),
            [
                f"data.path={mini_blocks}",
                f"data.sources.mix={mini_blocks}",
                f"data.sources.hq={hq_blocks}",
                f"training.output_dir={out}",
                "training.max_steps=5",
                "training.warmup_steps=1",
                "training.per_device_train_batch_size=4",
                "training.per_device_eval_batch_size=16",
                "training.logging_steps=1",
                "training.eval_steps=5",
                "training.save_steps=5",
                "training.disable_tqdm=true",
                "evaluation.eval_tokens=2048",
                "evaluation.final_eval_tokens=4096",
            ],
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert summary["global_step"] == 5 and summary["data"]["tokens_seen/hq"] == 4 * 128
    assert summary["plan"]["lr_schedule"]["decay_starts_at_step"] == 4
    final = summary["final_eval"]
    per_set, tokens = final["eval_loss_per_set"], final["eval_tokens_per_set"]
    manifest = json.loads((mini_blocks / "manifest.json").read_text())
    # the first 32 validation blocks hold 3+ sets of the mount's mini corpus, 2 (Poetry, Math) of the embedded sample
    assert set(per_set) <= set(manifest["sets"]) and len(per_set) >= (2 if using_embedded_data() else 3)
    assert sum(tokens.values()) == 32 * 127  # every target token of the 32 final blocks, once
    mean = sum(per_set[k] * tokens[k] for k in per_set) / sum(tokens.values())
    assert mean == pytest.approx(final["eval_loss"], abs=2e-3)  # the same losses, counted by set
    val = manifest["validation"]  # each set's bits per byte: its loss x its own tokens per byte of text
    assert final["eval_bpb_per_set"] == pytest.approx(
        {k: per_set[k] * val["tokens_per_set"][k] / val["text_bytes_per_set"][k] / np.log(2) for k in per_set}, rel=1e-9
    )
    assert (out / "final" / "lineage.json").is_file()
