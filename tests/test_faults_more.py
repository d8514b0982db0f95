"""Fault injection, issue 62's open items: a full disk during export, inputs read wrong without a word (a byte-order
mark, the same file as train and validation, a lenient build reused by a strict command), outputs inside another
command's output, unclear one-liners. Each case runs a real command on real files and checks one ``error:`` line
(no traceback), the exit code, and that nothing that existed before changed (``test_faults.py``'s helpers).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import forked
import pytest
from test_faults import (  # noqa: F401 (checkpoint: a fixture)
    REPO,
    _command,
    _in_small_filesystem,
    _small_filesystem_or_skip,
    assert_kept,
    checkpoint,
    cli,
    docs,
    one_error,
    snapshot,
)


@pytest.fixture(scope="module")
def ckpt(checkpoint) -> Path:  # noqa: F811 (the parameter is test_faults' fixture of that name)
    """test_faults' tiny Llama checkpoint with GPT-2's tokenizer."""
    return checkpoint


def _sums(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _limited(max_bytes: int):
    """A ``preexec_fn``: no file this process writes may grow past ``max_bytes`` (RLIMIT_FSIZE; Python ignores
    SIGXFSZ, so the write fails with EFBIG, as a full disk fails with ENOSPC)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))


# ----------------------------------------------------------------------------------------------- export, disk full
@pytest.mark.parametrize("limit", ["file_size", "tmpfs"])
def test_a_full_disk_during_export_is_one_line_and_keeps_the_earlier_export(tmp_path, ckpt, limit):
    """It was a SafetensorError traceback, exit 1, with config.json and the marker left behind (a partial export
    that a second export took for a whole one). The export is now written beside --out and moved in when whole.
    A bf16 export (3.2 MB of weights) fits under the limit, a float32 one (6.4 MB) does not."""
    if limit == "file_size":
        out = tmp_path / "exports" / "model"

        def export(*extra, to=out):
            """``hfpretrain export`` under the limit, forked from this process (tests/forked.py), as the tmpfs case
            below runs it."""

            def main():
                _limited(5 << 20)()
                from hfpretrain.cli import main

                return main(["export", str(ckpt), "--out", str(to), *extra])

            return forked.run_forked(main, cwd=REPO)

        first = export()
        assert first.returncode == 0, first.stderr[-3000:]
        kept = _sums(out)
        before = snapshot(tmp_path)
        r = export("--dtype", "float32")
        assert r.returncode == 1, r.stderr[-3000:]
        line = one_error(r.stderr)
        assert f"exporting to {out} failed" in line and "File too large" in line and "is as it was" in line, line
        assert_kept(before, tmp_path)
        assert snapshot(tmp_path).keys() == before.keys() and _sums(out) == kept  # no staging folder left either
        fresh = export("--dtype", "float32", to=tmp_path / "new" / "model")
        assert fresh.returncode == 1 and "nothing was created" in one_error(fresh.stderr)
        assert not (tmp_path / "new").exists()  # nor the folders made for it
        return
    _small_filesystem_or_skip()

    def exports(small: Path) -> int:
        """In the small filesystem, as the shell line ``export && echo BEFORE && sha256sum exp/* && export --dtype
        float32; echo RC=$? && ls -a SMALL && echo AFTER && sha256sum exp/*`` prints it."""

        def sums() -> None:
            for name, digest in _sums(small / "exp").items():
                print(f"{digest}  {small / 'exp' / name}")

        if _command("export", ckpt, "--out", small / "exp") != 0:
            return 1
        print("BEFORE")
        sums()
        print(f"RC={_command('export', ckpt, '--out', small / 'exp', '--dtype', 'float32')}")
        print(".", "..", *sorted(os.listdir(small)))
        print("AFTER")
        sums()
        return 0

    r = _in_small_filesystem(12, exports)
    assert "RC=1" in r.stdout, (r.stdout, r.stderr[-3000:])
    line = one_error(r.stderr)
    assert line.startswith("error: the disk is full: exporting to ") and "is as it was" in line, line
    before, listed, after = r.stdout.split("BEFORE")[1].split("RC=1")[0], *r.stdout.split("RC=1")[1].split("AFTER")
    assert sorted(listed.split()) == [".", "..", "exp"], r.stdout  # no staging folder left
    assert before.split() == after.split(), r.stdout  # the earlier export, byte for byte


