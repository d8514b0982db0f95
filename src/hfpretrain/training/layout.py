"""The run's parallel layout, decided once (resolve() calls ``choose_layout``): how many ranks replicate the model,
shard it (FSDP2, or ZeRO-1's optimizer states), split each layer (tensor parallelism, transformers' tp_plan) and
split each sequence (context parallelism, accelerate's ``cp_size``), with the reason ``--dry-run`` prints.

The engine (DDP, DeepSpeed ZeRO-1, FSDP2) comes from where it always came from, ``Machine.sharding``: the launch's
accelerate config, the recipe's ``training.fsdp``/``training.deepspeed``, or a dry run's ``--zero-stage``. The
``parallel`` section's degrees (``auto`` by default) are chosen here from the memory model (models/memory.py) at
micro-batch 1 against the GPU's memory (MICRO_BATCH_MEMORY_SHARE of it, as the micro-batch choice):

* data parallel (or the launch's ZeRO-1) while the whole model trains on one GPU;
* FSDP2 over every data-parallel rank when it does not (a DDP launch gets ``training.fsdp`` set: the Trainer makes the
  FSDP2 plugin from it);
* tensor parallelism, the smallest degree that divides the heads and the GPUs of a node, when one layer's weights
  and activations still do not fit a GPU sharded;
* context parallelism, the smallest degree that divides the sequence, when one sequence's activations do not fit;
* FSDP2 beside tp or cp whenever data-parallel ranks remain (accelerate refuses tp/cp beside pure data parallelism)
  and always with cp (its context parallelism needs the FSDP2 plugin).

Every written degree is checked (one ``RecipeError`` line naming the key): tp x cp x dp_shard must divide the world
size, degrees above 1 need several processes, tp needs a model with a plan and heads it divides, ZeRO-1 takes no tp,
cp needs causal SDPA without a document mask, and on a CPU launch accelerate takes no ``ParallelismConfig``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hfpretrain.models.parallel import check_tp, fsdp_beside_tp_supported
from hfpretrain.models.zoo import is_moe

from .config import ParallelSection, RecipeError, parallel_degree
from .fast_path import MICRO_BATCH_MEMORY_SHARE, planned_gpu_memory
from .machine import Machine

logger = logging.getLogger("hfpretrain")

ENGINE_NAMES = {0: "ddp", 1: "zero1", 3: "fsdp2"}
GPUS_PER_NODE = 8  # tensor and context parallel groups stay within a node (NVLink): auto picks at most this
# what a DDP launch gets when auto shards the model: accelerate_configs/2gpu_fsdp2.yaml's settings
AUTO_FSDP = {
    "fsdp": "full_shard auto_wrap",
    "fsdp_config": {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "reshard_after_forward": True,
        "state_dict_type": "SHARDED_STATE_DICT",
        "cpu_ram_efficient_loading": False,
    },
}
# accelerate refuses a ParallelismConfig on a CPU launch (accelerate/parallelism_config.py, _validate_accelerator:
# "ParallelismConfig is only compatible DistributedType.FSDP (version 2) or DistributedType.Multi{Device} or
# DistributedType.DEEPSPEED, but got MULTI_CPU"; MULTI_CPU is not among Accelerator.multi_device's types)
CPU_REFUSAL = (
    "accelerate takes a ParallelismConfig (tp_size, cp_size) only on GPU launches (MULTI_GPU, FSDP2, "
    "DeepSpeed), not on a CPU launch (MULTI_CPU): run it on GPUs"
)


def check_accelerator(tp: int, cp: int, machine: Machine) -> None:
    """RecipeError where accelerate would refuse the layout's ParallelismConfig (a CPU launch). The CPU tests of the
    Trainer under tensor parallelism replace this and accelerate's own check (tests/training/tp_trainer.py)."""
    if (tp > 1 or cp > 1) and not machine.planning and not machine.cuda:
        raise RecipeError(f"parallel.{'tp' if tp > 1 else 'cp'}={tp if tp > 1 else cp}: {CPU_REFUSAL}")


