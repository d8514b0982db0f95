"""Compute planner: budget (GPU × count × hours × MFU) → Chinchilla-optimal (N, D) → zoo shapes.

    C      = n_gpus · hours · 3600 · peak_flops(gpu, dtype) · mfu            (model FLOPs)
    N*, D* = Chinchilla-optimal split of C (``fit``):
             "hoffmann": Hoffmann et al. 2022, approach 3 (L = E + A/N^α + B/D^β, A=406.4,
                         B=410.7, α=0.34, β=0.28): N* = G·(C/6)^(β/(α+β)), D* = (C/6)/N*
             "rule20":   D* = 20·N*, C = 6·N*·D*
    For each of the zoo shapes nearest N* (in log N), tokens = C / flops_per_token(shape).total,
    i.e. the whole budget spent at the formula of ``hfpretrain.models.flops``; the memory estimate
    at the given micro-batch says whether it fits; steps = tokens / global batch tokens.

Mixture-of-Experts shapes are sized by their *active* parameters (what one token uses: top-k of the
routed experts, shared experts, router, attention, embeddings): N is compared with N* and tokens per
parameter are counted on it, as FLOPs per token are; the memory fit counts every expert. For a dense
shape active = total, so nothing changes there. The table says which count it used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from hfpretrain.models.flops import flops_per_token
from hfpretrain.models.hardware import canonical_gpu, gpu_memory_bytes, peak_flops
from hfpretrain.models.memory import GIB, TrainingLayout, estimate_memory
from hfpretrain.models.params import count_params
from hfpretrain.models.zoo import load_config, zoo_names

HOFFMANN = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
DEFAULT_VOCAB = 151669  # the Qwen3 tokenizer, for zoo shapes whose vocab comes from the tokenizer
MEMORY_HEADROOM = 0.92  # CUDA context, allocator fragmentation, NCCL buffers


def check_plan_arguments(**values) -> None:
    """ValueError naming the first argument that makes no sense (a count below 1, hours or MFU out of range)."""
    for name, value in values.items():
        if name == "hours":
            ok = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
            need = "a number of hours > 0"
        elif name == "mfu":
            ok = isinstance(value, (int, float)) and 0 < value <= 1
            need = "a fraction in (0, 1]"
        else:
            ok = isinstance(value, int) and value >= 1
            need = "an integer >= 1"
        if not ok:
            raise ValueError(f"{name} must be {need}, got {value!r}")


def chinchilla_optimal(compute_flops: float, fit: str = "hoffmann") -> tuple[float, float]:
    """(N*, D*) for a budget of ``compute_flops`` with C = 6·N·D."""
    if fit == "rule20":
        n = math.sqrt(compute_flops / (6 * 20))
        return n, 20 * n
    if fit != "hoffmann":
        raise ValueError(f"unknown fit {fit!r}; use 'hoffmann' or 'rule20'")
    a, b = HOFFMANN["alpha"], HOFFMANN["beta"]
    g = (a * HOFFMANN["A"] / (b * HOFFMANN["B"])) ** (1 / (a + b))
    n = g * (compute_flops / 6) ** (b / (a + b))
    return n, compute_flops / 6 / n


@dataclass
class Candidate:
    name: str
    params: int
    non_embedding: int
    active_params: int  # what sizes the shape: == params for a dense one, top-k of the experts for an MoE one
    flops_per_token: float
    tokens: float
    tokens_per_param: float
    memory_gib: float
    fits: bool
    grad_accum: int
    global_batch_tokens: int
    steps: int
    wall_hours: float


@dataclass
class Plan:
    gpu: str
    num_gpus: int
    hours: float
    mfu: float
    seq_len: int
    micro_batch: int
    compute_flops: float
    fit: str
    optimal_params: float
    optimal_tokens: float
    candidates: list[Candidate] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def table(self) -> str:
        lines = [
            f"budget: {self.num_gpus}x{self.gpu} x {self.hours:g} h at MFU {self.mfu:g} = {self.compute_flops:.3e} FLOPs",
            f"Chinchilla-optimal ({self.fit}): N* = {self.optimal_params / 1e9:.2f}B params, "
            f"D* = {self.optimal_tokens / 1e9:.1f}B tokens",
        ]
        sparse = any(c.active_params != c.params for c in self.candidates)
        if sparse:
            lines.append(
                "MoE shapes are sized by active parameters (top-k routed + shared experts, router, "
                "attention, embeddings): 'active' is compared with N* and divides the tokens; 'params' "
                "counts every expert, as the memory estimate does"
            )
        width = max([14] + [len(c.name) + 2 for c in self.candidates])
        lines.append(
            f"{'shape':<{width}}{'params':>9}"
            + (f"{'active':>9}" if sparse else "")
            + f"{'tokens':>10}{'tok/param':>10}{'mem GiB':>9}{'fits':>6}{'accum':>6}{'steps':>9}{'hours':>8}"
        )
        for c in self.candidates:
            lines.append(
                f"{c.name:<{width}}{c.params / 1e9:>8.2f}B"
                + (f"{c.active_params / 1e9:>8.2f}B" if sparse else "")
                + f"{c.tokens / 1e9:>9.1f}B{c.tokens_per_param:>10.1f}"
                f"{c.memory_gib:>9.1f}{'yes' if c.fits else 'NO':>6}{c.grad_accum:>6}{c.steps:>9,}{c.wall_hours:>8.1f}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the budget (GPU model x count x hours x MFU), the training layout the memory fit is judged
    at, and which shapes to consider (default: the zoo's, less ``tiny``). Checked when made."""

    gpu: str
    num_gpus: int
    hours: float
    mfu: float = 0.4
    seq_len: int = 2048
    micro_batch: int = 8
    global_batch_tokens: int = 2**20
    dtype: str = "bf16"
    zero_stage: int = 1
    grad_checkpointing: bool = False
    attn_implementation: str = "flash_attention_2"
    fit: str = "hoffmann"
    n_nearest: int = 3
    vocab_size: int = DEFAULT_VOCAB
    shapes: tuple[str, ...] | None = None
    tp: int = 1  # tensor- and context-parallel degrees: the memory fit per GPU, the data-parallel ranks' tokens
    cp: int = 1

    def __post_init__(self):
        check_plan_arguments(
            num_gpus=self.num_gpus,
            hours=self.hours,
            mfu=self.mfu,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            global_batch_tokens=self.global_batch_tokens,
            n_nearest=self.n_nearest,
            vocab_size=self.vocab_size,
            tp=self.tp,
            cp=self.cp,
        )
        if self.num_gpus % (self.tp * self.cp):
            raise ValueError(f"tp: tp x cp = {self.tp * self.cp} does not divide num_gpus {self.num_gpus}")


