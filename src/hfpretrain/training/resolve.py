"""``resolve(recipe, data_facts, machine) -> ResolvedRun``: what a run is, decided once, before any weight is built.

Three inputs, read before and never edited here: the recipe as written (training/config.py), the facts of its data
(``read_data_facts``: the manifests, the tokenizer, the mean document length under the document mask; assumed ones
when the data is not tokenized yet, so that a dry run plans any recipe), and the machine (training/machine.py: the
launch and the GPU). Out comes one frozen ``ResolvedRun``: the model config, the TrainingArguments (made once, every
value final), the speed choices with their reasons, the loss specification, the batch split, the one ``max_steps``
and where it came from, the data plan (mixture and phases), the parallel layout, and the plan's figures.
``--dry-run`` prints it and a run saves it as ``resolved.yaml`` beside the recipe as written; the real run and the
dry run call the same function. The recipe's checks run here, before any weight is built, except those that need
what resolution does not read: an fp8 GPU and torchao for a real run (pretrain, before this), the output folder
(writable, empty or resumable, its lock) and the checkpoint a resume compares against (run.py, resume.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import yaml
from transformers import AutoTokenizer, TrainingArguments

from hfpretrain.data.manifest import require_manifest
from hfpretrain.data.mixture import (
    MixtureSchedule,
    Source,
    combined_fingerprint,
    describe_mixture,
    load_sources,
    mixture_plan,
    resolve_phases,
)
from hfpretrain.data.order import attended_length, load_input_ids
from hfpretrain.data.tokenizer import tokenizer_sha256
from hfpretrain.models import load_config

from .arguments import _training_value, max_steps, training_arguments, training_fields, warn_long_warmup, wsd_decay
from .config import Recipe, RecipeError, recipe_to_dict
from .context import apply_context, check_fits, fit_positions
from .fast_path import FastPath, card_memory_bytes, choose_fast_path, choose_micro_batch
from .layout import ENGINE_NAMES, Layout, choose_layout  # noqa: F401 - Layout, ENGINE_NAMES: where they were
from .loss import LossSpec
from .machine import ENGINE_STAGE, Machine
from .moe import with_moe_section
from .plan import MAX_PASSES_WITHOUT_WARNING, attended_flops, make_plan, run_memory

logger = logging.getLogger("hfpretrain")

RESOLVED_FILE = "resolved.yaml"  # beside the recipe as written: in the run folder and in each checkpoint
ASSUMED_SEQ_LEN = 2048  # what the recipes' data is tokenized with (recipes/*.yaml: --seq-len 2048)


# ---- the data's facts -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFacts:
    """What the run's data says about the run, read once: or, before the data is tokenized, assumed (``missing``
    says why; a dry run plans with them and says so)."""

    path: str  # data.path: the validation split and the tokenizer
    manifest: dict | None  # data.path's manifest; None: not tokenized yet
    tokenizer: object | None = None  # the data's tokenizer, its end-of-text the token the blocks were packed with
    sources: dict = dataclasses.field(default_factory=dict)  # a mixture's sources: name -> data/mixture.py Source
    attended_lengths: dict = dataclasses.field(default_factory=dict)  # document mask: folder -> mean attended length
    vocab_size: int | None = None  # assumed facts: data.tokenizer's length (None: the model config's)
    vocab_note: str = ""  # assumed facts: where the vocabulary comes from
    missing: str | None = None  # why the facts are assumed

    @property
    def assumed(self) -> bool:
        return self.manifest is None

    @property
    def seq_len(self) -> int | None:
        return int(self.manifest["seq_len"]) if self.manifest else None


def read_data_facts(recipe: Recipe, planning: bool = False) -> DataFacts:
    """The data's facts for ``recipe``; a dry run (``planning``) whose data is not tokenized yet gets assumed ones,
    a run gets one line naming the missing folder."""
    folders = {"data.path": recipe.data.path, **{f"data.sources.{n}": p for n, p in recipe.data.sources.items()}}
    missing = next(
        (f"{key} {path}" for key, path in folders.items() if not (Path(path) / "manifest.json").is_file()), None
    )
    if missing and planning:
        vocab, note = _tokenizer_vocab(recipe.data.tokenizer)
        return DataFacts(
            recipe.data.path,
            None,
            vocab_size=vocab,
            vocab_note=note,
            missing=f"{missing} has no manifest.json (not tokenized yet)",
        )
    manifest = require_manifest(recipe.data.path)
    name = recipe.data.tokenizer or str(Path(recipe.data.path) / "tokenizer")
    tokenizer = load_tokenizer(name)
    if recipe.data.tokenizer:
        check_tokenizer(tokenizer, recipe.data.tokenizer, manifest, recipe.data.path)
    eos = manifest["tokenizer"]["eos_token"]
    tokenizer.eos_token = eos  # the end-of-text token the data was packed with, not a chat token
    if tokenizer.pad_token is None:
        tokenizer.pad_token = eos
    sources = (
        load_sources(recipe.data.sources, manifest, recipe.data.path, require_manifest) if recipe.data.sources else {}
    )
    lengths = {}
    if recipe.model.document_mask:  # MFU counts the attention FLOPs within documents (plan.attended_flops)
        eos_id = int(manifest["tokenizer"]["eos_token_id"])
        for path in [s.path for s in sources.values()] or [recipe.data.path]:
            lengths[str(path)] = attended_length(load_input_ids(path, "train"), eos_id)
    return DataFacts(str(recipe.data.path), manifest, tokenizer, sources, lengths)


def load_tokenizer(path: str):
    """AutoTokenizer, with a missing or unreadable tokenizer as one line (FileNotFoundError) naming it."""
    if not Path(path).exists() and (Path(path).is_absolute() or path.startswith(".") or path.count("/") > 1):
        raise FileNotFoundError(f"tokenizer {path} does not exist (data.path's tokenizer/ folder, or data.tokenizer)")
    from hfpretrain.integrity import tokenizer_problem

    problem = (
        tokenizer_problem(path, "tokenize the data again, or name a whole tokenizer with data.tokenizer")
        if Path(path).is_dir()
        else None
    )
    if problem:  # the file and what to do, not the library's text (a KeyError was a traceback)
        raise FileNotFoundError(f"tokenizer {path}: {problem}")
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(f"tokenizer {path}: cannot load it ({str(err).strip().splitlines()[0]})") from None


def tokenizer_hash(tokenizer) -> str | None:
    """sha256 of the backend tokenizer JSON, as the data pipeline records it in manifest.json."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return tokenizer_sha256(backend.to_str()) if backend is not None else None