@dataclass(frozen=True)
class Layout:
    """How the run's processes share the work: world = dp_replicate x dp_shard x tp x cp."""

    world_size: int
    zero_stage: int  # 0: plain data parallel; 1: ZeRO-1 (DeepSpeed); 3: FSDP2's full sharding
    tp: int = 1
    cp: int = 1
    dp_shard: int = 1  # ranks each FSDP2 shard group spans (1 unless zero_stage 3)
    reason: str = "one process"
    sequence_parallel: bool = False  # tp's groups split the positions between the blocks (models/parallel.py)
    async_tp: bool = False  # their collectives micro-pipelined with the matmuls (models/parallel.py enable_async_tp)
    tp_overlap: bool = False  # inductor reorders them in the compiled layers (models/parallel.py order_tp_collectives)

    @property
    def dp(self) -> int:
        """Data-parallel ranks: each reads its own micro-batches (a tp or cp group shares one)."""
        return self.world_size // (self.tp * self.cp)

    @property
    def dp_replicate(self) -> int:
        return self.dp // self.dp_shard

    @property
    def engine(self) -> str:
        name = ENGINE_NAMES.get(self.zero_stage, f"zero{self.zero_stage}")
        return name + (f"+tp{self.tp}" if self.tp > 1 else "") + (f"+cp{self.cp}" if self.cp > 1 else "")

    def as_dict(self) -> dict:
        return {
            "world_size": self.world_size,
            "zero_stage": self.zero_stage,
            "engine": self.engine,
            "dp_replicate": self.dp_replicate,
            "dp_shard": self.dp_shard,
            "tp": self.tp,
            "cp": self.cp,
            "sequence_parallel": self.sequence_parallel,
            "async_tp": self.async_tp,
            "tp_overlap": self.tp_overlap,
            "reason": self.reason,
        }


def wants_sequence_parallel(setting: bool | None, tp: int, cp: int) -> bool:
    """Whether ``parallel.sequence_parallel`` may split a tensor-parallel group's positions at degrees ``tp`` and
    ``cp``: where there is a group and no context parallelism (their combination has not run), unless set false
    (``choose_layout`` takes it under auto only where it is needed to fit)."""
    return setting is not False and tp > 1 and cp == 1


def check_sequence_parallel(setting: bool | None, tp: int, cp: int, seq_len: int) -> None:
    """One ``RecipeError`` line where ``parallel.sequence_parallel`` cannot apply."""
    key = "parallel.sequence_parallel"
    if setting and tp == 1:
        raise RecipeError(
            f"{key}=true splits a tensor-parallel group's positions: it needs parallel.tp > 1 (tp 1 here)"
        )
    if setting and cp > 1:
        raise RecipeError(f"{key}=true beside parallel.cp={cp} has not run: set it false or cp 1")
    if setting and seq_len % tp:  # auto does not take it there (choose_layout)
        raise RecipeError(
            f"{key}: the sequence ({seq_len} tokens) does not split into tp={tp} equal parts: "
            f"set {key}=false or a seq_len divisible by {tp}"
        )


def check_inductor_pass(key: str, compile_scope: str, backend: str) -> None:
    """One ``RecipeError`` line where ``key=true`` (an inductor pass over the compiled layers) has no compiled code
    or another backend to run in."""
    if compile_scope == "none" or backend != "inductor":
        raise RecipeError(
            f"{key}=true is an inductor pass over compiled code: set model.compile (layers) with "
            f"model.compile_backend=inductor (here {compile_scope}, {backend}), or {key}=false"
        )


def check_async_tp(
    setting: bool | None, sequence_parallel: bool, compile_scope: str, machine: Machine, backend: str = "inductor"
) -> bool:
    """Whether the run micro-pipelines its tensor-parallel collectives (``parallel.async_tp``); one ``RecipeError``
    line where true cannot apply. Inductor fuses an all-gather with the matmuls that read it and a matmul with the
    reduce-scatter of its output: sequence parallelism's collectives (plain tp all-reduces, which it cannot cut),
    in compiled code, over NCCL's symmetric memory."""
    key = "parallel.async_tp"
    if not setting:
        return False
    if not sequence_parallel:
        raise RecipeError(
            f"{key}=true overlaps sequence parallelism's all-gathers and reduce-scatters with the matmuls: it needs "
            "parallel.sequence_parallel (off in this layout; tp > 1 and cp 1 take it): set "
            "parallel.sequence_parallel=true or parallel.async_tp=false"
        )
    check_inductor_pass(key, compile_scope, backend)
    if not machine.planning and not machine.cuda:
        raise RecipeError(f"{key}=true needs CUDA GPUs (NCCL's symmetric memory): set it false on this machine")
    return True


