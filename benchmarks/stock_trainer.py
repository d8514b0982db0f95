"""Throughput benchmarks: this project's trainer against a stock ``transformers.Trainer``.

Both sides train the same model config on the same Arrow blocks and are timed by the same
:class:`ThroughputCallback` (training steps only, compile warm-up windows dropped). The stock
side is what a user gets from the documentation: ``AutoModelForCausalLM.from_config`` with sdpa,
``Trainer`` with ``bf16``, ``torch_compile=True``, ``adamw_torch_fused`` and the standard
``DataCollatorForLanguageModeling(mlm=False)``; nothing from this project but the timer.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)

from hfpretrain.models import TrainingLayout, detect_peak_flops, estimate_memory, flops_per_token, load_config
from hfpretrain.models.memory import GIB

from hfpretrain.training.callbacks import ThroughputCallback
from hfpretrain.training.config import load_recipe
from hfpretrain.data.manifest import require_manifest

WARMUP_WINDOWS = 2  # logging windows holding torch.compile and allocator warm-up


def steady_state(windows: list[dict]) -> dict:
    """Median of the logging windows after warm-up."""
    kept = windows[WARMUP_WINDOWS:] or windows[-1:]
    keys = ["tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu"]
    return {k: statistics.median(w[k] for w in kept) for k in keys if kept and k in kept[0]} | {"windows": len(kept)}


def summarize_run(output_dir: str | Path) -> dict:
    """Steady-state figures of a ``pretrain`` run, read back from its JSONL log (``log.jsonl``, or the
    ``log.jsonl.xz`` that results/ keeps)."""
    from hfpretrain.study.plots import read_log, run_log

    events = read_log(run_log(output_dir) or Path(output_dir) / "log.jsonl")
    windows = [e for e in events if e["event"] == "log" and "tokens_per_s" in e]
    summary = next((e for e in events if e["event"] == "summary"), {})
    config = next(e for e in events if e["event"] == "config")
    return {
        "trainer": "hfpretrain",
        **steady_state(windows),
        "mem_peak_gib": max((w.get("mem_peak_gib", 0) for w in windows), default=None),
        "memory_estimate_gib": config["plan"]["memory_per_gpu_gib"],
        "end_to_end": summary.get("end_to_end"),
        "final_eval": summary.get("final_eval"),
        "loss_impl": config.get("loss_impl"),
        "compiled_modules": config.get("compiled_modules"),
        "micro_batch": config["plan"].get(
            "micro_batch", config["recipe"]["training"].get("per_device_train_batch_size")
        ),
        "gradient_accumulation_steps": config["plan"].get("gradient_accumulation_steps"),
        "last_loss": windows[-1].get("loss") if windows else None,
    }


class _WindowRecorder(ThroughputCallback):
    """ThroughputCallback that also keeps every window's figures (the stock Trainer's logs)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.windows = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        super().on_log(args, state, control, logs=logs, **kwargs)
        if logs is not None and "loss" in logs and "tokens_per_s" in logs:  # a training window
            self.windows.append(
                {
                    k: logs[k]
                    for k in ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "loss")
                    if k in logs
                }
            )


def run_stock(recipe_path: str, overrides: list[str], micro_batch: int, max_steps: int, output_dir: str) -> dict:
    recipe = load_recipe(recipe_path, overrides)
    manifest = require_manifest(recipe.data.path)
    tokenizer = AutoTokenizer.from_pretrained(str(Path(recipe.data.path) / "tokenizer"))
    tokenizer.pad_token = tokenizer.pad_token or manifest["tokenizer"]["eos_token"]
    # As a user's own config.json: the vocab unpadded (GPT-2's 50,257 stays), no project defaults.
    config = load_config(
        recipe.model.config, {**recipe.model.overrides, "pad_vocab_multiple": 1}, vocab_size=len(tokenizer)
    )
    seq_len = int(manifest["seq_len"])
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")

    import datasets

    train = datasets.load_from_disk(str(Path(recipe.data.path) / "train")).select_columns(["input_ids"])
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=1,
        learning_rate=recipe.training.get("learning_rate", 3e-4),
        warmup_steps=10,
        weight_decay=0.1,
        adam_beta2=0.95,
        max_grad_norm=1.0,
        bf16=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(),
        torch_compile=torch.cuda.is_available(),
        optim="adamw_torch_fused" if torch.cuda.is_available() else "adamw_torch",
        logging_steps=10,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        dataloader_num_workers=4 if torch.cuda.is_available() else 0,
        dataloader_pin_memory=True,
        disable_tqdm=True,
        seed=recipe.training.get("seed", 42),
    )
    world = args.world_size
    tokens_per_step = micro_batch * world * seq_len
    recorder = _WindowRecorder(
        tokens_per_step,
        flops_per_token(config, seq_len).total,
        recipe.logging.peak_flops or detect_peak_flops("bf16"),
        world,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=[recorder],
    )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    return {
        "trainer": "stock transformers.Trainer",
        **steady_state(recorder.windows),
        "micro_batch": micro_batch,
        "mem_peak_gib": torch.cuda.max_memory_allocated() / GIB if torch.cuda.is_available() else None,
        "memory_estimate_gib": {
            k: v / GIB for k, v in estimate_memory(config, TrainingLayout(micro_batch, seq_len)).__dict__.items()
        },
        "last_loss": recorder.windows[-1].get("loss") if recorder.windows else None,
    }
