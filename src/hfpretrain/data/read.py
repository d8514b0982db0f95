"""Streaming readers for Pile-format input, and the bad-input policy.

Inputs are expanded into *sources* (plain dicts, so they pickle into ``datasets`` worker
processes): local ``.jsonl`` files (plain or compressed: ``.zst``, ``.gz``, ``.bz2``, ``.xz``), ``.parquet`` and
``.txt`` files, globs or folders, a ``datasets`` ``save_to_disk`` folder (``FOLDER`` or ``FOLDER?split=NAME``), a
Hub dataset id with its options (``allenai/c4?name=en&split=validation&data_files=...``: :func:`hub_arguments`), or
the sources of a blend file. :func:`generate_records` reads them one record at a time with
bounded memory (a zstd frame is decompressed chunk by chunk; only one line is held at a time)
and yields one row per record: good rows carry ``text`` and ``set``; bad rows carry ``skip``
(the reason) and ``where`` (``file:line``) so the caller can count and report them after the
fact, even when the generator ran in several processes.

Bad input, each reported with file and line:

==================  ===========================================================
reason              what
==================  ===========================================================
``missing_file``    a path or glob that matches nothing (line 0)
``malformed_json``  a line that is not a JSON object
``missing_text``    a record without a string ``text`` field (or the field ``text_field`` names)
``non_utf8``        bytes that are not UTF-8 (or lone surrogates in the JSON)
``empty_document``  ``text`` is empty or only whitespace
``truncated_zst``   the zstd frame ends early or is corrupt (line = first lost line)
``truncated_file``  a gzip, bzip2 or xz stream ends early or is corrupt (line = first lost line)
``unreadable_file`` a parquet file pyarrow cannot read (truncated, corrupt)
==================  ===========================================================

Whole-file losses are counted apart from records (``file_rows``): a missing file or a glob that
matches nothing, an empty file, an unreadable parquet file, the bytes a truncated ``.zst`` lost
(from its frame header; unknown for streamed files), a file whose records are all bad. The
pipeline turns them into errors (:mod:`.pipeline`), so that losing a whole shard never passes a
ceiling meant for a few bad lines.

A file whose first :data:`FIELD_CHECK_RECORDS` records (or all, if fewer) lack the text field altogether is a
wrong ``--text-field``, not bad records: one error that names the fields those records have and the one that
seems to hold the documents (it used to be 20 warnings per file before a hint at the end).

A UTF-8 byte-order mark at the start of a file is skipped (it made the first record malformed JSON: the first
document was lost). Policy ``skip`` (default) drops the record, logs a warning and counts it; ``fail`` raises
:class:`DataError` at the first bad record. Blank lines are not records and are ignored.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Iterator

from ..paths import MissingDataError, resolve

logger = logging.getLogger(__name__)

REASONS = (
    "missing_file",
    "malformed_json",
    "missing_text",
    "non_utf8",
    "empty_document",
    "truncated_zst",
    "truncated_file",
    "unreadable_file",
)
# JSON lines compressed by the standard library's modules (zstd has its own reader: it can tell the bytes lost)
COMPRESSED = {"gz": "gzip", "bz2": "bz2", "xz": "lzma"}
# sources that are one local file (their size and modification time enter the fingerprint)
FILE_KINDS = ("jsonl", "zst", *COMPRESSED, "parquet", "txt")
# what a folder given as input is searched for
INPUT_SUFFIXES = (
    ".jsonl",
    ".jsonl.zst",
    ".json.zst",
    ".jsonl.gz",
    ".json.gz",
    ".jsonl.bz2",
    ".jsonl.xz",
    ".parquet",
    ".txt",
)
SAVED_DATASET = ("state.json", "dataset_dict.json")  # datasets' save_to_disk: a Dataset's, a DatasetDict's marker
FILE_ROW = "_file"  # the skip value of generate_records' per-file accounting rows (file_rows=True)
POLICIES = ("skip", "fail")
RAW_COLUMNS = ("text", "set", "skip", "where")
UNKNOWN_SET = "unknown"
_CHUNK = 1 << 20
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, at the start of a file: skipped, not a malformed first record
_MAX_WARNINGS_PER_FILE = 20
FIELD_CHECK_RECORDS = 5  # a file whose first records all lack the text field: a wrong --text-field, not bad records


class DataError(Exception):
    """A user-facing data problem; the message is one line naming the file (and line or key)."""


HUB_OPTIONS = ("name", "split", "data_files", "revision")  # load_dataset's arguments a Hub input may set
# a Hub id with options, e.g. allenai/c4?name=en (a relative id, and its first option a known one: "?" is a glob too)
_HUB_QUERY = re.compile(r"\w[\w.\-/]*\?(%s)=[^&]*(&\w+=[^&]*)*" % "|".join(HUB_OPTIONS))


def _has_glob(s: str) -> bool:
    return any(c in s for c in "*?[")


def _kind(path: str) -> str:
    p = path.lower()
    if p.endswith(".zst") or p.endswith(".zstd"):
        return "zst"
    for kind in COMPRESSED:
        if p.endswith("." + kind):
            return kind
    if p.endswith(".parquet"):
        return "parquet"
    if p.endswith(".txt"):
        return "txt"
    return "jsonl"


def saved_dataset(spec: str) -> dict | None:
    """The source of a ``datasets`` ``save_to_disk`` folder (``FOLDER`` or ``FOLDER?split=NAME``), else None."""
    folder, _, query = spec.partition("?")
    if not folder or not any((Path(folder).expanduser() / marker).is_file() for marker in SAVED_DATASET):
        return None
    split = None
    if query:
        key, _, split = query.partition("=")
        if key != "split" or not split:
            raise DataError(f"{spec}: a save_to_disk folder takes one option, ?split=NAME")
    return {"kind": "saved", "path": str(Path(folder).expanduser().resolve()), "split": split}


def expand_inputs(specs, epochs: float = 1.0) -> list[dict]:
    """Turn input specs (paths, globs, save_to_disk folders, Hub ids) into a list of source dicts, in order.

    A spec that matches nothing becomes a ``missing`` source, which the reader reports as a
    ``missing_file`` bad record (so the policy decides, not this function).
    ``epochs`` > 1 repeats the sources; a fractional part keeps a deterministic sample.
    """
    if isinstance(specs, (str, os.PathLike)):
        specs = [specs]
    files: list[dict] = []
    for spec in specs:
        spec = str(spec)
        saved = saved_dataset(spec)
        if saved is not None:
            files.append(saved)
            continue
        if _HUB_QUERY.fullmatch(spec) and not os.path.exists(spec):  # "ID?name=...": not a glob
            hub_arguments(spec)  # a malformed option fails here, before any work
            files.append({"kind": "hub", "path": spec})
            continue
        if _has_glob(spec):
            matches = sorted(glob.glob(os.path.expanduser(spec), recursive=True))
            if not matches:
                files.append({"kind": "missing", "path": spec, "error": "glob matches no file"})
            for m in matches:
                files.append({"kind": _kind(m), "path": str(Path(m).resolve())})
            continue
        try:
            resolved = resolve(spec)
        except MissingDataError as e:
            files.append({"kind": "missing", "path": spec, "error": str(e)})
            continue
        if Path(resolved).is_dir():
            inner = sorted(
                str(p) for p in Path(resolved).rglob("*") if p.is_file() and p.name.lower().endswith(INPUT_SUFFIXES)
            )
            if not inner:
                files.append(
                    {
                        "kind": "missing",
                        "path": spec,
                        "error": "folder holds no "
                        + "/".join(INPUT_SUFFIXES)
                        + " file (nor is it a datasets save_to_disk folder)",
                    }
                )
            files.extend({"kind": _kind(p), "path": p} for p in inner)
        elif Path(resolved).exists():
            files.append({"kind": _kind(resolved), "path": str(Path(resolved).resolve())})
        else:
            files.append({"kind": "hub", "path": resolved})
    return _apply_epochs(files, epochs)


def _apply_epochs(files: list[dict], epochs: float) -> list[dict]:
    if epochs <= 0:
        raise DataError(f"epochs/weight must be > 0, got {epochs}")
    whole, frac = int(epochs), epochs - int(epochs)
    out = []
    for p in range(whole):
        out.extend({**f, "pass": p, "fraction": 1.0} for f in files)
    if frac > 1e-9:  # a missing file stays listed once (weight < 1 too): it must be reported, not dropped
        out.extend({**f, "pass": whole, "fraction": frac} for f in files if f["kind"] != "missing" or not whole)
    return out


def expand_blend(blend_path) -> list[dict]:
    """Read a blend file and return its sources.

    Format (JSON)::

        {"sources": [
            {"name": "code", "paths": ["data/code-*.jsonl.zst"], "epochs": 2},
            {"name": "web",  "paths": ["data/web.parquet"],      "weight": 0.5}
        ]}

    ``epochs`` (alias ``weight``, default 1) is how many times a source is used: the whole part
    repeats it, the fractional part keeps a deterministic pseudo-random subset of its documents
    (hash of file, line and pass). Sources are read in the order listed; training shuffles blocks.
    """
    path = Path(blend_path)
    if not path.is_file():
        raise DataError(f"{path}: blend file does not exist")
    try:
        blend = json.loads(path.read_text())
    except ValueError as e:
        raise DataError(f"{path}: blend file is not valid JSON ({e})") from None
    sources = blend.get("sources") if isinstance(blend, dict) else None
    if not isinstance(sources, list) or not sources:
        raise DataError(f"{path}: blend file needs a non-empty 'sources' list")
    files = []
    for i, src in enumerate(sources):
        if not isinstance(src, dict):
            raise DataError(
                f'{path}: sources[{i}] must be an object like {{"paths": [...], "epochs": 1}}, got {json.dumps(src)}'
            )
        paths = src.get("paths", src.get("path"))
        if isinstance(paths, str):
            paths = [paths]
        if not paths:
            raise DataError(f"{path}: sources[{i}] has no 'paths'")
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise DataError(f"{path}: sources[{i}].paths must be a path or a list of paths, got {json.dumps(paths)}")
        # relative paths are relative to the blend file
        paths = [p if (Path(p).is_absolute() or ":" in p.split("/")[0]) else str(path.parent / p) for p in paths]
        key = "epochs" if "epochs" in src else "weight"
        epochs = src.get(key, 1.0)
        if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or not epochs > 0 or epochs == float("inf"):
            raise DataError(
                f"{path}: sources[{i}].{key} must be a number > 0 (times the source is used), got {json.dumps(epochs)}"
            )
        files.extend(expand_inputs(paths, epochs=float(epochs)))
    return files


# ----------------------------------------------------------------------------- line readers
def _iter_lines_plain(path: str) -> Iterator[tuple[int, bytes | None, str | None]]:
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            yield n, raw, None


def _frame_content_size(header: bytes) -> int | None:
    """The decompressed size a zstd frame header declares, or None (not recorded, e.g. streamed files)."""
    import zstandard

    try:
        size = zstandard.get_frame_parameters(header).content_size
    except zstandard.ZstdError:  # a header cut short
        return None
    return None if size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR) else size


def _iter_lines_zst(path: str, acct: dict | None = None) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Decompress chunk by chunk; a frame that never ends (or corrupt data) is reported.

    On such an error ``acct["bytes_lost"]`` is set to the document bytes lost: what the broken frame's
    header declares minus what came out of it, plus the partial last line; None when the header does
    not record its size (files written by a streaming compressor), i.e. the loss cannot be measured.
    """
    import zstandard

    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    n = 0
    buf = b""
    frame_size = frame_out = None
    with open(path, "rb") as fh:
        dobj = None  # None between frames
        error = None
        while error is None:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            while chunk:
                if dobj is None:  # a frame starts here: its header may declare its size
                    dobj = dctx.decompressobj()
                    frame_size, frame_out = _frame_content_size(chunk[:18]), 0
                try:
                    data = dobj.decompress(chunk)
                except zstandard.ZstdError as e:
                    error = f"corrupt zstd data ({e})"
                    break
                frame_out += len(data)
                chunk = b""
                if dobj.eof:  # frame complete; another frame may follow
                    chunk = dobj.unused_data
                    dobj = None
                if data:
                    buf += data
                    lines = buf.split(b"\n")
                    buf = lines.pop()
                    for line in lines:
                        n += 1
                        yield n, line, None
        if error is None and dobj is not None:
            error = "zstd frame ends early (truncated file)"
    if error is not None:
        # the partial last line is lost with the rest of the file
        lost = None if frame_size is None else max(frame_size - frame_out, 0) + len(buf)
        if acct is not None:
            acct["bytes_lost"] = lost
        yield (
            n + 1,
            None,
            error
            + (
                f": {lost:,} bytes lost"
                if lost is not None
                else ": the amount lost is unknown (the frame header records no size)"
            ),
        )
    elif buf:
        yield n + 1, buf, None


