"""Golden losses: the first per-step train losses of the fixed reference run (tiny model, seed
1234, micro-batch 4, lr 3e-3 with 2 warmup steps, the mini blocks; see train_utils.REFERENCE)
must match tests/training/golden_tiny_loss.json within 1e-4, so a silent numeric change (init,
data order, loss, optimizer, schedule) is caught.

To regenerate after an intended change (and say why in the commit message):

    HFPRETRAIN_REGEN_GOLDEN=1 python -m pytest tests/training/test_golden.py

which rewrites the JSON from the reference run and then passes. The losses depend on the data: the
full data mount's mini corpus (DATA_ROOT set) has golden_tiny_loss.json, the embedded sample data
(DATA_ROOT unset) golden_tiny_loss_embedded.json; regenerate each with its data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import transformers

from hfpretrain.paths import using_embedded_data
from train_utils import REFERENCE, step_losses

GOLDEN = Path(__file__).with_name(
    "golden_tiny_loss_embedded.json" if using_embedded_data() else "golden_tiny_loss.json"
)


def test_golden_tiny_loss(reference_run):
    losses = step_losses(reference_run)
    steps = sorted(losses)
    if os.environ.get("HFPRETRAIN_REGEN_GOLDEN"):
        GOLDEN.write_text(
            json.dumps(
                {
                    "what": "per-step train loss of the reference run (tests/training/train_utils.py: BASE + REFERENCE)"
                    + (" on the embedded sample data" if using_embedded_data() else ""),
                    "overrides": REFERENCE,
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "losses": {str(s): losses[s] for s in steps},
                },
                indent=2,
            )
            + "\n"
        )
    golden = {int(k): v for k, v in json.loads(GOLDEN.read_text())["losses"].items()}
    assert sorted(golden) == steps
    for s in steps:
        assert losses[s] == pytest.approx(golden[s], abs=1e-4), f"step {s}: {losses[s]} vs golden {golden[s]}"
