"""``tokenize_corpus``: Pile-format text -> packed training blocks on disk (Arrow).

Steps (all through ``datasets``, whose cache lives in a temporary folder beside the output):

1. ``Dataset.from_generator`` streams records from the inputs (sharded over files with
   ``num_proc``), writing text to Arrow on disk: memory stays bounded on any input size.
2. Bad records are counted (by reason, with file:line examples) and the policy applied.
3. ``Dataset.map(batched=True, num_proc=...)`` tokenizes (end-of-text appended) with the HF
   tokenizer or, where it gives the same ids, tiktoken (``encoder``; see :mod:`.encoders`).
4. One sequential ``map`` packs documents into ``seq_len`` blocks with a carried remainder
   (see :mod:`.pack` for the layout and why it is not shifted).
5. ``save_to_disk`` for ``train`` and ``validation``, tokenizer copy, ``manifest.json``; all in
   ``OUT.tmp-<pid>/out`` first (a work folder with this tool's marker, :mod:`.guard`), then renamed into place,
   so a half-written output never looks finished.

The validation split is the first ``val_docs`` good documents of ``val_inputs``; without
``val_inputs`` it is the first ``val_docs`` documents of ``inputs`` and train gets the rest. ``val_docs`` left
unset is :data:`VAL_DOCS` (10,000), except without ``val_inputs`` on a small input: then the first
:data:`VAL_SHARE` (10%) of its documents, capped at 10,000, and one line says so (a small folder used to fail:
validation took 10,000 documents out of it).
``max_docs`` limits the number of train documents (for tests and quick runs).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..outdir import output_problem
from ..outdir import protected_reason as guarded_place
from .manifest import (
    FORMAT,
    MANIFEST,
    PIPELINE_VERSION,
    describe_inputs,
    dir_bytes,
    fingerprint,
    is_output,
    read_manifest,
    write_manifest,
)
from .guard import BuildGuard, make_work_dir, raise_if_terminated
from .encoders import ENCODERS, EncoderMismatch, Unsupported, choose_encoder
from .pack import PACK_MODES, Packer
from .read import (
    FILE_ROW,
    POLICIES,
    RAW_COLUMNS,
    DataError,
    expand_blend,
    expand_inputs,
    generate_records,
    hub_arguments,
)
from .tokenizer import BatchTokenizer, ids_dtype, load_tokenizer, pick_eos, tokenizer_sha256

logger = logging.getLogger(__name__)

DEFAULT_MAX_BAD_FRACTION = 0.01
VAL_DOCS = 10000  # validation documents when --val-docs is not given (at most, without --val-input)
VAL_SHARE = 0.1  # without --val-input and --val-docs: the share of a small input held out for validation
TOKENIZE_BATCH = 1000
PACK_BATCH = 4000
MAX_BAD_EXAMPLES = 20


def tokenize_corpus(
    inputs=None,
    out=None,
    tokenizer=None,
    seq_len: int = 1024,
    val_inputs=None,
    val_docs: int | None = None,
    num_proc: int = 1,
    max_docs: int | None = None,
    force: bool = False,
    on_bad: str = "skip",
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION,
    eos_token: str | None = None,
    blend=None,
    encoder: str = "auto",
    sets=None,
    text_field: str = "text",
    txt_split: str = "file",
    allow_missing: bool = False,
    pack: str = "concat",
) -> Path:
    """Tokenize and pack ``inputs`` (paths/globs/Hub ids, or ``blend`` file) into ``out``.

    Returns ``out``. A finished output whose fingerprint matches is reused unless ``force``. Only a
    folder that is missing, empty, or an output of this function (``manifest.json`` with ``format`` =
    :data:`.manifest.FORMAT`) is ever written or replaced, with or without ``force``; never the
    working directory (or a folder holding it), the home folder or a filesystem root.
    ``encoder``: ``"auto"`` (tiktoken if installed and exact for this tokenizer, else HF),
    ``"hf"`` or ``"tiktoken"``; the ids are the same, so it is not part of the fingerprint.
    ``sets``: keep only documents of these ``pile_set_name``s (train and validation), e.g. a
    high-quality subset of a mix for a curriculum's last phase; every named set must occur.
    ``txt_split``: a ``.txt`` input is one document (``file``) or one per blank-line paragraph (``paragraph``).
    ``text_field``: the record field that holds the document (default ``text``; e.g. ``content``), as
    ``run_clm.py``'s ``--text_column_name``; part of the fingerprint when not ``text``.
    ``allow_missing``: go on when a whole input file is lost (missing, a glob matching nothing, empty,
    unreadable, a ``.zst`` cut short by an unknown amount); without it each is an error naming the file.
    Bytes lost (bad records, the measured part of a cut ``.zst``) count against ``max_bad_fraction``
    too, and a file whose records are all bad is always an error (manifest ``input_files``).
    ``pack``: ``concat`` (documents in order, cut at block ends) or ``whole`` (documents kept whole where they
    fit, for long blocks: :mod:`.pack`); part of the fingerprint when not ``concat``.
    Raises :class:`DataError` (one-line message) for user-facing problems.
    """
    import datasets

    t0 = time.time()
    if out is None or tokenizer is None:
        raise DataError("out and tokenizer are required")
    if inputs is None and blend is None:
        raise DataError("no input: pass inputs (paths, globs, Hub ids) or a blend file")
    if on_bad not in POLICIES:
        raise DataError(f"on_bad must be one of {POLICIES}, got {on_bad!r}")
    if seq_len < 2:
        raise DataError(f"seq_len must be >= 2, got {seq_len}")
    if pack not in PACK_MODES:
        raise DataError(f"pack must be one of {PACK_MODES}, got {pack!r}")
    if val_docs is not None and val_docs < 1:
        raise DataError(f"val_docs must be >= 1, got {val_docs}")
    if encoder not in ENCODERS:
        raise DataError(f"encoder must be one of {ENCODERS}, got {encoder!r}")
    if max_docs is not None and max_docs < 1:
        raise DataError(f"max_docs must be >= 1, got {max_docs}")
    if not 0 <= max_bad_fraction <= 1:
        raise DataError(f"max_bad_fraction must be between 0 and 1, got {max_bad_fraction}")
    if num_proc is not None and int(num_proc) < 1:
        raise DataError(f"num_proc must be >= 1, got {num_proc}")
    if sets is not None:
        sets = sorted({str(s).strip() for s in ([sets] if isinstance(sets, str) else sets)} - {""})
        if not sets:
            raise DataError("sets: name at least one pile_set_name to keep")
    out = Path(out).expanduser().resolve()
    num_proc = max(1, int(num_proc or 1))
    if force:
        _refuse_protected(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file, not a folder: choose another --out")
    problem = output_problem(out, makes="data")  # before any work: a build that cannot be written is lost
    if problem:
        raise DataError(f"--out {out}: {problem}" + ("" if "choose" in problem else ": choose another --out"))

    train_sources = expand_inputs(inputs) if inputs is not None else []
    if blend is not None:
        train_sources += expand_blend(blend)
    val_sources = expand_inputs(val_inputs) if val_inputs is not None else None
    configure_sources(train_sources + (val_sources or []), text_field, txt_split)
    check_disjoint(train_sources, val_sources)
    check_missing(
        train_sources + (val_sources or []), allow_missing
    )  # before any work: a lost shard is not a bad record

    tok = load_tokenizer(tokenizer)
    eos_name, eos_id = pick_eos(tok, eos_token)
    tok_json = tok.backend_tokenizer.to_str()  # serialised once: hashed here, run by the encoders
    tok_sha = tokenizer_sha256(tok_json)
    if val_docs is None and val_sources is not None:
        val_docs = VAL_DOCS
    # unset without val_inputs: "auto" (VAL_DOCS of a large input, VAL_SHARE of a small one: the inputs decide)
    fp = fingerprint(
        train_sources,
        val_sources,
        tok_sha,
        eos_id,
        seq_len,
        "auto" if val_docs is None else val_docs,
        max_docs,
        sets,
        pack,
    )

    _refuse_existing(out, force)  # read-only, before anything is created, locked or removed
    guard = BuildGuard(out)
    guard.check_work_dirs()
    guard.acquire()  # one build per --out; workers end with this process
    try:
        _refuse_existing(out, force)  # again, now that no other build can change it
        guard.check_work_dirs()
        old = read_manifest(out)
        laxer = laxer_build(old, on_bad, max_bad_fraction, allow_missing) if is_output(old) else None
        if out.exists() and is_output(old) and old.get("fingerprint") == fp and not force and _complete(out):
            if laxer:  # built under a policy that let through what this command's refuses: this one decides
                logger.warning("rebuilding %s: %s", out, laxer)
            elif "text_bytes" in old.get("validation", {}):
                logger.info("reusing %s (fingerprint %s matches; --force to rebuild)", out, fp)
                return out
            logger.info("rebuilding %s: made before manifests recorded the text's bytes (bits per byte)", out)
        _refuse_beside(out)
        if is_output(old) and old.get("fingerprint") != fp and not force:  # a run may have trained on it
            logger.warning(
                "replacing %s: it was tokenized from other inputs or settings (fingerprint %s, now %s); the old "
                "blocks are deleted once the new ones are in place (a run that trained on them says so on resume)",
                out,
                old.get("fingerprint"),
                fp,
            )
        guard.remove_leftovers()  # the checks passed: dead builds' work folders (with this tool's marker) go

        try:
            enc = choose_encoder(tok_json, encoder)
        except Unsupported as e:
            raise DataError(f"encoder tiktoken: {e}") from None
        logger.info("encoder: %s (%s)", *enc)

        work = make_work_dir(out, "tmp")  # OUT.tmp-<pid>/, marked as this build's; the output is built in .../out
        try:  # from here on a Ctrl-C or an error removes the work folder (the corpus's setup included)
            stage = work / "out"

            corpus = _Corpus(
                train_sources,
                val_sources,
                val_docs,
                max_docs,
                sets,
                on_bad,
                max_bad_fraction,
                allow_missing,
                num_proc,
                pack,
            )

            def build(enc):
                if stage.exists():
                    shutil.rmtree(stage)
                stage.mkdir()
                return _build(
                    stage, corpus, _Encoding(tok, tok_json, enc, eos_name, eos_id, tok_sha, seq_len), datasets
                )

            try:
                manifest = build(enc)
            except Exception as e:
                mismatch = _cause(e, EncoderMismatch)
                if mismatch is None or enc[0] == "hf":
                    raise
                logger.warning("%s; rebuilding with the HF tokenizer", mismatch)
                manifest = build(("hf", f"tiktoken fell back: {mismatch}"))
            manifest["fingerprint"] = fp
            if text_field != "text":
                manifest["text_field"] = text_field
            wall = time.time() - t0
            total = manifest["train"]["tokens"] + manifest["validation"]["tokens"]
            manifest["wall_time_s"] = round(wall, 3)
            manifest["tokens_per_s"] = round(total / wall, 1) if wall > 0 else None
            write_manifest(stage, manifest)
            raise_if_terminated()  # a SIGTERM whose exception got lost on the way: never put it in place
            _swap_into_place(stage, out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        logger.info(
            "wrote %s: %d train / %d validation blocks of %d tokens, %.0f tokens/s",
            out,
            manifest["train"]["blocks"],
            manifest["validation"]["blocks"],
            seq_len,
            manifest["tokens_per_s"] or 0,
        )
        return out
    finally:
        guard.release()


OUTPUT_NAMES = ("train", "validation", "tokenizer", MANIFEST)  # all that a build writes in --out


def _refuse_existing(out: Path, force: bool) -> None:
    """Only a missing or empty folder, or an output of this tool, is ever written (or replaced): anything else is
    refused here, before anything is created, locked or removed."""
    if not out.exists():
        return
    if not out.is_dir():
        raise DataError(f"--out {out} is a file, not a folder: choose another --out")
    if not is_output(read_manifest(out)) and any(out.iterdir()):
        # Replacing it would delete what is there: only this tool's own outputs are ever replaced.
        raise DataError(
            f"{out} exists and is not a tokenize_corpus output (no {MANIFEST} with format "
            f"{FORMAT!r}); nothing was changed{' (--force only rebuilds outputs of this tool)' if force else ''}: "
            "choose another --out, or empty or remove that folder yourself"
        )
    _refuse_protected(out)  # about to be replaced (or written into)


def _refuse_beside(out: Path) -> None:
    """A rebuild replaces the whole folder: whatever else is in it (a run trained into data/run) would go too."""
    foreign = sorted(p.name for p in out.iterdir() if p.name not in OUTPUT_NAMES) if out.is_dir() else []
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise DataError(
            f"--out {out} holds {', '.join(foreign[:3])}{more} beside the tokenized data: a rebuild "
            "replaces the whole folder, so nothing was changed; move those out, or choose another --out"
        )


def protected_reason(out: Path) -> str | None:
    """Why ``out`` must never be replaced (it is renamed aside and deleted), or None: the output guard's places
    (outdir.protected_reason), and a mount point, which cannot be renamed."""
    out = Path(out).resolve()
    return guarded_place(out) or ("a filesystem root" if os.path.ismount(out) else None)


def _refuse_protected(out: Path) -> None:
    why = protected_reason(out)
    if why:
        raise DataError(
            f"--out {out} is {why}: refusing to replace it (that deletes everything in it); "
            "pass a new subfolder as --out"
        )


def _complete(out: Path) -> bool:
    return all(
        (out / p).exists() for p in ("train/dataset_info.json", "validation/dataset_info.json", "tokenizer", MANIFEST)
    )


def _cause(e: BaseException, kind):
    while e is not None:
        if isinstance(e, kind):
            return e
        e = e.__cause__ or e.__context__
    return None


def _swap_into_place(stage: Path, out: Path) -> None:
    """Put the finished ``stage`` in place of ``out``; a previous output is moved aside into this build's marked
    ``OUT.old-<pid>/`` first (a killed swap leaves it there for the next build to remove) and then deleted."""
    if out.exists():
        aside = make_work_dir(out, "old")
        os.replace(out, aside / "out")
        os.replace(stage, out)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(stage, out)


def _generate(sources, on_bad, limit, num_proc, cache_dir, datasets, name, sets=None):
    if not sources:
        raise DataError(f"no {name} input")
    features = datasets.Features({c: datasets.Value("string") for c in RAW_COLUMNS})
    try:
        return datasets.Dataset.from_generator(
            generate_records,
            features=features,
            cache_dir=str(cache_dir),
            # sets as a tuple: datasets shards over the lists in gen_kwargs (the files)
            gen_kwargs={
                "files": sources,
                "on_bad": on_bad,
                "limit": limit,
                "sets": tuple(sets) if sets is not None else None,
                "file_rows": True,
            },
            num_proc=min(num_proc, len(sources)) if len(sources) > 1 else None,
            split=datasets.Split.TRAIN,
        )
    except DataError:
        raise
    except ValueError as e:
        if sets is not None and "corresponds to no data" in str(e):  # the generator yielded no row
            raise DataError(
                f"{name}: no document of the sets {', '.join(sets)} in the input; set names are "
                "the inputs' meta.pile_set_name, case-sensitive"
            ) from None
        raise
    except Exception as e:  # datasets wraps generator errors; surface ours as one line
        cause = e
        while cause is not None:
            if isinstance(cause, DataError):
                raise DataError(str(cause)) from None
            cause = cause.__cause__ or cause.__context__
        if "DataError" in str(e) or "[on_bad=fail]" in str(e):
            raise DataError(str(e).strip().splitlines()[-1]) from None
        raise


def _cut(skip: np.ndarray, n_good: int | None) -> int:
    """Number of raw rows that hold the first ``n_good`` good rows (all rows if None/too few)."""
    if n_good is None:
        return len(skip)
    good = np.cumsum(skip == "")
    idx = np.searchsorted(good, n_good)  # first row where the count reaches n_good
    return int(min(idx + 1, len(skip)))


def _bad_stats(raw, lo: int, hi: int) -> dict:
    sub = raw.data.table.slice(lo, hi - lo) if hasattr(raw.data, "table") else raw.data.slice(lo, hi - lo)
    sub = sub.filter(pc.not_equal(sub.column("skip"), FILE_ROW))  # records only, not the per-file rows
    skip = sub.column("skip")
    bad_mask = pc.not_equal(skip, "")
    bad = sub.filter(bad_mask)
    counts = {}
    for item in pc.value_counts(bad.column("skip")).to_pylist():
        counts[item["values"]] = item["counts"]
    examples = [
        {"where": w, "reason": r}
        for w, r in zip(bad.column("where").to_pylist()[:MAX_BAD_EXAMPLES], bad.column("skip").to_pylist())
    ]
    return {"records_read": len(sub), "skipped": counts, "bad_examples": examples}


def configure_sources(sources: list[dict], text_field: str = "text", txt_split: str = "file") -> None:
    """Set the record field and the .txt split on expanded sources (checked): tokenize and train-tokenizer alike."""
    if not isinstance(text_field, str) or not text_field.strip():
        raise DataError(f"text_field must be a field name, got {text_field!r}")
    if txt_split not in ("file", "paragraph"):
        raise DataError(f"txt_split must be 'file' or 'paragraph', got {txt_split!r}")
    for src in sources:
        if text_field != "text":
            src["text_field"] = text_field
        if src["kind"] == "txt":
            src["txt_split"] = txt_split


def _source_key(src: dict) -> tuple | None:
    """What a source reads, however it was named (a path through a link or a folder, a Hub id with its options in
    another order), or None for a missing one."""
    if src["kind"] == "missing":
        return None
    if src["kind"] == "hub":
        dataset, kwargs = hub_arguments(src["path"])
        return ("hub", dataset, *sorted((k, str(v)) for k, v in kwargs.items()))
    if src["kind"] == "saved":
        return ("saved", str(Path(src["path"]).resolve()), src.get("split") or "train")
    return ("file", str(Path(src["path"]).resolve()))


def check_disjoint(train_sources: list[dict], val_sources: list[dict] | None) -> None:
    """A validation input that is also a train input is refused: the validation loss would be measured on documents
    the model trains on, and say nothing (it passed without a word)."""
    train = {_source_key(s): s for s in train_sources}
    for src in val_sources or []:
        key = _source_key(src)
        if key is not None and key in train:
            raise DataError(
                f"--val-input {src['path']}"
                + (f" (split {key[2]})" if key[0] == "saved" else "")
                + " is also a train input: validation documents must not be trained on; give another "
                "file as --val-input, or leave --val-input out to hold out the first --val-docs documents "
                "of --input"
            )


def laxer_build(old: dict, on_bad: str, max_bad_fraction: float, allow_missing: bool) -> str | None:
    """Why an output built under a laxer bad-input policy than this command's holds what this one's would refuse
    (bad records skipped where it fails at the first, or under a higher ceiling; files lost without
    --allow-missing), or None. Such an output is not reused: the build under this command's policy decides."""
    skipped = sum(sum((old.get(split) or {}).get("skipped", {}).values()) for split in ("train", "validation"))
    lost = [
        f
        for acc in (old.get("input_files") or {}).values()
        if isinstance(acc, dict)
        for f in acc.get("lost_files") or []
    ]
    was = f"--on-bad {old.get('on_bad', 'skip')} --max-bad-fraction {old.get('max_bad_fraction')}"
    if skipped and on_bad == "fail":
        return f"it was built with {was} and skipped {skipped} bad record(s); this command has --on-bad fail"
    if skipped and isinstance(old.get("max_bad_fraction"), (int, float)) and max_bad_fraction < old["max_bad_fraction"]:
        return (
            f"it was built with {was} and skipped {skipped} bad record(s); this command's ceiling is "
            f"--max-bad-fraction {max_bad_fraction}"
        )
    if lost and not allow_missing:
        return (
            f"it was built with --allow-missing without {len(lost)} lost file(s) ({lost[0].get('path')}: "
            f"{lost[0].get('reason')}); this command has no --allow-missing"
        )
    return None


