"""Recipe configuration: a YAML file plus ``section.key=value`` overrides, checked at start.

Sections:
  model       which config JSON to build, field overrides, weights to start from, attention, precision, compilation
  loss        the loss's implementation (fused or not), chunk sizes, z-loss
  batch       how a step's samples are split into micro-batches
  data        the output folder of ``scripts/tokenize_pile.py``, or several with weights and phases
  training    the field names of ``transformers.TrainingArguments``, but ``optim`` (set from optimizer.name)
  evaluation  validation token budget, optional lm-eval scoring during training
  logging     JSONL log, gradient statistics, profiler window, hardware peak override
  optimizer   the one optimizer selector: a TrainingArguments optim name, or muon (Muon for hidden matrices, AdamW
              for the rest); its settings, weight decay on embeddings
  kernels     the project's own kernels and model rewrites, each on by default (off: A/B runs, bisecting)
  moe         Mixture-of-Experts: auxiliary-loss weight, aux-loss-free balancing, dead-expert warning
  context     a context-extension phase: the longer length, the RoPE change, the token budget (training/context.py)
  parallel    the parallel layout (data-parallel shards, tensor and context parallelism) and the collectives' timeout
  training_flops  the compute budget; training.max_steps follows from it
  nan_policy  what to do with a non-finite loss

Typed sections are dataclasses read through OmegaConf (which rejects unknown keys and wrong
types); the ``training`` section is checked against ``TrainingArguments``'s own dataclass fields. Keys that moved
between sections (MOVED_KEYS) load at their new place with a warning.
Each field carries its help in ``metadata["help"]`` (``train --help`` lists them), and a field with a fixed set of
values has a ``Literal`` type, checked at load. Every error names the key, and for a typo the nearest valid one.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import logging
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError
from transformers import TrainingArguments
from transformers.training_args import OptimizerNames

from hfpretrain.kernels.cross_entropy import check_tile
from hfpretrain.models.backend import KNOWN_IMPLEMENTATIONS
from hfpretrain.models.fp8 import FAST_ACCUM
from hfpretrain.models.residual import RESIDUAL_DTYPES


_UNION_TYPES = (typing.Union, types.UnionType)  # Optional[int], int | None

logger = logging.getLogger("hfpretrain")


class RecipeError(ValueError):
    """A recipe or override that cannot be used; the message names the key."""


# Each recipe key is a dataclass field with its help in ``metadata["help"]`` (as transformers' TrainingArguments
# does; ``train --help`` lists them). A key with a fixed set of values has a ``Literal`` type: load_recipe checks the
# value against it. OmegaConf is given the same classes with ``str`` in place of each ``Literal`` (``_schema_class``):
# OmegaConf 2.3 refuses ``Literal`` fields, and 2.4's own check would refuse the bool of old recipes' fp8_fast_accum
# and word its errors otherwise.
AttnImplementation = Literal[("auto", *KNOWN_IMPLEMENTATIONS)]  # models/backend.py's names, and auto
FastAccum = Literal[tuple(FAST_ACCUM)]  # models/fp8.py
ResidualDtype = Literal[RESIDUAL_DTYPES]  # models/residual.py
# optimizer.name: the Trainer's own optimizers (TrainingArguments.optim, which resolve() sets from it) and Muon
TRAINER_OPTIMIZERS = tuple(o.value for o in OptimizerNames)
DEFAULT_OPTIMIZER = getattr(
    TrainingArguments.__dataclass_fields__["optim"].default,
    "value",
    TrainingArguments.__dataclass_fields__["optim"].default,
)
OptimizerName = Literal[("muon", *TRAINER_OPTIMIZERS)]


@dataclass
class ModelSection:
    config: str = field(default="tiny", metadata={"help": "zoo name, JSON file, or folder with config.json"})
    overrides: dict = field(
        default_factory=dict, metadata={"help": "config field overrides (an ablation is a diff here)"}
    )
    attn_implementation: AttnImplementation = field(
        default="auto",
        metadata={
            "help": "the attention backend: auto | flash_attention_2 | sdpa_packed (SDPA, causal without a mask) | sdpa "
            "| eager | flex_attention | flex_attention_fa4 (models/backend.py)"
        },
    )
    precision: Literal["bf16", "fp8", "fp8_rowwise", "auto"] = field(
        default="bf16",
        metadata={
            "help": "bf16 | fp8 (torchao float8 matmuls, tensorwise scales) | fp8_rowwise: the decoder's linears only "
            "(models/fp8.py) | auto (fp8 from hidden size 2048 on a float8 GPU with torchao, else bf16: "
            "training/fast_path.py)"
        },
    )
    fp8_emulate: bool = field(
        default=False,
        metadata={"help": "fp8 casts without a float8 GPU (tests, debugging numerics): slow, no speed-up"},
    )
    fp8_fast_accum: FastAccum = field(
        default="all",
        metadata={
            "help": "fp8: which matmuls accumulate with Hopper's fast (lower-precision) fp8 accumulation: all (+2.6% "
            "tokens/s at 1.8B, the loss within 0.44% of bf16's over 300 steps: docs/benchmarks.md) | input_grad "
            "(the forward's and the input gradients': sums over a model width) | forward (torchao's recipes: the "
            "conservative choice). models/fp8.py"
        },
    )
    residual_dtype: ResidualDtype = field(
        default="auto",
        metadata={
            "help": "the residual stream under bf16 autocast: auto (bfloat16 on a GPU, float32 on a CPU) | float32 (what "
            "fp32 embeddings give) | bfloat16 (cast where it enters the first layer: half the bytes; "
            "models/residual.py)"
        },
    )
    compile: Literal["auto", "none", "decoder", "layers", "model"] = field(
        default="auto",
        metadata={
            "help": "what torch.compile compiles: auto | none | decoder (base model, loss outside) | layers (each "
            "decoder layer) | model"
        },
    )
    compile_backend: Literal["inductor", "aot_eager", "eager"] = field(
        default="inductor",
        metadata={"help": "torch.compile backend: inductor | aot_eager | eager: the last two bisect a compile failure"},
    )
    compile_mode: Literal["default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead"] = field(
        default="default", metadata={"help": "torch.compile mode"}
    )
    inductor_options: dict = field(
        default_factory=dict,
        metadata={
            "help": "torch._inductor.config settings for this run's compiles, e.g. {coordinate_descent_tuning: true}"
        },
    )
    document_mask: bool = field(
        default=False,
        metadata={
            "help": "attend within each packed document only (position ids restart after every end-of-text; "
            "transformers builds the block-causal mask from them): sdpa (or flash_attention_2), not sdpa_packed, "
            "which has no mask"
        },
    )
    init_from: Optional[str] = field(default=None, metadata={"help": "start from these weights instead of random init"})
    experts_implementation: Literal["auto", "eager", "batched_mm", "grouped_mm", "sonicmoe"] = field(
        default="auto",
        metadata={
            "help": "MoE shapes: transformers' experts backend, auto (sonicmoe where it loads and was measured: one "
            "process on a Hopper GPU, bf16, Qwen3-MoE, the local kit; else grouped_mm on a GPU: one grouped matmul "
            "over all experts; eager on a CPU) | eager (a loop over the experts) | batched_mm | grouped_mm | sonicmoe "
            "(sonic-moe's CuTe DSL kernels: a local sonic_moe package (benchmarks/sonic_kit.sh, models/sonic.py), else "
            "transformers' loader from the Hub's kernels-community/sonic-moe; checked at start). "
            "Refused on a dense model."
        },
    )
    sdpa_backends: list = field(
        default_factory=lambda: ["flash", "efficient", "math", "cudnn"],
        metadata={
            "help": "PyTorch SDPA kernels allowed (flash, efficient, math, cudnn), in the order they are tried "
            "(PyTorch's default order)"
        },
    )


@dataclass
class LossSection:
    """How the next-token loss is computed (training/loss.py)."""

    implementation: Literal["auto", "compiled", "liger", "chunked", "none"] = field(
        default="auto",
        metadata={"help": "auto | compiled (head + loss in one graph) | liger | chunked | none (HF's loss)"},
    )
    chunk_tokens: int = field(default=8192, metadata={"help": "chunk size of the chunked cross-entropy"})
    liger_min_chunk_tokens: int = field(
        default=1024, metadata={"help": "liger's chunks at least this long (0: its own sizing, logits ~ hidden)"}
    )
    z_loss: float = field(
        default=0.0,
        metadata={
            "help": "PaLM's z-loss: + z_loss * logsumexp(logits)^2 per token in training (1e-4 in PaLM); evaluation "
            "stays CE"
        },
    )


@dataclass
class BatchSection:
    """How a step's samples (training.per_device_train_batch_size x gradient_accumulation_steps x GPUs) are split."""

    micro_batch: Literal["auto", "recipe"] = field(
        default="auto",
        metadata={
            "help": "auto (a GPU): fewer, larger micro-batches than the recipe's split when memory allows, same samples "
            "per step (training/fast_path.py choose_micro_batch) | recipe: training.per_device_train_batch_size "
            "as written"
        },
    )