def check_tokenizer(tokenizer, name: str, manifest: dict, data_path: str | Path) -> None:
    """An explicit data.tokenizer must be the one the data was tokenized with (manifest sha256); one with a
    different file but the same vocabulary as the data's tokenizer/ copy only warns."""
    recorded = manifest.get("tokenizer") or {}
    want, have = recorded.get("sha256"), tokenizer_hash(tokenizer)
    if not want or have == want:
        return
    copy_dir = Path(data_path) / "tokenizer"
    try:
        same_vocab = (
            copy_dir.is_dir() and AutoTokenizer.from_pretrained(str(copy_dir)).get_vocab() == tokenizer.get_vocab()
        )
    except Exception:  # noqa: BLE001 - an unreadable copy proves nothing: treat as different
        same_vocab = False
    if same_vocab:
        logger.warning(
            "data.tokenizer=%s is not the file %s was tokenized with (sha256 %s vs %s) but has the same "
            "vocabulary: going on",
            name,
            data_path,
            (have or "?")[:12],
            want[:12],
        )
        return
    raise ValueError(
        f"data.tokenizer={name} (sha256 {(have or '?')[:12]}, {len(tokenizer)} tokens) is not the tokenizer "
        f"data.path={data_path} was tokenized with ({recorded.get('name_or_path')}, sha256 {want[:12]}, "
        f"{recorded.get('vocab_size')} tokens): leave data.tokenizer unset to use the data's own "
        "tokenizer/ copy, or tokenize the data with this tokenizer"
    )