# ----------------------------------------------------------------------------------------------- inputs read wrong
def test_a_byte_order_mark_loses_no_document(tmp_path, gpt2_tokenizer):
    """A UTF-8 file saved with a byte-order mark (Windows editors write one) lost its first document: that line was
    malformed JSON ("Unexpected UTF-8 BOM"), a bad record under the 1% ceiling of a larger file; in a .txt the mark
    became part of the text. Plain, gzip'd and zstd'd JSON lines and a .txt, each with the mark: every document."""
    import gzip

    import zstandard

    body = b"\xef\xbb\xbf" + docs(40)
    (tmp_path / "a.jsonl").write_bytes(body)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "d.txt").write_bytes(b"\xef\xbb\xbfHello world, a text file.\n")
    out = tmp_path / "data"
    r = cli(
        "tokenize",
        "--input",
        *(tmp_path / n for n in ("a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "txt/d.txt")),
        "--tokenizer",
        gpt2_tokenizer,
        "--seq-len",
        "16",
        "--val-docs",
        "4",
        "--out",
        out,
        "-q",
    )
    assert r.returncode == 0 and "BOM" not in r.stderr, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["train"]["skipped"] == {} and manifest["validation"]["skipped"] == {}
    assert manifest["train"]["documents"] + manifest["validation"]["documents"] == 121
    assert manifest["train"]["text_bytes_per_set"]["txt"] == len("Hello world, a text file.\n")


@pytest.mark.parametrize("how", ["same_path", "through_a_link", "in_a_folder", "hub_split"])
def test_the_same_input_as_train_and_validation_is_refused(tmp_path, small, gpt2_tokenizer, how):
    """It passed without a word: the validation loss was measured on documents trained on."""
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.jsonl").write_bytes(docs(30))
    (tmp_path / "link.jsonl").symlink_to(small)
    given = {
        "same_path": ["--input", small, "--val-input", small],
        "through_a_link": ["--input", small, tmp_path / "shards", "--val-input", tmp_path / "link.jsonl"],
        "in_a_folder": ["--input", tmp_path / "shards", "--val-input", tmp_path / "shards" / "a.jsonl"],
        "hub_split": ["--dataset-name", "someone/corpus", "--split", "train", "--val-split", "train"],
    }[how]
    before = snapshot(tmp_path)
    r = cli("tokenize", *given, "--tokenizer", gpt2_tokenizer, "--seq-len", "16", "--out", tmp_path / "data")
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert "--val-input" in line and "is also a train input" in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_bytes(docs(40))
    return path


@pytest.mark.parametrize("strict", [["--on-bad", "fail"], ["--max-bad-fraction", "0.001"], []])
def test_a_lenient_build_is_not_reused_by_a_stricter_command(tmp_path, gpt2_tokenizer, strict):
    """A folder built with --on-bad skip (one bad record of 300 skipped), or with --allow-missing (an empty shard), was
    reused by a command that would have refused it (--on-bad fail, a lower ceiling, no --allow-missing): "reusing
    ...", exit 0. The stricter command now rebuilds under its own policy, which refuses; the folder is kept."""
    lines = [json.dumps({"text": f"document number {i} " * 12}) for i in range(300)]
    lines[150] = "{not json"
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    inputs = ["--input", tmp_path / "in.jsonl"]
    lenient = []
    if not strict:  # the lenient build lost a whole file (an empty shard), which --allow-missing let through
        (tmp_path / "in.jsonl").write_text("\n".join(lines[:150] + lines[151:]) + "\n")
        (tmp_path / "empty.jsonl").write_text("")
        inputs += [tmp_path / "empty.jsonl"]
        lenient = ["--allow-missing"]
    data = tmp_path / "data"
    args = [*inputs, "--tokenizer", gpt2_tokenizer, "--seq-len", "16", "--val-docs", "4", "--out", data, "-q"]
    assert cli("tokenize", *args, *lenient).returncode == 0
    before = snapshot(tmp_path)
    r = cli("tokenize", *args, *strict)
    assert r.returncode == 2, r.stderr[-3000:]
    line = one_error(r.stderr)
    assert ("empty.jsonl" if not strict else "in.jsonl:151") in line, line
    assert "rebuilding" in r.stderr and "reusing" not in r.stderr, r.stderr
    assert_kept(before, tmp_path)
    r = cli("tokenize", *args, *lenient)  # the lenient command itself still reuses it
    assert r.returncode == 0 and snapshot(tmp_path) == before


# ----------------------------------------------------------------------------------------------- unclear one-liners
def _dry_run(mini_blocks, tmp_path, *overrides, recipe=REPO / "recipes" / "tiny_cpu.yaml"):
    return cli(
        "train", recipe, f"data.path={mini_blocks}", f"training.output_dir={tmp_path / 'run'}", *overrides, "--dry-run"
    )


@pytest.mark.parametrize(
    "yaml_text, overrides, names",
    [
        # "Merge error: list is not a subclass of KernelsSection" / a TypeError traceback for training and overrides
        ("kernels:\n  - loss\n", [], "kernels is a section of keys"),
        ("training:\n  - max_steps\n", [], "training is a section of keys"),
        ("", ["model.overrides=[1]"], "model.overrides is a section of keys"),
        # strings where the model's config holds numbers: a TypeError at the first forward, a validation traceback
        ("", ["model.overrides.rope_theta=nan"], "model.overrides.rope_theta='nan': expected a number"),
        ("", ['model.overrides.hidden_size="64"'], "write it without quotes: model.overrides.hidden_size=64"),
        ("", ["model.overrides.num_hidden_layers=2.5"], "model.overrides.num_hidden_layers=2.5: expected an integer"),
        ("", ["model.overrides.hidden_act=3"], "model.overrides.hidden_act=3: expected str"),
        ("", ['training.learning_rate="0.001"'], "write the number without quotes (training.learning_rate=0.001)"),
        ("", ["training.learning_rate=nan"], "training.learning_rate: expected float, got str 'nan': NaN and infinity"),
    ],
)
def test_a_misshapen_or_mistyped_key_is_one_line_naming_it(tmp_path, mini_blocks, yaml_text, overrides, names):
    recipe = REPO / "recipes" / "tiny_cpu.yaml"
    if yaml_text:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(f"model:\n  config: tiny\n{yaml_text}")
    r = _dry_run(mini_blocks, tmp_path, *overrides, recipe=recipe)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert names in line, line
    assert not (tmp_path / "run").exists()


def test_max_steps_unset_on_the_command_line_lets_the_budget_decide(tmp_path, mini_blocks):
    """training.max_steps=null was "expected int, got NoneType": a recipe's max_steps could not give way to
    training_flops (or context.tokens) from the command line."""
    r = _dry_run(mini_blocks, tmp_path, "training_flops=1e13")
    assert r.returncode == 2 and "training.max_steps=null lets the budget decide" in one_error(r.stderr)
    r = _dry_run(mini_blocks, tmp_path, "training.max_steps=null", "training_flops=1e13")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "training_flops 1e+13: training.max_steps = " in r.stderr, r.stderr[-3000:]
    r = _dry_run(mini_blocks, tmp_path, "training.max_steps=null")  # and without a budget: the same one line
    assert r.returncode == 2 and "training.max_steps must be set" in one_error(r.stderr)


@pytest.mark.parametrize("case", ["missing", "file", "empty"])
def test_a_missing_init_from_is_named_as_init_from(tmp_path, mini_blocks, case):
    """It was "model config /x does not exist", as if model.config were wrong."""
    init = tmp_path / "base"
    if case == "file":
        init.write_text("not a model")
    elif case == "empty":
        init.mkdir()
    r = cli(
        "train",
        "recipes/tiny_cpu.yaml",
        f"data.path={mini_blocks}",
        f"training.output_dir={tmp_path / 'run'}",
        f"model.init_from={init}",
        "training.max_steps=1",
        "training.warmup_steps=0",
    )
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert (
        f"model.init_from={init} " in line
        and {"missing": "does not exist", "file": "is not a folder", "empty": "holds no config.json"}[case] in line
    ), line
    assert not (tmp_path / "run").exists()


def test_a_dangling_link_as_output_folder_says_where_it_points(tmp_path, mini_blocks):
    """It was "error: [Errno 17] File exists", after the model was built."""
    (tmp_path / "run").symlink_to(tmp_path / "gone")
    before = snapshot(tmp_path)
    r = cli(
        "train",
        "recipes/tiny_cpu.yaml",
        f"data.path={mini_blocks}",
        f"training.output_dir={tmp_path / 'run'}",
        "training.max_steps=1",
        "training.warmup_steps=0",
    )
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert f"{tmp_path / 'run'} is a link to {tmp_path / 'gone'}, which does not exist" in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


# ----------------------------------------------------------------------------------------------- nested outputs
def test_the_output_markers_are_the_commands_own():
    from hfpretrain.data.manifest import FORMAT as TOKENIZED
    from hfpretrain.data.train_tokenizer import FORMAT as TOKENIZER
    from hfpretrain.eval.export import MARKER, MARKER_FORMAT
    from hfpretrain.outdir import OUTPUT_MARKERS
    from hfpretrain.training.lineage import FORMAT as LINEAGE

    assert [m[:2] for m in OUTPUT_MARKERS] == [
        ("manifest.json", TOKENIZED),
        ("training.json", TOKENIZER),
        (MARKER, MARKER_FORMAT),
        ("lineage.json", LINEAGE),
    ]


@pytest.mark.parametrize(
    "case",
    [
        "train_in_data",
        "tokenize_in_run",
        "export_in_run",
        "train_tokenizer_in_export",
        "eval_into_data",
        "long_context_into_data",
    ],
)
def test_no_output_inside_another_commands_output(tmp_path, mini_blocks, small, gpt2_tokenizer, ckpt, case):
    """A run's output_dir inside a tokenized data folder trained and saved there (a rebuild of the data deletes the
    run); a data folder, an export inside a run's folder; eval --out DATA wrote its results into the data folder.
    Each is refused in one line before any work, nothing written."""
    from hfpretrain.training.lineage import FORMAT

    data = tmp_path / "data"
    shutil.copytree(mini_blocks, data)
    run = tmp_path / "run"
    run.mkdir()
    (run / "lineage.json").write_text(json.dumps({"format": FORMAT}))  # what a run writes first
    (run / "log.jsonl").write_text("")
    export = tmp_path / "export"
    export.mkdir()
    (export / ".hfpretrain-export.json").write_text(json.dumps({"format": "hfpretrain.export/1"}))
    args, where = {
        "train_in_data": (
            [
                "train",
                "recipes/tiny_cpu.yaml",
                f"data.path={data}",
                f"training.output_dir={data / 'run'}",
                "training.max_steps=1",
                "training.warmup_steps=0",
            ],
            f"inside a tokenized data folder, {data}",
        ),
        "tokenize_in_run": (
            ["tokenize", "--input", small, "--tokenizer", gpt2_tokenizer, "--seq-len", "16", "--out", run / "data"],
            f"inside a run's folder, {run}",
        ),
        "export_in_run": (["export", ckpt, "--out", run / "export"], f"inside a run's folder, {run}"),
        "train_tokenizer_in_export": (
            ["train-tokenizer", "--input", small, "--vocab-size", "300", "--out", export / "tok"],
            f"inside an export, {export}",
        ),
        "eval_into_data": (
            ["eval", ckpt, "--out", data, "--tasks", "arc_easy", "--limit", "2"],
            f"{data} is a tokenized data folder",
        ),
        "long_context_into_data": (
            ["long-context", ckpt, "--lengths", "64", "--samples", "1", "--out", data / "lc.json"],
            f"{data} is a tokenized data folder",
        ),
    }[case]
    before = snapshot(tmp_path)
    r = cli(*args)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert where in line and "nothing was changed" in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


def test_an_evaluation_still_goes_inside_its_checkpoint(tmp_path, ckpt):
    """eval's default --out is CKPT/eval, long-context's CKPT/long_context.json: inside a run's final/ (its
    lineage.json) they are allowed."""
    from hfpretrain.training.lineage import FORMAT

    final = tmp_path / "run" / "final"
    shutil.copytree(ckpt, final)
    (final.parent / "lineage.json").write_text(json.dumps({"format": FORMAT}))
    (final / "lineage.json").write_text(json.dumps({"format": FORMAT}))
    r = cli("long-context", final, "--lengths", "64", "--samples", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (final / "long_context.json").is_file()


# ----------------------------------------------------------------------------------------------- broken tokenizers
def _break_tokenizer(folder: Path, how: str) -> None:
    if how == "truncated":  # a copy cut short
        text = (folder / "tokenizer.json").read_bytes()
        (folder / "tokenizer.json").write_bytes(text[:1000])
    elif how == "not_a_tokenizer":  # JSON, but not what the tokenizers library reads ("KeyError: 'added_tokens'")
        (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}')
    for name in ("vocab.json", "merges.txt"):  # the slow tokenizer's files would stand in for it
        (folder / name).unlink(missing_ok=True)


@pytest.mark.parametrize("command", ["tokenize", "export", "generate"])
@pytest.mark.parametrize("how", ["truncated", "not_a_tokenizer"])
def test_a_broken_tokenizer_folder_is_one_line_naming_the_file(tmp_path, small, gpt2_tokenizer, ckpt, command, how):
    """Each was the library's internal text ("Expecting value: line 51 column 12", "KeyError: 'added_tokens'",
    "Couldn't instantiate the backend tokenizer") or, in generate, a JSONDecodeError traceback."""
    folder = tmp_path / "tok"
    shutil.copytree(gpt2_tokenizer if command == "tokenize" else ckpt, folder)
    for f in folder.iterdir():
        f.chmod(0o644)
    _break_tokenizer(folder, how)
    args = {
        "tokenize": [
            "tokenize",
            "--input",
            small,
            "--tokenizer",
            folder,
            "--seq-len",
            "16",
            "--out",
            tmp_path / "data",
        ],
        "export": ["export", folder, "--out", tmp_path / "export"],
        "generate": ["generate", "--model", folder, "--prompt", "hi", "--max-new-tokens", "2"],
    }[command]
    before = snapshot(tmp_path)
    r = cli(*args)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert f"{folder / 'tokenizer.json'} is not " in line, line
    assert ("not valid JSON" if how == "truncated" else "not a tokenizer the tokenizers library reads") in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


# ----------------------------------------------------------------------------------------------- a study's logs
def test_a_cut_log_inside_a_study_is_one_line_naming_it(tmp_path, mini_blocks):
    """The report of a study holding a run whose log.jsonl has a line cut short was "error: Expecting value: line
    2 column 1 (char 31)": the JSON parser's text, without the file."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"recipe: {REPO / 'recipes' / 'tiny_cpu.yaml'}\nsizes: [tiny]\nsteps: [2]\n")
    study = tmp_path / "study"
    args = [
        spec,
        "--out",
        study,
        f"data.path={mini_blocks}",
        "training.per_device_train_batch_size=2",
        "evaluation.eval_tokens=2048",
        "evaluation.final_eval_tokens=2048",
        "training.eval_strategy=no",
        "training.warmup_steps=0",
    ]
    r = cli("study", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    log = next(study.rglob("log.jsonl"))
    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:30] + "\n"
    log.write_text("".join(lines))
    before = snapshot(tmp_path)
    for command in (["study", *args, "--report-only"], ["report", study]):
        r = cli(*command)
        assert r.returncode == 2
        line = one_error(r.stderr)
        assert f"{log}:2: not a JSON record" in line, line
        assert_kept(before, tmp_path)


@pytest.mark.parametrize(
    "body, names",
    [
        ("sizes: tiny\nsteps: [1]\n", "sizes: a list, e.g. sizes: [tiny], got 'tiny'"),  # "no model config named 't'"
        ("sizes: [tiny]\nsteps: [1]\noverrides: training.seed=1\n", "overrides: a list"),  # "override 't' is not ..."
        ("sizes: [tiny]\nsteps: [1]\nseeds: 3\n", "seeds: a list"),  # a TypeError
    ],
)
def test_a_study_list_given_as_a_string_is_one_line(tmp_path, body, names):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"recipe: {REPO / 'recipes' / 'tiny_cpu.yaml'}\n{body}")
    before = snapshot(tmp_path)
    r = cli("study", spec, "--out", tmp_path / "study", "--list")
    assert r.returncode == 2
    assert names in one_error(r.stderr)
    assert snapshot(tmp_path) == before


# ----------------------------------------------------------------------------------------------- compressed inputs
@pytest.mark.parametrize("name", ["not_xz.jsonl.xz", "corrupt.jsonl.gz"])
def test_a_compressed_input_that_does_not_decompress_is_one_line(tmp_path, gpt2_tokenizer, name):
    """lzma's LZMAError (a file that is not xz) and zlib's error (gzip data damaged inside) are not OSErrors: each was
    a DatasetGenerationError traceback."""
    import gzip

    if name.endswith(".xz"):
        (tmp_path / name).write_bytes(b"not compressed at all\n")
    else:
        data = bytearray(gzip.compress(docs(400)))
        data[200:400] = bytes(b ^ 0x55 for b in data[200:400])
        (tmp_path / name).write_bytes(bytes(data))
    before = snapshot(tmp_path)
    r = cli(
        "tokenize",
        "--input",
        tmp_path / name,
        "--tokenizer",
        gpt2_tokenizer,
        "--seq-len",
        "16",
        "--out",
        tmp_path / "data",
        "-q",
    )
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert f"{tmp_path / name}" in line and ("truncated_file" in line), line
    assert snapshot(tmp_path) == before


# ----------------------------------------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("entry", [["-m", "hfpretrain", "tokenize"], ["scripts/tokenize_pile.py"]])
def test_ctrl_c_during_tokenize_is_one_line_and_leaves_nothing(tmp_path, gpt2_tokenizer, entry):
    """A KeyboardInterrupt traceback (exit -2); now one line, exit 130, and the build's work folder removed, through
    the entry point and through the script alias alike."""
    import signal

    (tmp_path / "big.jsonl").write_bytes(docs(40000))
    before = snapshot(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.Popen(
        [
            sys.executable,
            *entry,
            "--input",
            str(tmp_path / "big.jsonl"),
            "--tokenizer",
            str(gpt2_tokenizer),
            "--seq-len",
            "128",
            "--out",
            str(tmp_path / "data"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as a terminal starts it
    seen = []
    for line in p.stderr:  # the build has started: its work folder exists
        seen.append(line)
        if "encoder:" in line:
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    err = "".join(seen) + err
    assert p.returncode == 130, err[-3000:]
    assert "interrupted (Ctrl-C)" in one_error(err)
    assert snapshot(tmp_path) == before  # no output, no OUT.tmp-<pid> work folder, no lock
