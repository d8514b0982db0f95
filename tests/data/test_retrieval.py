"""Synthetic retrieval documents (data/retrieval.py, `hfpretrain retrieval-docs`): real text, facts hidden in it,
asked for at the end; written as Pile-format jsonl.zst that the tokenizer packs into a mixture source."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import zstandard
from transformers import AutoTokenizer

from hfpretrain.cli import main
from hfpretrain.data import tokenize_corpus
from hfpretrain.data.read import generate_records, expand_inputs
from hfpretrain.data.retrieval import QUALITIES, SUBJECTS, retrieval_documents
from hfpretrain.eval.long_context import FILLER

QUESTION = re.compile(
    r"^(?:What is the (.+) of the (.+)\? The \1 of the \2 is (\d+)\."
    r"|Which (.+) does the (.+) have\? The \5 has \4 (\d+)\."
    r"|Question: the (.+) for the (.+)\? Answer: (\d+)\.)$"
)


@pytest.fixture(scope="module")
def count(gpt2_tokenizer):
    """Tokens of each text of a list, as GPT-2 counts them (what the generator measures documents with)."""
    tok = AutoTokenizer.from_pretrained(gpt2_tokenizer)
    return lambda batch: [len(ids) for ids in tok(batch, add_special_tokens=False)["input_ids"]]


def _texts(path):
    return [row["text"] for row in generate_records(expand_inputs([path])) if not row["skip"]]


def _asked(doc):
    """The document's body and, for each question at its end, the ways its fact can be worded."""
    body, _, questions = doc.rpartition("\n\n")
    asked = []
    for line in questions.split("\n"):
        m = QUESTION.match(line)
        assert m, line
        kind, name, value = [g for g in m.groups() if g is not None]
        asked.append(
            [
                f"The {kind} of the {name} is {value}.",
                f"Note that the {name} has {kind} {value}.",
                f"Keep in mind: {kind} for the {name}, {value}.",
            ]
        )
    return body, asked


def _haystack(doc):
    body, asked = _asked(doc)
    for forms in asked:
        for fact in forms:
            body = body.replace(" " + fact, "")
    return body


def test_each_fact_is_hidden_once_and_asked_at_the_end(mini_train, count):
    texts = _texts(mini_train)
    docs = list(retrieval_documents(texts, count, documents=30, min_tokens=200, max_tokens=600, seed=3))
    assert len(docs) == 30
    lengths = count(docs)
    assert max(lengths) <= 600 and min(lengths) >= 150  # the cut is by characters, checked in tokens
    asked = 0
    for doc in docs:
        body, facts = _asked(doc)
        for forms in facts:
            assert sum(body.count(f) for f in forms) == 1  # hidden once, before its question
        asked += len(facts)
        assert "pass key" not in doc  # the passkey evaluation's wording is never trained on
    assert asked > 30  # one to four facts a document
    assert _haystack(docs[0])[:200] in "\n\n".join(texts)  # the haystack is the corpus's text, in order
    again = list(retrieval_documents(texts, count, documents=30, min_tokens=200, max_tokens=600, seed=3))
    assert again == docs  # a seed gives the same documents
    assert list(retrieval_documents(texts, count, 30, 200, 600, seed=4)) != docs


