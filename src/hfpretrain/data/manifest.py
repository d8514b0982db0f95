"""The fingerprint that decides reuse, input checksums, and reading/writing ``manifest.json``.

The fingerprint is a sha256 over: the input sources (path, size and mtime for local files;
the id for Hub datasets; fraction/pass for blends), the tokenizer hash, the end-of-text id,
seq_len, val_docs, max_docs, the selected sets (``--sets``, when given), the packing (``--pack``, when not
``concat``) and :data:`PIPELINE_VERSION`.
It is cheap (no file reads), so checking whether a finished output can be reused is instant; the manifest also records each
input's sha256, computed while building.

Manifest keys (top level): ``format``, ``pipeline_version``, ``created``, ``fingerprint``,
``layout``, ``seq_len``, ``pack``, ``dtype``, ``tokenizer`` {name_or_path, vocab_size, eos_token,
eos_token_id, sha256, class, encoder {name, reason}}, ``inputs`` / ``val_inputs`` [{path, kind, size, sha256}], ``val_docs``,
``max_docs``, ``select_sets`` (``--sets``: the only sets kept, or null), ``on_bad``, ``max_bad_fraction``,
``sets`` (index -> name for ``set_ids``),
``train`` / ``validation`` {records_read, documents, skipped {reason: n}, bad_examples
[{where, reason}], tokens, text_tokens, eos_tokens, blocks, block_tokens, dropped_tail_tokens,
tokens_per_set, document_lengths {documents, mean, p50, p90, p99, max, longer_than_block, split,
split_short, histogram}, text_bytes (UTF-8 bytes of the documents: bits per byte), text_bytes_per_set, bytes (on disk), bare_id_bytes, bytes_overhead}, ``wall_time_s``, ``tokens_per_s``, ``num_proc``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from .read import FILE_KINDS

PIPELINE_VERSION = "1"
MANIFEST = "manifest.json"
# manifest["format"]: the marker that a folder is an output of tokenize_corpus (and so may be replaced by it)
FORMAT = "hfpretrain.tokenized"


def saved_fingerprints(folder: str) -> dict:
    """``datasets``' fingerprint of each table of a ``save_to_disk`` folder (each split's ``state.json``)."""
    out = {}
    for state in sorted(Path(folder).rglob("state.json")):
        try:
            out[str(state.parent.relative_to(folder))] = json.loads(state.read_text()).get("_fingerprint")
        except ValueError:
            out[str(state.parent.relative_to(folder))] = None  # load_from_disk names the broken file
    return out


def _source_key(src: dict) -> list:
    key = [src["kind"], src["path"], src.get("pass", 0), src.get("fraction", 1.0)]
    if src.get("text_field", "text") != "text":  # only then: outputs read from "text" keep their fingerprints
        key.append({"text_field": src["text_field"]})
    if src["kind"] == "txt":
        key.append({"txt_split": src.get("txt_split", "file")})
    if src["kind"] in FILE_KINDS and os.path.exists(src["path"]):
        st = os.stat(src["path"])
        key += [st.st_size, st.st_mtime_ns]
    if src["kind"] == "saved":  # datasets' own fingerprint of the saved table(s), and the split read
        key.append({"split": src.get("split"), "state": saved_fingerprints(src["path"])})
    return key


def fingerprint(
    train_sources,
    val_sources,
    tokenizer_sha: str,
    eos_id: int,
    seq_len: int,
    val_docs: int | str,
    max_docs: int | None,
    sets=None,
    pack: str = "concat",
) -> str:
    payload = {
        "train": [_source_key(s) for s in train_sources],
        "val": [_source_key(s) for s in val_sources] if val_sources is not None else None,
        "tokenizer": tokenizer_sha,
        "eos_id": int(eos_id),
        "seq_len": int(seq_len),
        "val_docs": val_docs if val_docs == "auto" else int(val_docs),
        "max_docs": max_docs,
        "version": PIPELINE_VERSION,
    }
    if sets is not None:  # only when selecting: outputs of all sets keep their fingerprints
        payload["sets"] = sorted(sets)
    if pack != "concat":  # likewise: concat outputs keep theirs
        payload["pack"] = pack
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def file_sha256(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def describe_inputs(sources) -> list[dict]:
    """One entry per distinct source path (repeats of a blend are listed once, with passes)."""
    out: dict[str, dict] = {}
    for s in sources or []:
        e = out.get(s["path"])
        if e is None:
            e = {"path": s["path"], "kind": s["kind"]}
            if s["kind"] in FILE_KINDS and os.path.exists(s["path"]):
                e["size"] = os.path.getsize(s["path"])
                e["sha256"] = file_sha256(s["path"])
            out[s["path"]] = e
            e["epochs"] = 0.0
        e["epochs"] = round(e["epochs"] + s.get("fraction", 1.0), 6)
    return list(out.values())


def read_manifest(out: Path) -> dict | None:
    p = Path(out) / MANIFEST
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except ValueError:
        return None


def tokens_per_byte(manifest: dict, split: str = "validation") -> float | None:
    """Tokens (end-of-text included) per UTF-8 byte of the split's text. None for an output tokenized before
    ``text_bytes`` was recorded (its ``bytes`` is the size on disk, not the text)."""
    stats = manifest.get(split) or {}
    return stats["tokens"] / stats["text_bytes"] if stats.get("text_bytes") else None


def bits_per_byte(nats_per_token: float, tokens_per_byte: float) -> float:
    """A loss in nats per token as bits per byte of text: comparable across tokenizers."""
    return nats_per_token * tokens_per_byte / math.log(2)


def require_manifest(data_path, key: str = "data.path") -> dict:
    """The manifest of a data folder a run reads (:func:`read_manifest` is for folders that may not be one);
    ``key``: the setting that named the folder, for the error."""
    manifest = read_manifest(data_path)
    if manifest is None:
        path = Path(data_path)
        if not path.exists():
            raise FileNotFoundError(
                f"{key}={data_path} does not exist: make it with `hfpretrain tokenize --input FILE... "
                f"--tokenizer TOKENIZER --seq-len N --out {data_path}` (README, A first run by hand)"
            )
        raise FileNotFoundError(
            f"{key}={data_path}: {path / MANIFEST} is missing or not JSON: not an output folder of "
            "`hfpretrain tokenize`"
        )
    return manifest


def is_output(manifest) -> bool:
    """Whether ``manifest`` (from :func:`read_manifest`) marks its folder as a tokenize_corpus output:
    any valid JSON named manifest.json is not enough, it must carry this tool's ``format``."""
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def write_manifest(out: Path, manifest: dict) -> None:
    p = Path(out) / MANIFEST
    p.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def dir_bytes(path: Path, suffix: str = ".arrow") -> int:
    return sum(f.stat().st_size for f in Path(path).rglob(f"*{suffix}"))
