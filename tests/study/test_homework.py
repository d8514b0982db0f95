"""The homework report (``python scripts/report.py --homework``): one document, the assignment's deliverables in
order, every number in it copied from a committed file, no absolute path of the machine."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import pytest

from hfpretrain.study.homework import ABSOLUTE, SECTION_SOURCES, SOURCES, write_homework

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "results" / "homework.md"
# a comma that ends a number is the sentence's ("seed 1234, the ..."), not the figure's
NUMBER = re.compile(r"\d(?:[\d,]*\d)?(?:\.\d+)?(?:e[+-]?\d+)?")
ORDER = [
    "Data processing",
    "Changes to the training code",
    "Every experiment",
    "Hardware and time",
    "The best model: training and validation curves",
    "Generations",
    "The ablation",
    "Reproduce",
    "Where the checkpoint and the tokenizer are",
    "Team contributions",
    "The data used",
]


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    out = write_homework(REPO, tmp_path_factory.mktemp("hw") / "homework.md", link_base=REPO / "results")
    return out.read_text()


def test_the_committed_homework_is_the_generated_one(doc):
    assert COMMITTED.read_text() == doc, "regenerate: python scripts/report.py --homework"


def test_the_deliverables_come_in_the_assignments_order(doc):
    headings = [line[3:] for line in doc.splitlines() if line.startswith("## ")]
    assert len(headings) == len(ORDER)
    for i, (heading, want) in enumerate(zip(headings, ORDER), 1):
        assert heading.startswith(f"{i}. {want}"), heading
    for must in (
        "Example batch",
        "![training and validation loss]",
        "Unconditional sample",
        "**Prompt:**",
        "IsoFLOP curves and per-budget optima",
        "scripts/generate.py --model CHECKPOINT --prompt",
        "**The shipped corpus is not the Pile.**",
        "The same commands take the Pile",
    ):
        assert must in doc, must


def test_no_absolute_path_of_the_machine(doc):
    assert not ABSOLUTE.findall(doc), ABSOLUTE.findall(doc)[:5]
    assert str(REPO) not in doc and "/work/" not in doc and "Pile-format" not in doc


def _numbers(source: str) -> set[str]:
    """The numbers of a source file, and of its path (a section names the files it cites); a JSON file's floats
    also as the document rounds them (to 1-4 decimals)."""
    # a run's log is committed compressed (results/gpu_2gpu's resumed run names its model only there)
    text = lzma.open(REPO / source, "rt").read() if source.endswith(".xz") else (REPO / source).read_text()
    out = set(NUMBER.findall(text)) | set(NUMBER.findall(source))
    if source.endswith(".json"):

        def floats(v):
            if isinstance(v, dict):
                for x in v.values():
                    yield from floats(x)
            elif isinstance(v, list):
                for x in v:
                    yield from floats(x)
            elif isinstance(v, float):
                yield v

        out |= {f"{v:.{k}f}" for v in floats(json.loads(text)) for k in range(1, 5)}
    return out


def stray_numbers(doc: str) -> dict[int, list[str]]:
    """Per section (its number): the numbers it carries that its own sources (``SECTION_SOURCES``) do not."""
    parts = re.split(r"^## (\d+)\. ", doc, flags=re.M)
    out = {}
    for number, body in zip(parts[1::2], parts[2::2]):
        n = int(number)
        known = {str(n)}.union(*(_numbers(s) for s in SECTION_SOURCES[n]))
        stray = sorted(set(NUMBER.findall(body)) - known)
        if stray:
            out[n] = stray[:20]
    return out


def test_every_number_is_in_the_files_its_section_was_cut_from(doc):
    """Each number of a section is one of the numbers of that section's own source files (or the section's
    number): a figure copied into the wrong section, or from another file than the one cited, fails, though
    it may be in some other source."""
    assert sorted(int(line[3:].split(".")[0]) for line in doc.splitlines() if line.startswith("## ")) == sorted(
        SECTION_SOURCES
    )
    assert set(SOURCES) == {s for sources in SECTION_SOURCES.values() for s in sources}
    assert not stray_numbers(doc), stray_numbers(doc)
    # the check is per section: the MoE study's decision multiplier, a number of § 7's sources, is stray in § 6
    moe = re.search(r"compute multiplier (\d\.\d+) \[", (REPO / "results/study_gpu_moe2/report.md").read_text())[1]
    assert moe in doc.split("## 7. ")[1] and moe not in doc.split("## 6. ")[1].split("## 7. ")[0]
    moved = doc.replace("## 7. ", f"Multiplier {moe}.\n\n## 7. ", 1)
    assert moe in stray_numbers(moved).get(6, [])


def test_the_key_figures_match_the_json(doc):
    """The best model's final score against its summary.json, and every run row of § 3 against its study's
    results.json (the report tables the rows are cut from are themselves tested against it)."""
    final = json.loads((REPO / "results/best_small10/seed1234/summary.json").read_text())["final_eval"]
    assert f"{final['eval_bpb']:.3f} bits per byte, {final['eval_loss']:.3f} nats per token" in doc
    experiments = doc.split("## 3. ")[1].split("## 4. ")[0]
    seen = 0
    for study in ("study_gpu_vocab2", "study_gpu_vocab", "study_gpu_moe", "study_gpu_moe2"):
        # run names repeat across studies; a superseded study's heading says so
        table = re.split(rf"### {study}(?: \(superseded by \w+\))?\n", experiments)[1].split("### ")[0]
        for r in json.loads((REPO / "results" / study / "results.json").read_text()):
            row = next(line for line in table.splitlines() if line.startswith(f"| {r['run']} |"))
            assert row.rstrip(" |").endswith(f"{r['val_bpb']:.4g}"), row
            seen += 1
    assert seen == 118 + 48 + 38 + 147


def test_the_checkpoint_section_names_the_kept_weights(doc):
    """§ 9 says plainly that the best model's weights are not in the repository, where the export was made, their size
    and hash, from the committed record."""
    kept = json.loads((REPO / "results/best_small10/seed1234/checkpoint.json").read_text())
    where = doc.split("## 9. ")[1].split("## 10. ")[0]
    assert "**its weights are not in this repository, and not published until the team names a Hub id below**" in where
    assert f"`{kept['kept_at']}/`" in where and f"SHA-256, `{kept['weights']['sha256']}`" in where
    assert f"{kept['weights']['bytes']:,} bytes" in where and "<TO FILL IN>" in where  # the Hub id: the team's


def test_the_kept_weights_are_the_recorded_ones():
    """Where a checkout has the kept checkpoint beside it (the team's machine), its weights are the recorded bytes
    and load as a model; a clean checkout (CI) has no weights to check."""
    import hashlib

    kept = json.loads((REPO / "results/best_small10/seed1234/checkpoint.json").read_text())
    weights = REPO / kept["kept_at"] / kept["weights"]["file"]
    if not weights.is_file():
        pytest.skip(f"{kept['kept_at']}: not on this machine (kept by the team, not in git)")
    digest = hashlib.sha256()
    with open(weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    assert weights.stat().st_size == kept["weights"]["bytes"] and digest.hexdigest() == kept["weights"]["sha256"]
    from transformers import AutoConfig

    assert str(AutoConfig.from_pretrained(REPO / kept["kept_at"]).dtype).endswith(kept["dtype"])


def test_the_per_set_sentence_counts_the_moe_studys_scored_runs(doc):
    """What the MoE verdict does not say is derived from the runs: how many were scored per validation set."""
    rows = json.loads((REPO / "results/study_gpu_moe2/results.json").read_text())
    scored = [r for r in rows if r.get("val_bpb_per_set")]
    assert scored and f"{len(scored)} of its {len(rows)} runs are scored per validation set" in doc
    assert "nothing is scored per validation set" not in doc


def test_the_larger_multiplier_check_is_said_with_its_reading_and_its_runs(doc):
    """What the MoE verdict does not say names the check beyond the rule's threshold (dense at 2x the decision
    budget) by its reading in analysis.json and how many of its planned runs have run."""
    analysis = json.loads((REPO / "results/study_gpu_moe2/analysis.json").read_text())
    (check,) = [c for c in analysis["multiplier_checks"] if c["factor"] == 2]
    rows = json.loads((REPO / "results/study_gpu_moe2/results.json").read_text())
    ran = [r for r in rows if r["budget"] == 5e16 and r["arm"] == "dense" and r.get("multiplier_check")]
    said = f"trained on 2 times the decision budget, the dense arm reads {check['reading']}"
    if len(ran) < 12:
        assert f"{said} so far ({len(ran)} of the 12 runs planned for that check: interim)" in doc
    else:
        assert f"{said} (its 12 planned runs)" in doc and "interim" not in doc


def test_every_link_points_to_a_committed_file(doc):
    """Links and images resolve from results/ (where the committed document lives), the best model's tokenizer
    folder included."""
    targets = re.findall(r"\]\(([^)\s]+)\)", doc)
    assert any(t.endswith("seed1234/final") for t in targets)
    missing = [t for t in targets if not re.match(r"^[a-z]+://|^#", t) and not (REPO / "results" / t).exists()]
    assert not missing, missing[:5]


def test_the_committed_eval_summaries_name_no_absolute_path():
    """lm-eval's summary.md beside a committed run (linked from the run READMEs the homework cites) names its
    checkpoint relative to the repository, as the harness now writes it (the GPU machine's /work/main/... before)."""
    summaries = [
        *(REPO / "results").rglob("lm_eval/summary.md"),
        *(REPO / "results").rglob("eval/summary.md"),
        *(REPO / "results").rglob("eval_summary.md"),
    ]
    assert summaries
    for path in summaries:
        text = path.read_text()
        assert not ABSOLUTE.findall(text), (path, ABSOLUTE.findall(text)[:3])


def test_the_training_command_names_a_committed_recipe(doc):
    """§ 8 trains from the best run's recipe as committed (its run report names the GPU machine's run folder)."""
    (recipe,) = re.findall(r"scripts/pretrain\.py (\S+)", doc)
    assert (REPO / recipe).is_file(), recipe


def test_the_training_changes_name_their_files_and_ladder_rows(doc):
    """§ 2 lists each change with the files that make it and the ladder row that measured it: every file exists,
    every row named is a row of the ladder's table, and every row of the ladder but the classic recipe's (the
    starting point) has its change in the list."""
    from hfpretrain.study.homework import CODE_CHANGES, LADDER, _table_rows

    section = doc.split("## 2. ")[1].split("## 3. ")[0]
    ladder = [r[0] for r in _table_rows((REPO / LADDER / "README.md").read_text(), "| run | bits per byte")[1:]]
    named = set()
    for change, files, row in CODE_CHANGES:
        assert change in section
        for f in files:
            assert (REPO / f).is_file(), f
            assert f"[`{f}`](../{f})" in section, f
        if row is not None:
            (match,) = [r for r in ladder if r.startswith(row)]
            named.add(match)
    assert named == {r for r in ladder if not r.startswith("classic")}


def _row_strays(cells: list[str], sources: tuple[str, ...]) -> list[str]:
    """The numbers of a table row that none of its own sources carries."""
    return sorted(set(NUMBER.findall(" | ".join(cells))) - set().union(*(_numbers(s) for s in sources)))


def test_the_other_experiments_are_a_table_each_row_from_its_readme(doc):
    """§ 3 tabulates the experiments outside the studies: one row each, its first cell the README's title linking
    to it, no empty cell, and every figure of the row in that README or the files beside it that the row names (not
    merely somewhere in § 3's sources, which hold every study's run table)."""
    from hfpretrain.study.homework import OTHER_EXPERIMENTS, _title

    section = doc.split("## 3. ")[1].split("## 4. ")[0]
    other = section.split("### The other experiments\n")[1]
    table = [line for line in other.splitlines() if line.startswith("|")]
    assert table[0].startswith("| experiment | question |") and len(table) == 2 + len(OTHER_EXPERIMENTS)
    assert "- [" not in other and "docs/benchmarks.md" in other  # a table, not a list of links
    for e, line in zip(OTHER_EXPERIMENTS, table[2:]):
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 6 and all(cells), line
        link = f"[{_title((REPO / e.readme).read_text())}](../{e.readme})".replace("../results/", "")
        assert cells[0] == link, (cells[0], link)
        for f in e.also:
            assert (REPO / f).is_file() and Path(f).is_relative_to(Path(e.readme).parent), f
            assert f in SECTION_SOURCES[3], f
        assert not _row_strays(cells, (e.readme, *e.also)), (e.readme, _row_strays(cells, (e.readme, *e.also)))
    # the check is per row: the curriculum's result, a figure of its own README, is stray in the ladder's row
    ladder, curriculum = OTHER_EXPERIMENTS[0], OTHER_EXPERIMENTS[1]
    assert "1.292" in curriculum.result and "1.292" in _row_strays([ladder.result, "1.292"], (ladder.readme,))
