"""Fault injection: foreign files and folders next to or inside outputs (a user's folder, an earlier run's), corrupt
and truncated inputs, misspelt keys, kills at fixed points of a save, a full disk (a small tmpfs in a user namespace,
a counted skip where the platform has none) (issue 36: nothing lost, nothing silently wrong, no tracebacks; issue 39
items 6, 7, 10).

Every case runs a command as a user would and checks three things: one ``error:`` line on stderr (no traceback),
the exit code (2: bad input, nothing done; 1: a failure while running), and that every file that existed before the
command is still there, byte for byte. Inputs are tiny (seq_len 16, a few dozen documents): seconds per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forked
import pytest
import zstandard

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------- helpers
def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``, by relative path."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = None if p.is_dir() and not p.is_symlink() else (os.readlink(p) if p.is_symlink() else p.read_bytes())
    return out


def assert_kept(before: dict, root: Path) -> None:
    """Everything in ``before`` is still under ``root``, unchanged (new files may have appeared)."""
    after = snapshot(root)
    lost = [k for k in before if k not in after]
    changed = [k for k in before if k in after and before[k] != after[k]]
    assert not lost and not changed, f"lost: {lost[:10]}, changed: {changed[:10]}"


def one_error(stderr: str) -> str:
    """The one ``error:`` line of ``stderr`` (which holds no traceback)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def cli(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``hfpretrain ARGS`` in a process of its own, forked from this one (tests/forked.py: no fresh imports)."""
    return forked.cli(*args, cwd=cwd or REPO, env=env)


def docs(n: int, field: str = "text") -> bytes:
    return b"".join(
        json.dumps({field: f"document number {i} " * 12, "meta": {"pile_set_name": "S"}}).encode() + b"\n"
        for i in range(n)
    )


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_bytes(docs(40))
    return path


def _tokenize(src, out, tok, *extra):
    return cli(
        "tokenize", "--input", src, "--tokenizer", tok, "--seq-len", "16", "--val-docs", "4", "--out", out, "-q", *extra
    )


def _dead_pid() -> int:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


# ----------------------------------------------------------------------------------------------- 36.1: tokenize
def _users_things(root: Path, name: str, pid: int) -> None:
    """What a user may keep beside an output called ``name``: a backup folder, a scratch folder, notes in a file
    whose name is the output's lock."""
    for folder in (f"{name}.old-2024", f"{name}.old-{pid}", f"{name}.tmp-{pid}"):
        (root / folder / "train").mkdir(parents=True)
        (root / folder / "notes.txt").write_text(f"my {folder}")
    (root / f"{name}.lock").write_text("my lock notes\n")


def test_tokenize_refusing_a_users_folder_touches_nothing_beside_it(tmp_path, small, gpt2_tokenizer):
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    _users_things(tmp_path, "corpus", _dead_pid())
    before = snapshot(tmp_path)
    r = _tokenize(small, out, gpt2_tokenizer)
    assert r.returncode == 2 and "not a tokenize_corpus output" in one_error(r.stderr)
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()  # nothing new either


def test_tokenize_leaves_users_folders_named_like_leftovers(tmp_path, small, gpt2_tokenizer):
    """A build that succeeds removes only what a build of this tool made (a marker inside it): a user's
    ``corpus.old-2024`` backup, a folder named after a dead pid and a ``corpus.lock`` file of theirs stay."""
    _users_things(tmp_path, "corpus", _dead_pid())
    before = snapshot(tmp_path)
    r = _tokenize(small, tmp_path / "corpus", gpt2_tokenizer)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "corpus" / "manifest.json").is_file()
    assert_kept(before, tmp_path)


def test_tokenize_refuses_a_folder_or_link_where_its_lock_goes(tmp_path, small, gpt2_tokenizer):
    (tmp_path / "corpus.lock").mkdir()
    (tmp_path / "corpus.lock" / "x.txt").write_text("mine")
    (tmp_path / "other.lock").symlink_to(tmp_path / "small.jsonl")
    before = snapshot(tmp_path)
    for name in ("corpus", "other"):
        r = _tokenize(small, tmp_path / name, gpt2_tokenizer)
        assert r.returncode == 2 and f"{name}.lock" in one_error(r.stderr)
        assert not (tmp_path / name).exists()
    assert_kept(before, tmp_path)


