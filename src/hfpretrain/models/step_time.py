"""Step-time model: tokens/s, per-GPU efficiency and MFU of N GPUs on M nodes for one parallel layout.

A step is ``accum`` micro-batches of compute plus the communication that does not hide under it:

    t_1     = micro_batch · S · F / (peak_bf16 · mfu_1)                  one micro-batch on one GPU
              (or micro_batch · S / tokens_per_s_1 when the one-GPU tokens/s is given)
    t_mb    = ((t_1 − t_res) / tp + t_res) / cp                          compute of one micro-batch, one GPU
    t_res   = micro_batch · S · L · d · RESIDUAL_BYTES / (HBM_EFFICIENCY · HBM)  (tp > 1 only)
    t_fwd   = t_mb / 3,  t_bwd = 2 · t_mb / 3                            (the 2 : 4 of F's factor 6)
    T_step  = accum · t_mb + exposed communication (below)
    tokens/s = dp · accum · micro_batch · S / T_step;  per GPU = tokens/s / N
    efficiency = per GPU / one GPU's tokens/s;  MFU = F · per GPU / peak_bf16

F is ``models/flops.py``'s 6·N_matmul + 12·L·d_attn·S per token, the formula of the project's MFU, and MFU is
against the bf16 dense peak (``models/hardware.py``) for fp8 runs too, as docs/benchmarks.md reports it. mfu_1 is
one GPU's measured MFU for that shape, GPU and precision (``MEASURED_ONE_GPU_MFU``) where one exists, else the
planner's assumed MFU (0.40); ``one_gpu_mfu`` or ``one_gpu_tokens_per_s`` replace it. Everything one GPU does in its
step (optimizer included) is in t_mb: the model adds only what more GPUs add.

tp splits each layer's heads and MLP width but not its residual stream: the norms, the residual adds and the sums of
the block inputs' gradients run whole on every tp rank (cp splits the sequence, so it divides them too). t_res is
that memory-bound work, counted in bf16 reads and writes of the stream per token, layer and hidden unit: 10 forward
(two norms, two residual adds) and about 22 backward (the same passes, the sums of the projections' input
gradients, the norms' weight gradients), RESIDUAL_BYTES = 64, at HBM_EFFICIENCY = 0.8 of the card's HBM bandwidth.
The profile of tp 2 on two H200s (results/gpu_2gpu_2026-11-29c) had the fused elementwise kernels at 57 ms a step
against one GPU's 64 ms, not half, which would make about 50 ms of them whole: this term counts 34 ms, so it is on
the low side by its own evidence (the bytes are counted, not fitted). Sequence parallelism (``parallel.
sequence_parallel``), which splits that work over the tp ranks, did not make the step shorter on two H200s (1-2%
slower, results/gpu_2gpu_2026-11-30; not profiled: probably its gathers and scatters along the sequence copy the
stream as much as the split saves). The model counts it as tp without it.

Groups: dp = N / (tp · cp) replicas see distinct micro-batches. Parameters are split over the tp ranks (P/tp per
GPU) and their gradients and shards are exchanged over the g = N / tp ranks that hold the same slice (cp ranks
hold the same weights, so they take part). tp · cp must fit in one node; the data-parallel ring spans the nodes.
tp and cp go with fsdp2 only (accelerate refuses them beside pure data parallelism and needs its FSDP2 plugin for
cp: training/layout.py); ddp takes tp over all N GPUs only.

Ring collectives over g ranks of a B-byte buffer, on a link of bw bytes/s per GPU and direction:

    all-gather = reduce-scatter = (g−1)/g · B / bw,   all-reduce = 2 (g−1)/g · B / bw
    bw = BUS_EFFICIENCY · NVLink bandwidth on one node; with M > 1 nodes the ring crosses InfiniBand, and the slower
         link sets its time: bw = BUS_EFFICIENCY · min(NVLink, InfiniBand per GPU)

Bytes per layout (P = all parameters, experts included; P_root = embeddings + LM head + final norm, the part outside
the decoder layers; bf16 = 2 bytes):

    ddp    all-reduce of fp32 gradients (4·P; autocast keeps fp32 weights), once per step (no_sync before)
    zero1  reduce-scatter of bf16 gradients (2·P) once per step (DeepSpeed trains bf16 weights), and the all-gather
           of the updated bf16 weights (2·P) after the optimizer step
    fsdp2  per micro-batch: all-gather of bf16 weights in forward (2·P) and again in backward for the layers
           (2·(P − P_root): full shard, resharded after forward, the root is not); reduce-scatter of bf16
           gradients (2·P) once per step (accelerate's mixed precision reduces in bf16; no_sync before)
    tp     per micro-batch and layer, 2 all-reduces forward + 2 backward of the activations
           (micro_batch · S/cp · d · 2 bytes) over the tp ranks of a node (transformers' colwise/rowwise plan)
    cp     per micro-batch and layer, each GPU passes its K,V block (micro_batch · S/cp · 2·d_kv · 2 bytes) cp−1
           times forward and its K,V and their gradients backward: 3 · (cp−1) blocks, on NVLink

Overlap (the same rule for every layout; no constant is fitted to a measurement):

    exposed(c, window, tail) = max(tail, c − window)

a collective c issued piece by piece as the compute that feeds it finishes hides under ``window``, except the
``tail`` that can only start when that compute is done (or must finish before compute starts), and except
whatever exceeds the window.

    ddp    exposed(AR, t_bwd of the last micro-batch, AR · P_embed_in/P): the input embedding's gradient is ready last
    zero1  exposed(RS, t_bwd, RS · min(1, 5e8/P)): DeepSpeed's last reduce bucket (ds_configs/zero1.json's
           reduce_bucket_size, 5e8 elements); the all-gather runs after the optimizer step: all exposed
    fsdp2  forward, each micro-batch: exposed(AG, t_fwd, AG_root), the root's gather comes before any compute;
           backward, last micro-batch: exposed(AG_layers + RS, t_bwd, RS_root), the root's gradients are reduced
           last; backward, other micro-batches: exposed(AG_layers, t_bwd, 0)
    tp     all exposed (transformers' tensor parallel plan runs its all-reduces on the critical path)
    cp     exposed(CP, attention's share of t_mb, 0): the ring passes hide under attention only

Gradient accumulation amortises the once-per-step collectives (ddp, zero1, fsdp2's reduce-scatter) over ``accum``
micro-batches; fsdp2's all-gathers, tp and cp are paid every micro-batch.

Not modelled (each stated so that a miss can be traced): what tp and cp cost beyond their collectives and the
residual stream (measured on 2 H200s, 2026-11-29: tp 2 runs 7% and cp 2 at 32k 14.5% below this model; tp's
all-reduces ran at 0.58 ms where 0.47 is taken here, about 11 ms of the 30 ms a step it misses, and cp's ring and
FSDP2's gathers at micro-batch 1 are not hidden as assumed: docs/models.md § Step-time model), memory pressure (an
allocator working near the card's limit; the 2-GPU DDP point, 125.5 GiB of the card's 131.3, ran 10.2% below this
model), compute slowed by collectives running beside it (NCCL's SMs and HBM traffic), the smaller matmuls of tp and
cp (their mfu_1 is one GPU's), the optimizer step that ZeRO-1 and FSDP2 shrink by sharding it, NCCL's tree and NVLink
SHARP algorithms (faster than a ring), latency of small messages, and stragglers between nodes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache

from hfpretrain.models.flops import flops_per_token
from hfpretrain.models.hardware import canonical_gpu, peak_flops
from hfpretrain.models.parallel import check_tp
from hfpretrain.models.zoo import load_config

LAYOUTS = ("ddp", "zero1", "fsdp2")
DTYPES = ("bf16", "fp8")  # the matmuls' precision (fp8: torchao's float8 linears); collectives move bf16 either way
ASSUMED_MFU = 0.40  # the planner's default --mfu, when no one-GPU measurement exists for the shape and GPU

# NCCL reaches about 80% of the NVLink line rate: "450GB/s is the line rate. With the protocol overhead (~20%) NCCL
# can get an effective NVLink bandwidth of 370GB/s" (NCCL's maintainer on H100, NVIDIA/nccl-tests issue 212). The
# same fraction is taken for InfiniBand (an assumption: NDR links run nearer their line rate, so this is cautious).
BUS_EFFICIENCY = 0.8
ZERO1_BUCKET = 5e8  # elements: ds_configs/zero1.json's reduce_bucket_size

# Per GPU and direction. NVLink, GB/s: H100 SXM and H200 NVLink 4, 900 GB/s total = 450 each way (NVIDIA H100 and
# H200 datasheets); B200 NVLink 5, 1.8 TB/s total = 900 each way (NVIDIA DGX B200 datasheet). InfiniBand, Gbit/s:
# one ConnectX-7 NDR 400 Gb/s adapter per GPU in DGX H100, DGX H200 and DGX B200 (NVIDIA DGX user guides).
LINKS: dict[str, tuple[float, float]] = {"H100-SXM": (450.0, 400.0), "H200": (450.0, 400.0), "B200": (900.0, 400.0)}

# HBM bandwidth, TB/s: H100 SXM 3.35, NVL 3.9, PCIe 2.0, H200 4.8, B200 8 (NVIDIA datasheets). Memory-bound fused
# kernels reach about 80% of it (the same fraction as the links: an assumption, not fitted).
HBM_TB_S: dict[str, float] = {"H100-SXM": 3.35, "H100-NVL": 3.9, "H100-PCIe": 2.0, "H200": 4.8, "B200": 8.0}
HBM_EFFICIENCY = 0.8
RESIDUAL_BYTES = 64  # bf16 reads and writes of the residual stream per token, layer and hidden unit (the docstring)

# One GPU's measured MFU (against the bf16 peak) at seq 2048: (shape, GPU, dtype) -> (MFU, where it was measured).
MEASURED_ONE_GPU_MFU: dict[tuple[str, str, str], tuple[float, str]] = {
    ("qwen3_1p8b", "H200", "bf16"): (0.585, "results/gpu_4gpu/one_gpu.json (2026-11-28, micro-batch 20)"),
    ("qwen3_1p8b", "H200", "fp8"): (0.740, "docs/benchmarks.md § Speed, one GPU (2026-11-24, micro-batch 24 x 10)"),
}


@dataclass(frozen=True)
class StepTimeRequest:
    """One layout to predict. ``micro_batch`` is sequences per data-parallel replica (a tp or cp group shares one).
    Bandwidths: ``intra_node_gb_s`` in GB/s (NVLink), ``inter_node_gbit_s`` in Gbit/s (InfiniBand), per GPU and
    direction; None takes ``LINKS``. Checked when made: a ValueError naming the field."""

    shape: str
    gpu: str
    num_gpus: int = 1
    nodes: int = 1
    layout: str = "fsdp2"
    tp: int = 1
    cp: int = 1
    seq_len: int = 2048
    micro_batch: int = 8
    grad_accum: int = 1
    dtype: str = "bf16"
    one_gpu_mfu: float | None = None
    one_gpu_tokens_per_s: float | None = None
    intra_node_gb_s: float | None = None
    inter_node_gbit_s: float | None = None
    vocab_size: int | None = None

    def __post_init__(self):
        for name in ("num_gpus", "nodes", "tp", "cp", "seq_len", "micro_batch", "grad_accum"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.num_gpus % self.nodes:
            raise ValueError(f"nodes: {self.nodes} nodes do not divide {self.num_gpus} GPUs")
        per_node = self.num_gpus // self.nodes
        if per_node % (self.tp * self.cp):
            raise ValueError(f"tp: tp x cp = {self.tp * self.cp} must divide the {per_node} GPUs of a node")
        if self.layout == "zero1" and self.tp > 1:
            raise ValueError("tp: ZeRO-1 (DeepSpeed) does not take tensor parallelism; use layout fsdp2 or ddp")
        if self.layout != "fsdp2" and (self.cp > 1 or (self.tp > 1 and self.num_gpus > self.tp)):
            # accelerate refuses tp/cp beside pure data parallelism, and its cp needs the FSDP2 plugin
            # (training/layout.py; accelerate/parallelism_config.py, accelerate/state.py)
            raise ValueError(
                f"layout: {self.layout} with {'cp' if self.cp > 1 else 'tp'} > 1: accelerate composes "
                "tensor and context parallelism with FSDP2 only; use layout fsdp2"
            )
        if self.cp > 1 and self.seq_len % (2 * self.cp):  # as the run refuses it (training/layout.py)
            raise ValueError(
                f"cp: the sequence ({self.seq_len} tokens) must split into 2 x cp = {2 * self.cp} equal chunks "
                "(torch's ring attention balances the causal work that way)"
            )
        if self.tp > 1 and self.dtype == "fp8":  # as the run refuses it (training/resolve.py)
            raise ValueError(
                f"precision: fp8 with tp {self.tp}: torchao's float8 linears take no tensor-parallel (DTensor) "
                "weights; use bf16 or tp 1"
            )
        if self.one_gpu_mfu is not None and self.one_gpu_tokens_per_s is not None:
            raise ValueError("one_gpu_mfu: give one_gpu_mfu or one_gpu_tokens_per_s, not both")
        if self.one_gpu_mfu is not None and not 0 < self.one_gpu_mfu <= 1:
            raise ValueError(f"one_gpu_mfu must be a fraction in (0, 1], got {self.one_gpu_mfu!r}")
        for name in ("one_gpu_tokens_per_s", "intra_node_gb_s", "inter_node_gbit_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        gpu = canonical_gpu(self.gpu)  # ValueError for an unknown GPU
        if self.tp > 1 and gpu not in HBM_TB_S:
            raise ValueError(
                f"gpu: no HBM bandwidth for {gpu} (known: {', '.join(HBM_TB_S)}), which tp's residual-stream term needs"
            )
        if gpu not in LINKS and (self.intra_node_gb_s is None or (self.nodes > 1 and self.inter_node_gbit_s is None)):
            raise ValueError(
                f"gpu: no default link bandwidths for {gpu} (known: {', '.join(LINKS)}); "
                "give intra_node_gb_s and, across nodes, inter_node_gbit_s"
            )


@dataclass(frozen=True)
class StepTime:
    """The prediction for one request: times in seconds, per optimizer step unless named per micro-batch."""

    request: StepTimeRequest
    gpu: str
    dp: int
    tokens_per_step: int
    compute_per_micro_batch_s: float
    one_gpu_tokens_per_s: float
    one_gpu_mfu: float
    one_gpu_source: str
    link_gb_s: float  # the effective bandwidth of the data-parallel ring (BUS_EFFICIENCY applied)
    comm_s: dict[str, float] = field(default_factory=dict)  # each collective's time per step, as if alone
    exposed_s: dict[str, float] = field(default_factory=dict)  # what of it the step waits for
    step_s: float = 0.0
    tokens_per_s: float = 0.0
    tokens_per_s_per_gpu: float = 0.0
    efficiency: float = 0.0
    mfu: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def exposed(comm: float, window: float, tail: float) -> float:
    """What of a collective of ``comm`` seconds the step waits for: all but ``window``, and at least ``tail``."""
    return max(tail, comm - window)


def _one_gpu(r: StepTimeRequest, gpu: str, flops: float, peak: float) -> tuple[float, float, str]:
    """(tokens/s, MFU, source) of one GPU."""
    if r.one_gpu_tokens_per_s is not None:
        return r.one_gpu_tokens_per_s, flops * r.one_gpu_tokens_per_s / peak, "one_gpu_tokens_per_s (given)"
    if r.one_gpu_mfu is not None:
        mfu, source = r.one_gpu_mfu, "one_gpu_mfu (given)"
    elif (r.shape, gpu, r.dtype) in MEASURED_ONE_GPU_MFU and r.seq_len == 2048:
        mfu, source = MEASURED_ONE_GPU_MFU[r.shape, gpu, r.dtype]
        source = f"measured: {source}"
    else:
        mfu, source = ASSUMED_MFU, "assumed (the planner's default MFU; no one-GPU measurement)"
    return mfu * peak / flops, mfu, source


@lru_cache(maxsize=32)
def _shape(shape: str, vocab_size: int | None, seq_len: int):
    """(config, FLOPs per token, all parameters, those outside the decoder layers) of a zoo shape."""
    from torch import nn

    from hfpretrain.models.params import meta_model

    config = load_config(shape, vocab_size=vocab_size) if vocab_size else load_config(shape)
    model = meta_model(config)
    total = sum(p.numel() for p in model.parameters())
    blocks = next(m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == config.num_hidden_layers)
    layers = sum(p.numel() for p in blocks.parameters())
    return config, flops_per_token(config, seq_len), total, total - layers


def predict(r: StepTimeRequest) -> StepTime:
    config, fpt, total, root = _shape(r.shape, r.vocab_size, r.seq_len)
    check_tp(config, r.tp, key="tp")  # the run's own check: a plan for the shape, heads and MLP width it divides
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    gpu = canonical_gpu(r.gpu)
    peak = peak_flops(gpu, "bf16")
    tokens_1, mfu_1, source = _one_gpu(r, gpu, fpt.total, peak)

    layers = config.num_hidden_layers
    t_1 = r.micro_batch * r.seq_len / tokens_1
    t_res = 0.0
    if r.tp > 1:  # the residual stream's work, whole on every tp rank
        t_res = r.micro_batch * r.seq_len * layers * config.hidden_size * RESIDUAL_BYTES
        t_res = min(t_1, t_res / (HBM_EFFICIENCY * HBM_TB_S[gpu] * 1e12))
    t_mb = ((t_1 - t_res) / r.tp + t_res) / r.cp
    t_fwd, t_bwd = t_mb / 3, 2 * t_mb / 3
    nvlink, ib = LINKS.get(gpu, (None, None))
    intra = BUS_EFFICIENCY * (r.intra_node_gb_s or nvlink) * 1e9
    inter = BUS_EFFICIENCY * (r.inter_node_gbit_s or ib or 0) / 8 * 1e9
    bw = min(intra, inter) if r.nodes > 1 else intra

    params, root = total / r.tp, root / r.tp
    g = r.num_gpus // r.tp  # ranks holding the same slice of the weights
    share = (g - 1) / g
    accum = r.grad_accum
    comm: dict[str, float] = {}
    hidden: dict[str, float] = {}
    if r.layout == "ddp":
        ar = 2 * share * 4 * params / bw
        comm["all-reduce grads fp32"] = ar
        embed_in = config.vocab_size * config.hidden_size / r.tp
        hidden["all-reduce grads fp32"] = exposed(ar, t_bwd, ar * embed_in / params)
    elif r.layout == "zero1":
        rs = share * 2 * params / bw
        comm["reduce-scatter grads bf16"] = rs
        hidden["reduce-scatter grads bf16"] = exposed(rs, t_bwd, rs * min(1.0, ZERO1_BUCKET / params))
        comm["all-gather weights bf16"] = rs
        hidden["all-gather weights bf16"] = rs
    else:  # fsdp2
        ag = share * 2 * params / bw
        ag_root = share * 2 * root / bw
        ag_layers = ag - ag_root
        comm["all-gather weights forward"] = accum * ag
        hidden["all-gather weights forward"] = accum * exposed(ag, t_fwd, ag_root)
        comm["all-gather layers backward + reduce-scatter grads"] = accum * ag_layers + ag
        hidden["all-gather layers backward + reduce-scatter grads"] = (accum - 1) * exposed(
            ag_layers, t_bwd, 0.0
        ) + exposed(ag_layers + ag, t_bwd, ag_root)
    if r.tp > 1:
        activations = r.micro_batch * r.seq_len / r.cp * config.hidden_size * 2
        tp = accum * layers * 4 * 2 * (r.tp - 1) / r.tp * activations / intra
        comm["tp all-reduce activations"] = hidden["tp all-reduce activations"] = tp
    if r.cp > 1:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        block = r.micro_batch * r.seq_len / r.cp * 2 * kv_heads * head_dim * 2 / r.tp
        cp = layers * 3 * (r.cp - 1) * block / intra
        comm["cp ring K,V"] = accum * cp
        hidden["cp ring K,V"] = accum * exposed(cp, t_mb * fpt.attention / fpt.total, 0.0)

    step = accum * t_mb + sum(hidden.values())
    dp = r.num_gpus // (r.tp * r.cp)
    tokens = dp * accum * r.micro_batch * r.seq_len
    per_gpu = tokens / step / r.num_gpus
    return StepTime(
        request=r,
        gpu=gpu,
        dp=dp,
        tokens_per_step=tokens,
        compute_per_micro_batch_s=t_mb,
        one_gpu_tokens_per_s=tokens_1,
        one_gpu_mfu=mfu_1,
        one_gpu_source=source,
        link_gb_s=bw / 1e9,
        comm_s=comm,
        exposed_s=hidden,
        step_s=step,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=per_gpu,
        efficiency=per_gpu / tokens_1,
        mfu=fpt.total * per_gpu / peak,
    )


# Printed under every cp prediction until the model explains the measured point (tests/models/assets).
CP_CAVEAT = (
    "cp: an upper bound, not yet a prediction: measured on 2 H200s (2026-11-29), cp 2 at 32k ran 14.5% below it "
    "(docs/models.md § Step-time model)"
)


def table(results: list[StepTime]) -> str:
    """The predictions as a table, one row per request, marked as predictions."""
    head = (
        f"{'layout':<7}{'GPUs':>5}{'nodes':>6}{'tp':>3}{'cp':>3}{'mb':>4}{'acc':>4}{'tokens/step':>12}"
        f"{'link GB/s':>10}{'comm ms':>9}{'exposed':>9}{'step ms':>9}{'tokens/s':>11}{'per GPU':>9}"
        f"{'eff':>7}{'MFU':>7}"
    )
    lines = ["PREDICTIONS of the step-time model (hfpretrain.models.step_time; not measurements)", head]
    for s in results:
        r = s.request
        lines.append(
            f"{r.layout:<7}{r.num_gpus:>5}{r.nodes:>6}{r.tp:>3}{r.cp:>3}{r.micro_batch:>4}{r.grad_accum:>4}"
            f"{s.tokens_per_step:>12,}{s.link_gb_s:>10.0f}{1e3 * sum(s.comm_s.values()):>9.1f}"
            f"{1e3 * sum(s.exposed_s.values()):>9.1f}{1e3 * s.step_s:>9.1f}{s.tokens_per_s:>11,.0f}"
            f"{s.tokens_per_s_per_gpu:>9,.0f}{100 * s.efficiency:>6.1f}%{100 * s.mfu:>6.1f}%"
        )
    sources = sorted(
        {(s.request.shape, s.gpu, s.request.dtype, s.request.seq_len, s.one_gpu_mfu, s.one_gpu_source) for s in results}
    )
    for shape, gpu, dtype, seq, mfu, source in sources:
        lines.append(f"{shape} on {gpu}, {dtype}, seq {seq}: one GPU at MFU {100 * mfu:.1f}% ({source})")
    lines.append(
        f"links: NVLink and InfiniBand at {BUS_EFFICIENCY:g} of line rate; across nodes the slower sets the "
        "ring; eff = tokens/s per GPU against one GPU; MFU against the bf16 peak"
    )
    if any(s.request.cp > 1 for s in results):
        lines.append(CP_CAVEAT)
    return "\n".join(lines)