def _iter_lines_compressed(path: str, kind: str) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Lines of a gzip, bzip2 or xz file, streamed; a stream cut short or corrupt ends it with an error."""
    import importlib

    import lzma
    import zlib

    module = importlib.import_module(COMPRESSED[kind])
    n = 0
    try:
        with module.open(path, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                yield n, raw, None
    # gzip: EOFError/BadGzipFile/zlib.error, lzma: LZMAError (neither an OSError: a file that is not xz was a traceback)
    except (EOFError, OSError, ValueError, lzma.LZMAError, zlib.error) as e:
        yield n + 1, None, f"the {module.__name__} stream ends early or is corrupt ({type(e).__name__}: {e})"


def _iter_saved(src: dict, text_field: str = "text") -> Iterator[tuple[int, dict]]:
    """Rows of a ``save_to_disk`` folder (a DatasetDict's ``split``, default ``train``), in batches."""
    import datasets

    path = src["path"]
    try:
        ds = datasets.load_from_disk(path)
    except Exception as e:  # another datasets version's layout, a broken state.json: one line naming the folder
        raise DataError(
            f"{path}: cannot load it as a datasets save_to_disk folder "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        split = src.get("split") or "train"
        if split not in ds:
            raise DataError(f"{path}: no split {split!r} (splits: {', '.join(ds)}): name one with {path}?split=NAME")
        ds = ds[split]
    elif src.get("split"):
        raise DataError(f"{path}: a single Dataset, not a DatasetDict: it has no splits, drop ?split=")
    if text_field not in ds.column_names:
        raise wrong_field_in_rows(path, text_field, ds.select(range(min(FIELD_CHECK_RECORDS, len(ds)))).to_list())
    columns = [c for c in dict.fromkeys((text_field, "meta", "pile_set_name")) if c in ds.column_names]
    n = 0
    for batch in ds.select_columns(columns).iter(batch_size=1024):
        for i in range(len(batch[text_field])):
            n += 1
            yield n, {c: batch[c][i] for c in columns}


def wrong_field(path: str, field: str, records: int, fields: dict[str, int]) -> DataError:
    """The error for a file whose first ``records`` records have no ``field``: which fields they have (``fields``:
    name -> characters of string values), and the one that seems to hold the documents."""
    best = max((k for k, n in fields.items() if n > 0), key=lambda k: fields[k], default=None)
    names = ", ".join(sorted(fields)) or "none"
    return DataError(
        f"{path}: no field {field!r} in its first {records} record{'s' if records != 1 else ''} (fields: "
        f"{names}): "
        + (
            f"the documents seem to be in {best!r}: pass --text-field {best}"
            if best
            else "name the field that holds the documents with --text-field"
        )
    )


def wrong_field_in_rows(path: str, field: str, rows: list[dict]) -> DataError:
    """:func:`wrong_field` for a table whose first ``rows`` have no column ``field``."""
    fields: dict[str, int] = {}
    for row in rows:
        _count_fields(fields, row)
    return wrong_field(path, field, len(rows), fields)


def _count_fields(fields: dict[str, int], row: dict) -> None:
    """Add ``row``'s fields to ``fields`` (name -> characters of string values), for :func:`wrong_field`."""
    for k, v in row.items():
        fields[str(k)] = fields.get(str(k), 0) + (len(v) if isinstance(v, str) else 0)


def _iter_parquet(path: str, text_field: str = "text") -> Iterator[tuple[int, dict]]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    if text_field not in names:  # no such column: say which there are, on its first rows
        first = next(pf.iter_batches(batch_size=FIELD_CHECK_RECORDS), None)
        rows = first.to_pylist() if first is not None else []
        if rows:
            raise wrong_field_in_rows(path, text_field, rows)
    cols = [c for c in dict.fromkeys((text_field, "meta", "pile_set_name")) if c in names]
    n = 0
    for batch in pf.iter_batches(batch_size=1024, columns=cols or None):
        for row in batch.to_pylist():
            n += 1
            yield n, row


def hub_arguments(spec: str) -> tuple[str, dict]:
    """``ID?name=CONFIG&split=SPLIT&data_files=GLOB[,GLOB]&revision=REV`` -> (ID, load_dataset keyword arguments).

    E.g. ``allenai/c4?name=en&split=validation&data_files=en/c4-validation.00000-of-00008.json.gz``; ``split``
    defaults to ``train``. A packaged builder reads local files the same way: ``json?data_files=/data/*.jsonl``.
    """
    dataset, _, query = spec.partition("?")
    kwargs: dict = {"split": "train"}
    for item in query.split("&") if query else []:  # not URL-decoded: a "+" or "%" in a file name stays itself
        key, eq, value = item.partition("=")
        if not eq:
            raise DataError(f"{spec}: option {item!r} is not key=value")
        if key not in HUB_OPTIONS:
            raise DataError(f"{spec}: unknown Hub option {key!r} (known: {', '.join(HUB_OPTIONS)})")
        kwargs[key] = value.split(",") if key == "data_files" else value
    if not dataset:
        raise DataError(f"{spec}: no dataset id before '?'")
    return dataset, kwargs


def _iter_hub(spec: str) -> Iterator[tuple[int, dict]]:
    import datasets

    dataset, kwargs = hub_arguments(spec)
    try:
        ds = datasets.load_dataset(dataset, streaming=True, **kwargs)
    except Exception as e:  # offline, unknown id, config or split: one line that names the input
        raise DataError(
            f"{spec}: cannot load it as a Hub dataset nor find a local file of that name "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        ) from None
    for n, row in enumerate(ds, 1):
        yield n, row


# ----------------------------------------------------------------------------- records
def _set_name(obj: dict) -> str:
    meta = obj.get("meta")
    if isinstance(meta, str):  # some Pile mirrors store meta as a JSON string
        try:
            meta = json.loads(meta)
        except ValueError:
            meta = None
    name = meta.get("pile_set_name") if isinstance(meta, dict) else obj.get("pile_set_name")
    return str(name) if name else UNKNOWN_SET


def _check(obj, text_field: str = "text") -> tuple[str | None, str | None, str]:
    """-> (text, set, reason); reason is "" for a good record. The text is ``obj[text_field]``."""
    if not isinstance(obj, dict):
        return None, None, "malformed_json"
    text = obj.get(text_field)
    if not isinstance(text, str):
        return None, None, "missing_text"
    if not text.strip():
        return None, None, "empty_document"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None, None, "non_utf8"
    return text, _set_name(obj), ""


def _txt_records(path: str, split: str, acct: dict) -> Iterator[tuple[int, str | None, str | None, str, str, int]]:
    """A plain-text file: one document (``split="file"``) or one per blank-line-separated paragraph
    (``"paragraph"``, numbered by the line it starts on). Its set is the name of its folder."""
    if not os.path.exists(path):
        acct.update(lost="missing_file", bytes_lost=None)
        yield 0, None, None, "missing_file", "does not exist", 0
        return
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is no part of the text
    except UnicodeDecodeError as e:
        yield 1 + raw[: e.start].count(b"\n"), None, None, "non_utf8", f"invalid byte at offset {e.start}", len(raw)
        return
    set_name = Path(path).parent.name or UNKNOWN_SET
    if split == "file":
        yield (1, text, set_name, "", "", len(raw)) if text.strip() else (1, None, None, "empty_document", "", len(raw))
        return
    start = 0
    for sep in [*re.finditer(r"\n[ \t]*\n\s*", text), None]:
        end = sep.start() if sep else len(text)
        paragraph = text[start:end].rstrip("\n")  # the file's final newline is not part of its last paragraph
        if paragraph.strip():
            yield 1 + text.count("\n", 0, start), paragraph, set_name, "", "", len(paragraph.encode("utf-8"))
        start = sep.end() if sep else end


def _note_fields(acct: dict, reason: str, record, field: str) -> None:
    """Remember the fields of a record that has no ``field`` at all (for :func:`wrong_field`)."""
    if reason == "missing_text" and isinstance(record, dict) and field not in record:
        _count_fields(acct.setdefault("fields", {}), record)


def _records(src: dict, acct: dict) -> Iterator[tuple[int, str | None, str | None, str, str, int]]:
    """-> (line, text, set, reason, detail, bytes) for one source (text from its ``text_field``, default
    "text"); ``acct`` gets what was lost of the file (``lost``: reason, ``bytes_lost``: bytes, None if unknown)."""
    kind, path = src["kind"], src["path"]
    field = src.get("text_field", "text")
    if kind == "missing":
        acct.update(lost="missing_file", bytes_lost=None)
        yield 0, None, None, "missing_file", src.get("error", "does not exist"), 0
        return
    if kind == "txt":
        yield from _txt_records(path, src.get("txt_split", "file"), acct)
        return
    if kind in ("jsonl", "zst", *COMPRESSED):
        if not os.path.exists(path):
            acct.update(lost="missing_file", bytes_lost=None)
            yield 0, None, None, "missing_file", "does not exist", 0
            return
        lines = (
            _iter_lines_zst(path, acct)
            if kind == "zst"
            else _iter_lines_compressed(path, kind)
            if kind in COMPRESSED
            else _iter_lines_plain(path)
        )
        for n, raw, error in lines:
            if error is not None:
                lost = "truncated_zst" if kind == "zst" else "truncated_file"
                acct["lost"] = lost
                if kind != "zst":  # the stream cannot tell how much of it was lost
                    acct["bytes_lost"] = None
                yield n, None, None, lost, error, 0
                return
            nbytes = len(raw) + (kind == "zst")  # plain lines keep their newline, decompressed ones do not
            if n == 1 and raw.startswith(BOM):  # a byte-order mark (Windows editors write one) is not the record's
                raw = raw[len(BOM) :]
            if not raw.strip():
                continue
            try:
                s = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield n, None, None, "non_utf8", f"invalid byte at offset {e.start}", nbytes
                continue
            try:
                obj = json.loads(s)
            except ValueError as e:
                yield n, None, None, "malformed_json", str(e), nbytes
                continue
            text, set_name, reason = _check(obj, field)
            _note_fields(acct, reason, obj, field)
            yield n, text, set_name, reason, "", nbytes
    else:
        rows = (
            _iter_parquet(path, field)
            if kind == "parquet"
            else _iter_saved(src, field)
            if kind == "saved"
            else _iter_hub(path)
        )
        n = 0
        try:
            for n, row in rows:
                text, set_name, reason = _check(row, field)
                _note_fields(acct, reason, row, field)
                yield n, text, set_name, reason, "", len(text.encode("utf-8")) if text else 0
        except Exception as e:  # pyarrow on a truncated or corrupt parquet file (ArrowInvalid, OSError)
            if kind != "parquet" or isinstance(e, DataError):
                raise
            acct.update(lost="unreadable_file", bytes_lost=None)
            yield (
                n + 1,
                None,
                None,
                "unreadable_file",
                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                0,
            )


def generate_records(
    files: list[dict], on_bad: str = "skip", limit: int | None = None, sets=None, file_rows: bool = False
):
    """``datasets.Dataset.from_generator`` generator: one row per record of ``files``.

    With ``file_rows``, each file read ends with one accounting row (``skip`` = :data:`FILE_ROW`,
    ``where`` = the path, ``text`` = JSON: records, good, bad, bytes read, bytes of bad records,
    ``lost`` (missing_file, empty_file, truncated_zst, truncated_file, unreadable_file or null), ``bytes_lost`` (None:
    unknown), ``complete``), so whole-file losses are counted even when workers read the files.

    Stops after ``limit`` good documents (per worker; the caller cuts the concatenation).
    ``sets``: keep only good documents whose ``pile_set_name`` is one of these (the others are
    neither yielded nor counted: a subset, not bad input).
    """
    if on_bad not in POLICIES:
        raise DataError(f"on_bad must be one of {POLICIES}, got {on_bad!r}")
    good = 0
    for src in files:
        frac = src.get("fraction", 1.0)
        warned = 0
        acct = {
            "records": 0,
            "good": 0,
            "bad": 0,
            "bytes": 0,
            "bad_bytes": 0,
            "lost": None,
            "bytes_lost": 0,
            "complete": True,
            "first_bad": None,
        }
        held: list[str] | None = []  # warnings held while every record so far lacks the text field (then None)
        field = src.get("text_field", "text")

        def warn(msg):
            nonlocal warned
            if warned < _MAX_WARNINGS_PER_FILE:
                logger.warning("skipped %s", msg)
            elif warned == _MAX_WARNINGS_PER_FILE:
                logger.warning("%s: more bad records; see manifest.json for counts", src["path"])
            warned += 1

        for line, text, set_name, reason, detail, nbytes in _records(src, acct):
            where = f"{src['path']}:{line}"
            acct["records"] += 1
            acct["bytes"] += nbytes
            if held is not None and not (reason == "missing_text" and acct.get("fields")):
                if held and on_bad == "fail":
                    raise DataError(held[0] + " [on_bad=fail]")
                for msg in held:  # a record of another kind: those were bad records after all
                    warn(msg)
                held = None
            if reason:
                acct["bad"] += 1
                acct["bad_bytes"] += nbytes
                acct["first_bad"] = acct["first_bad"] or f"{where}: {reason}"
                msg = f"{where}: {reason}" + (f" ({detail})" if detail else "")
                if held is not None:  # the field may be the wrong one: say so on the first records, not per record
                    held.append(msg)
                    if len(held) >= FIELD_CHECK_RECORDS:
                        raise wrong_field(src["path"], field, len(held), acct["fields"])
                    yield {"text": None, "set": None, "skip": reason, "where": where}
                    continue
                if on_bad == "fail":
                    raise DataError(msg + " [on_bad=fail]")
                warn(msg)
                yield {"text": None, "set": None, "skip": reason, "where": where}
                continue
            acct["good"] += 1
            if sets is not None and set_name not in sets:
                continue
            if frac < 1.0:
                key = f"{src['path']}:{line}:{src.get('pass', 0)}".encode()
                if int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64 >= frac:
                    continue
            yield {"text": text, "set": set_name, "skip": "", "where": ""}
            good += 1
            if limit is not None and good >= limit:
                acct["complete"] = False  # stopped early: what was not read is not lost
                break
        if held and acct["good"] == 0 and acct["records"] == len(held):  # a short file, none with the field
            raise wrong_field(src["path"], field, len(held), acct["fields"])
        if held and on_bad == "fail":
            raise DataError(held[0] + " [on_bad=fail]")
        for msg in held or []:
            warn(msg)
        acct.pop("fields", None)
        if (
            acct["records"] == 0
            and acct["lost"] is None
            and src["kind"] in ("jsonl", "zst", *COMPRESSED, "parquet", "saved")
        ):
            acct["lost"] = "empty_file"
            acct["bytes_lost"] = None
        if file_rows:
            yield {
                "text": json.dumps({**acct, "path": src["path"], "kind": src["kind"], "pass": src.get("pass", 0)}),
                "set": None,
                "skip": FILE_ROW,
                "where": src["path"],
            }
        if not acct["complete"]:
            return


__all__ = ["DataError", "REASONS", "POLICIES", "expand_inputs", "expand_blend", "generate_records"]