@dataclass
class DataSection:
    path: str = field(
        default="",
        metadata={
            "help": "output folder of tokenize_pile.py (train/, validation/, manifest.json, tokenizer/). With `sources`: "
            "the output whose validation split and tokenizer/ the run uses (default: the first source)"
        },
    )
    tokenizer: Optional[str] = field(default=None, metadata={"help": "defaults to <path>/tokenizer"})
    sources: dict = field(
        default_factory=dict,
        metadata={
            "help": "Weighted mixtures and phases (data/mixture.py, docs/training.md § Mixtures and phases): name -> "
            "output folder of tokenize_pile.py"
        },
    )
    mixture: dict = field(default_factory=dict, metadata={"help": "name -> weight: one phase, the whole run"})
    phases: list = field(
        default_factory=list,
        metadata={
            "help": "[{mixture: {name: weight}, share: fraction of max_steps | steps: N, name: label}]; the last may "
            "omit both"
        },
    )
    decay_in_last_phase: bool = field(
        default=False, metadata={"help": "warmup_stable_decay's num_decay_steps = the last phase's steps"}
    )


@dataclass
class EvaluationSection:
    eval_tokens: int = field(
        default=1_000_000, metadata={"help": "fixed validation budget; blocks = eval_tokens // seq_len"}
    )
    final_eval_tokens: Optional[int] = field(
        default=None,
        metadata={
            "help": "the evaluation after the last step: None = every validation block (tokenize_pile.py's first 10,000 "
            "documents by default), so final losses and bits per byte compare across runs and tokenizers"
        },
    )
    # not a Literal: the eval package checks the task (its name, lm-eval installed, the task's data) when the run starts
    lm_eval_task: Optional[str] = field(
        default=None,
        metadata={
            "help": "arc_easy | arc_challenge | openbookqa | hellaswag | piqa: scored on the live model at every "
            "evaluation"
        },
    )
    lm_eval_limit: int = field(default=200, metadata={"help": "lm_eval_task: the first this many of its documents"})
    per_set: bool = field(
        default=False,
        metadata={"help": "final evaluation: loss per pile_set_name of the validation blocks (one more pass)"},
    )
    long_context_lengths: list = field(
        default_factory=list,
        metadata={
            "help": "after the last step (eval/long_context.py, through the eval package's callback): passkey retrieval "
            "at these prompt lengths ([]: none) and the loss by position on the first long_context_blocks "
            "validation blocks (0: none), into output_dir/long_context.json and the log"
        },
    )
    long_context_samples: int = field(default=20, metadata={"help": "passkey prompts per length"})
    long_context_blocks: int = field(
        default=0,
        metadata={"help": "loss by position on the first this many validation blocks after the last step (0: none)"},
    )
    long_context_min_document_tokens: int = field(
        default=0, metadata={"help": "loss by position: only documents at least this long in a block"}
    )


@dataclass
class LoggingSection:
    jsonl: str = field(default="log.jsonl", metadata={"help": "the JSONL log, in the run's output_dir"})
    grad_stats_interval: int = field(
        default=0, metadata={"help": "per-layer grad norms + histograms every N steps (0: off)"}
    )
    profile_steps: list = field(default_factory=list, metadata={"help": "[start, stop]: torch.profiler window"})
    nvtx: bool = field(default=False, metadata={"help": "an NVTX range per training step (a GPU)"})
    peak_flops: Optional[float] = field(default=None, metadata={"help": "override the detected per-GPU peak (FLOP/s)"})
    dtype_for_peak: str = field(
        default="bf16",
        metadata={"help": "the dtype of the detected per-GPU peak (fp8, bf16, fp16, tf32, fp32: models/hardware.py)"},
    )
    assumed_mfu: float = field(default=0.4, metadata={"help": "for the --dry-run time estimate"})
    wandb_artifacts: Literal["none", "reference", "upload"] = field(
        default="reference",
        metadata={
            "help": "with report_to including wandb: none | reference (the data and final/ as artifacts that point at "
            "their folders) | upload (final/'s files uploaded; the data is always a reference)"
        },
    )
    wandb_checkpoint_artifacts: bool = field(
        default=False, metadata={"help": "each checkpoint as a model artifact too (a reference)"}
    )


@dataclass
class OptimizerSection:
    name: OptimizerName = field(
        default=DEFAULT_OPTIMIZER,
        metadata={
            "help": "the optimizer, the run's one selector: a TrainingArguments optim name (adamw_torch_fused, "
            "adamw_torch, adafactor, sgd, ...: the Trainer builds it; resolve() sets training.optim from it) | "
            "muon: Muon for the 2-D weights inside the decoder blocks, torch's AdamW (fused on a GPU) for "
            "embeddings, head, norms and biases (training/optim.py). Either way the LR, weight decay, betas, eps "
            "and the schedule are the training.* fields: one scheduler scales both parts."
        },
    )
    muon_momentum: float = field(
        default=0.95, metadata={"help": "Muon's momentum (Keller Jordan's and torch's default)"}
    )
    muon_nesterov: bool = field(
        default=True, metadata={"help": "Nesterov momentum, as in the reference implementation"}
    )
    muon_ns_steps: int = field(
        default=5, metadata={"help": "Newton-Schulz iterations: 5 orthogonalise well enough in bf16"}
    )
    muon_lr_scale: Literal["match_rms_adamw", "original"] = field(
        default="match_rms_adamw",
        metadata={
            "help": "torch.optim.Muon's adjust_lr_fn. match_rms_adamw (Moonshot): Muon's update RMS matches AdamW's, so "
            "training.learning_rate and weight_decay serve both parts; original (Keller Jordan): "
            "sqrt(max(1, A/B)), wants its own, larger LR in muon_learning_rate (e.g. 0.02)"
        },
    )
    muon_learning_rate: Optional[float] = field(
        default=None, metadata={"help": "Muon's peak LR; None: training.learning_rate"}
    )
    decay_embeddings: bool = field(default=False, metadata={"help": "weight decay on embedding tables too"})


@dataclass
class KernelsSection:
    """The project's own kernels (hfpretrain/kernels) and model rewrites (models/speedups.py). Each one acts only
    where it applies (a GPU, a compiled model, a shape that has the module) and was measured faster there
    (docs/benchmarks.md); switching one off brings back the stock path, for A/B runs and for bisecting a
    numeric change."""

    fused_head: bool = field(
        default=True,
        metadata={
            "help": "the compiled loss on a GPU: LM head, loss and gradient with one Triton kernel "
            "(kernels/cross_entropy.py); false: the head and cross-entropy compiled by inductor"
        },
    )
    loss_tile: Optional[list] = field(
        default=None,
        metadata={
            "help": "[columns per iteration, warps] of that kernel; null: 16,384 x 8 up to a 64k vocabulary, 8,192 x 8 "
            "above"
        },
    )
    bias_gelu: bool = field(
        default=True,
        metadata={
            "help": "compiled GPT-2 MLPs: c_fc's bias gradient summed in GELU's backward kernel (kernels/gelu_bias.py)"
        },
    )
    gelu_sigmoid: bool = field(
        default=True, metadata={"help": "compiled models: the tanh GELU computed as x * sigmoid(2u) (models/gelu.py)"}
    )
    rope_table: bool = field(
        default=True,
        metadata={"help": "compiled decoder/model: rotary cos/sin read from a table made once (models/rotary.py)"},
    )
    experts_autocast: bool = field(
        default=True,
        metadata={
            "help": "MoE with experts_implementation=grouped_mm or sonicmoe under bf16 autocast: the experts' grouped "
            "matmuls on bf16 copies of their weights (transformers falls back to one fp32 matmul per expert when "
            "compiled, and its sonicmoe backend takes bf16 weights only: models/speedups.py, models/sonic.py)"
        },
    )
    experts_gather: bool = field(
        default=True,
        metadata={
            "help": "MoE with experts_implementation=grouped_mm: the tokens' rows sent to their experts and back by "
            "gathers only, without transformers' scatter-add backward and expert-parallel masks, each weighed "
            "before its down projection (models/speedups.py)"
        },
    )


