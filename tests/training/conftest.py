"""Fixtures of the training tests; the helpers they use are in train_utils.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from train_utils import REFERENCE, run_pretrain


@pytest.fixture(scope="session")
def reference_run(mini_blocks, tmp_path_factory) -> Path:
    """Output dir of the 10-step reference run (see REFERENCE); summary at summary.json."""
    out = tmp_path_factory.mktemp("reference") / "run"
    run_pretrain(mini_blocks, out, REFERENCE)
    return out