def _tokenizer_vocab(name: str | None) -> tuple[int | None, str]:
    if not name:
        return None, "data.tokenizer is not set"
    try:
        from hfpretrain.data.tokenizer import load_tokenizer as load

        return len(load(name)), f"data.tokenizer {name}"
    except Exception as err:  # noqa: BLE001 - a plan goes on with the config's vocabulary
        return None, f"data.tokenizer {name} does not load ({str(err).splitlines()[0]})"


# ---- the resolved run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedRun:
    """Everything a run is, decided by resolve(); the Trainer and the runner read it and change none of it."""

    recipe: Recipe  # as written (its overrides merged), never edited
    config: object  # the model's PretrainedConfig as it trains
    tokenizer: object | None  # the data's (None: a dry run without data)
    args: TrainingArguments  # made once
    fast: FastPath  # the speed choices and their reasons
    loss: LossSpec
    layout: Layout
    seq_len: int
    max_steps_from: str  # training.max_steps | training_flops=... | context.tokens=...
    manifest: dict | None  # data.path's (None: not tokenized yet)
    schedule: MixtureSchedule | None  # a weighted mixture in phases, or None for one data folder
    data_info: dict  # what each checkpoint's data.json records: a resume compares it
    plan: dict  # the figures: parameters, FLOPs, tokens, memory, time (training/plan.py)

    def resolved(self) -> dict:
        """What resolution decided beyond the plan's figures: the layout, where max_steps came from, the loss,
        the TrainingArguments and the model config that differ from their defaults, and the data's record."""
        return {
            "layout": self.layout.as_dict(),
            "max_steps": self.args.max_steps,
            "max_steps_from": self.max_steps_from,
            "micro_batch": self.args.per_device_train_batch_size,
            "gradient_accumulation_steps": self.args.gradient_accumulation_steps,
            "loss": dataclasses.asdict(self.loss),
            "training_arguments": changed_arguments(self.args),
            "model_config": self.config.to_diff_dict(),
            "data": self.data_info,
        }

    def to_dict(self) -> dict:
        """``--dry-run``'s document and ``resolved.yaml``: the recipe as written, what was resolved, the plan."""
        return {"recipe": recipe_to_dict(self.recipe), "resolved": self.resolved(), "plan": self.plan}


def resolved_yaml(run: ResolvedRun) -> str:
    """``run.to_dict()`` as YAML (``resolved.yaml``): plain types only, so that any YAML reader takes it."""
    return yaml.safe_dump(json.loads(json.dumps(run.to_dict(), default=str)), sort_keys=False)


def changed_arguments(args: TrainingArguments) -> dict:
    """The TrainingArguments fields that differ from transformers' defaults, as ``to_dict`` writes them."""
    defaults = {}
    for f in dataclasses.fields(TrainingArguments):
        if f.init:
            defaults[f.name] = f.default_factory() if f.default is dataclasses.MISSING else f.default
    out = {}
    for key, value in args.to_dict().items():
        default = getattr(defaults.get(key), "value", defaults.get(key))
        if key in defaults and value != default and not (key.endswith("_token") or key == "logging_dir"):
            out[key] = value
    return out