@dataclass
class MoeSection:
    """Load balancing of an MoE model's experts (training/moe.py); refused on a dense model."""

    aux_loss_coef: Optional[float] = field(
        default=None,
        metadata={
            "help": "transformers' load-balancing loss weight (router_aux_loss_coef: Qwen3-MoE, Mixtral; 0 switches it "
            "off); null keeps the model config's"
        },
    )
    aux_loss_scope: Literal["pooled", "per_layer"] = field(
        default="pooled",
        metadata={
            "help": "what the load-balancing loss balances: pooled (transformers' form: one Switch loss over every "
            "layer's tokens together, so a layer that sends all its tokens to one expert is offset by the others) or "
            "per_layer (Switch Transformer's, GShard's and Megatron's: each layer's loss, averaged over the layers: "
            "the same scale, so the same weight)"
        },
    )
    bias_update_rate: float = field(
        default=0.0,
        metadata={
            "help": "aux-loss-free balancing (DeepSeek-V3): each router's correction bias moves this much per optimizer "
            "step towards equal load (DeepSeek-V3 used 0.001); 0: off. Needs routers with a correction bias "
            "(glm4_moe)"
        },
    )
    dead_expert_windows: int = field(
        default=3, metadata={"help": "warn when an expert gets no token for this many logging windows in a row"}
    )
    forced_balance: bool = field(
        default=False,
        metadata={
            "help": "measurement only: each token's k experts are assigned round-robin instead of by its router (every "
            "expert gets the same rows), so that tokens/s against dropless routing is the cost of imbalance; the "
            "model it trains ignores its routers' choice"
        },
    )


@dataclass
class ContextSection:
    """A context-extension phase (training/context.py, docs/training.md § Long context): model.init_from's weights,
    trained at ``from_seq_len``, train on at ``seq_len`` with the RoPE change chosen here."""

    seq_len: Optional[int] = field(
        default=None, metadata={"help": "the phase's length (null: no extension); data.path must be packed at it"}
    )
    from_seq_len: Optional[int] = field(
        default=None,
        metadata={
            "help": "the length init_from was trained at; null: read from its lineage.json / data.json (a run's final/, "
            "checkpoint-N)"
        },
    )
    rope: Literal["keep", "theta", "yarn"] = field(
        default="keep",
        metadata={
            "help": "keep (the model's RoPE as it is) | theta (a larger base frequency, rope_theta) | yarn (YaRN through "
            "the config's rope_parameters: factor yarn_factor, original length from_seq_len)"
        },
    )
    rope_theta: Optional[float] = field(
        default=None, metadata={"help": "rope=theta: the new base frequency (yarn: optional, else the model's)"}
    )
    yarn_factor: Optional[float] = field(default=None, metadata={"help": "rope=yarn: null is seq_len / from_seq_len"})
    tokens: Optional[float] = field(
        default=None,
        metadata={
            "help": "the phase's token budget: training.max_steps = round(tokens / tokens per step); or set "
            "training.max_steps"
        },
    )
    gpu: Optional[str] = field(
        default=None,
        metadata={
            "help": "the GPU the plan must fit (a name of models/hardware.py's table: H200, H100-SXM, ...); null: the GPU "
            "this process sees (none on a CPU: not checked, the plan says so)"
        },
    )


@dataclass
class ParallelSection:
    """How the run's processes share the model (training/layout.py, docs/training.md § Parallel layout): data-parallel
    replicas, FSDP2 shards, tensor- and context-parallel groups; ``auto`` lets the planner choose from the shape, the
    sequence length, the GPU's memory and the world size. tp x cp x dp_shard must divide the world size."""

    dp_shard: str = field(
        default="auto",
        metadata={
            "help": "auto | N: ranks each FSDP2 shard group spans (1: no sharding; auto: the launch's engine, FSDP2 over "
            "every data-parallel rank when the model does not fit one GPU under DDP/ZeRO-1)"
        },
    )
    tp: str = field(
        default="auto",
        metadata={
            "help": "auto | N: tensor-parallel degree through transformers' tp_plan (Qwen3, Llama); auto: 1 unless one "
            "layer's weights and activations do not fit a GPU even sharded; must divide the attention and KV "
            "heads"
        },
    )
    cp: str = field(
        default="auto",
        metadata={
            "help": "auto | N: context-parallel degree (accelerate's cp_size: torch's ring attention, causal SDPA without "
            "a mask); auto: 1 unless one sequence's activations do not fit a GPU; must divide seq_len"
        },
    )
    sequence_parallel: Optional[bool] = field(
        default=None,
        metadata={
            "help": "null (auto) | true | false: with tp > 1, each rank of a tensor-parallel group holds 1/tp of the "
            "positions between the blocks in training (Megatron's sequence parallelism: the norms and residual adds "
            "split instead of repeated, the blocks' inputs all-gathered and their outputs reduce-scattered; "
            "models/parallel.py); auto: only where tp does not fit without it (on two H200s it saved 4-8 GiB and "
            "cost 1-2% of the tokens/s); not beside cp; needs seq_len divisible by tp"
        },
    )
    async_tp: Optional[bool] = field(
        default=None,
        metadata={
            "help": "null (auto) | true | false: with sequence parallelism, inductor's micro-pipelined tensor "
            "parallelism (torchtitan's async TP): each block input's all-gather and each row-wise output's "
            "reduce-scatter cut into steps that overlap the projections' matmuls (symmetric memory, NCCL); needs "
            "model.compile (inductor) and a CUDA launch; auto: off (two H200s, the 1.8B shape, tp 2: +0.5% over sequence "
            "parallelism alone, below tp without it: within noise)"
        },
    )
    tp_overlap: Optional[bool] = field(
        default=None,
        metadata={
            "help": "null (auto) | true | false: with tp > 1, inductor's comm/compute reordering in the compiled layers "
            "(each collective issued early and waited for late, independent matmuls between: the backward's "
            "all-reduce of a block input's gradient beside the weight-gradient matmuls); needs model.compile "
            "(inductor); auto: off (two H200s, the 1.8B shape, tp 2: 45% of the collectives' time hidden, no "
            "net gain: the matmuls beside them slowed as much)"
        },
    )
    timeout_s: float = field(
        default=1800.0,
        metadata={
            "help": "seconds every rank waits for the others at start and at each checkpoint (a gloo monitored barrier) "
            "before the run stops with an error naming the late ranks; also the process group's timeout"
        },
    )


