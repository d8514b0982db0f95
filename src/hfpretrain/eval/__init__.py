"""Evaluation (lm-evaluation-harness on local ARC / OpenBookQA files) and text generation.

Public API (imported lazily so ``import hfpretrain.eval`` stays light):

* ``evaluate_checkpoint(checkpoint, tasks=("arc_easy", "arc_challenge", "openbookqa"), limit=None,
  batch_size=8, dtype="auto", device=None, out_dir=None, data_root=None, scoring="lm_eval") -> dict``
* ``generate(model, prompts, max_new_tokens=64, temperature=1.0, top_p=1.0, top_k=50,
  repetition_penalty=1.0, seed=0, device=None) -> list[dict]``
* ``TASK_DIR``: the lm-eval task directory to pass as ``--include_path``.
* ``hfpretrain.eval.callback.LmEvalCallback``: in-training scoring through HFLM.

See docs/eval.md.
"""

from __future__ import annotations

__all__ = ["evaluate_checkpoint", "generate", "TASK_DIR", "DEFAULT_TASKS"]


def __getattr__(name):
    if name == "evaluate_checkpoint":
        from hfpretrain.eval.harness import evaluate_checkpoint

        return evaluate_checkpoint
    if name == "generate":
        from hfpretrain.eval.generation import generate

        return generate
    if name in ("TASK_DIR", "DEFAULT_TASKS"):
        from hfpretrain.eval import local_tasks

        return getattr(local_tasks, name)
    raise AttributeError(f"module 'hfpretrain.eval' has no attribute {name!r}")
