"""The long-context evaluation of a recipe (``evaluation.long_context_lengths``/``long_context_blocks``) after the
last training step, on the live model: passkey retrieval and the loss by position (eval/long_context.py), written
to ``output_dir/long_context.json`` (the run's report reads it) and logged through ``trainer.log``
(``long_context/passkey_<length>``, ``long_context/loss_<from>_<to>``).

On the main process only, with the whole model in memory: refused under FSDP (rank 0 alone would run forwards on
sharded parameters and hang) and for passkey lengths past the model's positions, at attach, before training. It
is an extra: not after a SIGTERM (the grace period is short), and a failure (out of memory at a long length) is a
warning, so that the trained run still writes final/ and its summary.
"""

from __future__ import annotations

import json
import logging
from contextlib import nullcontext
from pathlib import Path

import torch
from transformers import TrainerCallback

from hfpretrain.eval.long_context import loss_by_position, passkey_accuracy
from hfpretrain.training import RecipeError
from hfpretrain.training.callbacks import STOP_REQUESTED

log = logging.getLogger(__name__)
FILE = "long_context.json"


class LongContextCallback(TrainerCallback):
    def __init__(self, lengths, samples: int, blocks: int, min_document_tokens: int, document_mask: bool):
        self.lengths, self.samples, self.blocks = list(lengths), samples, blocks
        self.min_document_tokens, self.document_mask = min_document_tokens, document_mask
        self.trainer = None
        self.result: dict | None = None

    def attach(self, trainer):
        if trainer.is_fsdp_enabled:
            raise RecipeError(
                "evaluation.long_context_lengths/_blocks: not under FSDP (the evaluation runs on rank 0 "
                "with the whole model): evaluate final/ with `hfpretrain long-context` instead"
            )
        config = trainer.model.config
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        too_long = [n for n in self.lengths if limit and n > limit]
        if too_long:
            raise RecipeError(
                f"evaluation.long_context_lengths={self.lengths}: {too_long} are past the model's "
                f"{limit} positions (max_position_embeddings): lengths up to {limit}, or a context "
                "phase to extend it (context.seq_len)"
            )
        self.trainer = trainer
        return self

    def measure(self, model) -> dict:
        trainer = self.trainer
        args = trainer.args
        amp = torch.autocast("cuda", dtype=torch.bfloat16) if args.bf16 and torch.cuda.is_available() else nullcontext()
        model = trainer.accelerator.unwrap_model(model)
        was_training = model.training
        result = {}
        try:
            with amp:
                if self.blocks:
                    blocks = trainer.eval_dataset
                    rows = [blocks[i] for i in range(min(self.blocks, len(blocks)))]
                    result["loss_by_position"] = loss_by_position(
                        model,
                        rows,
                        int(model.config.eos_token_id),
                        self.document_mask,
                        self.min_document_tokens,
                        args.per_device_eval_batch_size,
                    )
                if self.lengths:
                    result["passkey"] = passkey_accuracy(model, trainer.processing_class, self.lengths, self.samples)
        finally:
            model.train(was_training)
        return result

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if model is None or self.trainer is None or not state.is_world_process_zero or STOP_REQUESTED.is_set():
            return
        try:
            self.result = {"step": state.global_step, **self.measure(model)}
        except Exception as err:  # noqa: BLE001 - an extra after training must not cost the run its final/
            log.warning(
                "long-context evaluation failed (%s: %s); final/ and the summary are written without it; "
                "`hfpretrain long-context` evaluates final/ on its own",
                type(err).__name__,
                str(err).splitlines()[0] if str(err) else "",
            )
            return
        out = Path(args.output_dir) / FILE
        out.write_text(json.dumps(self.result, indent=2) + "\n")
        metrics = {f"long_context/passkey_{n}": v["accuracy"] for n, v in self.result.get("passkey", {}).items()}
        metrics.update(
            {
                f"long_context/loss_{b['from']}_{b['to']}": b["loss"]
                for b in (self.result.get("loss_by_position") or {}).get("bins", [])
                if b["loss"] is not None
            }
        )
        self.trainer.log(metrics)
        log.info("long-context evaluation: %s (%s)", metrics, out)