def check_tp_overlap(setting: bool | None, tp: int, compile_scope: str, backend: str = "inductor") -> bool:
    """Whether inductor reorders the compiled layers' tensor-parallel collectives (``parallel.tp_overlap``); one
    ``RecipeError`` line where true cannot apply."""
    key = "parallel.tp_overlap"
    if not setting:
        return False
    if tp == 1:
        raise RecipeError(f"{key}=true orders tensor-parallel collectives: it needs parallel.tp > 1 (tp 1 here)")
    check_inductor_pass(key, compile_scope, backend)
    return True


def _divisors(n: int, limit: int) -> list[int]:
    return [k for k in range(2, min(n, limit) + 1) if n % k == 0]


def check_cp(cp: int, seq_len: int, attn_implementation: str, document_mask: bool, key: str = "parallel.cp") -> None:
    """What accelerate's context parallelism cannot take, in one line naming ``key``."""
    if cp == 1:
        return
    if document_mask:
        raise RecipeError(
            f"{key}={cp} with model.document_mask=true: accelerate's context parallelism (torch's ring "
            "attention) takes causal SDPA without a mask only, and the document mask is a mask: "
            "train the long-context phase without the document mask under cp, or with cp 1 "
            "(docs/training.md § Parallel layout says what masked CP would take)"
        )
    if attn_implementation != "sdpa":
        raise RecipeError(
            f"{key}={cp} with model.attn_implementation={attn_implementation}: accelerate's context "
            "parallelism runs transformers' own SDPA only (the Trainer refuses any other "
            "_attn_implementation): set model.attn_implementation=sdpa"
        )
    if seq_len % (2 * cp):
        raise RecipeError(
            f"{key}={cp}: the sequence ({seq_len} tokens) must split into 2 x cp equal chunks (torch's "
            "ring attention balances the causal work that way)"
        )