# ----------------------------------------------------------------------------------------------- 36.6: one reader
def _cut_zst(path: Path, n: int, streamed: bool = False) -> Path:
    """A .jsonl.zst of ``n`` documents cut to half its bytes (``streamed``: its frame header records no size)."""
    import random

    rng = random.Random(0)  # text that compresses only so far: the frame holds several blocks
    data = b"".join(
        json.dumps({"text": " ".join(f"{rng.getrandbits(40):x}" for _ in range(60))}).encode() + b"\n" for _ in range(n)
    )
    if streamed:
        import io

        buf = io.BytesIO()
        with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
            w.write(data)
        blob = buf.getvalue()
    else:
        blob = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(blob[: len(blob) // 2])
    return path


@pytest.mark.parametrize("streamed", [False, True])
def test_train_tokenizer_refuses_a_truncated_zst_as_tokenize_does(tmp_path, gpt2_tokenizer, streamed):
    cut = _cut_zst(tmp_path / "cut.jsonl.zst", 2000, streamed)
    (tmp_path / "small.jsonl").write_bytes(docs(40))
    before = snapshot(tmp_path)
    lines = []
    for command in (
        [
            "tokenize",
            "--input",
            cut,
            "--tokenizer",
            gpt2_tokenizer,
            "--seq-len",
            "16",
            "--val-docs",
            "4",
            "--out",
            tmp_path / "data",
        ],
        ["train-tokenizer", "--input", cut, "--vocab-size", "300", "--out", tmp_path / "tok"],
    ):
        r = cli(*command)
        assert r.returncode == 2, (command[0], r.stderr[-2000:])
        lines.append(one_error(r.stderr))
    assert all(str(cut) in line for line in lines), lines
    key = "truncated_zst" if streamed else "bytes lost"
    assert all(key in line for line in lines), lines  # the same policy, the same words
    assert not (tmp_path / "tok").exists() and not (tmp_path / "data").exists()
    assert_kept(before, tmp_path)
    if streamed:  # and the same way to go on without it
        r = cli(
            "train-tokenizer",
            "--input",
            cut,
            tmp_path / "small.jsonl",
            "--vocab-size",
            "300",
            "--out",
            tmp_path / "tok",
            "--allow-missing",
        )
        assert r.returncode == 0, r.stderr[-2000:]


def test_train_tokenizer_applies_the_bad_record_ceiling(tmp_path, small):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(docs(20) + b"{not json\n" * 5)
    r = cli("train-tokenizer", "--input", bad, "--vocab-size", "300", "--out", tmp_path / "tok")
    assert r.returncode == 2 and "max_bad_fraction" in one_error(r.stderr) and not (tmp_path / "tok").exists()
    r = cli(
        "train-tokenizer", "--input", bad, "--vocab-size", "300", "--out", tmp_path / "tok", "--max-bad-fraction", "0.5"
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_train_tokenizer_never_writes_into_a_users_folder(tmp_path, small):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "tokenizer.json").write_text("my own tokenizer")
    (out / "notes.txt").write_text("keep me")
    before = snapshot(tmp_path)
    r = cli("train-tokenizer", "--input", small, "--vocab-size", "300", "--out", out)
    assert r.returncode == 2 and str(out) in one_error(r.stderr)
    assert_kept(before, tmp_path)
    # its own earlier output is replaced, and --force writes into any folder
    assert cli("train-tokenizer", "--input", small, "--vocab-size", "300", "--out", tmp_path / "t").returncode == 0
    assert cli("train-tokenizer", "--input", small, "--vocab-size", "320", "--out", tmp_path / "t").returncode == 0
    assert json.loads((tmp_path / "t" / "training.json").read_text())["requested_vocab_size"] == 320
    assert cli("train-tokenizer", "--input", small, "--vocab-size", "300", "--out", out, "--force").returncode == 0
    assert (out / "notes.txt").read_text() == "keep me"


# ----------------------------------------------------------------------------------------------- 39.7: text field
@pytest.mark.parametrize("command", ["tokenize", "train-tokenizer"])
def test_a_wrong_text_field_stops_at_once_naming_the_fields(tmp_path, gpt2_tokenizer, command):
    src = tmp_path / "code.jsonl"
    src.write_bytes(docs(60, field="content"))
    args = (
        ["--tokenizer", gpt2_tokenizer, "--seq-len", "16", "--val-docs", "4", "--out", tmp_path / "o"]
        if command == "tokenize"
        else ["--vocab-size", "300", "--out", tmp_path / "o"]
    )
    r = cli(command, "--input", src, *args)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert str(src) in line and "'text'" in line and "content" in line and "--text-field content" in line, line
    assert r.stderr.count("WARNING") <= 1, r.stderr  # not a warning per record before the hint
    assert not (tmp_path / "o").exists()
    r = cli(command, "--input", src, *args, "--text-field", "content")  # and the field it names works
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_few_records_without_the_field_are_bad_records_not_a_wrong_field(tmp_path, gpt2_tokenizer):
    src = tmp_path / "mixed.jsonl"
    src.write_bytes(docs(400) + docs(1, field="content"))
    r = _tokenize(src, tmp_path / "o", gpt2_tokenizer)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["train"]["skipped"] == {"missing_text": 1}


# ----------------------------------------------------------------------------------------------- 39.6: small corpus
def test_a_small_corpus_without_val_input_holds_out_a_share(tmp_path, gpt2_tokenizer):
    folder = tmp_path / "mydocs"
    folder.mkdir()
    for i in range(30):
        (folder / f"d{i}.txt").write_text(f"my own document {i}. " * 30)
    r = cli("tokenize", "--input", folder, "--tokenizer", gpt2_tokenizer, "--seq-len", "16", "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr[-2000:]
    said = [line for line in r.stderr.splitlines() if "validation" in line and "holding out" in line]
    assert len(said) == 1, r.stderr[-2000:]
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["validation"]["documents"] == 3 and m["train"]["documents"] == 27 and m["val_docs"] == 3
    # an explicit --val-docs is what it says: too many is still an error
    r = cli(
        "tokenize",
        "--input",
        folder,
        "--tokenizer",
        gpt2_tokenizer,
        "--seq-len",
        "16",
        "--out",
        tmp_path / "p",
        "--val-docs",
        "30",
    )
    assert r.returncode == 2 and "--val-docs" in one_error(r.stderr)


# ----------------------------------------------------------------------------------------------- 36.10: report, demo
def _run_folder(root: Path, data: Path | None = None) -> Path:
    """A finished run's folder as report reads it (what it reads before any model work)."""
    run = root / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (run / "recipe.yaml").write_text(f"data:\n  path: {data or root / 'nodata'}\ntraining:\n  learning_rate: 0.001\n")
    (run / "summary.json").write_text(
        json.dumps(
            {
                "global_step": 1,
                "plan": {
                    "parameters": {"total": 10, "non_embedding": 5},
                    "seq_len": 16,
                    "world_size": 1,
                    "tokens_per_step": 32,
                    "flops_per_token": 60,
                },
            }
        )
    )
    (run / "log.jsonl").write_text(json.dumps({"event": "log", "step": 1, "loss": 9.5}) + "\n")
    return run


@pytest.mark.parametrize(
    "name, text, names",
    [
        ("recipe.yaml", "data:\n  path: [1, 2\n", "recipe.yaml"),  # YAML cut short
        ("recipe.yaml", "- data\n- training\n", "recipe.yaml"),  # not a mapping
        ("recipe.yaml", "training:\n  learning_rate: 0.001\n", "data.path"),  # no data.path
        ("summary.json", '{"global_step": 1, "pla', "summary.json"),  # JSON cut short
        ("summary.json", "[1, 2]", "summary.json"),  # not an object
        ("summary.json", '{"global_step": 1}', "plan"),  # written by something else
        ("final/config.json", "{", "config.json"),
        ("log.jsonl", '{"event": "log", "step": 1, "lo\n', "log.jsonl:1"),  # a line cut short
        ("final/eval/results.json", "{bad", "results.json"),  # lm-eval scores of earlier
    ],
)
def test_report_on_a_corrupt_run_folder_is_one_line(tmp_path, name, text, names):
    run = _run_folder(tmp_path)
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    (run / name).write_text(text)
    before = snapshot(tmp_path)
    r = cli("report", run, "--no-generate")
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert names in line, line
    assert_kept(before, tmp_path)


def test_report_with_a_corrupt_data_manifest_is_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text('{"format": "hfpretrain.tokenized", "tra')
    run = _run_folder(tmp_path, data)
    r = cli("report", run, "--no-eval", "--no-generate")
    assert r.returncode == 2 and "manifest.json" in one_error(r.stderr)


def test_plot_to_a_file_matplotlib_cannot_write_is_one_line(tmp_path):
    """``--out run/final/config.json`` was a ValueError traceback from matplotlib's savefig, after the plotting."""
    run = _run_folder(tmp_path)
    before = snapshot(tmp_path)
    r = cli("plot", run, "--out", run / "final" / "config.json")
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert "config.json" in line and "no .json files" in line and "png" in line, line
    assert_kept(before, tmp_path)


@pytest.mark.parametrize("dry_run", [True, False])
def test_demo_with_a_misspelt_override_is_one_line_before_any_work(tmp_path, dry_run):
    out = tmp_path / "demo"
    r = cli("demo", "--out", out, "--override", "training.learning_rat=0.001", *(["--dry-run"] if dry_run else []))
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert "learning_rat" in line and "learning_rate" in line, line  # the key, and the nearest valid one
    assert not out.exists()  # nothing tokenized before the recipe was found wrong


# ----------------------------------------------------------------------------------------------- 36.3: export
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, gpt2_tokenizer) -> Path:
    import shutil

    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("faults_ckpt") / "final"
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50304,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
    ).save_pretrained(out)
    for f in Path(gpt2_tokenizer).iterdir():
        shutil.copy(f, out / f.name)
    return out


@pytest.mark.parametrize("where", ["folder", "cwd"])
def test_export_into_a_users_folder_changes_nothing(tmp_path, checkpoint, where):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": true}')
    (mine / "README.md").write_text("my notes")
    before = snapshot(tmp_path)
    r = cli("export", checkpoint, "--out", "." if where == "cwd" else mine, cwd=mine if where == "cwd" else None)
    assert r.returncode == 2 and ("working directory" if where == "cwd" else "--force") in one_error(r.stderr)
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


# ----------------------------------------------------------------------------------------------- 36.2: output_dir
TINY_TRAIN = [
    "training.use_cpu=true",
    "training.report_to=none",
    "training.dataloader_num_workers=0",
    "training.disable_tqdm=true",
    "training.per_device_train_batch_size=2",
    "training.logging_steps=1",
    "training.eval_strategy=no",
    "evaluation.eval_tokens=2048",
    "evaluation.final_eval_tokens=2048",
]


def _train(data: Path, out: Path, steps: int, *extra) -> subprocess.CompletedProcess:
    return cli(
        "train",
        "recipes/tiny_cpu.yaml",
        f"data.path={data}",
        f"training.output_dir={out}",
        f"training.max_steps={steps}",
        "training.save_steps=1",
        "training.warmup_steps=0",
        *TINY_TRAIN,
        *extra,
    )


def test_a_new_run_in_a_finished_runs_folder_is_refused_unless_overwriting(tmp_path, mini_blocks):
    """It overwrote the old run's checkpoints and final/ (exit 0), and with save_total_limit=1 the rotation kept the
    old run's highest checkpoint and deleted the new run's own."""
    run = tmp_path / "run"
    assert _train(mini_blocks, run, 2).returncode == 0
    before = snapshot(tmp_path)
    r = _train(mini_blocks, run, 1, "training.learning_rate=1e-4", "training.save_total_limit=1")
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert f"training.output_dir={run} holds an earlier run" in line and "overwrite_output_dir=true" in line, line
    assert "resume_from_checkpoint=auto" in line, line
    assert_kept(before, tmp_path)
    r = _train(
        mini_blocks, run, 1, "training.learning_rate=1e-4", "training.save_total_limit=1", "overwrite_output_dir=true"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]  # the new run's, none of the old
    assert json.loads((run / "summary.json").read_text())["global_step"] == 1
    steps = [json.loads(line).get("step") for line in (run / "log.jsonl").read_text().splitlines()]
    assert max(s for s in steps if s is not None) == 1  # its log holds this run alone


def test_a_new_run_in_a_users_folder_changes_nothing(tmp_path, mini_blocks):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "recipe.yaml").write_text("my: recipe\n")
    (mine / "summary.json").write_text('{"mine": true}')
    before = snapshot(tmp_path)
    for resume in ("none", "auto"):
        r = _train(mini_blocks, mine, 1, f"training.resume_from_checkpoint={resume}")
        assert r.returncode == 2
        line = one_error(r.stderr)
        assert "not a run of this tool" in line and "recipe.yaml, summary.json" in line, line
        assert_kept(before, tmp_path)
        assert snapshot(tmp_path).keys() == before.keys()


