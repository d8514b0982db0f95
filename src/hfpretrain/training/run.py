"""``pretrain(recipe, overrides)``: recipe -> model + blocks + PretrainTrainer -> checkpoints and logs.

Read top to bottom: resolve the recipe into one frozen run (resolve.py: the dry run stops there), refuse another
run's checkpoint (resume.py), build the model with its speed-ups (models/speedups.py), the data order
(data/order.py, data/mixture.py) and the trainer with its callbacks, train, evaluate on the final set, export
``final/`` and write the summary. Nothing here decides anything the resolved run has not decided.

Callbacks that belong to later packages (the lm-eval scoring of ``evaluation.lm_eval_task``, in eval/) are handed
in by the caller through ``callbacks``: training imports nothing from eval/ or study/.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Callable

import torch
from transformers import TrainerCallback, set_seed
from transformers.trainer import DEFAULT_PROGRESS_CALLBACK
from transformers.trainer_callback import ProgressCallback

from hfpretrain.data import load_blocks
from hfpretrain.data.mixture import MixtureBlocks
from hfpretrain.data.order import (
    EvalBlocks,
    ResumableSampler,
    ShuffledBlocks,
    collate_blocks,
    install_worker_cleanup,
    load_input_ids,
)
from hfpretrain.models import attention_backend, build_model
from hfpretrain.models.fp8 import check_fp8_available
from hfpretrain.models.speedups import Applied, apply_speedups

from .arguments import prepare_wandb
from .callbacks import (
    STOP_REQUESTED,
    stopped_by,
    CompileCheckCallback,
    GradStatsCallback,
    JsonlLogCallback,
    LineProgressCallback,
    MemoryCallback,
    MixtureLogCallback,
    PreemptionCallback,
    ProfilerCallback,
    TelemetryProgressCallback,
    ThroughputCallback,
    WandbConfigCallback,
)
from .barrier import RankCheckCallback
from .checkpoints import (
    check_output_dir,
    checkpoint_write_error,
    hold_run_lock,
    prepare_fresh_output_dir,
    write_failure,
)
from .config import SDPA_BACKENDS, Recipe, RecipeError, load_recipe, recipe_to_dict, recipe_to_yaml
from .fast_path import speedups_of
from .lineage import WandbLineageCallback, lineage, write_lineage
from .machine import Machine
from .model_card import peak_learning_rate, write_model_card
from .moe import ExpertBalanceCallback, ExpertLoad, aux_loss_function, find_routers, force_balanced_routing
from .nonfinite import NonFinitePolicy
from .per_set import per_set_bits_per_byte, per_set_losses
from .resolve import RESOLVED_FILE, ResolvedRun, read_data_facts, resolve, resolved_yaml
from .resume import check_resume, elastic_batch, refuse_other_optimizer_layout, resolve_resume, resume_reading
from .trainer import PretrainTrainer
from .reshard import load_universal_if_resized, whole_copy_if_fsdp

logger = logging.getLogger("hfpretrain")

# The caller's callbacks for a recipe (e.g. eval.callback.recipe_callbacks): built right after the recipe loads, so
# that their own checks fail before any work.
CallbackFactory = Callable[[Recipe], "list[TrainerCallback]"]


def pretrain(
    recipe_path: str | Path | None,
    overrides: list[str] | None = None,
    dry_run: bool = False,
    world_size: int | None = None,
    zero_stage: int | None = None,
    callbacks: CallbackFactory | None = None,
) -> dict:
    """Train (or with ``dry_run`` only resolve: the ResolvedRun's document; ``world_size``/``zero_stage`` then
    describe the launch being planned, e.g. 8 GPUs with ZeRO-1, instead of the current process).
    ``callbacks(recipe)``: the caller's Trainer callbacks (one with an ``attach(trainer)`` method is attached once
    the trainer exists)."""
    recipe = load_recipe(recipe_path, overrides)
    extra = list(callbacks(recipe)) if callbacks else []
    ev = recipe.evaluation
    scored = (
        f"evaluation.lm_eval_task={ev.lm_eval_task}"
        if ev.lm_eval_task
        else "evaluation.long_context_lengths/_blocks"
        if ev.long_context_lengths or ev.long_context_blocks
        else None
    )
    if scored and not extra and not dry_run:
        raise RecipeError(
            f"{scored} is scored by the eval package's callback: train through `hfpretrain train`, or "
            "pass callbacks=hfpretrain.eval.callback.recipe_callbacks to pretrain()"
        )
    if not dry_run:
        check_fp8_available(recipe.model.precision, recipe.model.fp8_emulate)  # before any work
    machine = Machine.detect(
        planning=dry_run, world_size=world_size if dry_run else None, zero_stage=zero_stage if dry_run else None
    )
    facts = read_data_facts(recipe, planning=dry_run)
    run = resolve(recipe, facts, machine)
    # a checkpoint saved on another number of processes resumes at its global batch (elastic resume), in its
    # optimizer's layout: a dry run plans that resume too, and refuses what the run would refuse
    resume = resolve_resume(recipe.training.get("resume_from_checkpoint"), run.args.output_dir)
    keep = elastic_batch(resume, run) if resume else []
    if keep:
        recipe = load_recipe(recipe_path, [*(overrides or []), *keep])
        run = resolve(recipe, facts, machine)
    zero = run.layout.zero_stage
    # FSDP2 planned on a CPU launch is run as DDP by accelerate: there it is known once the Trainer is built
    fsdp = False if zero != 3 else (True if machine.cuda else None)
    refuse_other_optimizer_layout(resume, run.layout.tp, zero in (1, 3), deepspeed=zero == 1, fsdp=fsdp)
    if dry_run:
        planned = run.to_dict()
        if resume:  # what the launch will read, and how (a dry run plans on one process: FSDP as the layout says)
            how = resume_reading(resume, run.layout.world_size, zero, fsdp is not False)
            planned["plan"]["resume"] = {"from": resume, "reading": how}
        return planned
    check_output_dir(run.args.output_dir)  # before the work: a run that cannot save is lost
    lock = hold_run_lock(run.args)
    try:
        return train_run(run, extra)
    finally:
        lock.release()


def train_run(run: ResolvedRun, extra_callbacks: list | None = None) -> dict:
    """Build the model, the data and the trainer; train; evaluate on the final set; export final/; summarise."""
    recipe, args, plan, seq_len = run.recipe, run.args, run.plan, run.seq_len
    data_seed = args.data_seed or args.seed
    record = lineage(
        recipe.data.path,
        run.manifest,
        recipe.data.tokenizer or str(Path(recipe.data.path) / "tokenizer"),
        run.data_info["tokenizer_sha256"],
        seq_len,
        plan["samples_per_step"],
        args.max_steps,
        data_seed,
        run.schedule,
    )
    # each checkpoint's data.json records the lineage too (a resume compares the keys above it)
    run = dataclasses.replace(run, data_info={**run.data_info, "lineage": record})
    # Before anything is written to output_dir: is its checkpoint this run's?
    resume = resolve_resume(recipe.training.get("resume_from_checkpoint"), args.output_dir)
    if resume:
        check_resume(resume, run)
    else:
        prepare_fresh_output_dir(args, recipe.training.get("resume_from_checkpoint"), recipe.overwrite_output_dir)
    prepare_wandb(args)

    set_seed(args.seed)
    model, applied = build_run_model(run)
    train_length = args.max_steps * plan["samples_per_step"]
    if run.schedule is None:
        train_blocks = ShuffledBlocks(load_input_ids(recipe.data.path, "train"), train_length, data_seed)
    else:
        train_blocks = MixtureBlocks(
            [load_input_ids(s.path, "train") for s in run.schedule.sources.values()], run.schedule, data_seed
        )
    val_blocks = load_input_ids(recipe.data.path, "validation")
    eval_blocks = EvalBlocks(val_blocks, recipe.evaluation.eval_tokens // seq_len)
    final_tokens = recipe.evaluation.final_eval_tokens
    final_blocks = EvalBlocks(val_blocks, len(val_blocks) if final_tokens is None else final_tokens // seq_len)

    out = Path(args.output_dir)
    if args.process_index == 0:  # the recipe as written, and what it resolved to on this launch
        out.mkdir(parents=True, exist_ok=True)
        (out / "recipe.yaml").write_text(recipe_to_yaml(recipe))
        (out / RESOLVED_FILE).write_text(resolved_yaml(run))
        write_lineage(out, record)
    trainer, logs = build_trainer(
        run, model, train_blocks, eval_blocks, train_length, record, applied, extra_callbacks or []
    )
    # again against the engine the Trainer runs
    sharded_engine = run.layout.zero_stage in (1, 3)
    refuse_other_optimizer_layout(
        resume, run.layout.tp, sharded_engine, deepspeed=trainer.is_deepspeed_enabled, fsdp=trainer.is_fsdp_enabled
    )
    load_universal_if_resized(resume, trainer)  # ZeRO shards of another GPU count: DeepSpeed's universal copy
    resume = whole_copy_if_fsdp(resume, trainer)  # FSDP's shards without FSDP: read whole, once
    if resume:
        logger.info("resuming from %s", resume)
    if args.dataloader_num_workers > 0:
        install_worker_cleanup()
    attention_kernels = sdpa_kernels(recipe.model.sdpa_backends) if torch.cuda.is_available() else nullcontext()
    try:
        # torch.compile traces inside train() (and evaluate()), so both see the same kernels and inductor settings
        with attention_kernels, torch._inductor.config.patch(dict(recipe.model.inductor_options)):
            result = trainer.train(resume_from_checkpoint=resume)  # its train_loss: the whole run's (trainer.log)
            trainer.check_finite()  # the last step's loss and gradient norm
            final_eval = final_evaluation(trainer, run, final_blocks, len(eval_blocks))
        summary = {
            "train": result.metrics,
            "final_eval": final_eval,
            "global_step": trainer.state.global_step,
            "end_to_end": getattr(logs.throughput, "end_to_end", {}),
            "skipped_steps": trainer.skipped_before + trainer.skipped_steps,  # earlier sessions' included
            "loss_impl": run.fast.fused_loss,
            "compiled_modules": applied.compiled_modules,
            "fp8_modules": applied.fp8_modules,
            "speedups": dataclasses.asdict(applied),
            "plan": plan,
            "peak_learning_rate": peak_learning_rate(
                trainer.lr_scheduler, trainer.state.global_step, args.learning_rate
            ),
            "code": record["code"],  # the code of this launch (lineage.json)
        }
        if logs.mixture:
            summary["data"] = logs.mixture.figures(trainer.state.global_step)
        finished = trainer.state.global_step >= args.max_steps
        # a stop by signal is not a finished run: said here, in summary.json, and by the command's exit status
        summary["stopped"] = None if finished else stopped_by()
        if summary["stopped"] and args.process_index == 0:
            logger.warning(
                "stopped by %s at step %d of %d: %s/checkpoint-%d saved; to go on, run the same command "
                "with training.resume_from_checkpoint=auto",
                summary["stopped"],
                trainer.state.global_step,
                args.max_steps,
                out,
                trainer.state.global_step,
            )
        if finished:
            try:
                trainer.save_model(str(out / "final"))
                if args.process_index == 0:
                    write_lineage(out / "final", record)
                    write_model_card(out / "final", run.config, plan, summary, recipe, run.manifest)
            except Exception as e:  # a full disk: one line, as for a checkpoint (safetensors raises its own error)
                cause = write_failure(e)
                if cause is None or args.process_index != 0:
                    raise
                raise checkpoint_write_error(out / "final", cause) from None
            if args.process_index == 0:
                if logs.wandb_lineage:
                    logs.wandb_lineage.log_model(out / "final", aliases=["final", f"step-{trainer.state.global_step}"])
                final_loss = f"validation loss {final_eval['eval_loss']:.4g}, " if "eval_loss" in final_eval else ""
                bpb = f"{final_eval['eval_bpb']:.4g} bits per byte; " if "eval_bpb" in final_eval else ""
                logger.info(
                    "done: %s%sthe model is in %s (from_pretrained, pipeline, lm_eval's pretrained=)",
                    final_loss,
                    bpb,
                    out / "final",
                )
        if args.process_index == 0:
            tmp = out / "summary.json.tmp"  # whole or absent: a study's other workers read it while it is written
            tmp.write_text(json.dumps(summary, indent=2, default=str))
            os.replace(tmp, out / "summary.json")
        logs.jsonl.write("summary", **summary)
    finally:  # a failed run too: its log file closed, the process's SIGTERM handler put back
        logs.jsonl.close()
        logs.preemption.restore()
    if "wandb" in args.report_to and args.process_index == 0:
        import wandb

        if wandb.run is not None:
            wandb.finish()  # this run's records and artifacts complete (a study trains the next in this process)
        # wandb keeps the settings of its first run in the process (its WANDB_DIR above all): reset them, so the
        # next run of a study logs into its own folder
        wandb.teardown()
    # A rank that exits while another still writes final/ aborted in gloo's teardown
    # ("terminate called without an active exception", SIGABRT, seen in CI under FSDP2).
    trainer.accelerator.wait_for_everyone()
    return summary


def build_run_model(run: ResolvedRun) -> tuple[torch.nn.Module, Applied]:
    """The model (built from its config, or ``init_from``'s weights) with the speed-ups the fast path chose
    (models/speedups.py): ``(model, what each speed-up changed)``."""
    fast = run.fast
    # each choice under the recipe key that sets it (the plan's JSON keeps the fast path's own names)
    keys = {
        "compile": "model.compile",
        "fused_loss": "loss.implementation",
        "precision": "model.precision",
        "residual_dtype": "model.residual_dtype",
        "experts_implementation": "model.experts_implementation",
    }
    for what, key in keys.items():
        if getattr(fast, what) is not None:
            why = fast.reasons[what]
            if what == "precision" and fast.precision == "bf16" and not run.args.bf16:
                why += "; training.bf16 is off: the matmuls run in float32"
            logger.info("%s: %s (%s)", key, getattr(fast, what), why)
    logger.info(
        "micro-batch: %d x %d accumulation (%s)",
        run.args.per_device_train_batch_size,
        run.args.gradient_accumulation_steps,
        fast.reasons["micro_batch"],
    )
    # init_from's weights under the plan's config: the checkpoint's own, with the recipe's balancing (moe:) and a
    # context phase's RoPE change (training/context.py), and the attention and experts backends the plan chose
    if run.layout.tp > 1:
        model = tensor_parallel_model(run)
    else:
        model = build_model(
            run.config,
            attn_implementation=fast.attn_implementation,
            experts_implementation=fast.experts_implementation,
            weights=run.recipe.model.init_from,
        )
    # Trainer.train() aligns config.pad_token_id with the tokenizer (for generation), so a checkpoint
    # reloaded with from_pretrained gets padding_idx = end-of-text; never train with that frozen row.
    model.get_input_embeddings().padding_idx = None
    # The same alignment done here, now that the embedding exists: the Trainer then finds nothing to change and
    # does not warn about it at every run (save_model leaves pad_token_id out of the export again).
    generation = getattr(model, "generation_config", None)
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        value = getattr(run.tokenizer, name)
        if value is not None:
            setattr(model.config, name, value)
            if generation is not None:
                setattr(generation, name, value)
    if generation is not None:
        # made from a config with use_cache off (training never uses the cache; it passes use_cache=False anyway),
        # the generation config would have every checkpoint's generate() and pipeline() run without the KV cache
        generation.use_cache = True
    return model, apply_speedups(model, speedups_of(fast, run.recipe, run.layout.sequence_parallel), run.seq_len)


def tensor_parallel_model(run: ResolvedRun) -> torch.nn.Module:
    """The model sharded by transformers' tp_plan over the layout's tensor-parallel groups (models/parallel.py):
    ``model.init_from``'s weights, or the seeded random initialisation that rank 0 saves first (transformers shards
    a model while it loads it). The Trainer then sees ``model.tp_size`` and hands accelerate the ParallelismConfig."""
    import shutil

    from accelerate import PartialState

    from hfpretrain.models.parallel import enable_async_tp, load_tensor_parallel, order_tp_collectives

    state, weights, init = PartialState(), run.recipe.model.init_from, None
    if weights is None:
        init = Path(run.args.output_dir) / "tp_init"
        if state.is_main_process:
            build_model(run.config, attn_implementation=run.fast.attn_implementation).save_pretrained(init)
        state.wait_for_everyone()
        weights = str(init)
    # beside FSDP2, accelerate's mesh (cached on the ParallelismConfig the Trainer hands it): one root for both
    parallel = run.args.parallelism_config
    mesh = parallel.get_device_mesh(state.device.type) if run.layout.world_size > run.layout.tp else None
    model = load_tensor_parallel(
        weights,
        run.config,
        run.layout.tp,
        run.layout.world_size,
        device=state.device.type,
        mesh=mesh,
        sequence_parallel=run.layout.sequence_parallel,
        attn_implementation=attention_backend(run.config, run.fast.attn_implementation),
    )
    if run.layout.async_tp:  # before the first compile, which runs the pass
        logger.info("async tp over group %s (models/parallel.py enable_async_tp)", enable_async_tp(model))
    if run.layout.tp_overlap:  # likewise
        order_tp_collectives()
        logger.info("tp collectives reordered by inductor (parallel.tp_overlap)")
    state.wait_for_everyone()
    if init is not None and state.is_main_process:
        shutil.rmtree(init, ignore_errors=True)
    return model


def build_trainer(
    run: ResolvedRun,
    model,
    train_blocks,
    eval_blocks,
    train_length: int,
    record: dict,
    applied: Applied,
    extra_callbacks: list,
) -> tuple[PretrainTrainer, RunLogs]:
    """PretrainTrainer with the run's callbacks, which run in the order each declares (training/callbacks.py: the
    telemetry, then the log, ...), and the caller's ``extra_callbacks`` after ours."""
    recipe, args, plan = run.recipe, run.args, run.plan
    out = Path(args.output_dir)
    jsonl = JsonlLogCallback(
        out / recipe.logging.jsonl,
        {
            "recipe": recipe_to_dict(recipe),
            "plan": plan,
            "resolved": run.resolved(),
            "loss_impl": run.fast.fused_loss,
            "compiled_modules": applied.compiled_modules,
            "speedups": dataclasses.asdict(applied),
            "lineage": record,
        },
    )
    # with the document mask, FLOPs within documents (plan.attended_flops)
    flops = plan.get("flops_per_token_attended", plan["flops_per_token"])
    throughput = ThroughputCallback(
        plan["tokens_per_step"], flops, plan["peak_flops_per_gpu"], args.world_size, plan.get("peak_flops_fp8_per_gpu")
    )
    grad_stats = GradStatsCallback(jsonl, recipe.logging.grad_stats_interval)
    preemption = PreemptionCallback()
    routers = find_routers(model)
    if routers and recipe.moe.forced_balance:  # before ExpertLoad's hooks, which then count the forced choice
        force_balanced_routing(routers)
        logger.warning(
            "moe.forced_balance=true: the experts get tokens round-robin, not by their routers (a speed "
            "measurement; the model trained ignores its routers)"
        )
    # MoE: the experts' load in the log, and aux-loss-free balancing with moe.bias_update_rate
    per_layer = recipe.moe.aux_loss_scope == "per_layer"
    expert_load = ExpertLoad(routers, aux_loss_function(model, per_layer)) if routers else None
    mixture_log = MixtureLogCallback(run.schedule, run.seq_len) if run.schedule is not None else None
    wandb = "wandb" in args.report_to and args.process_index == 0
    wandb_lineage = (
        WandbLineageCallback(record, out, recipe.logging.wandb_artifacts, recipe.logging.wandb_checkpoint_artifacts)
        if wandb and recipe.logging.wandb_artifacts != "none"
        else None
    )
    # a progress bar on a terminal; one line per logging step in a log file or with disable_tqdm (in a notebook,
    # transformers' own bar)
    console = (
        None
        if not args.disable_tqdm and DEFAULT_PROGRESS_CALLBACK is not ProgressCallback
        else TelemetryProgressCallback()
        if not args.disable_tqdm and sys.stderr.isatty()
        else LineProgressCallback()
    )
    callbacks = [
        mixture_log,
        ExpertBalanceCallback(expert_load, recipe.moe.bias_update_rate, recipe.moe.dead_expert_windows)
        if expert_load is not None
        else None,
        throughput,
        MemoryCallback(),
        grad_stats,
        jsonl,
        preemption,
        ProfilerCallback(
            out / "profile",
            recipe.logging.profile_steps,
            recipe.logging.nvtx,
            rank=args.process_index if args.world_size > 1 else None,
        ),
        RankCheckCallback(recipe.parallel.timeout_s) if args.world_size > 1 else None,
        *extra_callbacks,
        console,
        CompileCheckCallback(applied.compiled_modules),
        WandbConfigCallback(run.to_dict()) if wandb else None,
        wandb_lineage,
    ]

    eos_id = run.config.eos_token_id
    collator = partial(collate_blocks, eos_id=eos_id) if recipe.model.document_mask else collate_blocks
    trainer = PretrainTrainer(
        model=model,
        args=args,
        train_dataset=train_blocks,
        eval_dataset=eval_blocks,
        data_collator=collator,
        processing_class=run.tokenizer,
        callbacks=[cb for cb in callbacks if cb is not None],  # run by `order`
        train_sampler=ResumableSampler(train_length),
        samples_per_step=plan["samples_per_step"],
        loss=run.loss,
        nonfinite=NonFinitePolicy(recipe.nan_policy, recipe.max_skipped_steps, recipe.max_skipped_fraction),
        decay_embeddings=recipe.optimizer.decay_embeddings,
        run_files={"recipe.yaml": recipe_to_yaml(recipe), RESOLVED_FILE: resolved_yaml(run)},
        train_blocks=len(train_blocks.blocks) if run.schedule is None else None,
        tokens_per_byte=plan["validation_tokens_per_byte"],
        optimizer_section=recipe.optimizer,
        sequence_parallel=run.layout.sequence_parallel,
    )
    trainer.grad_stats = grad_stats
    trainer.expert_load = expert_load
    for callback in extra_callbacks:
        if hasattr(callback, "attach"):
            callback.attach(trainer)  # e.g. lm-eval's scores then go through trainer.log, beside the loss
    trainer.data_info = run.data_info  # written into each checkpoint (data.json)
    return trainer, RunLogs(jsonl, throughput, preemption, mixture_log, wandb_lineage)