def resolve(recipe: Recipe, facts: DataFacts, machine: Machine) -> ResolvedRun:
    """The run ``recipe`` describes on ``facts``' data and ``machine``; RecipeError (or FileNotFoundError,
    ValueError) with one line naming the key where it cannot run. Edits none of its inputs."""
    check_launch(recipe, machine)
    config = model_config(recipe, facts, machine)
    seq_len = facts.seq_len or assumed_seq_len(recipe, config)
    config, context = apply_context(recipe, config, seq_len, recipe.data.path)
    if context is None and not facts.assumed:
        config = fit_positions(config, seq_len, recipe.data.path)
    world = machine.world_size
    fields = training_fields(recipe, machine)
    fast = choose_fast_path(
        recipe.model,
        config,
        int(_training_value(fields, "per_device_train_batch_size")),
        seq_len,
        machine.cuda,
        machine.gpu_memory,
        planning=machine.planning,
        bf16=bool(recipe.training.get("bf16")),
        loss_section=recipe.loss,
        experts_autocast=recipe.kernels.experts_autocast,
        world_size=machine.world_size,
    )

    def memory_at(zero, micro, accum, loss=None, tp=1, cp=1, sequence_parallel=False) -> int:
        """The modelled peak bytes per GPU (run_memory) with the fast path as it stands when called."""
        return run_memory(
            recipe, config, fields, seq_len, fast, world, zero, micro, accum, loss, tp, cp, sequence_parallel
        ).total

    # the parallel layout (training/layout.py): the launch's engine, and the parallel section's degrees
    layout, layout_fields = choose_layout(
        recipe.parallel,
        config,
        seq_len,
        machine,
        fields,
        fast,
        lambda z, tp, cp, sp: memory_at(z, 1, 1, tp=tp, cp=cp, sequence_parallel=sp),
        document_mask=recipe.model.document_mask,
        compile_backend=recipe.model.compile_backend,
        target_gpu_memory=card_memory_bytes(recipe.context.gpu) if recipe.context.gpu and not machine.cuda else None,
    )
    fields.update(layout_fields)
    if layout.tp > 1 and fast.precision.startswith("fp8"):
        # torchao's Float8Linear takes plain weights; transformers' tp_plan makes them DTensors at load
        if recipe.model.precision != "auto":
            raise RecipeError(
                f"model.precision={recipe.model.precision} with parallel.tp={layout.tp}: torchao's float8 "
                "linears take no tensor-parallel (DTensor) weights here; use model.precision=bf16 or tp 1"
            )
        reasons = {**fast.reasons, "precision": f"bf16: tensor parallelism (tp {layout.tp}) takes no float8 linears"}
        fast = dataclasses.replace(fast, precision="bf16", reasons=reasons)
    if layout_fields.get("fsdp") and recipe.optimizer.name == "muon":  # check_launch's rule, for the planner's FSDP2
        raise RecipeError(
            f"optimizer.name=muon is not supported under FSDP, which the layout needs here "
            f"({layout.reason}): set parallel.dp_shard=1 and parallel.tp/cp=1 on GPUs that fit the "
            "model, or optimizer.name=adamw_torch_fused"
        )
    zero, dp = layout.zero_stage, layout.dp
    steps, steps_from = max_steps(recipe, config, seq_len, dp)
    fields["max_steps"] = steps
    split = choose_micro_batch(
        recipe.batch.micro_batch,
        recipe.loss.implementation,
        fast,
        config,
        int(_training_value(fields, "per_device_train_batch_size")),
        int(_training_value(fields, "gradient_accumulation_steps")),
        seq_len,
        lambda micro, accum, loss: memory_at(zero, micro, accum, loss, layout.tp, layout.cp, layout.sequence_parallel),
        machine.gpu_memory,
        planning=machine.planning,
        target_gpu=recipe.context.gpu,
    )
    reasons = {**fast.reasons, "micro_batch": split.reason}
    if split.loss_reason:  # auto's same choice, its reason at the micro-batch that runs
        reasons["fused_loss"] = split.loss_reason
    fast = dataclasses.replace(fast, fused_loss=split.fused_loss, reasons=reasons)
    fields.update(per_device_train_batch_size=split.micro_batch, gradient_accumulation_steps=split.accumulation)
    samples_per_step = split.micro_batch * split.accumulation * dp  # a tp or cp group reads one micro-batch
    if layout.tp > 1 or layout.cp > 1:
        fields["parallelism_config"] = parallelism_config(layout, machine)

    sources = facts.sources or (
        assumed_sources(recipe, seq_len, steps, samples_per_step) if recipe.data.sources else {}
    )
    schedule = MixtureSchedule(sources, resolve_phases(recipe.data, steps), samples_per_step) if sources else None
    fields["lr_scheduler_kwargs"], lr_schedule = scheduler_lengths(recipe, fields, steps, schedule)
    args = training_arguments(fields, machine)
    if not machine.planning and args.world_size != world:
        raise RecipeError(
            f"max_steps and the batch were resolved for WORLD_SIZE={world} processes but the Trainer "
            f"runs {args.world_size}: launch with accelerate or torchrun"
        )
    warn_long_warmup(args)

    train_blocks = int(facts.manifest["train"]["blocks"]) if facts.manifest else steps * samples_per_step
    plan = make_plan(
        recipe,
        config,
        args,
        fields,
        seq_len,
        fast,
        train_blocks,
        facts.manifest,
        world,
        zero,
        machine,
        check_passes=not recipe.data.sources,
        tp=layout.tp,
        cp=layout.cp,
        sequence_parallel=layout.sequence_parallel,
    )
    plan["parallel"] = layout.as_dict()
    if context is not None:
        plan["context"] = {
            **context,
            "fits": check_fits(plan, recipe.context.gpu, machine.gpu_memory, planning=machine.planning),
        }
    data_info = {} if facts.assumed else data_record(recipe, facts)
    if schedule is not None:  # a weighted mixture, in phases (data/mixture.py)
        plan["data"] = mixture_plan(schedule, seq_len, MAX_PASSES_WITHOUT_WARNING)
        plan["train_blocks"] = sum(s.train_blocks for s in sources.values())
        plan["passes_over_data"] = max(s["passes"] for s in plan["data"]["sources"].values())
        if not facts.assumed:
            data_info.update(
                fingerprint=combined_fingerprint(schedule, facts.manifest.get("fingerprint")),
                mixture=describe_mixture(schedule),
            )
    if lr_schedule:
        plan["lr_schedule"] = lr_schedule
    if facts.attended_lengths:
        plan.update(attended_flops(config, plan, facts.attended_lengths, recipe.data.path))
    if facts.assumed:
        plan["assumed"] = assumptions(recipe, facts, config, seq_len, train_blocks)
    data_info["samples_per_step"] = plan["samples_per_step"]
    written, k = recipe.loss, recipe.kernels
    loss = LossSpec(
        impl=fast.fused_loss,
        chunk_tokens=written.chunk_tokens,
        liger_min_chunk_tokens=written.liger_min_chunk_tokens,
        z_loss=written.z_loss,
        fused_head=k.fused_head,
        tile=tuple(k.loss_tile) if k.loss_tile else None,
        compile_backend=recipe.model.compile_backend,
        compile_mode=fast.compile_mode,
    )
    return ResolvedRun(
        recipe,
        config,
        facts.tokenizer,
        args,
        fast,
        loss,
        layout,
        seq_len,
        steps_from,
        facts.manifest,
        schedule,
        data_info,
        plan,
    )