def plan(r: PlanRequest) -> Plan:
    gpu_key = canonical_gpu(r.gpu)
    peak = peak_flops(gpu_key, r.dtype)
    compute = r.num_gpus * r.hours * 3600 * peak * r.mfu
    n_opt, d_opt = chinchilla_optimal(compute, r.fit)
    configs = {}
    for name in r.shapes or [s for s in zoo_names() if s != "tiny"]:
        try:
            configs[name] = load_config(name, vocab_size=r.vocab_size)
        except ValueError:  # a reference shape made for another tokenizer: take it as it is
            configs[name] = load_config(name)
    counts = {name: count_params(cfg) for name, cfg in configs.items()}
    # sized by active parameters: the total for a dense shape, what one token uses for an MoE one
    nearest = sorted(configs, key=lambda s: abs(math.log(counts[s].active / n_opt)))[: r.n_nearest]
    result = Plan(
        gpu=gpu_key,
        num_gpus=r.num_gpus,
        hours=r.hours,
        mfu=r.mfu,
        seq_len=r.seq_len,
        micro_batch=r.micro_batch,
        compute_flops=compute,
        fit=r.fit,
        optimal_params=n_opt,
        optimal_tokens=d_opt,
    )
    per_step = r.micro_batch * r.seq_len * r.num_gpus // (r.tp * r.cp)  # a tp or cp group shares a micro-batch
    accum = max(1, math.ceil(r.global_batch_tokens / per_step))
    layout = TrainingLayout(
        r.micro_batch,
        r.seq_len,
        n_gpus=r.num_gpus,
        zero_stage=r.zero_stage,
        dtype=r.dtype,
        grad_checkpointing=r.grad_checkpointing,
        attn_implementation=r.attn_implementation,
        grad_accum=accum,
        tp=r.tp,
        cp=r.cp,
    )
    for name in nearest:
        cfg = configs[name]
        fpt = flops_per_token(cfg, r.seq_len).total
        tokens = compute / fpt
        mem = estimate_memory(cfg, layout)
        batch_tokens = per_step * accum
        result.candidates.append(
            Candidate(
                name=name,
                params=counts[name].total,
                non_embedding=counts[name].non_embedding,
                active_params=counts[name].active,
                flops_per_token=fpt,
                tokens=tokens,
                tokens_per_param=tokens / counts[name].active,
                memory_gib=mem.total / GIB,
                fits=mem.total <= MEMORY_HEADROOM * gpu_memory_bytes(gpu_key),
                grad_accum=accum,
                global_batch_tokens=batch_tokens,
                steps=math.ceil(tokens / batch_tokens),
                wall_hours=tokens * fpt / (r.num_gpus * peak * r.mfu) / 3600,
            )
        )
    return result
