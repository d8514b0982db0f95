"""The generated report of a real (tiny, CPU) run, and of a study folder, through scripts/report.py."""

from __future__ import annotations

import json
from pathlib import Path

from forked import script

REPO = Path(__file__).resolve().parents[2]


def test_run_report_has_every_section(mini_blocks, tmp_path):
    from hfpretrain.study.run_report import write_run_report
    from hfpretrain.training import pretrain

    run = tmp_path / "run"
    pretrain(
        REPO / "recipes" / "tiny_cpu.yaml",
        [
            f"data.path={mini_blocks}",
            f"training.output_dir={run}",
            "training.max_steps=4",
            "training.eval_steps=2",
            "training.save_strategy=no",
            "training.logging_steps=1",
            "training.warmup_steps=1",
            "training.dataloader_num_workers=0",
            "evaluation.eval_tokens=1024",
            "evaluation.final_eval_tokens=2048",
        ],
    )
    report = write_run_report(run, eval_limit=4, prompts=("The history of the",), max_new_tokens=6)
    text = report.read_text()
    for section in (
        "## Data",
        "Example batch",
        "## Model, hyper-parameters, hardware",
        "| hardware | 1 × cpu |",
        "## What the training code does",
        "![training and validation loss](curves.png)",
        "bits per byte",
        "## lm-eval (0-shot)",
        "arc_easy",
        "**Prompt:** `'The history of the'`",
        "Unconditional sample 2",
        "## Reproduce",
        "scripts/tokenize_pile.py --input",
    ):
        assert section in text, section
    assert (run / "curves.png").stat().st_size > 5_000
    assert (run / "final" / "eval" / "results.json").is_file()  # scored once, read back next time

    # the script: a second report reuses the saved scores; a folder that is neither is one error line (each command
    # forked from this process: tests/forked.py)
    proc = script("report.py", run, "--no-generate", cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "arc_easy" in (run / "report.md").read_text()
    proc = script("report.py", tmp_path, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1

    # scripts/plot.py: the four panels of any run folder
    proc = script("plot.py", run, "--out", tmp_path / "p.png", cwd=REPO)
    assert proc.returncode == 0 and (tmp_path / "p.png").stat().st_size > 20_000, proc.stderr[-1000:]
    proc = script("plot.py", tmp_path / "nothing", cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")


def test_the_reproduce_command_carries_the_manifests_packing():
    """The tokenize command in a run's report makes the same blocks: --pack whole, --val-docs, --max-docs and
    --sets come from the manifest (a 16k extension's data is packed whole: without it the command packs otherwise)."""
    from pathlib import Path

    from hfpretrain.study.run_report import reproduce_lines

    manifest = {
        "inputs": [{"path": "train-00000.jsonl.zst"}],
        "val_inputs": [{"path": "val.jsonl.zst"}],
        "tokenizer": {"name_or_path": "out/tok_bpe8k"},
        "seq_len": 16384,
        "pack": "whole",
        "val_docs": 10000,
        "val_docs_rule": "given",
        "max_docs": None,
        "select_sets": ["Books", "Emails"],
    }
    command = reproduce_lines(Path("runs/x"), [(Path("out/mix_16k"), manifest)])[3]
    assert command == (
        "python scripts/tokenize_pile.py --input train-00000.jsonl.zst --val-input val.jsonl.zst "
        "--tokenizer out/tok_bpe8k --seq-len 16384 --val-docs 10000 --pack whole --sets Books Emails "
        "--out out/mix_16k"
    )
    moved = {
        **manifest,
        "inputs": [{"path": "/root/stash/pretrain/mix/train-00000.jsonl.zst"}],
        "val_inputs": [{"path": "/work/shared/data/pretrain/mix/val.jsonl.zst"}],
        "tokenizer": {"name_or_path": "/mnt/d/tokenizers/gpt2"},
    }
    command = reproduce_lines(Path("runs/x"), [(Path("out/mix_16k"), moved)])[3]  # no machine's folders in a report
    assert command.startswith(
        'python scripts/tokenize_pile.py --input "$DATA_ROOT"/pretrain/mix/train-00000.jsonl.zst '
        '--val-input "$DATA_ROOT"/pretrain/mix/val.jsonl.zst --tokenizer "$DATA_ROOT"/tokenizers/gpt2 '
    )
    from hfpretrain.study.run_report import portable_path

    embedded = Path.cwd() / "src" / "hfpretrain" / "assets" / "default_data" / "pretrain" / "sample.jsonl.zst"
    assert portable_path(str(embedded)) == "src/hfpretrain/assets/default_data/pretrain/sample.jsonl.zst"
    plain = reproduce_lines(
        Path("runs/x"),
        [(Path("out/d"), {**manifest, "pack": "concat", "val_docs_rule": "default", "select_sets": None})],
    )[3]
    assert "--pack" not in plain and "--val-docs" not in plain and "--sets" not in plain


def test_the_reproduce_commands_make_every_source_and_its_retrieval_documents(tmp_path, mini_train, gpt2_tokenizer):
    """A mixture's run is made again from all its sources: each source's tokenize command, and before one made of
    `hfpretrain retrieval-docs` output, the command that wrote it (the arguments its rows record); a source not on
    this machine is named as such."""
    from hfpretrain.cli import main
    from hfpretrain.data import tokenize_corpus
    from hfpretrain.data.retrieval import made_by
    from hfpretrain.study.run_report import portable_path, reproduce_lines

    docs = tmp_path / "retrieval.jsonl.zst"
    args = [
        "--input",
        str(mini_train),
        "--tokenizer",
        str(gpt2_tokenizer),
        "--out",
        str(docs),
        "--documents",
        "12",
        "--min-tokens",
        "100",
        "--max-tokens",
        "400",
        "--statement-share",
        "0.5",
    ]
    assert main(["retrieval-docs", *args]) == 0
    assert made_by(docs) == args and made_by(mini_train) is None and made_by(tmp_path / "nowhere.jsonl") is None
    for first_row in ('{"text": "x", "meta": "a string"}', "not json", '["a list"]'):
        (tmp_path / "other.jsonl").write_text(first_row + "\n")
        assert made_by(tmp_path / "other.jsonl") is None, first_row
    blocks = tokenize_corpus(
        inputs=[docs], out=tmp_path / "retrieval_512", tokenizer=gpt2_tokenizer, seq_len=512, pack="whole", val_docs=4
    )
    manifest = json.loads((blocks / "manifest.json").read_text())
    main_manifest = {"inputs": [{"path": "train.jsonl.zst"}], "tokenizer": {"name_or_path": "tok"}, "seq_len": 512}
    lines = reproduce_lines(
        Path("runs/x"), [(Path("out/long"), main_manifest), (blocks, manifest), (Path("out/gone"), None)]
    )
    commands = lines[lines.index("```bash") + 1 : lines.index("```")]
    assert commands[0].startswith("python scripts/tokenize_pile.py --input train.jsonl.zst")
    # the data root's files as "$DATA_ROOT"/... (the embedded sample's relative to the repository), as elsewhere
    assert commands[1] == "python scripts/retrieval_docs.py " + " ".join(map(portable_path, args))
    assert str(mini_train) not in commands[1] and f"--out {docs} " in commands[1]
    assert commands[2].startswith(f"python scripts/tokenize_pile.py --input {docs} ")
    assert commands[2].endswith(f"--pack whole --out {blocks}")
    assert commands[3] == "# out/gone: not on this machine, its command unknown here"
    assert commands[4].startswith("accelerate launch scripts/pretrain.py runs/x/recipe.yaml")


def test_the_data_section_says_how_the_blocks_were_packed_and_the_mixture(mini_blocks, tmp_path):
    """The packing sentence follows the manifest's ``pack`` (a context-extension phase's data is packed whole), and a
    mixture run names its sources' shares."""
    import json

    from hfpretrain.data import tokenize_corpus
    from hfpretrain.study.run_report import data_lines

    manifest = json.loads((mini_blocks / "manifest.json").read_text())
    text = "\n".join(data_lines(mini_blocks, manifest))
    assert "documents run across block boundaries" in text and "mixture" not in text
    tok = mini_blocks / "tokenizer"
    whole = tokenize_corpus(
        inputs=manifest["inputs"][0]["path"],
        out=tmp_path / "whole",
        tokenizer=tok,
        seq_len=128,
        max_docs=100,
        val_docs=10,
        pack="whole",
    )
    text = "\n".join(data_lines(whole, json.loads((whole / "manifest.json").read_text()), {"long": 4, "retrieval": 1}))
    assert "documents kept whole where they fit" in text and "run across" not in text
    assert "long 80%, retrieval 20%." in text


def test_the_data_table_gives_the_tokens_training_reads():
    """The tokens in blocks, not every token tokenized: best_small10's data (55,306 blocks of 1,024 and a 384-token
    tail packing dropped) was reported as 56,633,728 training tokens, 384 more than the run read. A manifest
    written before ``block_tokens`` existed gets blocks × seq_len."""
    from hfpretrain.study.run_report import data_rows

    train = {"documents": 89_772, "tokens": 56_633_728, "blocks": 55_306, "block_tokens": 56_633_344}
    manifest = {"seq_len": 1024, "train": train, "validation": {"documents": 10, "tokens": 100}}
    rows = dict(data_rows(manifest))
    assert rows["train tokens in blocks (what training reads)"] == 56_633_344
    assert rows["train tokens tokenized"] == 56_633_728 and "train tokens" not in rows
    del train["block_tokens"]
    assert dict(data_rows(manifest))["train tokens in blocks (what training reads)"] == 55_306 * 1024
