"""Score the live model on ARC-Easy (validation subset) during training, through lm-eval's HFLM.

Usage::

    cb = LmEvalCallback(tokenizer, every_n_steps=500, task="arc_easy", limit=200)
    trainer = Trainer(..., callbacks=[cb])
    cb.attach(trainer)          # optional, recommended: log through trainer.log()
    trainer.train()

Every ``every_n_steps`` optimizer steps (``on_step_end``) and after each evaluation
(``on_evaluate``), the in-memory model (``kwargs["model"]``) is wrapped in
``HFLM(pretrained=model, tokenizer=tokenizer)`` and the first ``limit`` documents of the task's
``split`` are scored 0-shot with the task's own prompt (lm-eval's ``doc_to_text`` /
``doc_to_choice`` / ``doc_to_target``). The metrics ``eval/<task>_acc``, ``eval/<task>_acc_norm``
and ``eval/<task>_acc_avg_logprob`` (reference rule, see ``hfpretrain.eval.scoring``) are logged:

* attached to a Trainer: through ``trainer.log(...)``, i.e. into ``state.log_history`` *and*
  every reporting integration (TensorBoard, W&B, console), at the same step as the loss;
* not attached: appended to ``state.log_history`` (saved in ``trainer_state.json``) only.
  In ``on_evaluate`` the metrics are also added to the evaluation ``metrics`` dict.

Every call's metrics are kept in ``callback.history``. Scoring runs on the main process only
and needs the full (unsharded) model in memory, so it is not meant for ZeRO-3 / FSDP runs.
This module imports nothing from ``hfpretrain.training``.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from hfpretrain.eval.extras import require_lm_eval
from hfpretrain.eval.task_data import IN_TRAINING_TASKS, base_task

log = logging.getLogger(__name__)


def recipe_callbacks(recipe) -> list:
    """The callbacks a recipe's ``evaluation`` section asks for (``pretrain(..., callbacks=recipe_callbacks)``):
    an LmEvalCallback for ``evaluation.lm_eval_task``, checked now (task name, lm-eval installed, task data), so
    that a wrong one stops the run before any work. The tokenizer and cadence come from the trainer (attach).
    And the long-context evaluation after the last step (``evaluation.long_context_lengths``/``_blocks``)."""
    ev = recipe.evaluation
    callbacks = []
    if ev.long_context_lengths or ev.long_context_blocks:
        from hfpretrain.eval.long_context_callback import LongContextCallback

        callbacks.append(
            LongContextCallback(
                ev.long_context_lengths,
                ev.long_context_samples,
                ev.long_context_blocks,
                ev.long_context_min_document_tokens,
                recipe.model.document_mask,
            )
        )
    task = ev.lm_eval_task
    if not task:
        return callbacks
    try:
        return [LmEvalCallback(None, every_n_steps=None, task=task, limit=ev.lm_eval_limit), *callbacks]
    except ValueError as err:
        raise ValueError(f"evaluation.lm_eval_task={task}: {err}") from None


class LmEvalCallback(TrainerCallback):
    def __init__(
        self,
        tokenizer,
        every_n_steps: int | None,
        task: str = "arc_easy",
        limit: int | None = 200,
        split: str = "validation",
        batch_size: int = 16,
        data_root=None,
        at_evaluate: bool = True,
        prefix: str = "eval/",
    ):
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError("every_n_steps must be >= 1 (or None to score only on evaluate)")
        if split not in ("train", "validation", "test"):
            raise ValueError(f"split must be train/validation/test, not {split!r}")
        if base_task(task) not in IN_TRAINING_TASKS:
            raise ValueError(
                f"{task} cannot be scored during training (WinoGrande's partial scoring and LAMBADA's "
                f"greedy check run through lm-eval): use {', '.join(IN_TRAINING_TASKS)}"
            )
        # at the run's start, not at the first scoring step, hours in
        require_lm_eval(f"evaluation.lm_eval_task={task}")
        from hfpretrain.eval.local_tasks import task_sources

        # likewise the task's file, or the Hub's copy of it (one line either way)
        self._sources = task_sources([task], data_root, splits=(split,))
        self.tokenizer = tokenizer
        self.every_n_steps = every_n_steps
        self.task = task
        self.limit = limit
        self.split = split
        self.batch_size = batch_size
        self.data_root = data_root
        self.at_evaluate = at_evaluate
        self.prefix = prefix
        self.trainer = None
        self.history: list[dict] = []
        self._task_obj = None
        self._docs = None
        self._last_step = None
        if self._sources.get(task):  # the Hub's copy: downloaded now, not at the first scoring step, hours in
            self._load()

    def attach(self, trainer):
        """Log through ``trainer.log`` (reaches all reporting callbacks); without a tokenizer or a cadence given,
        take the trainer's (its processing_class; every eval_steps, else save_steps). Returns self."""
        self.trainer = trainer
        self.tokenizer = self.tokenizer if self.tokenizer is not None else trainer.processing_class
        if self.every_n_steps is None:
            self.every_n_steps = trainer.args.eval_steps or trainer.args.save_steps
        return self

    # ------------------------------------------------------------------ scoring
    def _load(self):
        if self._docs is None:
            from hfpretrain.eval.local_tasks import load_tasks
            from hfpretrain.eval.scoring import apply_limit

            self._task_obj = load_tasks([self.task], self.data_root, splits=(self.split,), sources=self._sources)[
                self.task
            ]
            docs = {
                "train": self._task_obj.training_docs,
                "validation": self._task_obj.validation_docs,
                "test": self._task_obj.test_docs,
            }[self.split]()
            self._docs = apply_limit(docs, self.limit)
        return self._task_obj, self._docs

    def score(self, model) -> dict:
        """Score ``model`` now; returns ``{"eval/<task>_acc": ..., ...}``."""
        import torch
        from lm_eval.models.huggingface import HFLM

        from hfpretrain.eval.scoring import score_docs

        task, docs = self._load()
        was_training = model.training
        model.eval()
        try:
            lm = HFLM(pretrained=model, tokenizer=self.tokenizer, batch_size=self.batch_size)
            with torch.no_grad():
                res = score_docs(lm, task, docs, prompt="lm_eval")
        finally:
            model.train(was_training)
        p = f"{self.prefix}{self.task}_"
        return {f"{p}acc": res["acc"], f"{p}acc_norm": res["acc_norm"], f"{p}acc_avg_logprob": res["acc_avg_logprob"]}

    def _run(self, state, model) -> dict | None:
        if model is None or not state.is_world_process_zero:
            return None
        if self._last_step == state.global_step:
            return None  # already scored at this step (step end + evaluate)
        self._last_step = state.global_step
        metrics = self.score(model)
        self.history.append({"step": state.global_step, **metrics})
        if self.trainer is not None:
            self.trainer.log(dict(metrics))
        else:
            state.log_history.append({**metrics, "step": state.global_step})
        log.info("step %d: %s", state.global_step, metrics)
        return metrics

    # ------------------------------------------------------------------ hooks
    def on_step_end(self, args, state, control, **kwargs):
        if self.every_n_steps and state.global_step > 0 and state.global_step % self.every_n_steps == 0:
            self._run(state, kwargs.get("model"))
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not self.at_evaluate:
            return control
        new = self._run(state, kwargs.get("model"))
        if new is None and self.history and self.history[-1]["step"] == state.global_step:
            new = {k: v for k, v in self.history[-1].items() if k != "step"}
        if new and metrics is not None:
            metrics.update(new)
        return control
