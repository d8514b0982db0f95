"""Shared fixtures: the data root, small tokenized corpora and a tiny trained checkpoint.

Everything here is real: real Arrow files from the real pipeline, real Trainer runs.
Session-scoped so the expensive pieces are built once per test run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = os.environ.get("DATA_ROOT")
    if not root or not Path(root).is_dir():
        pytest.fail("DATA_ROOT is not set to the data folder (tokenizers/, eval/, pretrain/)")
    return Path(root)


@pytest.fixture(scope="session")
def gpt2_tokenizer(data_root) -> Path:
    return data_root / "tokenizers" / "gpt2"


@pytest.fixture(scope="session")
def mini_train(data_root) -> Path:
    return data_root / "pretrain" / "mix" / "mini_train.jsonl.zst"


@pytest.fixture(scope="session")
def mini_val(data_root) -> Path:
    return data_root / "pretrain" / "mix" / "mini_val.jsonl.zst"