def check_missing(sources: list[dict], allow_missing: bool) -> None:
    """A missing input file (or a glob matching nothing) is an error naming it, unless ``allow_missing``."""
    missing = [s for s in sources if s["kind"] == "missing"]
    if missing and not allow_missing:
        names = sorted({s["path"] for s in missing})
        more = (
            f" (and {len(names) - 1} more: {', '.join(names[1:4])}{' ...' if len(names) > 4 else ''})"
            if len(names) > 1
            else ""
        )
        raise DataError(
            f"{missing[0]['path']}:0: missing_file ({missing[0].get('error', 'does not exist')}){more}: "
            "its documents would be missing; pass --allow-missing to go on without it"
        )


def _file_accounting(raw) -> dict:
    """What was read and lost per input file, from generate_records' per-file rows (a blend's passes
    over one file added up): manifest ``input_files``."""
    table = raw.data.table if hasattr(raw.data, "table") else raw.data
    rows = table.filter(pc.equal(table.column("skip"), FILE_ROW))
    return file_accounting(rows.column("text").to_pylist())


def file_accounting(file_rows) -> dict:
    """:func:`_file_accounting` from the ``text`` of generate_records' per-file rows (JSON strings)."""
    files: dict[str, dict] = {}
    for text in file_rows:
        a = json.loads(text)
        f = files.setdefault(
            a["path"],
            {
                "path": a["path"],
                "records": 0,
                "good": 0,
                "bad": 0,
                "bytes": 0,
                "bad_bytes": 0,
                "lost": None,
                "bytes_lost": 0,
                "first_bad": None,
            },
        )
        for key in ("records", "good", "bad", "bytes", "bad_bytes"):
            f[key] += a[key]
        if a["lost"]:
            f["lost"] = a["lost"]
            f["bytes_lost"] = (
                None if a["bytes_lost"] is None or f["bytes_lost"] is None else f["bytes_lost"] + a["bytes_lost"]
            )
        f["first_bad"] = f["first_bad"] or a["first_bad"]
    lost = [
        {"path": f["path"], "reason": f["lost"], "bytes_lost": f["bytes_lost"]} for f in files.values() if f["lost"]
    ]
    all_bad = [
        {"path": f["path"], "records": f["records"], "first": f["first_bad"]}
        for f in files.values()
        if f["records"] and not f["good"] and f["lost"] in (None, "truncated_zst", "truncated_file")
    ]
    return {
        "files_read": len(files),
        "bytes_read": sum(f["bytes"] for f in files.values()),
        "bad_record_bytes": sum(f["bad_bytes"] for f in files.values()),
        "bytes_lost": sum(x["bytes_lost"] for x in lost if x["bytes_lost"] is not None),
        "lost_files": lost,
        "all_bad_files": all_bad,
    }


