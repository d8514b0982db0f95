"""Helpers for the data tests: write small Pile-format inputs."""

from __future__ import annotations

import json
from pathlib import Path

import zstandard


def doc(text, set_name="Test"):
    return {"text": text, "meta": {"pile_set_name": set_name}}


def lines_of(records) -> list[bytes]:
    out = []
    for r in records:
        out.append(r if isinstance(r, bytes) else json.dumps(r).encode())
    return out


def write_jsonl(path: Path, records) -> Path:
    path.write_bytes(b"".join(l + b"\n" for l in lines_of(records)))
    return path


def write_zst(path: Path, records) -> Path:
    data = b"".join(l + b"\n" for l in lines_of(records))
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    return path


def read_zst_texts(path: Path, n: int | None = None) -> list[dict]:
    """Independent reader (whole-file) for checking the pipeline's output."""
    data = zstandard.ZstdDecompressor().decompressobj().decompress(Path(path).read_bytes())
    rows = [json.loads(l) for l in data.split(b"\n") if l.strip()]
    return rows[:n] if n is not None else rows