@dataclass
class Recipe:
    model: ModelSection = field(
        default_factory=ModelSection,
        metadata={
            "help": "which config JSON to build, field overrides, weights to start from, attention backend, precision, "
            "compilation"
        },
    )
    loss: LossSection = field(
        default_factory=LossSection,
        metadata={"help": "the loss: its implementation (fused or not), chunk sizes, z-loss"},
    )
    batch: BatchSection = field(
        default_factory=BatchSection, metadata={"help": "how a step's samples are split into micro-batches"}
    )
    data: DataSection = field(
        default_factory=DataSection,
        metadata={"help": "the output folder of scripts/tokenize_pile.py, or several with weights and phases"},
    )
    training: dict = field(
        default_factory=dict, metadata={"help": "transformers.TrainingArguments' fields, checked against its dataclass"}
    )
    evaluation: EvaluationSection = field(
        default_factory=EvaluationSection,
        metadata={"help": "validation token budget, optional lm-eval scoring during training"},
    )
    logging: LoggingSection = field(
        default_factory=LoggingSection,
        metadata={"help": "JSONL log, gradient statistics, profiler window, hardware peak override"},
    )
    optimizer: OptimizerSection = field(
        default_factory=OptimizerSection,
        metadata={
            "help": "the optimizer (name: a TrainingArguments optim, or muon: Muon for hidden matrices, AdamW for the "
            "rest) and its settings"
        },
    )
    kernels: KernelsSection = field(
        default_factory=KernelsSection,
        metadata={
            "help": "the project's own kernels and model rewrites, each on by default (off: A/B runs, bisecting)"
        },
    )
    moe: MoeSection = field(
        default_factory=MoeSection,
        metadata={"help": "Mixture-of-Experts: auxiliary-loss weight, aux-loss-free balancing, dead-expert warning"},
    )
    context: ContextSection = field(
        default_factory=ContextSection,
        metadata={"help": "a context-extension phase: the longer length, the RoPE change, the token budget"},
    )
    parallel: ParallelSection = field(
        default_factory=ParallelSection,
        metadata={
            "help": "the parallel layout: dp_shard, tp, cp (auto: chosen by the planner), the collectives' timeout"
        },
    )
    training_flops: Optional[float] = field(
        default=None,
        metadata={
            "help": "train for this many FLOPs (the project formula, as --dry-run prints it): training.max_steps is "
            "derived, round(training_flops / (FLOPs per token x tokens per step)), so a recipe keeps its budget "
            "when its model, batch or data change. Set this or training.max_steps; both must agree."
        },
    )
    nan_policy: Literal["stop", "skip"] = field(
        default="stop", metadata={"help": "what a non-finite loss does: stop the run, or skip the optimizer step"}
    )
    max_skipped_steps: int = field(
        default=10, metadata={"help": "nan_policy=skip: more skipped optimizer steps than this stop the run"}
    )
    max_skipped_fraction: float = field(
        default=0.05,
        metadata={
            "help": "... and so does a larger share of the run's steps: checked from step 20 on and at the end, after "
            "the last save"
        },
    )
    resume_mismatch: Literal["error", "allow"] = field(
        default="error",
        metadata={
            "help": "resuming a checkpoint of another run (model, data, tokenizer, LR, batch or seed differ): error | "
            "allow"
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "a new run (nothing resumed) in a training.output_dir that holds files: refused, unless true, which "
            "removes the earlier run's checkpoints, final/, summary, log, recipe, resolved.yaml and lineage first "
            "(other files stay)"
        },
    )


# recipe name -> torch.nn.attention.SDPBackend member
SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}


def field_choices(hint) -> tuple | None:
    """The values a field's type allows: the arguments of its ``Literal``, and None when it is ``Optional``; None for
    a field that is not a choice."""
    options = typing.get_args(hint) if typing.get_origin(hint) in _UNION_TYPES else (hint,)
    for option in options:
        if typing.get_origin(option) is Literal:
            return typing.get_args(option) + ((None,) if type(None) in options else ())
    return None


def recipe_choices(recipe_cls: type | None = None) -> dict[str, tuple]:
    """``{"section.key" (a top-level key: "key"): its allowed values}`` for every choice field of the recipe, in the
    order of the fields."""
    choices = {}
    for name, hint in typing.get_type_hints(recipe_cls or Recipe).items():
        if dataclasses.is_dataclass(hint):
            for key, inner in typing.get_type_hints(hint).items():
                if (allowed := field_choices(inner)) is not None:
                    choices[f"{name}.{key}"] = allowed
        elif (allowed := field_choices(hint)) is not None:
            choices[name] = allowed
    return choices


def _check_choices(recipe: Recipe) -> None:
    """Each choice field's value is one of its type's ``Literal`` values (OmegaConf took any string)."""
    for key, allowed in recipe_choices(type(recipe)).items():
        value = recipe
        for part in key.split("."):
            value = getattr(value, part)
        if value not in allowed:
            # YAML 1.1 reads yes/no/on/off as booleans, which reach a string field as 'True'/'False'
            boolean = " (YAML reads yes/no/on/off/true/false as a boolean)" if value in ("True", "False") else ""
            raise RecipeError(
                f"{key}={value!r}{boolean} is not one of {sorted(allowed, key=str)}"
                f"{_nearest(str(value), [str(a) for a in allowed])}"
            )


