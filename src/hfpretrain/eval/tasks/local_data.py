"""``custom_dataset`` loader for the local ARC / OpenBookQA task twins (lm-eval ``!function``).

lm-eval calls ``custom_dataset(**metadata, **dataset_kwargs)``.  The data root comes from the
``data_root`` metadata key (``--metadata '{"data_root": "/path"}'`` or
``TaskManager(metadata={"data_root": ...})``), else from the ``DATA_ROOT`` environment variable, else the
embedded data root (``hfpretrain.paths``).
``dataset_kwargs.local_task`` names which files to read.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from hfpretrain.eval.ai2 import load_dataset_dict
except ImportError:  # used from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from hfpretrain.eval.ai2 import load_dataset_dict


def load(local_task: str, data_root: str | None = None, **_ignored):
    return load_dataset_dict(local_task, data_root)