_LOST_WHY = {
    "missing_file": "does not exist",
    "empty_file": "holds no records",
    "unreadable_file": "cannot be read (a truncated or corrupt parquet file)",
    "truncated_zst": "is cut short, by an amount its zstd frame header cannot tell (no size recorded)",
    "truncated_file": "is cut short or corrupt (its compressed stream ends early)",
}


def check_files(acc: dict, name: str, max_bad_fraction: float, allow_missing: bool) -> None:
    """Whole-file losses are errors, not one bad record each: a file whose records are all bad; a file
    lost by an unknown amount (unless allow_missing); bytes lost above max_bad_fraction."""
    for f in acc["all_bad_files"]:
        raise DataError(
            f"{f['path']}: all {f['records']} records are bad (first: {f['first']}): the whole file would "
            f"be lost; fix it or remove it from the {name}"
            + (
                "; missing_text: if the documents are in another field, name it with --text-field"
                if (f["first"] or "").endswith("missing_text")
                else ""
            )
        )
    unknown = [x for x in acc["lost_files"] if x["bytes_lost"] is None]
    if unknown and not allow_missing:
        x = unknown[0]
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        what = "the rest of its documents" if x["reason"].startswith("truncated") else "its documents"
        raise DataError(
            f"{x['path']}: {x['reason']}: {_LOST_WHY[x['reason']]}{more}; {what} would be "
            "missing: pass --allow-missing to go on without it"
        )
    total = acc["bytes_read"] + acc["bytes_lost"]
    lost = acc["bad_record_bytes"] + acc["bytes_lost"]
    if total and lost / total > max_bad_fraction:
        known = [x for x in acc["lost_files"] if x["bytes_lost"]]
        worst = max(known, key=lambda x: x["bytes_lost"]) if known else None
        raise DataError(
            f"{name}: {lost:,} of {total:,} bytes lost ({lost / total:.1%} > max_bad_fraction "
            f"{max_bad_fraction:.1%})"
            + (
                f"; {worst['path']}: {worst['reason']}, {worst['bytes_lost']:,} bytes lost"
                if worst
                else "; in bad records"
            )
        )


