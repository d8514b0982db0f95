"""Hub inputs with options (config name, split, data_files, revision), as run_clm's --dataset_name and
--dataset_config_name: ``ID?name=...&split=...&data_files=...``. No Hub here: the packaged ``json`` builder reads
local files through the same path, and a Hub id offline fails in one line that names the input."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest

from hfpretrain.data import DataError, tokenize_corpus
from hfpretrain.data.read import expand_inputs, hub_arguments

from helpers import write_jsonl

TEXTS = [f"document number {i}: " + "some words of text " * (5 + i % 7) for i in range(40)]


def _stream(out, split: str) -> np.ndarray:
    return np.asarray(datasets.load_from_disk(str(out / split)).with_format("numpy")["input_ids"]).reshape(-1)


def test_options_parse_into_load_dataset_arguments():
    assert hub_arguments("allenai/c4?name=en&split=validation&data_files=en/a.json.gz,en/b.json.gz") == (
        "allenai/c4",
        {"name": "en", "split": "validation", "data_files": ["en/a.json.gz", "en/b.json.gz"]},
    )
    assert hub_arguments("EleutherAI/pile") == ("EleutherAI/pile", {"split": "train"})
    assert hub_arguments("org/ds?revision=v1.0") == ("org/ds", {"split": "train", "revision": "v1.0"})
    [src] = expand_inputs(["allenai/c4?name=en&data_files=en/c4-train.0000[0-3]-of-01024.json.gz"])
    assert src["kind"] == "hub"  # a "?" and "[...]" of options, not a glob of local files
    with pytest.raises(DataError, match=r"^allenai/c4\?name=en&splt=train: unknown Hub option 'splt' \(known: name, "):
        expand_inputs(["allenai/c4?name=en&splt=train"])


def test_builder_with_data_files_and_split_gives_the_same_blocks_as_the_file(tmp_path, gpt2_tokenizer):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": t, "meta": {"pile_set_name": "S"}} for t in TEXTS])
    val = write_jsonl(tmp_path / "val.jsonl", [{"text": t.upper(), "meta": {"pile_set_name": "S"}} for t in TEXTS[:8]])
    kw = dict(tokenizer=gpt2_tokenizer, seq_len=32, val_docs=5)
    ref = tokenize_corpus([train], tmp_path / "ref", val_inputs=[val], **kw)
    spec = f"json?data_files={train}"
    val_spec = f"json?split=validation&data_files={val}"  # a split the builder does not have: load_dataset's error
    out = tokenize_corpus([spec], tmp_path / "out", val_inputs=[f"json?data_files={val}"], **kw)
    for split in ("train", "validation"):
        assert np.array_equal(_stream(ref, split), _stream(out, split))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == [{"path": spec, "kind": "hub", "epochs": 1.0}]  # the spec, options and all
    with pytest.raises(DataError, match=r"json\?split=validation.*: cannot load it as a Hub dataset"):
        tokenize_corpus([spec], tmp_path / "bad", val_inputs=[val_spec], **kw)


def test_an_unreachable_hub_id_is_one_line(tmp_path, gpt2_tokenizer, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        tokenize_corpus(
            ["no-such-org/no-such-dataset?name=en"], tmp_path / "out", tokenizer=gpt2_tokenizer, seq_len=32, val_docs=5
        )
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("no-such-org/no-such-dataset?name=en: cannot load it as a Hub dataset")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_globs_and_local_paths_are_not_hub_specs(tmp_path):
    (tmp_path / "shard1.jsonl").write_text('{"text": "a"}\n')
    [glob_src] = expand_inputs([str(tmp_path / "shard?.jsonl")])  # a "?" glob, no Hub option after it
    assert glob_src["kind"] == "jsonl" and glob_src["path"].endswith("shard1.jsonl")
    for spec in (f"{tmp_path}/c4?name=en", "./c4?name=en", "data/shard?a=1.jsonl"):
        assert all(s["kind"] != "hub" for s in expand_inputs([spec])), spec
    assert hub_arguments("json?data_files=a+b%20c.jsonl")[1]["data_files"] == ["a+b%20c.jsonl"]  # taken as written
    with pytest.raises(DataError, match="option 'split' is not key=value"):
        hub_arguments("org/ds?split")