@functools.cache
def _schema_class(cls: type) -> type:
    """The dataclass ``cls`` as OmegaConf is given it: the same fields, defaults and metadata, each ``Literal`` type
    a ``str`` (``Optional[str]`` for an optional one), each section field its own schema class."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        hint, kwargs = hints[f.name], {"metadata": f.metadata}
        if dataclasses.is_dataclass(hint):
            hint = kwargs["default_factory"] = _schema_class(hint)
        else:
            allowed = field_choices(hint)
            if allowed is not None:
                if not all(isinstance(a, str) for a in allowed if a is not None):
                    raise TypeError(f"{cls.__name__}.{f.name}: a recipe choice is a string: {allowed}")
                hint = Optional[str] if None in allowed else str
            if f.default is not dataclasses.MISSING:
                kwargs["default"] = f.default
            if f.default_factory is not dataclasses.MISSING:
                kwargs["default_factory"] = f.default_factory
        fields.append((f.name, hint, field(**kwargs)))
    schema = dataclasses.make_dataclass(cls.__name__, fields)
    schema.__module__, schema.__qualname__ = cls.__module__, cls.__qualname__
    _REAL_CLASS[schema] = cls
    return schema


_REAL_CLASS: dict[type, type] = {}  # schema class -> the dataclass it was made from


def _from_schema(obj):
    """An instance of a schema class (``OmegaConf.to_object``'s) as the dataclass it was made from, sections too."""
    real = _REAL_CLASS.get(type(obj))
    if real is None:
        return obj
    return real(**{f.name: _from_schema(getattr(obj, f.name)) for f in dataclasses.fields(obj)})


def _to_schema(obj):
    """A recipe dataclass instance as its schema class's, for ``OmegaConf.structured``."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return obj
    return _schema_class(type(obj))(**{f.name: _to_schema(getattr(obj, f.name)) for f in dataclasses.fields(obj)})


def _sections_with(key: str) -> list[str]:
    """``section.key`` for each section that has ``key`` (an override written without its section)."""
    owners = [
        f"{name}.{key}"
        for name, hint in typing.get_type_hints(Recipe).items()
        if dataclasses.is_dataclass(hint) and key in {f.name for f in dataclasses.fields(hint)}
    ]
    return owners + ([f"training.{key}"] if key in TrainingArguments.__dataclass_fields__ else [])


def _nearest(key: str, valid) -> str:
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _training_fields() -> dict[str, Any]:
    hints = typing.get_type_hints(TrainingArguments)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(TrainingArguments) if f.init}


def _check_type(key: str, value: Any, hint: Any) -> Any:
    """Reject values TrainingArguments would silently accept with the wrong type (e.g. a string
    learning rate); fields with richer types (enums, dicts, lists) are left to TrainingArguments."""
    options = typing.get_args(hint) if typing.get_origin(hint) in _UNION_TYPES else (hint,)
    if value is None and type(None) in options:
        return value
    if isinstance(value, (dict, list)) and any((typing.get_origin(t) or t) in (dict, list) for t in options):
        return value
    simple = [t for t in options if t in (bool, int, float, str)]
    if not simple or any(t is Any for t in options):
        return value
    if value is False and str in simple and bool not in simple:
        # YAML 1.1 (OmegaConf) reads a bare `no` as false: for a str field that is the "no" that
        # switches a strategy off (save_strategy=no, eval_strategy=no), not a type error.
        return "no"
    for t in simple:
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if t is str and isinstance(value, str):
            return value
    names = "/".join(t.__name__ for t in simple)
    advice = ""
    if isinstance(value, str) and (int in simple or float in simple):
        try:
            number = float(value)
        except ValueError:
            number = None
        advice = (
            ""
            if number is None
            else ": NaN and infinity are refused"
            if not math.isfinite(number)
            else f": write the number without quotes (training.{key}={value})"
        )
    raise RecipeError(f"training.{key}: expected {names}, got {type(value).__name__} {value!r}{advice}")


# transformers 5.24 renamed gradient_checkpointing(_kwargs) to activation_checkpointing(_kwargs) and kept the old
# names as aliases; 5.17 knows only the old ones. A recipe may use either name on either version
# (arguments.training_arguments passes the installed one).
CHECKPOINTING_NAMES = {
    "activation_checkpointing": "gradient_checkpointing",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs",
}


def _takes_none(hint: Any) -> bool:
    return hint is Any or (typing.get_origin(hint) in _UNION_TYPES and type(None) in typing.get_args(hint))


def _validate_training(training: dict) -> dict:
    fields = _training_fields()
    for new, old in CHECKPOINTING_NAMES.items():
        fields.setdefault(new, fields[old])
    checked = {}
    for key, value in training.items():
        if key not in fields and key in Recipe.__dataclass_fields__:  # overwrite_output_dir was a Trainer flag
            raise RecipeError(
                f"unknown key training.{key}: {key} is a top-level recipe key, not in training "
                f"({key}={str(value).lower() if isinstance(value, bool) else value} on the command line)"
            )
        if key not in fields:
            raise RecipeError(
                f"unknown key training.{key}{_nearest(key, fields)}: training takes TrainingArguments fields"
            )
        if value is None and not _takes_none(fields[key]):
            continue  # null unsets a key (training.max_steps=null: training_flops or context.tokens decide)
        if key == "resume_from_checkpoint" and isinstance(value, bool):
            checked[key] = "auto" if value else None  # true: the last complete checkpoint; false: start fresh
            continue
        checked[key] = _check_type(key, value, fields[key])
    return checked


def _apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The ``section.key=value`` overrides merged into ``cfg`` in order; a bad one is named in one RecipeError.
    Each is parsed and checked on its own, then all are merged in one ``OmegaConf.merge(cfg, *parts)``: in order, as
    one merge each would, but the whole config is deep-copied once, not once per override (0.5 s per recipe in a
    study). A merge that fails is repeated one override at a time, to name the one that failed."""
    parts = []
    for item in overrides:
        try:
            parts.append(_parse_override(cfg, item))
        except RecipeError:
            _merge_each(cfg, parts)  # an earlier override's merge error comes first, as one by one
            raise
    if not parts:
        return cfg
    try:
        return OmegaConf.merge(cfg, *(given for _, _, given in parts))
    except (ConfigKeyError, ConfigAttributeError, ValidationError):
        return _merge_each(cfg, parts)


def _parse_override(cfg: DictConfig, item: str) -> tuple[str, str, DictConfig]:
    """``(key, section, config)`` of one ``section.key=value`` override, its form, section and value checked."""
    if "=" not in item:
        raise RecipeError(f"override '{item}' is not of the form section.key=value")
    key, value = item.split("=", 1)
    top = key.split(".")[0]
    if top not in cfg:
        owners = _sections_with(key) if top == key else []  # a key written without its section
        hint = f" (did you mean {' or '.join(f'{o}={value}' for o in owners)}?)" if owners else _nearest(top, cfg)
        raise RecipeError(f"unknown section '{top}' in override '{item}'{hint}")
    try:
        given = OmegaConf.from_dotlist([item])
    except yaml.YAMLError as err:
        raise RecipeError(
            f"override '{item}': the value is not valid YAML "
            f"({getattr(err, 'problem', None) or str(err).splitlines()[0]})"
        ) from None
    _refuse_colon_keys(f"override '{item}'", OmegaConf.to_container(given))
    _refuse_misshapen(f"override '{item}'", OmegaConf.to_container(given), cfg)
    return key, top, given


def _merge_each(cfg: DictConfig, parts: list[tuple[str, str, DictConfig]]) -> DictConfig:
    for key, top, given in parts:
        try:
            cfg = OmegaConf.merge(cfg, given)
        except (ConfigKeyError, ConfigAttributeError):
            raise RecipeError(f"unknown key '{key}'{_nearest(key.split('.')[-1], _section_keys(cfg, top))}") from None
        except ValidationError as err:
            raise RecipeError(f"{key}: {str(err).splitlines()[0]}") from None
    return cfg


# counts and intervals that mean nothing at 0 or below
_POSITIVE_TRAINING_KEYS = (
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "save_steps",
    "eval_steps",
    "logging_steps",
)


def _refuse_colon_keys(where: str, value) -> None:
    """YAML reads ``{min_lr_rate:0.5}`` (no space after the colon) as the key ``min_lr_rate:0.5`` with no value,
    and a key set to null is unset: the override was silently dropped."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(key, str) and ":" in key and inner is None:
                name, _, given = key.partition(":")
                raise RecipeError(
                    f"{where}: '{key}' reads as a key with no value; YAML needs a space "
                    f"after the colon ({name}: {given})"
                )
            _refuse_colon_keys(where, inner)
    elif isinstance(value, list):
        for inner in value:
            _refuse_colon_keys(where, inner)


def _refuse_misshapen(where: str, given, schema: DictConfig, prefix: str = "") -> None:
    """A section (``kernels:``, ``training:``, ``model.overrides``) given as a list or a scalar was OmegaConf's "Merge
    error: list is not a subclass of KernelsSection", or a TypeError traceback: one line naming the key."""
    if not isinstance(given, dict):
        return
    for key, value in given.items():
        node = schema._get_node(key) if isinstance(key, str) and key in schema else None
        if not isinstance(node, DictConfig) or value is None:
            continue
        if not isinstance(value, dict):
            kind = {list: "a list", str: "a string", bool: "a bool"}.get(type(value), "a number")
            raise RecipeError(
                f"{where}: {prefix}{key} is a section of keys ({prefix}{key}: followed by indented "
                f"'key: value' lines, or {prefix}{key}.KEY=VALUE on the command line), got {kind}: "
                f"{value!r}"
            )
        _refuse_misshapen(where, value, node, f"{prefix}{key}.")


def _section_keys(cfg: DictConfig, top: str):
    section = cfg[top]
    return section.keys() if isinstance(section, DictConfig) else []


def yaml_problem(path, err: Exception) -> str:
    """One line for a YAML file that does not parse (a syntax error, with its line) or is not UTF-8 text."""
    if isinstance(err, UnicodeDecodeError):
        return f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{path}{f':{mark.line + 1}' if mark else ''}: YAML syntax error: {problem}"


def _read_yaml(path: Path) -> DictConfig:
    """The recipe file; a YAML syntax error or a file that is not a mapping is one RecipeError line naming it."""
    try:
        cfg = OmegaConf.load(path)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise RecipeError(yaml_problem(path, err)) from None
    if not isinstance(cfg, DictConfig):
        raise RecipeError(
            f"{path}: a recipe is a mapping of sections (model:, data:, training:, ...), "
            f"got a {type(cfg).__name__.replace('Config', '').lower()}"
        )
    _refuse_colon_keys(str(path), OmegaConf.to_container(cfg, resolve=False))
    return cfg


def _inductor_settings(options) -> dict:
    """``model.inductor_options`` as ``torch._inductor.config.patch`` takes it, each key checked: it must name a
    setting (dotted for its sub-configs, e.g. ``triton.multi_kernel``), since a misspelt one would be a silent
    no-op. A dotted override such as ``model.inductor_options.triton.multi_kernel=1`` arrives nested
    (``{triton: {multi_kernel: 1}}``) and is flattened; a setting whose own value is a mapping
    (``pre_grad_fusion_options``) is kept whole."""
    if not options:  # importing inductor's config takes seconds of every launch's start: only to check a setting
        return {}
    import torch._inductor.config as inductor_config

    defaults = inductor_config.get_config_copy()
    names = defaults.keys()
    settings = {}

    def visit(group, prefix: str) -> None:
        for key, value in group.items():
            key = f"{prefix}{key}"
            is_group = key not in names and any(name.startswith(key + ".") for name in names)
            if is_group and isinstance(value, dict) and value:
                visit(value, key + ".")
            else:  # a setting, or a misspelt name whose mapping must reach the check below, not vanish
                settings[key] = value

    visit(options, "")
    for key, value in settings.items():
        if key in names:
            default = defaults[key]  # a value of another type would fail only at the first compile, in train()
            if isinstance(default, (bool, int, float, str)) and not (
                type(value) is type(default) or (type(default) is float and type(value) is int)
            ):
                raise RecipeError(
                    f"model.inductor_options.{key}={value!r}: expected a {type(default).__name__} (default {default!r})"
                )
            continue
        if any(name.startswith(key + ".") for name in names):
            raise RecipeError(f"model.inductor_options.{key}: a group of settings, not one (name one inside it)")
        near = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise RecipeError(f"model.inductor_options.{key}: not a setting of torch._inductor.config{hint}")
    return settings


# Keys that moved to the section of what they configure (issue 57): old "section.key" -> new "section.key". A recipe
# file or override with an old key loads as before, with one warning naming the new key; resume reads a checkpoint's
# recipe.yaml through the same table (migrate_recipe_dict).
MOVED_KEYS = {
    "training.optim": "optimizer.name",
    "model.fused_loss": "loss.implementation",
    "model.loss_chunk_tokens": "loss.chunk_tokens",
    "model.liger_min_chunk_tokens": "loss.liger_min_chunk_tokens",
    "model.z_loss": "loss.z_loss",
    "model.micro_batch": "batch.micro_batch",
    "model.decay_embeddings": "optimizer.decay_embeddings",
}
# optimizer.name's old value: TrainingArguments' optimizer, which training.optim chose
_OLD_ADAMW = "adamw"


def migrate_recipe_dict(raw: dict, where: str, warn: bool = True) -> dict:
    """``raw`` (a recipe as a plain mapping) with each key of MOVED_KEYS at its new place: a copy, a warning per
    moved key (``warn``); an old and a new key that disagree are one RecipeError naming both."""
    raw = copy.deepcopy(raw)
    say = logger.warning if warn else logger.debug
    optimizer = raw.get("optimizer") if isinstance(raw.get("optimizer"), dict) else None
    training = raw.get("training") if isinstance(raw.get("training"), dict) else {}
    if optimizer is not None and optimizer.get("name") == _OLD_ADAMW:
        del optimizer["name"]  # training.optim's value below, else TrainingArguments' default
        if "optim" not in training:
            say(
                "%s: optimizer.name=adamw is now the optimizer's own name: optimizer.name=%s (TrainingArguments' "
                "default)",
                where,
                DEFAULT_OPTIMIZER,
            )
    if optimizer is not None and optimizer.get("name") == "muon" and "optim" in training:
        # Muon's AdamW part was always torch's AdamW: training.optim chose nothing
        say(
            "%s: training.optim=%s is ignored under optimizer.name=muon (and is no longer a recipe key)",
            where,
            training.pop("optim"),
        )
    for old, new in MOVED_KEYS.items():
        (old_section, old_key), (new_section, new_key) = old.split("."), new.split(".")
        section = raw.get(old_section)
        if not isinstance(section, dict) or old_key not in section:
            continue
        value = section.pop(old_key)
        if not isinstance(raw.get(new_section), dict):
            raw[new_section] = {}
        target = raw[new_section]
        if new_key in target and target[new_key] != value:
            raise RecipeError(f"{where}: {old}={value!r} and {new}={target[new_key]!r} are one setting: keep {new}")
        target[new_key] = value
        say("%s: %s is now %s (%s=%s)", where, old, new, new, value)
    return raw


def _migrate_override(item: str) -> str:
    """An override naming a moved key, at the new key (one warning)."""
    key, sep, value = item.partition("=")
    if not sep:
        return item
    if key == "optimizer.name" and value.strip() == _OLD_ADAMW:
        logger.warning("override %s: optimizer.name=adamw is now optimizer.name=%s", item, DEFAULT_OPTIMIZER)
        return f"{key}={DEFAULT_OPTIMIZER}"
    for old, new in MOVED_KEYS.items():
        if key == old or key.startswith(old + "."):
            logger.warning("override %s: %s is now %s", item, old, new)
            return f"{new}{key[len(old) :]}={value}"
    return item


def load_recipe(path: str | Path | None, overrides: list[str] | None = None) -> Recipe:
    """Read a recipe YAML (or the defaults when path is None), apply overrides, validate."""
    schema = OmegaConf.structured(_schema_class(Recipe))
    try:
        if path is not None:
            path = Path(path)
            if not path.is_file():
                raise RecipeError(f"recipe {path} does not exist")
            written = OmegaConf.to_container(_read_yaml(path), resolve=False)
            _refuse_misshapen(str(path), written, schema)
            schema = OmegaConf.merge(schema, OmegaConf.create(migrate_recipe_dict(written, str(path))))
    except (ConfigKeyError, ConfigAttributeError) as err:
        key = getattr(err, "full_key", None) or str(err).splitlines()[0]
        leaf = str(key).split(".")[-1]
        top = str(key).split(".")[0]
        valid = _section_keys(schema, top) if top in schema and top != leaf else schema.keys()
        raise RecipeError(f"{path}: unknown key '{key}'{_nearest(leaf, valid)}") from None
    except ValidationError as err:
        raise RecipeError(f"{path}: {getattr(err, 'full_key', '')}: {str(err).splitlines()[0]}") from None
    cfg = _apply_overrides(schema, [_migrate_override(item) for item in overrides or []])
    recipe: Recipe = _from_schema(OmegaConf.to_object(cfg))
    recipe.training = _validate_training(recipe.training)
    _check_numbers(recipe)  # first: every range test below is false for NaN
    # Recipes saved before the ninth session wrote fp8_fast_accum as a bool (OmegaConf gives it as a string here):
    # false was torchao's forward-only recipe, true the backward too. They still train again as they did.
    recipe.model.fp8_fast_accum = {"False": "forward", "True": "all"}.get(
        recipe.model.fp8_fast_accum, recipe.model.fp8_fast_accum
    )
    _check_choices(recipe)
    if recipe.training.get("load_best_model_at_end"):
        raise RecipeError(
            "training.load_best_model_at_end: final/ is the last step's model (its evaluation, model "
            "card and lineage describe that step); metric_for_best_model alone keeps the best "
            "checkpoint through rotation: load it from there"
        )
    strategy = recipe.training.get("train_sampling_strategy", "random")
    if strategy != "random":  # PretrainTrainer replaces the Trainer's samplers: the setting would do nothing
        raise RecipeError(
            f"training.train_sampling_strategy={strategy!r}: the data order is the project's (blocks "
            "of one length, shuffled by seed, resumed exactly): leave the key out"
        )
    for key in _POSITIVE_TRAINING_KEYS:  # TrainingArguments takes 0 (a traceback, or no saves, much later)
        value = recipe.training.get(key)
        if value is not None and value <= 0:
            raise RecipeError(f"training.{key}={value} must be > 0")
    for key in ("eval_tokens", "final_eval_tokens"):
        value = getattr(recipe.evaluation, key)
        if value is not None and value < 0:
            raise RecipeError(f"evaluation.{key}={value} must be >= 0 (a number of validation tokens)")
    if recipe.max_skipped_steps < 0:
        raise RecipeError(f"max_skipped_steps={recipe.max_skipped_steps} must be >= 0")
    if not 0 <= recipe.max_skipped_fraction <= 1:
        raise RecipeError(
            f"max_skipped_fraction={recipe.max_skipped_fraction} is outside [0, 1]: the share of the "
            "run's optimizer steps nan_policy=skip may skip"
        )
    if recipe.loss.z_loss < 0:
        raise RecipeError(f"loss.z_loss={recipe.loss.z_loss} must be >= 0")
    backends = list(recipe.model.sdpa_backends)
    if not backends or any(b not in SDPA_BACKENDS for b in backends):
        raise RecipeError(f"model.sdpa_backends={backends}: must be a non-empty list of {list(SDPA_BACKENDS)}")
    recipe.model.inductor_options = _inductor_settings(recipe.model.inductor_options)
    moe = recipe.moe
    if (moe.aux_loss_coef is not None and moe.aux_loss_coef < 0) or moe.bias_update_rate < 0:
        raise RecipeError(
            f"moe.aux_loss_coef={moe.aux_loss_coef} / moe.bias_update_rate={moe.bias_update_rate}: must be >= 0"
        )
    if moe.dead_expert_windows < 1:
        raise RecipeError(f"moe.dead_expert_windows={moe.dead_expert_windows} must be >= 1")
    if recipe.kernels.loss_tile is not None:
        try:
            recipe.kernels.loss_tile = list(check_tile(recipe.kernels.loss_tile))
        except ValueError as err:
            raise RecipeError(str(err)) from None
    _check_checkpointing(recipe.training)
    check_context_section(recipe)
    check_parallel_section(recipe.parallel)
    _check_long_context_evaluation(recipe.evaluation)
    check_data_section(recipe.data, recipe.training)
    _check_decay_ratio(recipe.training, recipe.data.decay_in_last_phase)
    _check_scheduler_kwargs(recipe.training)
    if not recipe.data.path and recipe.data.sources:
        recipe.data.path = str(next(iter(recipe.data.sources.values())))  # validation + tokenizer: the first
    if not recipe.data.path:
        raise RecipeError(
            "data.path is not set: point it at the output folder of scripts/tokenize_pile.py "
            "(or name several in data.sources)"
        )
    return recipe


# The ranges of typed keys that no check below covers, by field name, not section (a key moved to another section
# keeps its range): each was accepted at load and failed, or silently did nothing, later.
NUMBER_RANGES = {
    "muon_momentum": (lambda v: 0 <= v < 1, "a momentum, in [0, 1)"),
    "muon_learning_rate": (lambda v: v > 0, "a learning rate, > 0"),
    "muon_ns_steps": (lambda v: v >= 1, "Newton-Schulz iterations, >= 1"),
    "assumed_mfu": (lambda v: 0 < v <= 1, "a share of the peak, in (0, 1]"),
    "peak_flops": (lambda v: v > 0, "FLOP/s, > 0"),
    "chunk_tokens": (lambda v: v >= 1, "tokens per chunk, >= 1"),
    "liger_min_chunk_tokens": (lambda v: v >= 0, "tokens, >= 0 (0: liger's own sizing)"),
}


def _check_numbers(value, key: str = "", name: str = "") -> None:
    """NaN passes every range test (``nan < 0`` is false) and infinity most of them, then lands in a config or an
    update rule (moe.bias_update_rate=inf: every router bias NaN after one step, exit 0). So every number of the
    recipe, wherever it is (typed sections, training, model.overrides, data mixtures), must be finite: by key. A
    typed field (``name``) of NUMBER_RANGES must be in its range too."""
    if isinstance(value, float) and not math.isfinite(value):
        raise RecipeError(f"{key}={value}: must be a finite number")
    if name in NUMBER_RANGES and value is not None and not isinstance(value, bool):
        ok, what = NUMBER_RANGES[name]
        if not ok(value):
            raise RecipeError(f"{key}={value}: out of range, expected {what}")
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _check_numbers(getattr(value, f.name), f"{key}.{f.name}" if key else f.name, f.name)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(v, f"{key}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_numbers(v, f"{key}[{i}]")


# activation_checkpointing_kwargs: transformers' own two, then torch.utils.checkpoint.checkpoint's keywords
CHECKPOINTING_KEYS = (
    "every_n_layers",
    "offload",
    "use_reentrant",
    "preserve_rng_state",
    "determinism_check",
    "debug",
    "early_stop",
)


def _check_checkpointing(training: dict) -> None:
    """training.activation_checkpointing (gradient_checkpointing, its older name) and its kwargs, checked at load:
    transformers forwards unknown kwargs to torch's checkpoint, which fails only at the first forward."""
    on = training.get("activation_checkpointing", training.get("gradient_checkpointing"))
    for name in ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"):
        kwargs = training.get(name)
        if not kwargs:
            continue
        if not isinstance(kwargs, dict):
            raise RecipeError(f"training.{name}={kwargs!r}: expected a mapping, e.g. {{every_n_layers: 2}}")
        if not on:
            raise RecipeError(
                f"training.{name} is set but activation checkpointing is off: set "
                "training.activation_checkpointing=true"
            )
        for key, value in kwargs.items():
            if key not in CHECKPOINTING_KEYS:
                raise RecipeError(
                    f"training.{name}.{key}: not a checkpointing option{_nearest(str(key), CHECKPOINTING_KEYS)}"
                    f" ({', '.join(CHECKPOINTING_KEYS)})"
                )
        every = kwargs.get("every_n_layers", 1)
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise RecipeError(f"training.{name}.every_n_layers={every!r}: checkpoint every n-th decoder layer, n >= 1")


def _check_long_context_evaluation(ev: EvaluationSection) -> None:
    lengths = list(ev.long_context_lengths)
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 64 for n in lengths):
        raise RecipeError(f"evaluation.long_context_lengths={lengths}: passkey prompt lengths in tokens, each >= 64")
    for key in ("long_context_samples", "long_context_blocks", "long_context_min_document_tokens"):
        low = 1 if key == "long_context_samples" else 0
        if getattr(ev, key) < low:
            raise RecipeError(f"evaluation.{key}={getattr(ev, key)} must be >= {low}")


# YaRN's published extensions stretch 4x to 40x (DeepSeek-V3: 40); far past that a factor is a typo, and it trained
# with exit 0 (yarn_factor=1e9: max_position_embeddings 64,000,000,000)
YARN_MAX_FACTOR = 128


def check_context_section(recipe: Recipe) -> None:
    """The context section's own keys, without reading the model or the data (those: training/context.py)."""
    ctx = recipe.context
    if ctx.seq_len is None:
        set_keys = [
            k for k in ("from_seq_len", "rope_theta", "yarn_factor", "tokens", "gpu") if getattr(ctx, k) is not None
        ] + (["rope"] if ctx.rope != "keep" else [])
        if set_keys:
            raise RecipeError(
                f"context.{set_keys[0]} is set but context.seq_len is not: a context-extension phase "
                "starts with its length"
            )
        return
    if ctx.seq_len < 2:
        raise RecipeError(f"context.seq_len={ctx.seq_len}: expected a length in tokens (>= 2)")
    if ctx.from_seq_len is not None and ctx.from_seq_len < 2:
        raise RecipeError(f"context.from_seq_len={ctx.from_seq_len}: expected a length in tokens (>= 2)")
    if ctx.from_seq_len is not None and ctx.seq_len < ctx.from_seq_len:
        raise RecipeError(
            f"context.seq_len={ctx.seq_len} is below the training length context.from_seq_len="
            f"{ctx.from_seq_len}: a context-extension phase trains at a longer length"
        )
    if not recipe.model.init_from:
        raise RecipeError(
            "context.seq_len needs model.init_from: a context-extension phase starts from a trained "
            "model (a run's final/ or a checkpoint-N folder)"
        )
    if ctx.rope == "theta" and ctx.rope_theta is None:
        raise RecipeError("context.rope=theta needs context.rope_theta (the new RoPE base frequency)")
    if ctx.rope == "keep" and (ctx.rope_theta is not None or ctx.yarn_factor is not None):
        what = "rope_theta" if ctx.rope_theta is not None else "yarn_factor"
        raise RecipeError(f"context.{what} is set but context.rope=keep: choose rope=theta or rope=yarn")
    if ctx.rope == "theta" and ctx.yarn_factor is not None:
        raise RecipeError("context.yarn_factor is set but context.rope=theta: YaRN is context.rope=yarn")
    if ctx.rope_theta is not None and not ctx.rope_theta > 0:
        raise RecipeError(f"context.rope_theta={ctx.rope_theta}: a base frequency must be > 0")
    if ctx.yarn_factor is not None and not 1 <= ctx.yarn_factor <= YARN_MAX_FACTOR:
        raise RecipeError(
            f"context.yarn_factor={ctx.yarn_factor:g}: YaRN stretches positions by a factor from 1 to "
            f"{YARN_MAX_FACTOR} (seq_len / from_seq_len; a larger one sets max_position_embeddings to "
            "that many times the trained length)"
        )
    if ctx.tokens is not None:
        if not ctx.tokens > 0 or ctx.tokens in (float("inf"),):
            raise RecipeError(f"context.tokens={ctx.tokens}: the phase's token budget must be a number > 0")
        if recipe.training_flops is not None:
            raise RecipeError("context.tokens and training_flops both set the phase's length: keep one")
    if ctx.gpu is not None:
        from hfpretrain.models.hardware import canonical_gpu

        try:
            canonical_gpu(ctx.gpu)
        except ValueError as err:
            raise RecipeError(f"context.gpu: {err}") from None


PARALLEL_DEGREES = ("dp_shard", "tp", "cp")


def parallel_degree(value) -> int | None:
    """A ``parallel`` degree as written: None for auto, else the integer (>= 1) it names."""
    text = str(value).strip()
    return None if text == "auto" else int(text)


def check_parallel_section(parallel: ParallelSection) -> None:
    """Each degree auto or an integer >= 1, the timeout a positive number (what needs the world size, the model or
    the launch: training/layout.py)."""
    for key in PARALLEL_DEGREES:
        value = getattr(parallel, key)
        try:
            ok = parallel_degree(value) is None or parallel_degree(value) >= 1
        except ValueError:
            ok = False
        if not ok:
            raise RecipeError(f"parallel.{key}={value!r}: expected auto or an integer >= 1")
    if not parallel.timeout_s > 0:
        raise RecipeError(f"parallel.timeout_s={parallel.timeout_s}: seconds to wait for a late rank, > 0")


PHASE_KEYS = ("mixture", "share", "steps", "name")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_mixture(where: str, mixture, sources: dict) -> None:
    if not isinstance(mixture, dict) or not mixture:
        raise RecipeError(f"{where}: expected a mapping of source name -> weight, got {mixture!r}")
    for name, weight in mixture.items():
        if name not in sources:
            raise RecipeError(
                f"{where}: unknown source '{name}'{_nearest(str(name), sources)}: data.sources names {sorted(sources)}"
            )
        if not _number(weight) or weight != weight:
            raise RecipeError(f"{where}.{name}: weight must be a number, got {weight!r}")
        if weight < 0:
            raise RecipeError(f"{where}.{name}: weight {weight} is negative")
    if sum(mixture.values()) <= 0:
        raise RecipeError(f"{where}: the weights sum to 0: give at least one source a positive weight")


def check_data_section(data: DataSection, training: dict) -> None:
    """Mixtures and phases, checked without reading any data: names, weights, shares (one line each)."""
    sources, phases = data.sources, data.phases
    if not sources:
        for key in ("mixture", "phases"):
            if getattr(data, key):
                raise RecipeError(f"data.{key} needs data.sources (name -> output folder of tokenize_pile.py)")
    else:
        for name, path in sources.items():
            if not isinstance(path, str) or not path:
                raise RecipeError(f"data.sources.{name}: expected an output folder of tokenize_pile.py, got {path!r}")
        if data.mixture and phases:
            raise RecipeError(
                "data.mixture and data.phases are both set: a one-phase run is data.mixture, "
                "several phases each have their own mixture"
            )
        if not data.mixture and not phases:
            raise RecipeError("data.sources needs data.mixture (name -> weight) or data.phases")
        if data.mixture:
            _check_mixture("data.mixture", data.mixture, sources)
    for k, phase in enumerate(phases):
        where = f"data.phases[{k}]"
        if not isinstance(phase, dict):
            raise RecipeError(f"{where}: expected a mapping with mixture and share or steps, got {phase!r}")
        for key in phase:
            if key not in PHASE_KEYS:
                raise RecipeError(
                    f"{where}: unknown key '{key}'{_nearest(str(key), PHASE_KEYS)}: a phase takes {list(PHASE_KEYS)}"
                )
        if "mixture" not in phase:
            raise RecipeError(f"{where}: no mixture (source name -> weight)")
        _check_mixture(f"{where}.mixture", phase["mixture"], sources)
        share, steps = phase.get("share"), phase.get("steps")
        if share is not None and steps is not None:
            raise RecipeError(f"{where}: give share (fraction of max_steps) or steps, not both")
        if share is not None and (not _number(share) or not 0 < share <= 1):
            raise RecipeError(f"{where}.share={share!r} is outside (0, 1]: a phase's share of training.max_steps")
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
            raise RecipeError(f"{where}.steps={steps!r}: expected a whole number of steps >= 1")
        if share is None and steps is None and k < len(phases) - 1:
            raise RecipeError(f"{where}: only the last phase may leave out share/steps (it takes the rest)")
    if data.decay_in_last_phase:
        schedule = training.get("lr_scheduler_type")
        if getattr(schedule, "value", schedule) != "warmup_stable_decay":
            raise RecipeError(
                f"data.decay_in_last_phase needs training.lr_scheduler_type=warmup_stable_decay (got {schedule!r})"
            )
        for key in ("num_decay_steps", "num_stable_steps"):
            if key in (training.get("lr_scheduler_kwargs") or {}):
                raise RecipeError(
                    f"training.lr_scheduler_kwargs.{key} is set by data.decay_in_last_phase (the decay "
                    "is the last phase's steps, the stable part the rest after warmup): leave it out"
                )
        if not sources:
            raise RecipeError("data.decay_in_last_phase needs data.sources and data.phases")


def _check_decay_ratio(training: dict, decay_in_last_phase: bool) -> None:
    """training.lr_scheduler_kwargs.decay_ratio: warmup_stable_decay's decay as a share of max_steps (like
    warmup_ratio), so that a recipe whose max_steps follows from training_flops keeps its schedule's shape."""
    kwargs = training.get("lr_scheduler_kwargs") or {}
    if kwargs.get("decay_ratio") is None:  # absent, or removed by an override (decay_ratio=null)
        return
    ratio, schedule = kwargs["decay_ratio"], training.get("lr_scheduler_type")
    if getattr(schedule, "value", schedule) != "warmup_stable_decay":
        raise RecipeError(
            f"training.lr_scheduler_kwargs.decay_ratio needs lr_scheduler_type=warmup_stable_decay (got {schedule!r})"
        )
    if not _number(ratio) or not 0 < ratio < 1:
        raise RecipeError(
            f"training.lr_scheduler_kwargs.decay_ratio={ratio!r} is outside (0, 1): the share of "
            "training.max_steps spent decaying"
        )
    for other in ("num_decay_steps", "num_stable_steps"):
        if other in kwargs:
            raise RecipeError(
                f"training.lr_scheduler_kwargs.decay_ratio and {other} both set the schedule's "
                "lengths: keep decay_ratio (the stable part is what warmup and decay leave)"
            )
    if decay_in_last_phase:
        raise RecipeError(
            "training.lr_scheduler_kwargs.decay_ratio and data.decay_in_last_phase both set the "
            "decay's length: keep one"
        )


# lr_scheduler_kwargs the project reads itself (before transformers sees them): name -> the schedules taking it.
# decay_ratio becomes warmup_stable_decay's num_decay_steps (resolve.py scheduler_lengths); min_lr becomes
# min_lr_rate (arguments.py training_fields).
_OWN_SCHEDULER_KWARGS = {"decay_ratio": ("warmup_stable_decay",)}
# what transformers' get_scheduler passes itself: not for the recipe's kwargs
_SCHEDULER_POSITIONAL = ("optimizer", "num_warmup_steps", "num_training_steps", "last_epoch")


def scheduler_kwargs_taken(schedule: str) -> set[str] | None:
    """The ``lr_scheduler_kwargs`` names the schedule ``schedule`` takes, read from transformers' scheduler
    function's signature (None: it takes any, through ``**kwargs``). ``constant`` and ``constant_with_warmup``
    take none: transformers would drop them silently."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType

    function = TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(schedule)]
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    taken = {p.name for p in parameters if p.name not in _SCHEDULER_POSITIONAL}
    return taken | {k for k, schedules in _OWN_SCHEDULER_KWARGS.items() if schedule in schedules}


def _check_scheduler_kwargs(training: dict) -> None:
    """training.lr_scheduler_kwargs: only names the chosen schedule takes (switching a recipe's schedule to
    warmup_stable_decay leaves cosine_with_min_lr's min_lr_rate behind; a misspelt name). Checked here, at load,
    not when the Trainer makes the scheduler after the run folder is written."""
    import json

    from transformers.optimization import SchedulerType

    kwargs = training.get("lr_scheduler_kwargs")
    if isinstance(kwargs, str):  # TrainingArguments also takes them as a JSON string
        try:
            kwargs = json.loads(kwargs) if kwargs.strip() else {}
        except ValueError:
            raise RecipeError(
                f"training.lr_scheduler_kwargs={kwargs!r}: not a mapping (name: value) nor JSON text"
            ) from None
    if not kwargs:
        return
    if not isinstance(kwargs, dict):
        raise RecipeError(f"training.lr_scheduler_kwargs={kwargs!r}: expected a mapping of name: value")
    schedule = training.get("lr_scheduler_type", "linear")
    schedule = getattr(schedule, "value", schedule)
    try:
        taken = scheduler_kwargs_taken(schedule)
    except (ValueError, KeyError):
        names = [s.value for s in SchedulerType]
        raise RecipeError(
            f"training.lr_scheduler_type={schedule!r} is not one of {names}{_nearest(str(schedule), names)}"
        ) from None
    if taken is None:
        return
    unknown = [k for k in kwargs if k not in taken and kwargs[k] is not None]
    if unknown:
        what = ", ".join(f"{k}{_nearest(str(k), taken)}" for k in unknown)
        takes = ", ".join(sorted(taken)) or "none"
        raise RecipeError(
            f"training.lr_scheduler_kwargs: lr_scheduler_type={schedule} does not take {what} "
            f"(it takes: {takes}): remove {'it' if len(unknown) == 1 else 'them'} "
            f"(training.lr_scheduler_kwargs.{unknown[0]}=null), or choose the schedule "
            f"{'it belongs' if len(unknown) == 1 else 'they belong'} to"
        )


def recipe_to_yaml(recipe: Recipe) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(_to_schema(recipe)))


def recipe_to_dict(recipe: Recipe) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(_to_schema(recipe)), resolve=True)