def check_bad(stats: dict, max_bad_fraction: float, split: str) -> None:
    n_bad = sum(stats["skipped"].values())
    if stats["records_read"] and n_bad / stats["records_read"] > max_bad_fraction:
        first = stats["bad_examples"][0] if stats["bad_examples"] else {"where": "?", "reason": "?"}
        raise DataError(
            f"{split}: {n_bad} of {stats['records_read']} records are bad "
            f"({n_bad / stats['records_read']:.1%} > max_bad_fraction {max_bad_fraction:.1%}); "
            f"first: {first['where']}: {first['reason']}; counts: {stats['skipped']}"
            + (
                "; missing_text: if the documents are in another field, name it with --text-field"
                if "missing_text" in stats["skipped"]
                else ""
            )
        )


def _text_bytes(raw) -> dict[str, int]:
    """{set name: UTF-8 bytes of the text of its documents kept (not skipped)}, streamed in record batches."""
    per_set: dict[str, int] = {}
    for batch in raw.with_format("arrow").iter(batch_size=PACK_BATCH):
        sizes = pa.table({"set": batch.column("set"), "n": pc.binary_length(batch.column("text"))})
        kept = sizes.filter(pc.equal(batch.column("skip"), ""))
        for row in kept.group_by("set").aggregate([("n", "sum")]).to_pylist():
            per_set[row["set"]] = per_set.get(row["set"], 0) + int(row["n_sum"])
    return per_set


