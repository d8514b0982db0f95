"""Corrections of committed run records, each written into the record it changes.

Bits per byte: runs trained before the data manifest carried the validation text's bytes logged bits per byte
against the size of the Arrow files on disk (``plan.validation_tokens_per_byte`` ≈ 0.498 for both tokenizers
of the vocabulary study, against 0.335 and 0.371 of text), so their ``final_eval.eval_bpb`` is wrong by a
factor of ~1.5 (``best/summary.json`` said 1.896; its loss gives 1.275). Their loss in nats per token is right,
and the validation text is the same as that of later runs on the same data (same tokenizer hash, same training
blocks, same validation tokens): the true ratio is the later runs' ``validation_tokens_per_byte``.
``correct_bits_per_byte`` rewrites such a summary.json from its loss and a reference run that logged the ratio
from the text, keeps the old value under ``corrections`` with the reason and the reference, and leaves
log.jsonl as it was logged (a log is a record of what the run printed).

    python -m hfpretrain.study.corrections STUDY_DIR [EXTRA_RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hfpretrain.data.manifest import bits_per_byte

WHY = (
    "bits per byte logged against the Arrow files' size on disk (before the manifest had text_bytes); "
    "recomputed from eval_loss and the validation text's tokens per byte of {ref}, a run on the same data"
)


def _data_identity(run_dir: Path) -> tuple | None:
    """What makes two runs' validation text the same: tokenizer hash, training blocks and tokens, tokens per set
    (from the lineage of the first config event; the data fingerprint changed with the manifest's format)."""
    from hfpretrain.study.plots import first_record, run_log

    log = run_log(run_dir)
    if log is None:
        return None
    config = first_record(log)
    v = (config.get("lineage") or {}).get("validation") or {}
    if not v:
        return None
    return (
        v.get("tokenizer_sha256"),
        v.get("seq_len"),
        v.get("train_blocks"),
        v.get("train_tokens"),
        tuple(sorted((v.get("tokens_per_set") or {}).items())),
    )


def _summary(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable summary ({type(err).__name__}: {err})") from None


def is_stale(summary: dict) -> bool:
    """A finished run whose bits per byte were not made from the text's bytes."""
    return "eval_loss" in (summary.get("final_eval") or {}) and not summary["plan"].get("validation_text_bytes")


def references(run_dirs: list[Path]) -> dict[tuple, Path]:
    """Data identity -> a run that logged bits per byte from the validation text's bytes."""
    out = {}
    for d in run_dirs:
        ident = _data_identity(d)
        if ident is not None and not is_stale(_summary(d)) and _summary(d)["plan"].get("validation_text_bytes"):
            out.setdefault(ident, d)
    return out


def correct_bits_per_byte(run_dir: Path, ref_dir: Path, base: Path) -> dict:
    """Rewrite ``run_dir/summary.json``'s bits per byte from its loss and ``ref_dir``'s tokens per text byte;
    return what changed. ``base``: paths in the record are relative to it."""
    summary, ref = _summary(run_dir), _summary(ref_dir)["plan"]
    if _data_identity(run_dir) != _data_identity(ref_dir):
        raise ValueError(f"{run_dir} and {ref_dir} were not trained on the same data: no correction")
    final, plan = summary["final_eval"], summary["plan"]
    ratio = ref["validation_tokens_per_byte"]
    change = {
        "field": "final_eval.eval_bpb",
        "was": final.get("eval_bpb"),
        "now": bits_per_byte(final["eval_loss"], ratio),
        "was_validation_tokens_per_byte": plan.get("validation_tokens_per_byte"),
        "why": WHY.format(ref=(ref_dir.relative_to(base) if ref_dir.is_relative_to(base) else ref_dir).as_posix()),
    }
    final["eval_bpb"] = change["now"]
    plan["validation_tokens_per_byte"] = ratio
    plan["validation_text_bytes"] = ref["validation_text_bytes"]
    summary.setdefault("corrections", []).append(change)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return change


def correct_study(study_dir: Path, extra: list[Path] = ()) -> list[tuple[Path, dict]]:
    """Every stale summary under STUDY_DIR/runs (and the ``extra`` run folders), against a reference run on the
    same data from the same set; a stale run without one is an error (nothing is guessed)."""
    if not (study_dir / "runs").is_dir():
        raise ValueError(f"{study_dir / 'runs'} does not exist: {study_dir} is not a study folder")
    for d in extra:
        if not (Path(d) / "summary.json").is_file():
            raise ValueError(f"{Path(d) / 'summary.json'} does not exist: {d} is not a run folder")
    dirs = sorted(p.parent for p in (study_dir / "runs").glob("*/*/summary.json")) + [Path(d) for d in extra]
    refs = references(dirs)
    todo = []
    for d in dirs:  # every reference found before any record is rewritten: an error leaves all of them as they were
        if not is_stale(_summary(d)):
            continue
        ref = refs.get(_data_identity(d))
        if ref is None:
            raise ValueError(f"{d}: stale bits per byte and no run on the same data logged them from the text")
        todo.append((d, ref))
    return [(d, correct_bits_per_byte(d, ref, study_dir)) for d, ref in todo]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hfpretrain.study.corrections",
        description="Rewrite stale bits per byte in a study's run records (see the module's notes).",
    )
    parser.add_argument("study", type=Path, help="the study folder (its runs/*/*/summary.json)")
    parser.add_argument("extra", type=Path, nargs="*", help="more run folders, e.g. a study's best run")
    args = parser.parse_args(argv)
    try:
        done = correct_study(args.study, args.extra)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for d, change in done:
        print(f"{d}: eval_bpb {change['was']:.4f} -> {change['now']:.4f}")
    if not done:
        print(f"{args.study}: no stale bits per byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
