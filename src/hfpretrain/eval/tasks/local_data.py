"""``custom_dataset`` loader and document functions for the local task twins (lm-eval ``!function``).

lm-eval calls ``custom_dataset(**metadata, **dataset_kwargs)``.  The data root comes from the
``data_root`` metadata key (``--metadata '{"data_root": "/path"}'`` or
``TaskManager(metadata={"data_root": ...})``), else from the ``DATA_ROOT`` environment variable, else the
embedded data root (``hfpretrain.paths``).
``dataset_kwargs.local_task`` names which files to read.

``process_hellaswag`` and the ``winogrande_*`` functions are lm-eval's own (lm_eval/tasks/hellaswag/utils.py,
lm_eval/tasks/winogrande/preprocess_winogrande.py, MIT licence), copied so that the tasks render identically
where lm-eval is installed without its bundled task folders.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    from hfpretrain.eval.task_data import load_dataset_dict
except ImportError:  # used from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from hfpretrain.eval.task_data import load_dataset_dict


def load(local_task: str, data_root: str | None = None, **_ignored):
    return load_dataset_dict(local_task, data_root)


def _hellaswag_text(text: str) -> str:
    text = text.strip()
    text = text.replace(" [title]", ". ")  # brackets are artifacts of HellaSwag's WikiHow part
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def process_hellaswag(dataset):
    def doc(d):
        ctx = d["ctx_a"] + " " + d["ctx_b"].capitalize()
        return {
            "query": _hellaswag_text(d["activity_label"] + ": " + ctx),
            "choices": [_hellaswag_text(e) for e in d["endings"]],
            "gold": int(d["label"]),
        }

    def docs(batch):  # lm-eval maps ``doc`` row by row: the same rows, a batch a call (10,042 rows: 1.9 -> 0.3 s)
        rows = [doc(dict(zip(batch, values))) for values in zip(*batch.values())]
        return {key: [row[key] for row in rows] for key in ("query", "choices", "gold")}

    return dataset.map(docs, batched=True)


def winogrande_doc_to_text(doc):  # the index of the right option: the "context" lm-eval scores against
    return {"1": 0, "2": 1}[doc["answer"]]


def winogrande_doc_to_target(doc):  # the sentence after the blank
    return doc["sentence"][doc["sentence"].index("_") + 1 :].strip()


def winogrande_doc_to_choice(doc):  # the sentence up to the blank, filled with each option
    idx = doc["sentence"].index("_")
    return [doc["sentence"][:idx] + opt for opt in (doc["option1"], doc["option2"])]
