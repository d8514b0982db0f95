"""The embedded default data root (src/hfpretrain/assets/default_data): used when DATA_ROOT is not set,
small, redistributable, regenerated exactly by scripts/build_embedded_data.py, and enough for the demo."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from hfpretrain import paths
from hfpretrain.paths import EMBEDDED_DATA_ROOT, MissingDataError, data_root, using_embedded_data

REPO = Path(__file__).resolve().parents[1]
MIX = EMBEDDED_DATA_ROOT / "pretrain" / "mix"


def _build_module():
    spec = importlib.util.spec_from_file_location("build_embedded_data", REPO / "scripts" / "build_embedded_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _docs(path: Path) -> list[dict]:
    data = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


def test_small_and_laid_out_like_the_data_mount():
    files = {
        p.relative_to(EMBEDDED_DATA_ROOT).as_posix(): p.stat().st_size
        for p in EMBEDDED_DATA_ROOT.rglob("*")
        if p.is_file()
    }
    assert sum(files.values()) < 3_000_000, files
    for rel in (
        "README.md",
        "pretrain/mix/mini_train.jsonl.zst",
        "pretrain/mix/mini_val.jsonl.zst",
        "tokenizers/gpt2/tokenizer.json",
        "tokenizers/gpt2/tokenizer_config.json",
        "eval/arc_easy/ARC-Easy-Test.jsonl",
        "eval/arc_challenge/ARC-Challenge-Test.jsonl",
        "eval/arc_easy/ARC-Easy-Dev.jsonl",
        "eval/arc_challenge/ARC-Challenge-Dev.jsonl",
        "LICENSES/Go-BSD-3-Clause.txt",
        "LICENSES/GPT-2-tokenizer-MIT.txt",
        "LICENSES/ARC-CC-BY-SA-4.0.txt",
    ):
        assert rel in files, rel
    assert not any(rel.startswith("eval/openbookqa") for rel in files)  # licence not confirmed: left out


def test_documents_are_pile_format_of_redistributable_sets_with_their_licence_noted():
    build = _build_module()
    readme = (EMBEDDED_DATA_ROOT / "README.md").read_text()
    train, val = _docs(MIX / "mini_train.jsonl.zst"), _docs(MIX / "mini_val.jsonl.zst")
    # the fixtures read 300 train / 100 val documents; the documented CLI test reads 400
    assert len(train) >= 400 and len(val) >= 100
    for doc in train + val:
        assert set(doc) == {"text", "meta"} and set(doc["meta"]) == {"pile_set_name"} and doc["text"].strip()
        assert doc["meta"]["pile_set_name"] in build.LICENCES
    assert not {d["text"] for d in train} & {d["text"] for d in val}
    sets = {d["meta"]["pile_set_name"] for d in train}
    assert sets == set(build.LICENCES)
    for name in sets:
        assert f"| {name} |" in readme and build.LICENCES[name] in readme
    assert not set(build.LICENCES) & set(build.EXCLUDED)


def test_data_root_falls_back_to_the_embedded_root_with_one_log_line(monkeypatch, caplog, tmp_path):
    monkeypatch.delenv("DATA_ROOT", raising=False)
    monkeypatch.setattr(paths, "_said_embedded", False)
    with caplog.at_level(logging.INFO, logger="hfpretrain.paths"):
        assert data_root() == EMBEDDED_DATA_ROOT and data_root("") == EMBEDDED_DATA_ROOT
        assert paths.resolve("data:tokenizers/gpt2") == str(EMBEDDED_DATA_ROOT / "tokenizers" / "gpt2")
    said = [r.getMessage() for r in caplog.records if r.name == "hfpretrain.paths"]
    assert len(said) == 1 and "DATA_ROOT is not set" in said[0] and str(EMBEDDED_DATA_ROOT) in said[0]
    assert using_embedded_data()
    # DATA_ROOT set: used exactly as before, no fallback
    caplog.clear()
    monkeypatch.setenv("DATA_ROOT", str(tmp_path))
    assert data_root() == tmp_path and not using_embedded_data() and not caplog.records
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "nope"))
    with pytest.raises(MissingDataError, match="is not a directory"):
        data_root()


def test_embedded_tokenizer_and_eval_tasks_load():
    from hfpretrain.data.tokenizer import load_tokenizer, pick_eos
    from hfpretrain.eval.task_data import MissingEvalDataError, available_tasks
    from hfpretrain.eval.local_tasks import DEFAULT_TASKS, load_tasks

    tok = load_tokenizer(EMBEDDED_DATA_ROOT / "tokenizers" / "gpt2")
    assert len(tok) == 50257 and pick_eos(tok) == ("<|endoftext|>", 50256)
    assert tok("Hello world!")["input_ids"] == [15496, 995, 0]
    assert available_tasks(DEFAULT_TASKS, EMBEDDED_DATA_ROOT) == ["arc_easy", "arc_challenge"]
    tasks = load_tasks(["arc_easy", "arc_challenge"], EMBEDDED_DATA_ROOT, splits=("validation", "test"))
    assert {name: len(t.test_docs()) for name, t in tasks.items()} == {"arc_easy": 48, "arc_challenge": 48}
    assert all(len(t.validation_docs()) >= 20 for t in tasks.values())
    with pytest.raises(MissingEvalDataError, match="embedded data holds ARC test and dev questions only"):
        load_tasks(["openbookqa"], EMBEDDED_DATA_ROOT)


@pytest.mark.full_data("the source files of the embedded sample")
def test_build_script_regenerates_the_embedded_files_exactly(data_root, tmp_path):
    out = tmp_path / "default_data"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "build_embedded_data.py"),
            "--data-root",
            str(data_root),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    built = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(EMBEDDED_DATA_ROOT).as_posix() for p in EMBEDDED_DATA_ROOT.rglob("*") if p.is_file())
    assert built == shipped
    for rel in built:
        a, b = out / rel, EMBEDDED_DATA_ROOT / rel
        if rel.endswith(".zst"):  # same documents; compressed bytes may differ across zstd versions
            assert _docs(a) == _docs(b), rel
        else:
            assert a.read_bytes() == b.read_bytes(), rel


def test_demo_runs_without_data_root(tmp_path):
    """`make demo` on a fresh clone: the whole pipeline on the embedded data (shortened here)."""
    env = {k: v for k, v in os.environ.items() if k != "DATA_ROOT"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "demo.py"),
            "--out",
            str(tmp_path / "demo"),
            "--max-steps",
            "4",
            "--eval-limit",
            "4",
            "--override",
            "evaluation.eval_tokens=2048",
            "--override",
            "evaluation.final_eval_tokens=2048",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "DATA_ROOT is not set: using the small embedded data" in proc.stderr
    assert "openbookqa: not in" in proc.stdout
    report = json.loads(proc.stdout[proc.stdout.index("{\n") :])
    assert report["data_root"] == str(EMBEDDED_DATA_ROOT)
    assert set(report["lm_eval"]) == {"arc_easy", "arc_challenge"} and report["validation_loss"] > 0
    assert Path(report["plot"]).is_file() and (Path(report["checkpoint"]) / "config.json").is_file()


def test_the_demo_budget_in_steps_and_tokens():
    """`make demo`'s training budget, held in steps, tokens and FLOPs rather than seconds, so that it cannot creep
    back: the GPT-2-vocabulary demo it replaced spent 300 steps x 2,048 tokens at 20 MFLOPs per token (12 TFLOPs,
    most of an hour on 2 shared cores); this one is 2/7 of that (docs/benchmarks.md § On a CPU)."""
    from hfpretrain.demo import DEMO_RECIPE, DEMO_SEQ_LEN, DEMO_VOCAB
    from hfpretrain.models.flops import flops_per_token
    from hfpretrain.models.zoo import load_config
    from hfpretrain.paths import recipe_path
    from hfpretrain.training.config import load_recipe

    recipe = load_recipe(recipe_path(DEMO_RECIPE), ["data.path=unused"])
    t = recipe.training
    tokens = t["max_steps"] * t["per_device_train_batch_size"] * t["gradient_accumulation_steps"] * DEMO_SEQ_LEN
    assert t["max_steps"] <= 400 and tokens <= 820_000
    assert recipe.model.overrides["vocab_size"] == DEMO_VOCAB  # the tokenizer the demo trains
    config = load_config(recipe.model.config, recipe.model.overrides, vocab_size=DEMO_VOCAB)
    assert tokens * flops_per_token(config, DEMO_SEQ_LEN).total <= 3.5e12
    # the validation it runs is a small part of it
    assert (
        t["max_steps"] // t["eval_steps"]
    ) * recipe.evaluation.eval_tokens + recipe.evaluation.final_eval_tokens <= tokens / 5


@pytest.mark.parametrize(
    "name, bare_hub_ids, hub",
    [
        ("gpt2", True, True),  # a tokenizer's Hub id
        ("gpt2", False, False),  # a corpus input of one word: a mistyped file
        ("Qwen/Qwen3-0.6B", False, True),
        ("pile/train.jsonl", False, False),  # a file that is not there, not a Hub dataset
        ("tok.json", True, False),
        ("a/b/c", True, False),
        ("./gpt2", True, False),
    ],
)
def test_a_missing_name_is_a_hub_id_only_where_it_looks_like_one(monkeypatch, tmp_path, name, bare_hub_ids, hub):
    """`--tokenizer gpt2` offline said "gpt2 does not exist", as if a folder were mistyped: for a tokenizer a bare
    name is a Hub id (refused offline with what to pass instead), as owner/name is anywhere; a name ending like a data
    file is a missing file. Online, a name taken as a Hub id is returned for the Hub to answer."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MissingDataError) as err:
        paths.resolve(name, bare_hub_ids=bare_hub_ids)
    assert ("HF_HUB_OFFLINE=1, so Hub id" in str(err.value)) == hub, str(err.value)
    assert hub or str(err.value) == f"{name} does not exist"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    if hub:
        assert paths.resolve(name, bare_hub_ids=bare_hub_ids) == name
    else:
        with pytest.raises(MissingDataError, match="does not exist"):
            paths.resolve(name, bare_hub_ids=bare_hub_ids)