def choose_layout(
    parallel: ParallelSection,
    config,
    seq_len: int,
    machine: Machine,
    fields: dict,
    fast,
    memory,
    document_mask: bool = False,
    target_gpu_memory: int | None = None,
    compile_backend: str = "inductor",
) -> tuple[Layout, dict]:
    """``(layout, the TrainingArguments fields it sets)`` for ``machine``'s launch; ``memory(zero, tp, cp, sp)``: the
    modelled peak bytes per GPU at micro-batch 1, ``sp`` with sequence parallelism (training/plan.py run_memory)."""
    world = machine.world_size
    written = {key: parallel_degree(getattr(parallel, key)) for key in ("dp_shard", "tp", "cp")}
    zero = machine.sharding(fields)
    if world == 1:
        for key, value in written.items():
            if value is not None and value > 1:
                raise RecipeError(
                    f"parallel.{key}={value} needs several processes: this launch has 1 (launch with "
                    "accelerate, or set it to auto)"
                )
        if parallel.sequence_parallel:
            check_sequence_parallel(parallel.sequence_parallel, 1, 1, seq_len)
        check_async_tp(parallel.async_tp, False, fast.compile, machine, compile_backend)
        check_tp_overlap(parallel.tp_overlap, 1, fast.compile, compile_backend)
        return Layout(1, zero), {}
    for key, value in written.items():
        if value is not None and world % value:
            raise RecipeError(f"parallel.{key}={value} does not divide the world size {world}")
    fixed = [written[k] or 1 for k in written]
    if fixed[0] * fixed[1] * fixed[2] > world or world % (fixed[0] * fixed[1] * fixed[2]):
        raise RecipeError(
            f"parallel: tp x cp x dp_shard = {fixed[1]} x {fixed[2]} x {fixed[0]} = "
            f"{fixed[0] * fixed[1] * fixed[2]} does not divide the world size {world}"
        )
    if written["tp"] and written["tp"] > 1:
        try:
            check_tp(config, written["tp"])
        except ValueError as err:
            raise RecipeError(str(err)) from None
        if zero == 1:
            raise RecipeError(
                f"parallel.tp={written['tp']} with ZeRO-1 (DeepSpeed): DeepSpeed's engine takes no "
                "tensor-parallel model here; use FSDP2 (accelerate_configs/*fsdp2.yaml) or DDP"
            )
    if written["cp"] and written["cp"] > 1:
        check_cp(written["cp"], seq_len, fast.attn_implementation, document_mask)
        if zero == 1:
            raise RecipeError(
                f"parallel.cp={written['cp']} with ZeRO-1 (DeepSpeed): accelerate's context parallelism "
                "needs its FSDP2 plugin (accelerate/state.py); launch with an FSDP2 config or DDP"
            )
    if written["dp_shard"] and written["dp_shard"] > 1 and zero == 1:
        raise RecipeError(
            f"parallel.dp_shard={written['dp_shard']} shards with FSDP2, but this launch runs DeepSpeed "
            "ZeRO-1: launch with an FSDP2 config, or leave parallel.dp_shard=auto"
        )

    gpu = target_gpu_memory or planned_gpu_memory(machine.gpu_memory, machine.planning)
    budget = MICRO_BATCH_MEMORY_SHARE * gpu if gpu else None

    setting = parallel.sequence_parallel

    def tp_beside_others_unsupported(t: int) -> bool:
        """tp on fewer than all ranks, which this transformers loads unsharded beside them (fsdp_beside_tp_supported)."""
        return 1 < t < world and not fsdp_beside_tp_supported()

    def split(z: int, tp: int, cp: int) -> bool:
        """Sequence parallelism at these degrees: as written, else (auto) only where tp does not fit without it:
        on two H200s it saved 4-8 GiB and cost 1-2% of the tokens/s (results/gpu_2gpu_2026-11-30)."""
        if not wants_sequence_parallel(setting, tp, cp):  # no tp group, beside cp, or set false
            return False
        if setting:
            return True
        return seq_len % tp == 0 and budget is not None and memory(z, tp, cp, False) > budget

    def need(z: int, tp: int, cp: int) -> int:
        return memory(z, tp, cp, split(z, tp, cp))

    def fits(z: int, tp: int, cp: int) -> bool:
        return budget is None or need(z, tp, cp) <= budget

    reasons = []
    tp, cp = written["tp"] or 1, written["cp"] or 1
    # the engine: what the launch set, else FSDP2 when the model does not train on one GPU under plain DDP
    if written["dp_shard"] and written["dp_shard"] > 1:
        zero, extra = 3, ({} if zero == 3 else dict(AUTO_FSDP))
        reasons.append(f"FSDP2 over {written['dp_shard']} ranks (parallel.dp_shard)")
    elif zero == 0 and written["dp_shard"] is None and not fits(0, tp, cp):
        zero, extra = 3, dict(AUTO_FSDP)
        reasons.append(
            f"FSDP2: under DDP one GPU would need {need(0, tp, cp) / 2**30:.1f} GiB at micro-batch 1, "
            f"more than {budget / 2**30:.1f} GiB ({MICRO_BATCH_MEMORY_SHARE:.0%} of the GPU)"
        )
    else:
        extra = {}
        reasons.append(
            {
                0: "data parallel: the model trains whole on each GPU",
                1: "ZeRO-1 (the launch's DeepSpeed): the model fits, its optimizer states sharded",
                3: "FSDP2 (the launch's or training.fsdp)",
            }.get(zero, f"ZeRO stage {zero}")
        )
    per_node = min(world, machine.gpu_count or GPUS_PER_NODE, GPUS_PER_NODE)
    if not fits(zero, tp, cp) and (written["tp"] is None or written["cp"] is None):
        # the fewest GPUs per group that make micro-batch 1 fit: tensor parallelism first (a layer's weights and
        # activations), then context parallelism (a sequence's activations), then both; within one node
        tps = [tp] if written["tp"] is not None or zero == 1 or is_moe(config) else [1, *_divisors(per_node, per_node)]
        cps = (
            [cp]
            if written["cp"] is not None or document_mask or fast.attn_implementation != "sdpa"
            else [1, *_divisors(per_node, per_node)]
        )
        for t, c in sorted(
            ((t, c) for t in tps for c in cps if t * c <= per_node), key=lambda tc: (tc[0] * tc[1], tc[1])
        ):
            if world % (t * c) or seq_len % (2 * c if c > 1 else 1):
                continue
            if not machine.planning and tp_beside_others_unsupported(t):
                continue  # refused below
            try:
                check_tp(config, t)
            except ValueError:
                continue
            if fits(zero, t, c):
                if t > tp:
                    reasons.append(f"tp {t}: one layer's weights and activations do not fit a GPU sharded")
                if c > cp:
                    reasons.append(f"cp {c}: one sequence's activations ({seq_len} tokens) do not fit a GPU")
                tp, cp = t, c
                break
    if budget is None:
        reasons.append("no GPU memory to plan against")
    else:
        needed = need(zero, tp, cp)
        reasons.append(
            f"{needed / 2**30:.1f} GiB per GPU at micro-batch 1 of {budget / 2**30:.1f} GiB "
            f"({MICRO_BATCH_MEMORY_SHARE:.0%} of the GPU){'' if needed <= budget else ': DOES NOT FIT'}"
        )
    check_accelerator(tp, cp, machine)
    if tp_beside_others_unsupported(tp):
        from transformers import __version__ as version

        # transformers loads the model with tp over its group only; beside it (FSDP2, cp) accelerate shards nothing
        if not machine.planning:
            raise RecipeError(
                f"parallel.tp={tp} on {world} ranks needs a transformers that shards the other dimension at load "
                f"(5.24 does; {version} leaves the other ranks' gradients unsynchronised): upgrade transformers, "
                "or set parallel.tp=1 (FSDP2 alone)"
            )
        reasons.append(f"transformers {version} here would refuse tp beside other ranks at launch (5.24 runs it)")
    dp = world // (tp * cp)
    if (tp > 1 or cp > 1) and zero != 3 and (dp > 1 or cp > 1):
        # accelerate composes tp and cp with FSDP2 only: pure data parallelism beside them is refused
        # (parallelism_config.py: "Tensor/Context parallelism (tp/cp_size > 1) cannot be used with pure data
        # parallelism"), and cp needs the FSDP2 plugin (state.py: "We need a fsdp_plugin to use context parallelism")
        zero, extra = 3, dict(AUTO_FSDP)
        reasons.append("FSDP2 beside tp/cp (accelerate composes them with FSDP2 only)")
    if zero == 3 and dp == 1 and cp == 1:
        if extra:  # FSDP2 chosen here, then tensor parallelism took every rank: nothing left to shard across
            zero, extra = 0, {}
            reasons.append(f"no FSDP2: tp {tp} takes all {world} ranks")
        else:
            raise RecipeError(
                f"parallel.tp={tp} takes all {world} ranks, leaving none for the launch's FSDP2 to shard "
                "across: launch without the FSDP config, or lower parallel.tp"
            )
    dp_shard = written["dp_shard"] or (dp if zero == 3 else 1)
    if zero == 3 and dp % dp_shard:
        raise RecipeError(
            f"parallel.dp_shard={dp_shard} does not divide the {dp} data-parallel ranks "
            f"(world {world} / tp {tp} / cp {cp})"
        )
    check_sequence_parallel(setting, tp, cp, seq_len)
    sequence_parallel = split(zero, tp, cp)
    if sequence_parallel:
        why = "parallel.sequence_parallel" if setting else "tp does not fit without it"
        reasons.append(f"sequence parallel ({why}): each tp rank holds 1/{tp} of the positions between the blocks")
    async_tp = check_async_tp(parallel.async_tp, sequence_parallel, fast.compile, machine, compile_backend)
    if async_tp:
        reasons.append("async tp (parallel.async_tp): the sequence collectives overlap the projections' matmuls")
    tp_overlap = check_tp_overlap(parallel.tp_overlap, tp, fast.compile, compile_backend)
    if tp_overlap:
        reasons.append("tp overlap (parallel.tp_overlap): the collectives' waits moved past independent matmuls")
    layout = Layout(world, zero, tp, cp, dp_shard, "; ".join(reasons), sequence_parallel, async_tp, tp_overlap)
    logger.info(
        "parallel layout: %s (dp_replicate %d x dp_shard %d x tp %d x cp %d): %s",
        layout.engine,
        layout.dp_replicate,
        layout.dp_shard,
        tp,
        cp,
        layout.reason,
    )
    return layout, extra