def parallelism_config(layout: Layout, machine: Machine):
    """accelerate's ParallelismConfig for a layout with tensor or context parallelism (the Trainer hands it to the
    Accelerator); None in a dry run, which builds no Accelerator."""
    if machine.planning:
        return None
    from accelerate import ParallelismConfig

    return ParallelismConfig(
        dp_replicate_size=layout.dp_replicate, dp_shard_size=layout.dp_shard, tp_size=layout.tp, cp_size=layout.cp
    )


def check_launch(recipe: Recipe, machine: Machine) -> None:
    """What the recipe cannot do on this launch, said before anything is built (each was found only once the
    Trainer existed)."""
    if recipe.model.init_from and recipe.model.overrides:
        raise RecipeError(
            f"model.overrides {dict(recipe.model.overrides)} do not apply to model.init_from="
            f"{recipe.model.init_from} (its weights define the model): remove them"
        )
    stage = machine.sharding(recipe.training)
    deepspeed = stage == ENGINE_STAGE["deepspeed"]
    if recipe.optimizer.name == "muon" and stage != ENGINE_STAGE["ddp"]:
        raise RecipeError(
            "optimizer.name=muon is not supported under DeepSpeed or FSDP (Muon needs whole "
            "matrices and its own optimizer object): use DDP or one GPU, or optimizer.name=adamw_torch_fused"
        )
    if recipe.nan_policy == "skip" and deepspeed:  # DeepSpeed steps its own optimizer: no skipping
        raise RecipeError(
            "nan_policy=skip is not supported under DeepSpeed (it steps its own optimizer): use nan_policy=stop"
        )
    if recipe.logging.grad_stats_interval and deepspeed:
        # DeepSpeed reduces and clips the gradients inside its engine: per-layer statistics would log nothing
        raise RecipeError(
            "logging.grad_stats_interval is not supported under DeepSpeed (it owns the gradients): "
            "set it to 0, or use DDP/FSDP2 for per-layer gradient statistics"
        )