def final_evaluation(trainer: PretrainTrainer, run: ResolvedRun, final_blocks: EvalBlocks, n_eval_blocks: int) -> dict:
    """The last step's validation loss and bits per byte on the final set (all validation blocks by default),
    and per validation set with ``evaluation.per_set``. Not after a SIGTERM: the grace period is short, and on the
    GPU an evaluation after a preemption hung (docs/benchmarks.md)."""
    recipe, args = run.recipe, run.args
    if args.eval_strategy == "no" or STOP_REQUESTED.is_set():
        return {}
    last = next((h for h in reversed(trainer.state.log_history) if "eval_loss" in h), None)
    if last and last.get("step") == trainer.state.global_step and len(final_blocks) == n_eval_blocks:
        final_eval = dict(last)
    else:
        final_eval = trainer.evaluate(eval_dataset=final_blocks, metric_key_prefix="final")
        final_eval = {k.replace("final_", "eval_", 1): v for k, v in final_eval.items()}
    final_eval["eval_tokens"] = len(final_blocks) * run.seq_len
    if recipe.evaluation.per_set:
        per_set = per_set_losses(
            trainer,
            load_blocks(recipe.data.path, "validation"),
            len(final_blocks),
            run.manifest.get("sets") or [],
            run.config.eos_token_id,
            args.per_device_eval_batch_size,
            recipe.model.document_mask,
        )
        final_eval["eval_loss_per_set"] = {k: v["loss"] for k, v in per_set.items()}
        final_eval["eval_tokens_per_set"] = {k: v["tokens"] for k, v in per_set.items()}
        final_eval["eval_bpb_per_set"] = per_set_bits_per_byte(
            final_eval["eval_loss_per_set"], run.manifest.get("validation") or {}
        )
        if not final_eval["eval_bpb_per_set"]:
            logger.warning(
                "%s was tokenized before the manifest counted each set's text bytes: the loss "
                "per set is in nats only (tokenize again for bits per byte per set)",
                recipe.data.path,
            )
    return final_eval


def sdpa_kernels(names: list[str]):
    """PyTorch SDPA kernels allowed, tried in the listed order (PyTorch's own order puts cuDNN
    last; on an H200 cuDNN first and flash first measured the same for the 1.8B shape)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    logger.info("sdpa kernels, in priority order: %s", list(names))
    return sdpa_kernel([getattr(SDPBackend, SDPA_BACKENDS[n]) for n in names], set_priority=True)


@dataclasses.dataclass
class RunLogs:
    """The callbacks ``pretrain`` reads back after training (the summary, the final export, teardown)."""

    jsonl: JsonlLogCallback
    throughput: ThroughputCallback
    preemption: PreemptionCallback
    mixture: MixtureLogCallback | None
    wandb_lineage: WandbLineageCallback | None


def shutdown_distributed() -> None:
    """End of a launched process: close the process group explicitly (gloo aborts in its destructor otherwise)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