def test_a_repetitive_haystack_is_a_few_corpus_sentences_said_again(mini_train, count):
    corpus = " ".join(" ".join(_texts(mini_train)).split())
    docs = list(
        retrieval_documents(
            _texts(mini_train),
            count,
            documents=12,
            min_tokens=500,
            max_tokens=900,
            min_facts=5,
            max_facts=5,
            repeat_share=1.0,
            seed=1,
        )
    )
    assert max(count(docs)) <= 900
    for doc in docs:
        assert len(_asked(doc)[1]) == 5  # min_facts = max_facts
        haystack = _haystack(doc)
        unit = min(
            (
                haystack[:n]
                for n in range(20, len(haystack) // 3)
                if haystack.startswith(haystack[:n] + " " + haystack[:n])
            ),
            key=len,
        )
        assert haystack.count(unit) >= 3 and len(haystack.replace(unit, "").strip()) < len(unit)  # said again and again
        assert all(sentence in corpus for sentence in re.split(r"(?<=[.!?]) ", unit))  # the corpus's sentences
    mixed = list(retrieval_documents(_texts(mini_train), count, 40, 300, 800, repeat_share=0.5, seed=1))
    assert 0 < sum(doc[:60] in doc[60:] for doc in mixed) < 40  # some repetitive, some not


def test_a_statement_haystack_is_made_up_statements_said_again(mini_train, count):
    docs = list(
        retrieval_documents(
            _texts(mini_train),
            count,
            documents=12,
            min_tokens=500,
            max_tokens=900,
            min_facts=3,
            max_facts=3,
            statement_share=1.0,
            seed=1,
        )
    )
    assert max(count(docs)) <= 900
    filler = set(re.findall(r"[a-z]+", FILLER.lower())) - {"the", "is"}
    assert not (set(SUBJECTS) | set(QUALITIES)) & filler  # none of the filler's nouns or adjectives
    for doc in docs:
        haystack = _haystack(doc)
        statements = haystack.rstrip(".").split(". ")
        assert all(re.fullmatch(r"The [a-z]+ is [a-z]+", s) for s in statements), haystack[:200]
        distinct = set(statements)
        assert 2 <= len(distinct) <= 5 and len(statements) >= 4 * len(distinct) - 1  # a few, said again and again
        assert {w for s in distinct for w in s.split()[1::2]} <= set(SUBJECTS) | set(QUALITIES)
    mixed = list(
        retrieval_documents(_texts(mini_train), count, 60, 300, 800, repeat_share=0.3, statement_share=0.3, seed=1)
    )
    kinds = [
        "statement" if re.match(r"The [a-z]+ is [a-z]+\. The", doc) else "repeat" if doc[:60] in doc[60:] else "corpus"
        for doc in mixed
    ]
    assert min(kinds.count(k) for k in ("statement", "repeat", "corpus")) > 0  # all three kinds


def _depths(doc):
    """Where each fact sits in its haystack, as a share of the haystack's length (the facts before it taken out)."""
    body, asked = _asked(doc)
    found = sorted((body.find(" " + f), len(" " + f)) for forms in asked for f in forms if " " + f in body)
    haystack = len(body) - sum(n for _, n in found)
    depths, before = [], 0
    for at, n in found:
        depths.append((at - before) / haystack)
        before += n
    return depths


def test_an_early_share_of_the_facts_is_hidden_in_the_first_quarter(mini_train, count):
    texts = _texts(mini_train)

    def depths(early_share):
        docs = retrieval_documents(
            texts, count, 40, 400, 800, min_facts=4, max_facts=8, seed=5, early_share=early_share
        )
        return [d for doc in docs for d in _depths(doc)]

    every, half, none = depths(1.0), depths(0.5), depths(0.0)
    assert len(every) > 200 and 0.2 < max(every) < 0.3  # the quarter, and the word the cut waits for
    early = lambda ds: sum(d < 0.3 for d in ds) / len(ds)  # noqa: E731
    assert 0.5 < early(half) < 0.75  # half of them, and a quarter of the rest: 0.625 expected
    assert early(none) < 0.4 and max(none) > 0.9  # anywhere
    with pytest.raises(ValueError, match="early_share=1.5"):
        next(retrieval_documents(texts, count, 1, 400, 800, early_share=1.5))


def test_a_seed_gives_the_documents_it_gave_before_shares_of_haystacks():
    """Golden: what ffab36c made (before statement_share) for one seed, so that recorded runs can be made again.
    Regenerate only for a change meant to alter the documents, and say so in the commit."""
    texts = [" ".join(f"Text {t} says thing number {i} about item {i * t % 7}." for i in range(40)) for t in range(30)]
    count = lambda batch: [len(text.split()) for text in batch]  # noqa: E731
    golden = {
        0.0: "c8067bcd3b8c8ba1b7a9399eb1a1f1dbeafd1e61974687dc1259a93cea034d90",
        0.5: "2e45e51baee3d0f62b83abd719906c39045c2212a979861c4a67b0af28fc9288",
    }
    for repeat_share, digest in golden.items():
        docs = retrieval_documents(texts, count, 8, 200, 600, max_facts=6, seed=2, repeat_share=repeat_share)
        assert hashlib.sha256("\x00".join(docs).encode()).hexdigest() == digest, repeat_share


def test_the_command_passes_its_early_share_on(tmp_path, mini_train, gpt2_tokenizer):
    out = tmp_path / "early.jsonl.zst"
    assert (
        main(
            [
                "retrieval-docs",
                "--input",
                str(mini_train),
                "--tokenizer",
                str(gpt2_tokenizer),
                "--out",
                str(out),
                "--documents",
                "10",
                "--min-tokens",
                "400",
                "--max-tokens",
                "800",
                "--min-facts",
                "4",
                "--max-facts",
                "8",
                "--early-share",
                "1",
            ]
        )
        == 0
    )
    depths = [d for line in zstandard.open(out, "rt", encoding="utf-8") for d in _depths(json.loads(line)["text"])]
    assert len(depths) >= 40 and max(depths) < 0.3  # the quarter, and the word the cut waits for


def test_the_command_writes_a_corpus_the_tokenizer_packs(tmp_path, mini_train, gpt2_tokenizer, capsys):
    out = tmp_path / "retrieval.jsonl.zst"
    assert (
        main(
            [
                "retrieval-docs",
                "--input",
                str(mini_train),
                "--tokenizer",
                str(gpt2_tokenizer),
                "--out",
                str(out),
                "--documents",
                "40",
                "--min-tokens",
                "100",
                "--max-tokens",
                "500",
                "--repeat-share",
                "0.9",
                "--statement-share",
                "0.1",
            ]
        )
        == 0
    )  # shares that sum to 1 in decimal
    rows = [json.loads(line) for line in zstandard.open(out, "rt", encoding="utf-8")]
    assert len(rows) == 40 and {r["meta"]["pile_set_name"] for r in rows} == {"Retrieval"}
    blocks = tokenize_corpus(
        inputs=[out], out=tmp_path / "blocks", tokenizer=gpt2_tokenizer, seq_len=512, pack="whole", val_docs=4
    )
    manifest = json.loads((blocks / "manifest.json").read_text())
    assert manifest["train"]["document_lengths"]["longer_than_block"] == 0  # no document split from its questions


@pytest.mark.parametrize(
    "args,message",
    [
        (["--input", "nowhere/*.jsonl.zst"], "--input nowhere/\\*.jsonl.zst: glob matches no file"),
        (["--out", "r.jsonl"], "name a .jsonl.zst file"),
        (["--min-tokens", "900", "--max-tokens", "500"], "0 < --min-tokens <= --max-tokens"),
        (["--min-facts", "5", "--max-facts", "3"], "1 <= --min-facts <= --max-facts <= 400"),
        (["--repeat-share", "1.5"], "--repeat-share 1.5: a share, 0 to 1"),
        (
            ["--repeat-share", "0.6", "--statement-share", "0.5"],
            "--statement-share 0.5: a share, 0 to 1 with --repeat-share 0.6",
        ),
        (["--early-share", "-0.1"], "--early-share -0.1: a share, 0 to 1"),
        (["--tokenizer", "no_such_tokenizer_dir"], "tokenizer no_such_tokenizer_dir"),
        (["--min-tokens", "8", "--max-tokens", "8"], "longer than max_tokens=8: raise it"),  # the facts alone are more
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, mini_train, gpt2_tokenizer, capsys, args, message):
    base = {"--input": str(mini_train), "--tokenizer": str(gpt2_tokenizer), "--out": str(tmp_path / "r.jsonl.zst")}
    for key, value in zip(args[::2], args[1::2]):
        base[key] = value
    argv = ["retrieval-docs"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and re.search(message, err), err
    assert not list(tmp_path.glob("r.jsonl.zst*"))  # nothing written
