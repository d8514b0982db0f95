"""The local task twins: same prompts/choices/targets as lm-eval's built-ins, full sizes, quirks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hfpretrain.eval.task_data import (
    FULL_SIZES,
    TASKS as TASK_SPECS,
    MissingEvalDataError,
    gold_index,
    load_dataset_dict,
    read_split,
)
from hfpretrain.eval.local_tasks import TASK_DIR, load_tasks
from hfpretrain.paths import using_embedded_data

# The embedded sample data (no DATA_ROOT) holds 48 ARC-Easy and 48 ARC-Challenge test questions (and a few
# dozen dev ones) and no OpenBookQA: tests on the full sets or on OpenBookQA need the full data mount.
EMBEDDED = using_embedded_data()
TASKS = ("arc_easy", "arc_challenge") if EMBEDDED else ("arc_easy", "arc_challenge", "openbookqa")
SPLITS = ("validation", "test") if EMBEDDED else ("train", "validation", "test")
OBQA = pytest.param("openbookqa", marks=pytest.mark.full_data("OpenBookQA"))
ALL_TASKS = ("arc_easy", "arc_challenge", OBQA)
TEMPLATE_KEYS = (
    "output_type",
    "test_split",
    "validation_split",
    "training_split",
    "doc_to_text",
    "doc_to_target",
    "doc_to_choice",
    "should_decontaminate",
    "doc_to_decontamination_query",
    "metric_list",
    "metadata",
)


@pytest.fixture(scope="module")
def local_tasks(data_root):
    return load_tasks(TASKS, data_root, splits=SPLITS)


def _builtin_cfg(name: str) -> dict:
    import lm_eval

    base = Path(lm_eval.__file__).parent / "tasks"
    if name == "openbookqa":
        return yaml.safe_load((base / "openbookqa" / "openbookqa.yaml").read_text())
    cfg = yaml.safe_load((base / "arc" / "arc_easy.yaml").read_text())
    if name == "arc_challenge":
        extra = yaml.safe_load((base / "arc" / "arc_challenge.yaml").read_text())
        extra.pop("include")
        cfg.update(extra)
    return cfg


def _builtin_task_on_local_data(name: str, data_root):
    """lm-eval's built-in config, verbatim, with only the data source replaced."""
    from lm_eval.api.task import ConfigurableTask

    cfg = _builtin_cfg(name)
    cfg.pop("tag", None)
    cfg.pop("dataset_path"), cfg.pop("dataset_name", None)
    cfg["custom_dataset"] = lambda **_: load_dataset_dict(name, data_root)
    return ConfigurableTask(config=cfg)


@pytest.mark.parametrize("name", ALL_TASKS)
def test_yaml_fields_equal_builtin(name, local_tasks):
    builtin = _builtin_cfg(name)
    ours = local_tasks[name].config
    assert ours.task == builtin["task"] == name
    for key in TEMPLATE_KEYS:
        mine = getattr(ours, key)
        if key == "metadata":
            assert mine["version"] == builtin["metadata"]["version"]
        else:
            assert mine == builtin[key], key


@pytest.mark.parametrize("name", ALL_TASKS)
def test_documents_render_identically(name, data_root, local_tasks):
    ours = local_tasks[name]
    theirs = _builtin_task_on_local_data(name, data_root)
    docs_o, docs_t = ours.test_docs(), theirs.test_docs()
    rows = list(range(5)) + [i for i, d in enumerate(docs_o) if d["choices"]["label"][0] == "1"][:3]
    rows += [i for i, d in enumerate(docs_o) if len(d["choices"]["text"]) != 4][:3]
    for i in rows:
        a, b = docs_o[i], docs_t[i]
        assert ours.doc_to_text(a) == theirs.doc_to_text(b)
        assert ours.doc_to_choice(a) == theirs.doc_to_choice(b)
        assert ours.doc_to_target(a) == theirs.doc_to_target(b) == gold_index(a)
    ours.build_all_requests(limit=6, rank=0, world_size=1)
    theirs.build_all_requests(limit=6, rank=0, world_size=1)
    assert [x.args for x in ours.instances] == [x.args for x in theirs.instances]
    assert len(ours.instances) >= 6 * 3
    ctx, cont = ours.instances[0].args
    if name == "openbookqa":
        assert ctx == docs_o[0]["question_stem"]
    else:
        assert ctx == f"Question: {docs_o[0]['question']}\nAnswer:"
    assert cont == " " + docs_o[0]["choices"]["text"][0]


@pytest.mark.full_data("full evaluation sets")
@pytest.mark.parametrize("name", TASKS)
def test_full_document_counts(name, local_tasks):
    task = local_tasks[name]
    assert len(task.test_docs()) == FULL_SIZES[name]["test"]
    assert len(task.validation_docs()) == FULL_SIZES[name]["validation"]
    assert len(task.training_docs()) == FULL_SIZES[name]["train"]


