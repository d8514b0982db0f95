"""Long-context evaluation (eval/long_context.py, `hfpretrain long-context`, the report's section), at tiny lengths."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from forked import script

from hfpretrain.cli import main as cli
from hfpretrain.data.read import expand_inputs, generate_records
from hfpretrain.data.retrieval import asked_facts, retrieval_documents
from hfpretrain.eval.long_context import (
    loss_by_position,
    mean_loss,
    passkey_accuracy,
    passkey_prompt,
    position_bins,
    retrieval_accuracy,
)

REPO = Path(__file__).resolve().parents[2]
EOS = 0


class _Fixed(torch.nn.Module):
    """A stand-in language model whose next-token guess is a fixed rule of the input: ``next`` (the true next token:
    a perfect model), ``same`` (the current token again) or ``uniform`` (equal logits)."""

    def __init__(self, rule: str, vocab: int):
        super().__init__()
        self.rule, self.vocab = rule, vocab
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a parameter: the functions read its device

    def forward(self, input_ids, position_ids=None, use_cache=False, logits_to_keep=None):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        if self.rule == "next":
            logits[:, :-1].scatter_(-1, input_ids[:, 1:, None], 10.0)
        elif self.rule == "same":
            logits.scatter_(-1, input_ids[..., None], 10.0)
        if logits_to_keep is not None:  # transformers' models take the positions to compute logits at
            logits = logits[:, logits_to_keep]
        return type("Out", (), {"logits": logits})()


@pytest.fixture(scope="module")
def tok(gpt2_tokenizer):
    return AutoTokenizer.from_pretrained(str(gpt2_tokenizer))


def test_a_passkey_prompt_has_its_length_and_the_key_at_its_depth(tok):
    for depth in (0.0, 0.5, 1.0):
        ids, answer = passkey_prompt(tok, 300, depth, "71432")
        assert len(ids) == 300 and ids[-len(answer) :] == answer and tok.decode(answer).strip() == "71432"
        text = tok.decode(ids[: -len(answer)])
        assert text.count("The pass key is 71432. Remember it.") == 1 and text.endswith("The pass key is")
        needle = text.index("The pass key is 71432")
        filler = len(text) - len("The pass key is") - text.index("irrelevant text")
        assert abs(needle - text.index("there.") - depth * filler) < 0.15 * filler + 40
    with pytest.raises(ValueError, match="needs more than 40 tokens"):
        passkey_prompt(tok, 40, 0.5, "71432")


def test_passkey_scores_the_answer_at_its_positions(tok):
    """A model that always knows the next token scores 100%, one that repeats the current token 0%: a scoring off by
    one position would swap them."""
    vocab = len(tok)
    assert passkey_accuracy(_Fixed("next", vocab), tok, lengths=(128, 256), samples=3)["256"]["accuracy"] == 1.0
    same = passkey_accuracy(_Fixed("same", vocab), tok, lengths=(128,), samples=3)
    assert same["128"] == {
        "accuracy": 0.0,
        "samples": 3,
        "by_depth": {"0.0": 0.0, "0.5": 0.0, "1.0": 0.0},
        "wrong_answers": {" is": 3},
    }  # what greedy decoding says: the question's last word again


def _retrieval_docs(mini_train, tok, n=6, **kw):
    count = lambda batch: [len(ids) for ids in tok(batch, add_special_tokens=False)["input_ids"]]  # noqa: E731
    texts = [row["text"] for row in generate_records(expand_inputs([mini_train])) if not row["skip"]]
    return list(retrieval_documents(texts, count, n, 300, 1500, seed=5, **kw))


def test_retrieval_on_held_out_documents_scores_each_answer_by_its_distance(mini_train, tok):
    """Each question's value is found where its fact states it; a model that knows the next token answers all of
    them, one that repeats the current token none; every question falls in one distance bin."""
    docs = _retrieval_docs(mini_train, tok, min_facts=3, max_facts=6, repeat_share=0.5)
    for doc in docs:
        asked = asked_facts(doc)
        assert 3 <= len(asked) <= 6
        for fact, lo, hi in asked:
            assert doc[fact - 1] == " " and doc.startswith(("The ", "Note that ", "Keep in mind: "), fact)
            assert doc[lo:hi].isdigit() and f"{doc[lo:hi]}." in doc[fact : fact + 120] and fact < lo
    perfect = retrieval_accuracy(_Fixed("next", len(tok)), tok, docs)
    assert perfect["accuracy"] == 1.0 and perfect["documents"] == 6
    assert (
        perfect["questions"] == sum(len(asked_facts(d)) for d in docs) == sum(b["questions"] for b in perfect["bins"])
    )
    assert perfect["bins"][0]["from"] == 0 and perfect["bins"][-1]["to"] > max(map(len, tok(docs)["input_ids"])) // 2
    assert retrieval_accuracy(_Fixed("same", len(tok)), tok, docs)["accuracy"] == 0.0
    # distances in tokens: " word" is one GPT-2 token, so the facts are ~100 and ~1,300 tokens from their answers
    question = "What is the room number of the red otter? The room number of the red otter is 1234."
    near, far = [f"Intro. The room number of the red otter is 1234.{' word' * n}\n\n{question}" for n in (100, 1300)]
    bins = retrieval_accuracy(_Fixed("next", len(tok)), tok, [near, far])["bins"]
    assert [(b["from"], b["questions"]) for b in bins] == [(0, 1), (1024, 1)]
    with pytest.raises(ValueError, match="is not a question of a retrieval document"):
        asked_facts("Some text.\n\nWhat is this? Nothing.")
    with pytest.raises(ValueError, match="asks for a fact the document does not state"):
        asked_facts("Some text.\n\nQuestion: the room number for the red otter? Answer: 1234.")


def test_loss_by_position_bins_the_tokens_of_documents_that_start_in_the_block():
    """Blocks read in order: [a b EOS | c d e EOS | f g h i j], then [k l EOS | ...]. The first block starts the
    split's first document, so all three segments count: b EOS (1, 2), d e EOS (1, 2, 3), g h i j (1, 2, 3, 4). The
    second block follows one that does not end with end-of-text: its first segment continues f g h i j and is left
    out; after a block that ends with end-of-text it counts (a long document starts at a block's start)."""
    block = np.array([[5, 6, EOS, 7, 8, 9, EOS, 1, 2, 3, 4, 5]])
    result = loss_by_position(_Fixed("uniform", 16), block, EOS)
    assert position_bins(12) == [(1, 2), (2, 4), (4, 8), (8, 12)]
    assert [b["tokens"] for b in result["bins"]] == [3, 5, 1, 0]
    assert result["documents"] == 3 and result["tokens"] == 9
    second = np.array([[5, 6, EOS, 7, 8, 9, 9, 9, 9, 9, 9, 9]])
    after_cut = loss_by_position(_Fixed("uniform", 16), np.concatenate([block, second]), EOS, batch_size=1)
    assert after_cut["tokens"] == 9 + 8 and after_cut["documents"] == 3 + 1  # k l EOS left out
    ended = np.array([[5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, EOS]])
    after_end = loss_by_position(_Fixed("uniform", 16), np.concatenate([ended, second]), EOS, batch_size=2)
    assert after_end["documents"] == 1 + 2 and after_end["tokens"] == 11 + 10
    assert (
        all(b["loss"] == pytest.approx(math.log(16)) for b in result["bins"][:3]) and result["bins"][3]["loss"] is None
    )
    long_only = loss_by_position(_Fixed("uniform", 16), block, EOS, min_document_tokens=5)
    assert [b["tokens"] for b in long_only["bins"]] == [1, 2, 1, 0] and long_only["documents"] == 1


def test_mean_loss_counts_every_target():
    block = np.array([[5, 6, EOS, 7, 8, 9, EOS, 1, 2, 3, 4, 5]] * 3)
    assert mean_loss(_Fixed("uniform", 16), block, EOS, batch_size=2) == {
        "loss": pytest.approx(math.log(16)),
        "tokens": 33,
    }


def test_cli_on_a_checkpoint_and_the_report_section(tiny_checkpoint, mini_blocks, mini_train, tmp_path):
    """`hfpretrain long-context` on a tiny model: the JSON (the loss per position bin of the mini blocks, passkey at
    128 and 256 tokens), then the report's section and plot from it; a passkey length too short is one line."""
    from hfpretrain.study.long_context_report import long_context_lines

    ckpt = tmp_path / "run" / "final"
    shutil.copytree(tiny_checkpoint, ckpt)
    docs = tmp_path / "retrieval.jsonl.zst"
    assert (
        cli(
            [
                "retrieval-docs",
                "--input",
                str(mini_train),
                "--tokenizer",
                str(ckpt),
                "--out",
                str(docs),
                "--documents",
                "3",
                "--min-tokens",
                "100",
                "--max-tokens",
                "250",
                "--repeat-share",
                "0.5",
            ]
        )
        == 0
    )
    # forked from this process (tests/forked.py): test_scripts.py starts the script in a fresh interpreter
    proc = script(
        "long_context.py",
        str(ckpt),
        "--data",
        str(mini_blocks),
        "--blocks",
        "2",
        "--lengths",
        "128",
        "256",
        "--samples",
        "2",
        "--short-data",
        str(mini_blocks),
        "--short-blocks",
        "2",
        "--retrieval-docs",
        str(docs),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((ckpt / "long_context.json").read_text())
    bins = result["loss_by_position"]["bins"]
    assert result["loss_by_position"]["seq_len"] == 128 and sum(b["tokens"] for b in bins) > 50
    assert all(b["loss"] is None or 0 < b["loss"] < 20 for b in bins)
    assert set(result["passkey"]) == {"128", "256"} and result["passkey"]["256"]["samples"] == 2
    for v in result["passkey"].values():  # each miss is a wrong answer, counted by what was said
        assert sum(v["wrong_answers"].values()) == round((1 - v["accuracy"]) * v["samples"])
    assert (
        "| length | accuracy | 95% interval | key in the first half | in the second half | prompts | "
        "most said instead |" in proc.stdout
    )
    retrieval = result["retrieval"]
    assert retrieval["documents"] == 3 and retrieval["questions"] >= 3 and 0 <= retrieval["accuracy"] <= 1
    assert "| distance (tokens) | accuracy | questions |" in proc.stdout
    short = result["short_context"]
    assert short["tokens"] == 2 * 127 and short["bpb"] > 0 and short["seq_len"] == 128
    # every target of the blocks: more than the position bins count (they leave out each block's first segment)
    assert short["tokens"] > sum(b["tokens"] for b in bins)
    assert "| positions | loss (nats) | tokens |" in proc.stdout
    lines = long_context_lines(ckpt, tmp_path / "report")
    assert lines[0] == "## Long context" and (tmp_path / "report" / "long_context.png").stat().st_size > 1000
    bad = script("long_context.py", str(ckpt), "--lengths", "32", timeout=300)
    assert (
        bad.returncode == 2 and bad.stderr.strip() == "error: --lengths [32]: a passkey prompt needs at least 64 tokens"
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for given, message in (
        (tmp_path / "none.jsonl.zst", "none.jsonl.zst"),
        (mini_train, "not a retrieval document"),
        (empty, "no documents in it"),
    ):
        bad = script("long_context.py", str(ckpt), "--lengths", "--retrieval-docs", str(given), timeout=300)
        line = bad.stderr.strip()
        assert bad.returncode == 2 and line.startswith(f"error: --retrieval-docs {given}: ") and message in line, line


def test_cli_refuses_lengths_past_learned_positions(gpt2_tokenizer, mini_blocks, mini_train, tmp_path):
    """GPT-2 learns positions up to n_positions: passkey prompts or blocks longer than that failed with an
    IndexError traceback from the embedding lookup. One line, exit 2, before any evaluation."""
    from transformers import GPT2Config, GPT2LMHeadModel

    ckpt = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_positions=64, n_layer=1, n_embd=32, n_head=2)).save_pretrained(ckpt)
    AutoTokenizer.from_pretrained(str(gpt2_tokenizer)).save_pretrained(ckpt)
    bad = script("long_context.py", str(ckpt), "--lengths", "64", "128", "--data", str(mini_blocks), timeout=300)
    assert bad.returncode == 2, bad.stderr[-2000:]
    line = bad.stderr.strip()
    assert line.startswith(f"error: {ckpt}: gpt2 learns absolute positions up to 64, so it has none for "), line
    assert "--lengths 128" in line and f"--data {mini_blocks} (blocks of 128)" in line and "--lengths 64" not in line
    docs = tmp_path / "retrieval.jsonl.zst"
    assert (
        cli(
            [
                "retrieval-docs",
                "--input",
                str(mini_train),
                "--tokenizer",
                str(ckpt),
                "--out",
                str(docs),
                "--documents",
                "2",
                "--min-tokens",
                "100",
                "--max-tokens",
                "200",
            ]
        )
        == 0
    )
    bad = script("long_context.py", str(ckpt), "--lengths", "--retrieval-docs", str(docs), timeout=300)
    line = bad.stderr.strip()
    assert (
        bad.returncode == 2
        and line.startswith(f"error: --retrieval-docs {docs}: documents of up to ")
        and line.endswith("past the 64 positions gpt2 learns: make them with --max-tokens 64 or less")
    ), line


def test_the_passkey_table_splits_the_keys_by_their_half_of_the_prompt():
    """Far keys (the prompt's first half) and near ones apart: where a model that fails at a length fails."""
    from hfpretrain.study.long_context_report import summary_lines

    by_depth = {"0.0": 0.0, "0.25": 1.0, "0.5": 1.0, "0.75": 1.0, "1.0": 1.0}
    result = {
        "passkey": {
            "16384": {"accuracy": 0.8, "samples": 5, "by_depth": by_depth, "wrong_answers": {" green": 1}},
            "8192": {"accuracy": 1.0, "samples": 2},
        }
    }  # written before by_depth was read: "-"
    lines = summary_lines(result)
    assert "| 16,384 | 80% | 38-96% | 50% | 100% | 5 | `' green'` x1 |" in lines
    assert "| 8,192 | 100% | 34-100% | - | - | 2 |  |" in lines


@pytest.mark.parametrize(
    "right, samples, interval",
    [(48, 50, "87-99%"), (39, 50, "65-87%"), (50, 50, "93-100%"), (0, 50, "0-7%"), (10, 20, "30-70%")],
)
def test_the_passkey_interval_is_wilsons(right, samples, interval):
    """The report's 95% interval, against scipy.stats.binomtest(right, samples).proportion_ci(method="wilson")
    (48 of 50: 0.8654-0.9890; 39: 0.6476-0.8725; 50: 0.9287-1; 0: 0-0.0713; 10 of 20: 0.2993-0.7007)."""
    from hfpretrain.study.long_context_report import _interval

    assert _interval(right / samples, samples) == interval