def model_config(recipe: Recipe, facts: DataFacts, machine: Machine):
    """The model's config before the context phase: ``model.init_from``'s own (its parameters, FLOPs and MFU are
    the plan's) or ``model.config`` with its overrides, sized to the data's vocabulary, with the ``moe:`` section
    and the data's end-of-text token."""
    source = recipe.model.init_from or recipe.model.config
    if machine.planning and recipe.model.init_from and not (Path(source) / "config.json").is_file():
        # a phase planned before the run it starts from has finished: model.config gives the shape
        source = _shape_before_init_from(recipe)
    elif recipe.model.init_from and not (Path(source) / "config.json").is_file():  # it was "model config ... does
        # not exist", as if model.config were wrong
        what = (
            "does not exist"
            if not Path(source).exists()
            else "is not a folder"
            if not Path(source).is_dir()
            else "holds no config.json"
        )
        raise RecipeError(
            f"model.init_from={source} {what}: name the saved model to start from (a run's final/ or "
            "a checkpoint-N folder)"
        )
    vocab = len(facts.tokenizer) if facts.tokenizer is not None else facts.vocab_size
    config = with_moe_section(recipe.moe, load_config(source, dict(recipe.model.overrides), vocab_size=vocab))
    if facts.tokenizer is None:
        return config
    config = copy.deepcopy(config)
    # Only eos: a pad_token_id would become the embedding's padding_idx, freezing the end-of-text
    # row at zero although it is a real token of every packed block.
    config.eos_token_id = facts.tokenizer.convert_tokens_to_ids(facts.manifest["tokenizer"]["eos_token"])
    config.pad_token_id = None
    return config


def _shape_before_init_from(recipe: Recipe) -> str:
    """The shape a dry run plans with while ``model.init_from`` does not exist yet: model.config, which must then
    be set (its default, tiny, would plan another model without a word)."""
    default_config = next(f.default for f in dataclasses.fields(type(recipe.model)) if f.name == "config")
    if recipe.model.config == default_config:
        raise RecipeError(
            f"model.init_from={recipe.model.init_from} does not exist yet and model.config is not set: "
            "a dry run plans the run with model.config, the shape of the model init_from will hold "
            "(e.g. model.config=qwen3_103m)"
        )
    logger.warning(
        "dry run: model.init_from=%s does not exist yet; planning with model.config=%s",
        recipe.model.init_from,
        recipe.model.config,
    )
    return recipe.model.config