@dataclass(frozen=True)
class _Corpus:
    """What a build reads and how it cuts it (tokenize_corpus's arguments, checked)."""

    train_sources: list
    val_sources: list | None  # None: validation = the first val_docs documents of the train sources
    val_docs: int | None  # None: VAL_DOCS, or VAL_SHARE of a small input (no val_sources)
    max_docs: int | None
    sets: list | None  # keep only these pile_set_names
    on_bad: str
    max_bad_fraction: float
    allow_missing: bool
    num_proc: int
    pack: str = "concat"  # how documents fill blocks (pack.py)


@dataclass(frozen=True)
class _Encoding:
    """The tokenizer as a build runs it."""

    tok: object  # the transformers tokenizer (saved beside the blocks)
    tok_json: str  # its serialised backend, which the encoders run
    enc: tuple  # (encoder name, why it was chosen)
    eos_name: str
    eos_id: int
    sha256: str
    seq_len: int


def _build(tmp, corpus: _Corpus, encoding: _Encoding, datasets):
    t_start = time.time()
    cache = tmp / "_cache"
    dtype = ids_dtype(len(encoding.tok))
    tokfn = BatchTokenizer(encoding.tok_json, encoding.eos_id, dtype, encoder=encoding.enc[0])

    # 1-2: read, count bad records, cut to the requested number of documents
    val_docs = corpus.val_docs
    if corpus.val_sources is None:
        cap = VAL_DOCS if val_docs is None else val_docs
        limit = None if corpus.max_docs is None else cap + corpus.max_docs
        raw = _generate(
            corpus.train_sources, corpus.on_bad, limit, corpus.num_proc, cache / "train", datasets, "train", corpus.sets
        )
        input_files = {"inputs": _file_accounting(raw), "val_inputs": None}
        check_files(input_files["inputs"], "inputs", corpus.max_bad_fraction, corpus.allow_missing)
        skip = np.asarray(raw.data.column("skip").to_numpy(zero_copy_only=False))
        n_good = int((skip == "").sum())
        if val_docs is None:  # a share of a small input, VAL_DOCS of a large one
            val_docs = (
                VAL_DOCS if limit is not None and n_good >= limit else min(VAL_DOCS, math.ceil(n_good * VAL_SHARE))
            )
            if n_good < 2:
                raise DataError(
                    f"inputs: {n_good} document{'s' if n_good != 1 else ''}: needs at least 2, one to "
                    "validate on and one to train on (or pass --val-input)"
                )
            if val_docs < VAL_DOCS:
                logger.warning(
                    "validation: no --val-input, and the input holds %d documents: holding out the first %d "
                    "(%d%%, at most %d) for validation, training on the other %d (--val-docs N or "
                    "--val-input to choose)",
                    n_good,
                    val_docs,
                    round(VAL_SHARE * 100),
                    VAL_DOCS,
                    n_good - val_docs,
                )
        if n_good <= val_docs:  # validation would take every document: nothing left to train on
            raise DataError(
                f"validation takes the first {val_docs} documents of the input (--val-docs) but it "
                f"holds only {n_good}, leaving none to train on: lower --val-docs or pass --val-input"
            )
        limit = None if corpus.max_docs is None else val_docs + corpus.max_docs
        split_at = _cut(skip, val_docs)
        end = _cut(skip, limit)
        parts = {"validation": (raw, 0, split_at), "train": (raw, split_at, end)}
    else:
        raw_tr = _generate(
            corpus.train_sources,
            corpus.on_bad,
            corpus.max_docs,
            corpus.num_proc,
            cache / "train",
            datasets,
            "train",
            corpus.sets,
        )
        raw_va = _generate(
            corpus.val_sources,
            corpus.on_bad,
            val_docs,
            corpus.num_proc,
            cache / "validation",
            datasets,
            "validation",
            corpus.sets,
        )
        input_files = {"inputs": _file_accounting(raw_tr), "val_inputs": _file_accounting(raw_va)}
        check_files(input_files["inputs"], "train inputs", corpus.max_bad_fraction, corpus.allow_missing)
        check_files(input_files["val_inputs"], "validation inputs", corpus.max_bad_fraction, corpus.allow_missing)
        skip_tr = np.asarray(raw_tr.data.column("skip").to_numpy(zero_copy_only=False))
        skip_va = np.asarray(raw_va.data.column("skip").to_numpy(zero_copy_only=False))
        parts = {
            "train": (raw_tr, 0, _cut(skip_tr, corpus.max_docs)),
            "validation": (raw_va, 0, _cut(skip_va, val_docs)),
        }

    timings = {"read_s": round(time.time() - t_start, 3)}
    stats = {}
    for split in ("train", "validation"):
        raw, lo, hi = parts[split]
        stats[split] = _bad_stats(raw, lo, hi)
        check_bad(stats[split], corpus.max_bad_fraction, split)

    # 3-4: tokenize (parallel), pack (sequential, carried remainder)
    set_index: dict[str, int] = {}
    result = {}
    for split in ("train", "validation"):
        raise_if_terminated()
        raw, lo, hi = parts[split]
        t_prev = time.time()
        if hi - lo == 0 or stats[split]["records_read"] == sum(stats[split]["skipped"].values()):
            raise DataError(
                f"{split}: no documents left to tokenize (read {hi - lo} records; skipped {stats[split]['skipped']}"
                + (f"; only sets {corpus.sets} kept" if corpus.sets else "")
                + ")"
            )
        sub = raw.select(range(lo, hi)) if (lo, hi) != (0, len(raw)) else raw
        text_bytes = _text_bytes(sub)  # per set: bits per byte of each set (evaluation.per_set)
        toks = sub.with_format("arrow").map(
            tokfn,
            batched=True,
            batch_size=TOKENIZE_BATCH,
            num_proc=corpus.num_proc if len(sub) >= 2 * TOKENIZE_BATCH else None,
            remove_columns=list(RAW_COLUMNS),
            desc=f"tokenize {split}",
            new_fingerprint=f"tok-{split}-{os.getpid()}-{time.time_ns()}",
        )
        t1 = time.time()
        timings[f"tokenize_{split}_s"] = round(t1 - t_prev, 3)
        packer = Packer(encoding.seq_len, encoding.eos_id, dtype, set_index, corpus.pack, len(toks))
        blocks = toks.with_format("arrow").map(
            packer,
            batched=True,
            batch_size=PACK_BATCH,
            num_proc=None,
            remove_columns=["input_ids", "set"],
            desc=f"pack {split}",
            features=datasets.Features(
                {
                    "input_ids": datasets.List(datasets.Value(np.dtype(dtype).name), length=encoding.seq_len),
                    "set_ids": datasets.List(datasets.Value("uint8")),
                }
            ),
            new_fingerprint=f"pack-{split}-{os.getpid()}-{time.time_ns()}",
        )
        blocks = blocks.with_format(None)
        blocks.save_to_disk(str(tmp / split))
        timings[f"pack_save_{split}_s"] = round(time.time() - t1, 3)
        logger.info("%s: %s", split, {k: v for k, v in timings.items() if split in k or k == "read_s"})
        if packer.blocks == 0:
            raise DataError(f"{split}: {packer.tokens} tokens is fewer than one block of seq_len={encoding.seq_len}")
        # token conservation, checked not assumed
        if (
            packer.tokens != packer.blocks * encoding.seq_len + packer.dropped_tail_tokens
            or len(blocks) != packer.blocks
        ):
            raise RuntimeError(
                f"{split}: token conservation failed: {packer.tokens} != "
                f"{packer.blocks} * {encoding.seq_len} + {packer.dropped_tail_tokens}"
            )
        nbytes = dir_bytes(tmp / split)
        bare = packer.blocks * encoding.seq_len * np.dtype(dtype).itemsize
        result[split] = {
            **stats[split],
            "documents": packer.documents,
            "tokens": packer.tokens,
            "text_tokens": packer.tokens - packer.documents,
            "eos_tokens": packer.documents,
            "blocks": packer.blocks,
            "block_tokens": packer.blocks * encoding.seq_len,
            "dropped_tail_tokens": packer.dropped_tail_tokens,
            "tokens_per_set": dict(sorted(packer.tokens_per_set.items())),
            "document_lengths": packer.length_stats(),  # a long-context phase's data: how long its documents are
            "text_bytes": sum(text_bytes.values()),  # UTF-8 bytes of the documents' text: nats/token -> bits per byte
            "text_bytes_per_set": dict(sorted(text_bytes.items())),
            "bytes": nbytes,  # on disk
            "bare_id_bytes": bare,
            "bytes_overhead": round(nbytes / bare - 1, 5) if bare else None,
        }
        del toks, blocks

    missing = [s for s in corpus.sets or [] if not result["train"]["tokens_per_set"].get(s)]
    if missing:
        raise DataError(
            f"sets: no train document of {', '.join(missing)} in the input (kept: "
            f"{', '.join(result['train']['tokens_per_set']) or 'none'}); set names are the inputs' "
            "meta.pile_set_name, case-sensitive"
        )
    shutil.rmtree(cache, ignore_errors=True)
    encoding.tok.save_pretrained(str(tmp / "tokenizer"))
    sets = [None] * len(set_index)
    for name, i in set_index.items():
        sets[i] = name
    return {
        "format": FORMAT,
        "pipeline_version": PIPELINE_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "fingerprint": None,
        "layout": "non-shifted blocks of seq_len tokens; labels = input_ids (the model shifts); "
        "documents end with eos; boundaries = eos positions",
        "seq_len": int(encoding.seq_len),
        "pack": corpus.pack,
        "dtype": np.dtype(dtype).name,
        "tokenizer": {
            "name_or_path": str(encoding.tok.name_or_path),
            "class": type(encoding.tok).__name__,
            "vocab_size": len(encoding.tok),
            "eos_token": encoding.eos_name,
            "eos_token_id": int(encoding.eos_id),
            "sha256": encoding.sha256,
            "encoder": {"name": encoding.enc[0], "reason": encoding.enc[1]},
        },
        "inputs": describe_inputs(corpus.train_sources),
        "val_inputs": (
            describe_inputs(corpus.val_sources)
            if corpus.val_sources is not None
            else "first val_docs documents of inputs"
        ),
        "val_docs": int(val_docs),
        "val_docs_rule": (
            "given"
            if corpus.val_docs is not None or corpus.val_sources is not None
            else f"auto: {VAL_SHARE:.0%} of the input's documents, at most {VAL_DOCS}"
        ),
        "max_docs": corpus.max_docs,
        "select_sets": corpus.sets,
        "on_bad": corpus.on_bad,
        "max_bad_fraction": corpus.max_bad_fraction,
        "allow_missing": corpus.allow_missing,
        "input_files": input_files,
        "num_proc": corpus.num_proc,
        "sets": sets + (["other"] if len(sets) == 255 else []),
        "train": result["train"],
        "validation": result["validation"],
        "timings": timings,
    }