def test_full_sizes_are_the_published_ones():
    scored = {k: FULL_SIZES[k][TASK_SPECS[k].scored_split] for k in FULL_SIZES}
    assert scored == {
        "arc_easy": 2376,
        "arc_challenge": 1172,
        "openbookqa": 500,
        "hellaswag": 10042,
        "piqa": 1838,
        "winogrande": 1267,
        "lambada_openai": 5153,
    }


# ---- HellaSwag, PIQA, WinoGrande, LAMBADA: lm-eval's own YAML (with its !function helpers) on the local rows --
BUILTIN_YAML = {
    "hellaswag": "hellaswag/hellaswag.yaml",
    "piqa": "piqa/piqa.yaml",
    "winogrande": "winogrande/default.yaml",
    "lambada_openai": "lambada/lambada_openai.yaml",
}
MORE = [pytest.param(n, marks=pytest.mark.full_data(n)) for n in BUILTIN_YAML]


def _builtin_yaml_with_functions(name: str) -> dict:
    """lm-eval's task YAML, its ``!function module.fn`` tags resolved from the files beside it."""
    import importlib.util

    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / BUILTIN_YAML[name]

    class Loader(yaml.SafeLoader):
        pass

    def function(loader, node):
        module, fn = loader.construct_scalar(node).rsplit(".", 1)
        spec = importlib.util.spec_from_file_location(module, path.parent / f"{module}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return getattr(mod, fn)

    Loader.add_constructor("!function", function)
    return yaml.load(path.read_text(), Loader=Loader)


@pytest.mark.parametrize("name", MORE)
def test_more_tasks_render_like_builtin(name, data_root):
    """The same documents, prompts, choices, targets and requests as lm-eval's built-in task on the same rows."""
    from lm_eval.api.task import ConfigurableTask

    ours = load_tasks([name], data_root)[name]
    cfg = _builtin_yaml_with_functions(name)
    for key in ("task", "output_type", "metric_list"):
        assert getattr(ours.config, key) == cfg[key], key
    cfg.pop("tag", None), cfg.pop("dataset_path"), cfg.pop("dataset_name", None)
    cfg["custom_dataset"] = lambda **_: load_dataset_dict(name, data_root)
    theirs = ConfigurableTask(config=cfg)
    split = TASK_SPECS[name].scored_split
    docs_o = ours.test_docs() if split == "test" else ours.validation_docs()
    docs_t = theirs.test_docs() if split == "test" else theirs.validation_docs()
    assert len(docs_o) == len(docs_t) == FULL_SIZES[name][split]
    for i in (0, 1, 2, len(docs_o) // 2, len(docs_o) - 1):
        assert ours.doc_to_text(docs_o[i]) == theirs.doc_to_text(docs_t[i])
        assert ours.doc_to_target(docs_o[i]) == theirs.doc_to_target(docs_t[i])
        if ours.config.doc_to_choice is not None:
            assert ours.doc_to_choice(docs_o[i]) == theirs.doc_to_choice(docs_t[i])
    ours.build_all_requests(limit=5, rank=0, world_size=1)
    theirs.build_all_requests(limit=5, rank=0, world_size=1)
    assert [x.args for x in ours.instances] == [x.args for x in theirs.instances]
    assert len(ours.instances) >= 5


@pytest.mark.full_data("LAMBADA")
def test_lambada_text_is_context_and_last_word(data_root):
    raw = json.loads((data_root / "eval" / "lambada" / "lambada_openai_test.jsonl").open().readline())
    task = load_tasks(["lambada_openai"], data_root)["lambada_openai"]
    doc = task.test_docs()[0]
    assert doc["text"] == raw["context"] + " " + raw["continuation"]
    assert task.doc_to_text(doc) == raw["context"] and task.doc_to_target(doc) == " " + raw["continuation"]


def test_bad_row_names_file_line_and_task(tmp_path):
    folder = tmp_path / "eval" / "piqa"
    folder.mkdir(parents=True)
    (folder / "piqa_validation.jsonl").write_text(
        '{"goal": "g", "sol1": "a", "sol2": "b", "label": 0}\n{"goal": "g"}\n'
    )
    with pytest.raises(ValueError, match=r"piqa_validation.jsonl:2: not a piqa row \(KeyError: 'sol1, sol2, label'\)"):
        read_split("piqa", "validation", tmp_path)
    with pytest.raises(MissingEvalDataError, match="hellaswag_validation.jsonl.zst"):
        load_tasks(["hellaswag"], tmp_path)


@pytest.mark.full_data("a given ARC-Easy row and OpenBookQA")
def test_ai2_to_hf_layout(data_root):
    arc = {d["id"]: d for d in read_split("arc_easy", "test", data_root)}
    assert arc["NYSEDREGENTS_2015_8_28"] == {
        "id": "NYSEDREGENTS_2015_8_28",
        "question": "All living and nonliving material is composed of",
        "choices": {"text": ["air", "elements", "water", "soil"], "label": ["1", "2", "3", "4"]},
        "answerKey": "2",
    }
    obqa = read_split("openbookqa", "test", data_root)[1]
    assert obqa == {
        "id": "1129",
        "question_stem": "There is most likely going to be fog around:",
        "choices": {"text": ["a marsh", "a tundra", "the plains", "a desert"], "label": ["A", "B", "C", "D"]},
        "answerKey": "A",
    }


@pytest.mark.parametrize(
    "name,numeric,three,five",
    [("arc_easy", 6, 2, 2), ("arc_challenge", 4, 2, 2)]
    if EMBEDDED
    else [("arc_easy", 97, 7, 4), ("arc_challenge", 22, 4, 3)],
)
def test_label_quirks_counted_and_targets_in_range(name, numeric, three, five, local_tasks, data_root):
    task = local_tasks[name]
    docs = task.test_docs()
    assert sum(d["choices"]["label"][0] == "1" for d in docs) == numeric
    assert sum(len(d["choices"]["text"]) == 3 for d in docs) == three
    assert sum(len(d["choices"]["text"]) == 5 for d in docs) == five
    # the gold text is the choice whose label is the answerKey in the raw AI2 row
    raw = {}
    sub = {"arc_easy": "ARC-Easy-Test.jsonl", "arc_challenge": "ARC-Challenge-Test.jsonl"}[name]
    with open(data_root / "eval" / name / sub, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            raw[r["id"]] = next(c["text"] for c in r["question"]["choices"] if c["label"] == r["answerKey"])
    for d in docs:
        t = task.doc_to_target(d)
        assert 0 <= t < len(d["choices"]["text"])
        assert task.doc_to_choice(d)[t] == raw[d["id"]]


def test_label_quirk_rows_score_correctly(local_tasks):
    """lm-eval's own process_results on quirk rows: gold chosen -> acc 1, other -> acc 0."""
    task = local_tasks["arc_easy"]
    quirky = [d for d in task.test_docs() if d["choices"]["label"][0] == "1" or len(d["choices"]["text"]) != 4]
    assert len(quirky) > (8 if EMBEDDED else 90)
    for d in quirky[:30]:
        n, gold = len(d["choices"]["text"]), task.doc_to_target(d)
        lls = [(-10.0, False)] * n
        lls[gold] = (-1.0, True)
        assert task.process_results(d, lls)["acc"] == 1.0
        wrong = [(-10.0, False)] * n
        wrong[(gold + 1) % n] = (-1.0, True)
        assert task.process_results(d, wrong)["acc"] == 0.0


def test_missing_data_file_is_one_clear_line(tmp_path):
    (tmp_path / "eval").mkdir()
    with pytest.raises(MissingEvalDataError) as err:
        load_tasks(["arc_easy"], tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "ARC-Easy-Test.jsonl" in msg


def test_task_dir_is_package_data():
    names = sorted(p.name for p in TASK_DIR.iterdir() if p.suffix in (".yaml", ".py"))
    assert names == [
        "arc_challenge.yaml",
        "arc_easy.yaml",
        "hellaswag.yaml",
        "lambada_openai.yaml",
        "local_data.py",
        "openbookqa.yaml",
        "piqa.yaml",
        "winogrande.yaml",
    ]


@pytest.mark.full_data("full evaluation sets")
def test_slim_data_root_with_test_files_only(data_root, tmp_path):
    """The GPU kit carries only test/dev files: lm-eval's task must still build (zero-shot)."""
    import shutil

    from hfpretrain.eval.task_data import split_path

    for name in TASKS:
        src = split_path(name, "test", data_root)
        dst = tmp_path / src.relative_to(data_root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    tasks = load_tasks(TASKS, tmp_path)
    for name in TASKS:
        assert len(tasks[name].test_docs()) == FULL_SIZES[name]["test"]
        assert len(load_dataset_dict(name, tmp_path)["train"]) == 0


def _builtin_dataset(name: str) -> tuple[str, str | None]:
    """dataset_path and dataset_name of lm-eval's built-in YAML (read as text: some hold !function tags)."""
    import re

    import lm_eval

    base = Path(lm_eval.__file__).parent / "tasks"
    files = {
        "arc_easy": ["arc/arc_easy.yaml"],
        "arc_challenge": ["arc/arc_easy.yaml", "arc/arc_challenge.yaml"],
        "openbookqa": ["openbookqa/openbookqa.yaml"],
        "hellaswag": ["hellaswag/hellaswag.yaml"],
        "piqa": ["piqa/piqa.yaml"],
        "winogrande": ["winogrande/default.yaml"],
        "lambada_openai": ["lambada/lambada_openai.yaml"],
    }[name]
    found = {}
    for f in files:  # the included file first, the task's own keys over it
        found.update(re.findall(r"^(dataset_path|dataset_name): *(\S+)", (base / f).read_text(), flags=re.M))
    name_ = found.get("dataset_name")
    return found["dataset_path"], None if name_ in (None, "null") else name_


@pytest.mark.parametrize("name", sorted(TASK_SPECS))
def test_hub_dataset_is_the_builtin_tasks(name):
    from hfpretrain.eval.task_data import HUB_DATASETS

    assert HUB_DATASETS[name] == _builtin_dataset(name)


def _online(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_missing_file_offline_names_the_file_and_the_hub_dataset(var, tmp_path, monkeypatch):
    """Offline, a missing file stays an error (no download is tried), one line naming what lm-eval would read."""
    import huggingface_hub

    _online(monkeypatch)
    monkeypatch.setenv(var, "1")
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda *a, **k: pytest.fail("asked the Hub offline"))
    (tmp_path / "eval").mkdir()
    with pytest.raises(MissingEvalDataError) as err:
        load_tasks(["openbookqa"], tmp_path)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(tmp_path / "eval" / "openbookqa" / "test.jsonl") in msg
    assert "Hub dataset allenai/openbookqa (main)" in msg and f"{var}=1" in msg


def test_missing_file_unreachable_hub_is_one_line(tmp_path, monkeypatch):
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'\nmore detail")

    _online(monkeypatch)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", refuse)
    with pytest.raises(MissingEvalDataError) as err:
        load_tasks(["piqa"], tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "piqa_validation.jsonl" in msg and "Hub dataset baber/piqa" in msg
    assert "the Hub did not answer (ConnectionError: Failed to resolve 'huggingface.co')" in msg


def test_missing_file_reachable_hub_uses_the_builtin_task(tmp_path, monkeypatch, caplog):
    """Online, the missing file's task is lm-eval's own (its Hub dataset), said in one log line; the tasks whose
    files are there stay local. The download itself is not run here (no network in the tests)."""
    import logging

    import huggingface_hub

    from hfpretrain.eval.local_tasks import task_sources
    from hfpretrain.eval.task_data import split_path

    asked = []
    _online(monkeypatch)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda self, repo_id, **kw: asked.append(repo_id))
    arc = split_path("arc_easy", "test", tmp_path)
    arc.parent.mkdir(parents=True)
    arc.write_text("")
    with caplog.at_level(logging.WARNING, logger="hfpretrain.eval.local_tasks"):
        sources = task_sources(["arc_easy", "openbookqa"], tmp_path)
    assert sources == {"arc_easy": None, "openbookqa": "allenai/openbookqa (main)"} and asked == ["allenai/openbookqa"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "openbookqa: no local file" in lines[0] and "allenai/openbookqa (main)" in lines[0]


def test_local_files_present_never_ask_the_hub(data_root, monkeypatch, caplog):
    """With the files there, online or not, the local twins are loaded as before and the Hub is not asked."""
    import huggingface_hub

    from hfpretrain.eval.local_tasks import TASK_DIR as task_dir, task_sources

    _online(monkeypatch)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda *a, **k: pytest.fail("asked the Hub"))
    assert task_sources(TASKS, data_root) == {t: None for t in TASKS}
    tasks = load_tasks(["arc_easy"], data_root)
    assert Path(tasks["arc_easy"].config.custom_dataset.__code__.co_filename).parent == task_dir
    assert not [r for r in caplog.records if r.name.startswith("hfpretrain")]


def test_load_tasks_takes_hub_tasks_from_lm_evals_own_manager(data_root, monkeypatch):
    """Local tasks from the project's task manager, the others from lm-eval's built-in one (faked: no network)."""
    import lm_eval.tasks

    real, built_in = lm_eval.tasks.TaskManager, []

    class Manager:
        def __new__(cls, *args, **kwargs):
            if "include_path" in kwargs:
                return real(*args, **kwargs)
            return super().__new__(cls)

        def load(self, names):
            built_in.extend(names)
            return {"tasks": {n: f"built-in {n}" for n in names}}

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Manager)
    tasks = load_tasks(
        ["openbookqa", "arc_easy"], data_root, sources={"openbookqa": "allenai/openbookqa (main)", "arc_easy": None}
    )
    assert list(tasks) == ["openbookqa", "arc_easy"] and tasks["openbookqa"] == "built-in openbookqa"
    assert built_in == ["openbookqa"] and tasks["arc_easy"].config.task == "arc_easy"