def test_auto_resume_starts_over_in_a_run_folder_that_saved_nothing(tmp_path, mini_blocks):
    """A run stopped before its first save (a study's run killed early) is started again by resume=auto; without
    it, the folder is a used one like any other."""
    from hfpretrain.training.lineage import FORMAT

    run = tmp_path / "run"
    run.mkdir()
    (run / "lineage.json").write_text(json.dumps({"format": FORMAT}))
    (run / "log.jsonl").write_text(json.dumps({"event": "log", "step": 1, "loss": 11.0}) + "\n")
    (run / "notes.txt").write_text("mine")
    r = _train(mini_blocks, run, 1)
    assert r.returncode == 2 and "holds an earlier run" in one_error(r.stderr)
    r = _train(mini_blocks, run, 1, "training.resume_from_checkpoint=auto")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "final").is_dir() and (run / "notes.txt").read_text() == "mine"


def _training_on_refused(tmp_path, mini_blocks, spoil) -> tuple[Path, str]:
    """A copy of ``mini_blocks`` spoilt by ``spoil(folder)``, trained on: the folder and the run's one error line,
    after checking that the run exited 2 and left every file as it was."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(mini_blocks, data)
    spoil(data)
    before = snapshot(tmp_path)
    r = _train(data, tmp_path / "run", 1)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert_kept(before, tmp_path)
    return data, line


def test_training_on_a_damaged_arrow_file_is_one_line_naming_the_folder(tmp_path, mini_blocks):
    """A truncated train/*.arrow was "error: Expected to be able to read 261256 bytes for message body, got 192",
    exit 1: no file named, as if the run had failed rather than its input."""

    def truncate(data):
        arrow = sorted((data / "train").glob("*.arrow"))[0]
        arrow.write_bytes(arrow.read_bytes()[:1000])

    data, line = _training_on_refused(tmp_path, mini_blocks, truncate)
    assert f"{data / 'train'}: cannot read its Arrow files" in line and "tokenize it again" in line, line
    assert not (tmp_path / "run").exists() or not any(p.name != ".run.lock" for p in (tmp_path / "run").iterdir())


def test_blocks_of_another_length_than_the_manifest_says_are_one_line(tmp_path, mini_blocks):
    """A folder whose manifest.json came from another tokenization (here: seq_len 64 over blocks of 128) passed every
    length check, all of which read the manifest, and trained on blocks of the other length without a word."""

    def shorten_manifest(data):
        manifest = json.loads((data / "manifest.json").read_text())
        (data / "manifest.json").write_text(json.dumps({**manifest, "seq_len": 64}))

    data, line = _training_on_refused(tmp_path, mini_blocks, shorten_manifest)
    assert f"{data / 'train'}: its blocks are 128 tokens long" in line and "says seq_len 64" in line, line


# ----------------------------------------------------------------------------------------------- kill points
# `hfpretrain train` in a process that SIGKILLs itself at one point of a save: the step's files written but not its
# marker; the older checkpoint half deleted by the rotation; final/ half written. What the trainer calls there is
# replaced by the kill, nothing else changes.
def _killer(point: str, at: int, argv: list[str]):
    """What the forked child runs: these patches, then ``hfpretrain ARGV``."""

    def run():
        import signal

        import hfpretrain.training.run as R
        import hfpretrain.training.trainer as T
        from hfpretrain.cli import main

        real_marker, real_rotate = T.write_complete_marker, T.rotate_checkpoints

        def die():
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        def marker(folder, step):
            if point == "save" and step == at:
                die()
            real_marker(folder, step)

        def rotate(run_dir, keep, protect=None):
            older = sorted(Path(run_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
            if point == "rotate" and len(older) > 1 and older[-1].name == f"checkpoint-{at}":
                (older[0] / "model.safetensors").unlink()
                die()
            real_rotate(run_dir, keep, protect)

        def card(folder, *args, **kwargs):
            if point == "final":
                die()

        T.write_complete_marker, T.rotate_checkpoints = marker, rotate
        if point == "final":
            R.write_model_card = card
        return main(argv)

    return run


@pytest.mark.parametrize(
    "point, resumed", [("save", "checkpoint-1"), ("rotate", "checkpoint-2"), ("final", "checkpoint-2")]
)
def test_a_run_killed_while_saving_resumes_from_its_last_whole_checkpoint(tmp_path, mini_blocks, point, resumed):
    from hfpretrain.training.checkpoints import checkpoint_problem

    run = tmp_path / "run"
    train = [
        "train",
        "recipes/tiny_cpu.yaml",
        f"data.path={mini_blocks}",
        f"training.output_dir={run}",
        "training.max_steps=2",
        "training.save_steps=1",
        "training.save_total_limit=1",
        "training.warmup_steps=0",
        *TINY_TRAIN,
    ]
    killed = forked.run_forked(_killer(point, 2, train), cwd=REPO)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert checkpoint_problem(run / resumed) is None  # the last whole checkpoint is whole
    before = snapshot(tmp_path)
    before.pop("run/.run.lock")  # the killed run's lock: the next run takes it over, and removes it at its end
    r = cli(*train)  # a new run is not what the folder needs: one line, nothing touched
    assert r.returncode == 2 and "resume_from_checkpoint=auto" in one_error(r.stderr)
    assert_kept(before, tmp_path)
    r = cli(*train, "training.resume_from_checkpoint=auto")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"resuming from {run / resumed}" in r.stderr, r.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["global_step"] == 2
    assert (run / "final" / "README.md").is_file() and checkpoint_problem(run / "checkpoint-2") is None


# ----------------------------------------------------------------------------------------------- 36.7: disk full


def _enter_small_filesystem(small: Path, mib: int) -> None:
    """This process (single-threaded: a forked child) into a user and mount namespace of its own, as root there (the
    caller's uid and gid mapped to 0), with a ``mib`` MiB tmpfs mounted on ``small``: what ``unshare --user
    --map-root-user --mount`` gives the command it starts (no root on the host, nothing mounted outside this
    process: the mount goes when the process ends)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    clone_newuser, clone_newns, ms_rec, ms_private = 0x10000000, 0x20000, 0x4000, 0x40000

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

    check(libc.unshare(clone_newuser | clone_newns), "unshare(CLONE_NEWUSER | CLONE_NEWNS)")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    check(libc.mount(None, b"/", None, ms_rec | ms_private, None), "mount --make-rprivate /")  # as unshare(1) does
    check(libc.mount(b"tmpfs", str(small).encode(), b"tmpfs", 0, f"size={mib}m".encode()), "mount tmpfs")


def _in_small_filesystem(mib: int, fn) -> subprocess.CompletedProcess:
    """``fn(small)`` in a process forked from this one (tests/forked.py: no fresh interpreter's imports, ~13 s of CPU
    a command) with a ``mib`` MiB tmpfs mounted on ``small``, in a user and mount namespace of its own
    (``_enter_small_filesystem``); ``fn`` runs the command, then prints what the test reads of the filesystem, which
    only that process sees."""
    small = Path(f"/tmp/hfpretrain-smallfs-{os.getpid()}")
    small.mkdir(exist_ok=True)

    def child():
        _enter_small_filesystem(small, mib)
        return fn(small)

    try:
        return forked.run_forked(child, cwd=REPO, timeout=600)
    finally:
        small.rmdir()


def _command(*argv) -> int:
    """``hfpretrain ARGV``'s exit code, in this process (a forked child)."""
    from hfpretrain.cli import main

    try:
        return main([str(a) for a in argv])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


def _small_filesystem_or_skip() -> None:
    probe = _in_small_filesystem(1, lambda small: 0)
    if probe.returncode != 0:
        pytest.skip(f"no user+mount namespace for a small filesystem here: {probe.stderr.strip()[-200:]}")


def _train_listing(mini_blocks: Path, steps: int, *extra: str, complete: str | None = None):
    """In the small filesystem: ``hfpretrain train`` (the tiny recipe, ``steps`` steps, a checkpoint a step) into
    SMALL/run, then ``rc=CODE``, the run folder's names and ``complete``'s COMPLETE marker (if any) on stdout."""

    def run(small: Path) -> int:
        run_dir = small / "run"
        code = _command(
            "train",
            "recipes/tiny_cpu.yaml",
            f"data.path={mini_blocks}",
            f"training.output_dir={run_dir}",
            f"training.max_steps={steps}",
            "training.save_steps=1",
            *extra,
            *TINY_TRAIN,
        )
        print(f"rc={code}")
        print(*(sorted(os.listdir(run_dir)) if run_dir.is_dir() else ["(no", "run", "folder)"]))
        if complete is not None:
            marker = run_dir / complete / "COMPLETE"
            print(marker.read_text() if marker.is_file() else f"(no {marker})")
        return 0

    return run


@pytest.mark.parametrize("mib", [60, 48])
def test_a_full_disk_while_saving_a_checkpoint_is_one_line(mini_blocks, mib):
    """torch's writer raises a RuntimeError ("... unexpected pos ..." / "file write failed") and safetensors its
    own SafetensorError, not an OSError: both were tracebacks. Now one line (exit 1): the disk is full, the folder,
    the previous checkpoint intact. 60 MiB: the second checkpoint's optimizer state fails; 48: its weights."""
    _small_filesystem_or_skip()
    # a checkpoint of the tiny model is ~42 MiB: the first fits in 60 MiB, the second does not
    r = _in_small_filesystem(
        mib, _train_listing(mini_blocks, 3, "training.save_total_limit=1", complete="checkpoint-1")
    )
    assert "rc=1" in r.stdout, (r.stdout, r.stderr[-3000:])
    line = one_error(r.stderr)
    assert line.startswith("error: the disk is full") and "saving checkpoint-2 in " in line and "/run failed" in line
    assert "the previous checkpoint " in line and "checkpoint-1 is intact" in line, line
    listed = r.stdout.split()
    assert "checkpoint-1" in listed and "checkpoint-2" not in listed and "step 1" in r.stdout, r.stdout


def test_a_full_disk_while_saving_final_is_one_line(mini_blocks):
    """final/ was saved outside the checkpoint guard: a full disk there was a traceback. One line (exit 1), its
    partial files removed, the checkpoint before it intact."""
    _small_filesystem_or_skip()
    # checkpoint-1 (weights and optimizer state, ~42 MiB) fits in 48 MiB, final/'s weights beside it do not
    r = _in_small_filesystem(48, _train_listing(mini_blocks, 1))
    assert "rc=1" in r.stdout, (r.stdout, r.stderr[-3000:])
    line = one_error(r.stderr)
    assert line.startswith("error: the disk is full") and "saving final in " in line, line
    assert "checkpoint-1 is intact" in line, line
    listed = r.stdout.split()
    assert "checkpoint-1" in listed and "final" not in listed, r.stdout


# ----------------------------------------------------------------------------------------------- 62: output guard
def _users_folder(root: Path) -> Path:
    """A user's folder holding the names a run writes (their recipe.yaml, final/thesis.tex, checkpoint-1/data.bin)."""
    mine = root / "mine"
    (mine / "final").mkdir(parents=True)
    (mine / "checkpoint-1").mkdir()
    (mine / "final" / "thesis.tex").write_text("my thesis")
    (mine / "checkpoint-1" / "data.bin").write_bytes(b"my data")
    (mine / "recipe.yaml").write_text("my: recipe\n")
    return mine


def test_overwrite_output_dir_on_a_users_folder_deletes_nothing(tmp_path, mini_blocks):
    """The refusal without overwrite said the folder is not a run; with overwrite_output_dir=true its final/ and
    checkpoint-1/ (the user's files) were deleted. Overwrite replaces a run's own files only."""
    mine = _users_folder(tmp_path)
    before = snapshot(tmp_path)
    r = _train(mini_blocks, mine, 1, "overwrite_output_dir=true")
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert f"training.output_dir={mine}" in line and "overwrite_output_dir" in line and "not a run" in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


@pytest.mark.parametrize("where", [".", "..", "home", "/"])
def test_train_never_writes_into_the_working_or_home_folder_or_a_root(tmp_path, mini_blocks, where):
    """``training.output_dir=.`` (or $HOME) with overwrite_output_dir=true wrote the run into the working folder,
    replacing the user's own recipe.yaml."""
    mine = _users_folder(tmp_path)
    before = snapshot(tmp_path)
    out = str(mine) if where == "home" else where
    r = cli(
        "train",
        REPO / "recipes" / "tiny_cpu.yaml",
        f"data.path={mini_blocks}",
        f"training.output_dir={out}",
        "training.max_steps=1",
        "overwrite_output_dir=true",
        *TINY_TRAIN,
        cwd=tmp_path if where == "home" else mine,
        env={"HOME": str(mine)},
    )
    assert r.returncode == 2
    line = one_error(r.stderr)
    why = {
        ".": "the working directory",
        "..": "a folder holding the working directory",
        "home": "the home folder",
        "/": "a filesystem root",
    }[where]
    assert f"training.output_dir={out}" in line and why in line, line
    assert_kept(before, tmp_path)


def _study_spec(root: Path, data: Path) -> Path:
    spec = root / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "s",
                "recipe": str(REPO / "recipes" / "tiny_cpu.yaml"),
                "sizes": ["tiny"],
                "steps": [1],
                "overrides": [f"data.path={data}", *TINY_TRAIN],
            }
        )
    )
    return spec


@pytest.mark.parametrize("command", ["tokenize", "train-tokenizer", "export", "eval", "study", "demo"])
def test_no_command_writes_into_the_working_folder(tmp_path, small, gpt2_tokenizer, checkpoint, mini_blocks, command):
    """One guard for every command that writes a folder: ``--out .`` is refused (with --force too), naming the
    flag and the folder; nothing in it changes."""
    mine = _users_folder(tmp_path)
    spec = _study_spec(tmp_path, mini_blocks)
    args = {
        "tokenize": ["--input", small, "--tokenizer", gpt2_tokenizer, "--seq-len", "16", "--force"],
        "train-tokenizer": ["--input", small, "--vocab-size", "300", "--force"],
        "export": [checkpoint, "--force"],
        "eval": [checkpoint],
        "study": [spec],
        "demo": [],
    }[command]
    before = snapshot(tmp_path)
    r = cli(command, *args, "--out", ".", cwd=mine)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert "--out" in line and "the working directory" in line and str(mine) in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


def test_tokenize_force_never_deletes_a_run_inside_the_data_folder(tmp_path, small, gpt2_tokenizer):
    """A run trained into data/run (its checkpoints, final/) was deleted with the old build by ``--force``, exit
    0: a rebuild replaces the whole folder, so it is refused while anything but the build's own files is in it."""
    data = tmp_path / "data"
    assert _tokenize(small, data, gpt2_tokenizer).returncode == 0
    (data / "run" / "final").mkdir(parents=True)
    (data / "run" / "final" / "model.safetensors").write_bytes(b"weights")
    before = snapshot(tmp_path)
    for extra in (["--force"], ["--seq-len", "32"]):  # forced, or rebuilt because the settings changed
        r = _tokenize(small, data, gpt2_tokenizer, *extra)
        assert r.returncode == 2
        line = one_error(r.stderr)
        assert f"--out {data}" in line and "run" in line and "nothing was changed" in line, line
        assert_kept(before, tmp_path)


# ----------------------------------------------------------------------------------------------- 62: numbers
@pytest.mark.parametrize(
    "override, names",
    [
        ("moe.aux_loss_coef=nan", "moe.aux_loss_coef=nan"),  # `< 0` is false for NaN: it landed in final/config.json
        ("moe.bias_update_rate=inf", "moe.bias_update_rate=inf"),  # every router bias NaN after one step, exit 0
        ("training_flops=nan", "training_flops=nan"),
        ("context.yarn_factor=1e9", "context.yarn_factor=1e+09"),  # max_position_embeddings 64,000,000,000, exit 0
    ],
)
def test_a_number_out_of_range_is_one_line_before_any_work(tmp_path, mini_blocks, override, names):
    extra = (
        ["context.seq_len=256", "context.rope=yarn", f"model.init_from={tmp_path}"]
        if override.startswith("context.")
        else []
    )
    r = _train(mini_blocks, tmp_path / "run", 1, override, *extra)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert names in line, line
    assert not (tmp_path / "run").exists()


def _float_keys(cls, prefix: str = "", ints: bool = False) -> list[str]:
    """Every float-typed key (``ints``: and int-typed) of the recipe's typed sections (Optional too), by name."""
    import dataclasses
    import typing

    out = []
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            out += _float_keys(hint, f"{prefix}{f.name}.", ints)
        elif (
            {float, int} & set(typing.get_args(hint) or (hint,))
            if ints
            else float in (typing.get_args(hint) or (hint,))
        ):
            out.append(f"{prefix}{f.name}")
    return out


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_key_refuses_non_finite_values_by_name(value):
    from hfpretrain.training.config import Recipe, RecipeError, load_recipe

    keys = _float_keys(Recipe)
    assert {"moe.aux_loss_coef", "moe.bias_update_rate", "context.yarn_factor", "training_flops"} <= set(keys)
    for key in keys:
        with pytest.raises(RecipeError, match=f"^{key}={value}: must be a finite number"):
            load_recipe(REPO / "recipes" / "tiny_cpu.yaml", [f"{key}={value}", "data.path=/nonexistent"])


@pytest.mark.parametrize(
    "override",
    [
        "optimizer.muon_momentum=1.5",
        "logging.assumed_mfu=0",
        "logging.peak_flops=-1",
        "optimizer.muon_learning_rate=-1",
        "loss.chunk_tokens=0",
    ],
)
def test_a_typed_key_out_of_its_range_is_refused_at_load(override):
    """Each was accepted at load (a momentum of 1.5 diverges; a chunk of 0 tokens fails in the loss)."""
    from hfpretrain.training.config import NUMBER_RANGES, Recipe, RecipeError, load_recipe

    assert {k.split(".")[-1] for k in _float_keys(Recipe, ints=True)} >= set(NUMBER_RANGES)  # none is stale
    key = override.split("=")[0]
    with pytest.raises(RecipeError, match=f"^{key}=.*: out of range, expected "):
        load_recipe(REPO / "recipes" / "tiny_cpu.yaml", [override, "data.path=/nonexistent"])


def test_a_non_finite_number_in_a_recipe_file_is_refused_by_key(tmp_path):
    """YAML's .nan reaches the untyped sections too (training, model.overrides, data mixtures)."""
    from hfpretrain.training.config import RecipeError, load_recipe

    for section, text in (
        ("training.learning_rate", "training:\n  learning_rate: .nan\n"),
        ("model.overrides.rope_theta", "model:\n  overrides:\n    rope_theta: .inf\n"),
    ):
        recipe = tmp_path / "r.yaml"
        recipe.write_text(text + "data:\n  path: /nonexistent\n")
        with pytest.raises(RecipeError, match=f"^{section}=(nan|inf): must be a finite number"):
            load_recipe(recipe)


# ----------------------------------------------------------------------------------------------- 62: study specs
@pytest.mark.parametrize(
    "body, names",
    [
        (
            "steps: [1]\narms:\n  a: [training.seed=1]\n  a: [training.seed=2]\n",  # the last one was kept
            "spec.yaml:6: YAML syntax error: 'a' is given twice",
        ),
        ("steps: [1]\narms:\n  a: training.seed=1\n", "arms.a"),  # split into characters, each an override
        ("steps: 5\n", "steps: a list of budgets"),  # a TypeError
        ("steps: [.nan]\n", "steps: needs finite positive budgets"),  # an unrelated message, later
    ],
)
def test_a_malformed_study_spec_is_one_line(tmp_path, mini_blocks, body, names):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"recipe: {REPO / 'recipes' / 'tiny_cpu.yaml'}\nsizes: [tiny]\n{body}")
    before = snapshot(tmp_path)
    r = cli("study", spec, "--out", tmp_path / "study", f"data.path={mini_blocks}")
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert names in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()


# ----------------------------------------------------------------------------------------------- 62: checks at start
@pytest.mark.parametrize(
    "overrides, names",
    [
        # an IndexError from transformers' load-balancing loss, after the model was built and recipe.yaml written
        (["model.config=qwen3_moe_109m_a21m", "model.overrides.num_experts=0"], "num_experts=0"),
        # a NotImplementedError at the first backward, after files were written (flash-attention is checked at start)
        (["model.attn_implementation=flex_attention"], "model.attn_implementation=flex_attention needs a CUDA GPU"),
    ],
)
def test_a_model_that_cannot_train_here_is_refused_before_building(tmp_path, mini_blocks, overrides, names):
    import torch

    if "CUDA" in names and torch.cuda.is_available():
        pytest.skip("flex attention trains on this machine's GPU")
    r = _train(mini_blocks, tmp_path / "run", 1, *overrides)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert names in line, line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case", ["device", "out_folder", "out_under_file", "no_tokenizer", "other_tokenizer"])
def test_long_context_refuses_bad_inputs_in_one_line_before_scoring(tmp_path, checkpoint, mini_blocks_bpe1k, case):
    """As eval, generate and export do: each was a traceback (an IndexError in the embedding, a ZeroDivisionError),
    or a failure to write after all the scoring."""
    import shutil

    import torch

    if case == "device" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    ckpt = tmp_path / "final"
    # tokenizer_config.json left without the vocabulary: the scoring divided by zero
    shutil.copytree(
        checkpoint,
        ckpt,
        ignore=shutil.ignore_patterns("tokenizer.json", "vocab.json", "merges.txt") if case == "no_tokenizer" else None,
    )
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("mine")
    args = {
        "device": ["--device", "cuda"],
        "out_folder": ["--out", tmp_path / "folder"],
        "out_under_file": ["--out", tmp_path / "file.txt" / "lc.json"],
        "no_tokenizer": [],
        "other_tokenizer": ["--data", mini_blocks_bpe1k, "--blocks", "1"],
    }[case]
    names = {
        "device": "--device cuda",
        "out_folder": "--out",
        "out_under_file": "file.txt is a file",
        "no_tokenizer": "tokenizer",
        "other_tokenizer": f"--data {mini_blocks_bpe1k} was tokenized with",
    }[case]
    before = snapshot(tmp_path)
    r = cli("long-context", ckpt, "--lengths", "64", "--samples", "1", *args)
    assert r.returncode == 2
    line = one_error(r.stderr)
    assert names in line, line
    assert_kept(before, tmp_path)
    assert snapshot(tmp_path).keys() == before.keys()