def assumed_seq_len(recipe: Recipe, config) -> int:
    """The length a dry run plans with before the data exists: a context phase's own, else what the recipes'
    data is tokenized with, within the model's positions."""
    if recipe.context.seq_len:
        return recipe.context.seq_len
    return min(ASSUMED_SEQ_LEN, getattr(config, "max_position_embeddings", None) or ASSUMED_SEQ_LEN)


def assumed_sources(recipe: Recipe, seq_len: int, steps: int, samples_per_step: int) -> dict:
    """A mixture's sources before they are tokenized: each holding exactly the blocks the run reads from it."""

    def sources(blocks: dict) -> dict:
        return {
            name: Source(str(name), str(path), {"seq_len": seq_len, "train": {"blocks": blocks.get(name, 1)}})
            for name, path in recipe.data.sources.items()
        }

    # the schedule depends on the weights and phases only: what it draws from each source sizes the stand-ins
    drawn = MixtureSchedule(sources({}), resolve_phases(recipe.data, steps), samples_per_step)
    return sources({name: max(1, n) for name, n in drawn.samples_per_source(drawn.length).items()})


def scheduler_lengths(recipe: Recipe, fields: dict, steps: int, schedule) -> tuple[dict | None, dict | None]:
    """``(lr_scheduler_kwargs, the plan's lr_schedule)``: warmup_stable_decay's decay from data.decay_in_last_phase
    (the last phase's steps) or from ``lr_scheduler_kwargs.decay_ratio`` (ours, not get_wsd_schedule's: taken out,
    turned into num_decay_steps)."""
    kwargs = fields.get("lr_scheduler_kwargs")
    lr_schedule = None
    if recipe.data.decay_in_last_phase:
        kwargs, lr_schedule = wsd_decay(fields, steps, schedule.phases[-1].steps, "data.decay_in_last_phase")
    if isinstance(kwargs, dict) and "decay_ratio" in kwargs:
        ratio = kwargs["decay_ratio"]
        kwargs = {k: v for k, v in kwargs.items() if k != "decay_ratio"}
        kwargs, lr_schedule = wsd_decay(
            {**fields, "lr_scheduler_kwargs": kwargs},
            steps,
            max(1, round(ratio * steps)),
            "training.lr_scheduler_kwargs.decay_ratio",
        )
    return kwargs, lr_schedule


def data_record(recipe: Recipe, facts: DataFacts) -> dict:
    """What each checkpoint's data.json records of the data (a resume compares it)."""
    return {
        "data_path": str(recipe.data.path),
        "fingerprint": facts.manifest.get("fingerprint"),
        "seq_len": int(facts.manifest["seq_len"]),
        "tokenizer": recipe.data.tokenizer or "<data.path>/tokenizer",
        "tokenizer_sha256": tokenizer_hash(facts.tokenizer),
    }


def assumptions(recipe: Recipe, facts: DataFacts, config, seq_len: int, train_blocks: int) -> dict:
    """The plan's ``assumed`` entry of a dry run without data, also said in a warning."""
    vocab_note = (
        f"vocabulary {config.vocab_size:,} from {facts.vocab_note.removeprefix('data.tokenizer ')}"
        if facts.vocab_size
        else f"vocabulary {config.vocab_size:,} of the model config {recipe.model.config} ({facts.vocab_note})"
    )
    logger.warning(
        "dry run without data: %s; assumed seq_len %d, %s, one pass over the training data "
        "(%d blocks); for the real figures, tokenize the data: hfpretrain tokenize --input FILE... "
        "--tokenizer TOKENIZER --seq-len N --out %s",
        facts.missing,
        seq_len,
        vocab_note,
        train_blocks,
        recipe.data.path,
    )
    return {
        "why": facts.missing,
        "seq_len": seq_len,
        "vocab_size": config.vocab_size,
        "vocabulary": vocab_note,
        "train_blocks": f"{train_blocks:,}: exactly one pass over the training data",
        "validation_tokens_per_byte": None,
    }
