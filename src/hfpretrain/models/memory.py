"""Training memory estimator for HF Trainer-style mixed precision (``bf16=True``).

Model of the run (what ``Trainer(bf16=True)`` does): the model stays fp32 (master weights), the
forward runs under ``torch.autocast(bfloat16)``, gradients are fp32, AdamW keeps two fp32 states.

Per parameter: weights 4 B, grads 4 B, AdamW 8 B (+4 B of foreach temporaries during ``step``).
ZeRO stage ≥1 shards optimizer states over ``n_gpus``, ≥2 also grads, 3 also weights.

Activations are the tensors autograd saves, counted per token per layer from the HF
implementations under autocast (a = bytes of the autocast dtype, 2 for bf16; fp32 items are 4):

* RMSNorm (Llama/Qwen3) saves its input upcast to fp32 and the normalised value in the stream's dtype:
  (4+r)·d, twice per layer (r = 4 for an fp32 stream, 2 for a bf16 one; 8·d for fp32).
* Each projection saves its autocast-cast input: q,k,v → 3·a·d; gate,up → 2·a·d; o → a·d_attn;
  down → a·d_ff. SwiGLU also saves gate, silu(gate), up: 3·a·d_ff.
* Qwen3 QK-norm saves q,k in fp32 and the normalised bf16 copy: (4+a)·(d_attn + d_kv).
* sdpa/flash keep q, k, v, out (a·(2·d_attn + 2·d_kv)) and the fp32 log-sum-exp (4·heads).
  eager keeps q, k, v (k, v repeated to d_attn for GQA) and the probabilities, fp32 and bf16:
  (4+a)·heads·S — the S² term that flash/sdpa avoid.
* GPT-2: LayerNorm saves its input (r·d, twice), c_attn's cast input and the fused qkv
  output (3·a·d, shared with sdpa), MLP: cast input, fc output, gelu output (2·a·d_ff).
* Outside the layers: the final norm, the LM head's cast input, and cross-entropy over
  B·S·V logits in fp32 — its peak (saved log-probs + their gradient + the input gradient,
  12·V bytes per token) dominates at a 151k vocab. Autocast also caches a bf16 copy of
  every matmul weight for the backward: 2·N_matmul bytes.

Under ``torch.compile`` (``compile="decoder"``) inductor's partitioner recomputes pointwise ops in
the backward and keeps only what matmuls and attention need, so per layer: the residual
stream at the layer input and after attention (2·r·d; r = 4 for fp32, 2 with
``model.residual_dtype=bfloat16``), the two normalised projection inputs (2·a·d), Qwen3's q, k
before their norm (a·(d_attn + d_kv)), q, k, v and the attention output with its log-sum-exp
(a·(2·d_attn + 2·d_kv) + 4·heads), gate, up and the down input (3·a·d_ff);
the bf16 weight copies are recomputed from the fp32 weights. Checked on an H200 and an H100
(docs/models.md, docs/benchmarks.md): within 4% of the measured peak from scale_7m to Qwen3 1.8B,
with liger's loss (any chunk size) and with the chunked loss. With the decoder's linears in float8
(``float8=True``, torchao's tensorwise recipe), the partitioner keeps the 1-byte casts that the backward's
matmuls read instead of the bf16 inputs they come from: the normalised projection inputs (2·d) and the down
input (d_ff) take 1 byte each.

With activation checkpointing (transformers' ``activation_checkpointing``, per decoder layer) a checkpointed layer
keeps only its input (r·d; nothing on the GPU with ``offload``, which holds it in pinned host memory), plus one
layer's activations recomputed during its backward; with ``every_n_layers: n`` the layers 0, n, 2n, ... are
checkpointed (ceil(L/n) of them) and the others keep all of theirs.

Document masking with SDPA (``model.document_mask``): transformers materialises the block-causal mask from the
position ids, B·S·S values shared by the layers, which SDPA's memory-efficient kernel takes as an additive bias of
the autocast dtype: a·S more bytes per token, once (the term that grows with the length: 0.5 GiB per sample at 16k).
Measured on an H100 (best_small's shape, compiled decoder, 16k x 4): +2.0 GiB over the same run without the mask;
an earlier model with one bias per layer overestimated that peak by 62%. Flash-attention's varlen path and flex
attention's block mask hold no dense mask.

``total`` is the modelled peak: the larger of (a) start of backward — weights, optimizer
states, all activations, the cross-entropy peak and (with gradient accumulation) the gradients
— and (b) the optimizer step — weights, gradients, states and AdamW's foreach temporaries.
Compare it with ``torch.cuda.max_memory_allocated()`` (not ``nvidia-smi``: the CUDA context and
allocator cache come on top).

Mixture-of-Experts (Qwen3-MoE, GLM-4-MoE): weights, gradients and optimizer states are those of
*all* experts (``count_params(config).total``), and so is autocast's bf16 weight cache; activations
follow the routed tokens. Per token of an MoE layer, in place of the dense MLP: the router's cast
input and its fp32 probabilities (a·d + 4·E + 12·k), and for each of the k routed copies of the
token its gathered cast input, gate_up output, silu(gate), the down input, the down output kept for
the routing weight and that weight (a·(2·d + 4·I) + 4, I = ``moe_intermediate_size``); shared
experts are a dense MLP of width n_shared·I. Compiled: k·(2·a·d + 3·a·I + 4) + 4·E, shared experts
as compiled dense MLPs. ``experts_implementation="batched_mm"`` also keeps each routed copy's
gathered expert weights in bf16 (a·3·d·I per copy); ``sonicmoe`` keeps a·(d + I) less per copy: its grouped
matmuls gather the rows as they load them and its down projection's backward recomputes the activation in its
epilogue (measured on an H200, results/moe_sonic_2026-11-30: 6.0 GiB less than grouped_mm at the 856M shape,
micro-batch 16, and 13.4 at best_small_moe's 128 x 1024, where this term gives 6.0 and 13.5). Layers that stay dense
(``first_k_dense_replace``, ``mlp_only_layers``) count as dense layers. Measured on an H200
(grouped_mm, seq 2048, docs/benchmarks.md), decoder compiled: qwen3_moe_856m_a152m 35.1 GiB at
micro-batch 16 (estimate +1%) and 103.9 at 64 (+6%), glm4_moe_837m_a177m 37.9 at 16 (−4.5%).
Compiled per layer (``compile="layers"``) the qwen3 shape peaked at 41.3 GiB at 16, which
k·a·(d + I) more per token of each expert layer accounts for: a term fitted to that one peak, not
derived from what the per-layer graphs keep (3% low at micro-batch 8).

Tensor parallelism (``tp``, transformers' plan: models/parallel.py): weights, gradients and optimizer states are one
GPU's slice (the plan's sharded weights / tp, the norms whole), ZeRO/FSDP shard that slice over the n_gpus / tp
ranks that hold it; a layer's activations are those of a layer with heads, KV heads and MLP width / tp (the residual
stream, the norms and the projections' inputs stay whole in transformers' plan); in training the head and loss run
over each rank's share of the micro-batch's rows, where tp divides them (training/loss.py), else over all of them.
With ``sequence_parallel`` the residual stream's own part of each layer (the norms' inputs:
``stream_bytes_per_token_per_layer``), the final norm and the head's input count 1/tp of the positions, and the head
and loss each rank's positions; the blocks' gathered inputs stay whole (the projections keep them for their weight
gradients). Context parallelism (``cp``): every per-token term counts micro_batch · seq_len / cp tokens (the
K/V blocks passed around the ring, 2·d_kv per token, are left out). Against the 1.8B shape on 2 H200s (2026-11-29,
compiled layers): tp 2 at 20 × 2,048, 60.1 GiB against 62.4 (4% low; transformers 5.17, whose plan leaves the
embedding whole: 58.4 under 5.24's); cp 2 at 32k and 64k, 42.7 and 73.9 against 48.4 and 84.1 (12–13% low; one GPU
at 32k: 84.2 against 87.7). What the cp ranks keep beyond this count is not yet traced.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from transformers import PretrainedConfig

from hfpretrain.models.backend import KNOWN_IMPLEMENTATIONS

GIB = 1024**3
COMPILE_SCOPES = ("none", "decoder", "layers", "model")  # model.compile once auto is resolved (training/fast_path.py)
MASKED_SDPA = ("sdpa",)  # SDPA with a mask tensor (sdpa_packed takes none; flash_attention_2 uses varlen)


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    grads: int
    optimizer: int
    activations: int
    total: int
    activations_per_layer: int = 0
    logits: int = 0
    optimizer_step_peak: int = 0
    backward_start_peak: int = 0

    def gib(self) -> dict[str, float]:
        return {k: round(v / GIB, 3) for k, v in asdict(self).items()}

    def __str__(self) -> str:
        g = self.gib()
        return (
            f"weights {g['weights']:.2f} GiB, grads {g['grads']:.2f} GiB, optimizer {g['optimizer']:.2f} GiB, "
            f"activations {g['activations']:.2f} GiB (logits {g['logits']:.2f}), total {g['total']:.2f} GiB"
        )


def _dims(config: PretrainedConfig) -> dict[str, int]:
    d = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    ff = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d
    return {
        "d": d,
        "h": heads,
        "da": heads * head_dim,
        "dkv": kv * head_dim,
        "ff": ff,
        "L": config.num_hidden_layers,
        "V": config.vocab_size,
    }


@dataclass(frozen=True)
class MoeShape:
    """What the memory model needs of an MoE config: experts per layer, top-k, expert width, shared-expert
    width (0 without), and how many decoder layers are MoE layers (the rest are dense)."""

    experts: int
    top_k: int
    expert_ff: int
    shared_ff: int
    moe_layers: int


def known_experts_implementations() -> list[str]:
    """transformers' experts backends: eager and those of its experts interface (batched_mm, grouped_mm, ...)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    return ["eager"] + sorted(ALL_EXPERTS_FUNCTIONS.keys())


def moe_shape(config: PretrainedConfig) -> MoeShape | None:
    """The :class:`MoeShape` of an MoE config (read from its meta model), None for a dense one."""
    from hfpretrain.models.params import meta_model
    from hfpretrain.models.zoo import is_moe, num_routed_experts

    if not is_moe(config):
        return None
    model = meta_model(config)
    moe_layers, shared_ff, expert_ff = 0, 0, 0
    for layer in model.model.layers:
        mlp = layer.mlp
        if hasattr(mlp, "experts"):
            moe_layers += 1
            # [experts, hidden, width] in every transformers experts module: Mixtral and OLMoE have no
            # moe_intermediate_size (their experts are intermediate_size wide)
            expert_ff = mlp.experts.down_proj.shape[-1]
            shared = getattr(mlp, "shared_experts", None) or getattr(mlp, "shared_expert", None)
            if shared is not None:
                shared_ff = shared.gate_proj.weight.shape[0]
    return MoeShape(
        experts=num_routed_experts(config),
        top_k=int(config.num_experts_per_tok),
        expert_ff=int(expert_ff),
        shared_ff=int(shared_ff),
        moe_layers=moe_layers,
    )


def _has_qk_norm(config: PretrainedConfig) -> bool:
    return config.model_type in ("qwen3", "qwen3_moe") or bool(getattr(config, "use_qk_norm", False))


def _dense_mlp_bytes(d: int, ff: int, a: int, compiled: bool, cast: int) -> int:
    """The MLP's share of a layer (compiled: its normalised input is counted with the attention's)."""
    return (2 * a + cast) * ff if compiled else 2 * a * d + 4 * a * ff


def _moe_mlp_bytes(d: int, moe: MoeShape, a: int, compiled: bool, cast: int, experts_implementation: str) -> int:
    k, ff = moe.top_k, moe.expert_ff
    if compiled:
        total = 4 * moe.experts + k * (2 * a * d + 3 * a * ff + 4)
    else:
        total = a * d + 4 * moe.experts + 12 * k + k * (a * (2 * d + 4 * ff) + 4)
    if experts_implementation == "batched_mm":
        total += k * a * 3 * d * ff  # each routed copy's gathered expert weights, cast, saved for the bmm backward
    elif experts_implementation.startswith("sonicmoe"):
        total -= k * a * (d + ff)  # no gathered copy of the rows, no activation output kept (see the docstring)
    if moe.shared_ff:
        total += _dense_mlp_bytes(d, moe.shared_ff, a, compiled, cast)
    return total


def activation_bytes_per_token_per_layer(
    config: PretrainedConfig,
    seq_len: int,
    attn_implementation: str = "sdpa",
    dtype: str = "bf16",
    compiled: bool = False,
    residual_bytes: int = 4,
    float8: bool = False,
    moe: MoeShape | None = None,
    experts_implementation: str = "grouped_mm",
) -> int:
    """Bytes autograd keeps per token for one decoder layer (no checkpointing); ``residual_bytes``: 4 for the
    fp32 residual stream that fp32 embeddings give under autocast, 2 with ``model.residual_dtype=bfloat16``;
    ``float8``: the decoder's linears train in float8 (model.precision=fp8), so that, compiled, the normalised
    projection inputs and the down projection's input are kept as their 1-byte casts. ``moe``: the config's
    :func:`moe_shape`, for one of its expert layers (routed tokens in place of the dense MLP); None: a dense layer."""
    a = 4 if dtype in ("fp32", "float32") else 2
    r = residual_bytes
    x = _dims(config)
    d, h, da, dkv, ff, S = x["d"], x["h"], x["da"], x["dkv"], x["ff"], seq_len
    eager = attn_implementation == "eager"
    cast = 1 if float8 else a  # the normalised inputs and the down input: what the float8 matmuls read
    if moe is not None:
        mlp = _moe_mlp_bytes(d, moe, a, compiled and not eager, cast, experts_implementation)
    else:
        mlp = _dense_mlp_bytes(d, ff, a, compiled and not eager, cast)
    if compiled and not eager:
        if config.model_type == "gpt2":  # same rule; not yet checked on a GPU
            return int(2 * r * d + 2 * a * d + a * (3 * da) + a * da + 4 * h + 2 * a * ff)
        qk_norm = a * (da + dkv) if _has_qk_norm(config) else 0
        return int(2 * r * d + 2 * cast * d + qk_norm + a * (2 * da + 2 * dkv) + 4 * h + mlp)
    if config.model_type == "gpt2":
        total = r * d + a * d + 3 * a * d  # ln_1 input, c_attn cast input, fused qkv (kept by attention)
        total += (a * da + 4 * h) if not eager else (4 + a) * h * S  # sdpa out + lse | probabilities
        total += a * da  # merged heads, c_proj input
        total += r * d + a * d + 2 * a * ff  # ln_2 input, c_fc cast input, fc out, gelu out
        return int(total)
    total = 2 * (4 + r) * d  # two RMSNorms: the fp32 upcast of the input + the normalised value in the stream's dtype
    total += 3 * a * d  # q, k, v cast inputs
    if _has_qk_norm(config):
        total += (4 + a) * (da + dkv) + 4 * h  # q_norm / k_norm
    if eager:
        total += 3 * a * da + (4 + a) * h * S  # q, k, v (repeated for GQA), probabilities fp32 + cast
    else:
        total += a * (2 * da + 2 * dkv) + 4 * h  # q, k, v, out, lse
    total += a * da  # o_proj input
    total += mlp  # dense: gate/up cast inputs, gate, silu(gate), up, product (down input); MoE: see the notes
    return int(total)


def stream_bytes_per_token_per_layer(config: PretrainedConfig, compiled: bool, residual_bytes: int = 4) -> int:
    """What a layer keeps per token of the residual stream itself (the norms' inputs; eager, their fp32 upcasts
    and outputs too): the part sequence parallelism splits over a tensor-parallel group, whose blocks keep their
    gathered inputs whole."""
    d = config.hidden_size
    return 2 * residual_bytes * d if compiled else 2 * (4 + residual_bytes) * d


@dataclass(frozen=True)
class TrainingLayout:
    """How one GPU trains a model: everything besides the model's config that its memory depends on (the
    trainer builds it from the recipe and the fast path; the planner from its arguments)."""

    micro_batch: int
    seq_len: int
    n_gpus: int = 1
    zero_stage: int = 0  # 1: optimizer states sharded (DeepSpeed ZeRO-1), 3: everything (FSDP full shard)
    grad_checkpointing: bool = False
    attn_implementation: str = "sdpa"
    dtype: str = "bf16"
    grad_accum: int = 1
    # tokens per chunk of a fused/chunked linear cross-entropy (fused_loss liger or chunked): logits then exist
    # for one chunk only, next to the head's gradient buffers
    fused_loss_chunk: int | None = None
    # model.compile's scope (COMPILE_SCOPES): none, decoder or model (one graph: see the module notes), or layers
    # (one graph per decoder layer: MoE layers keep more)
    compile: str = "none"
    fused_loss: str = "chunked"
    residual_bytes: int = 4  # the residual stream: fp32 (4) or bf16 (2, model.residual_dtype=bfloat16)
    float8: bool = False  # the decoder's linears in float8 (model.precision=fp8): smaller saved inputs, compiled
    experts_implementation: str = "grouped_mm"  # MoE: transformers' experts backend (batched_mm keeps more)
    # activation checkpointing (grad_checkpointing): every n-th decoder layer, its input in host memory with offload
    checkpoint_every_n_layers: int = 1
    checkpoint_offload: bool = False
    document_mask: bool = False  # model.document_mask: a block-causal mask (sdpa: a bias per layer, see the notes)
    # tensor and context parallelism (models/parallel.py, training/layout.py): each GPU holds 1/tp of the plan's
    # sharded weights and of each layer's heads and MLP width, and seq_len / cp of each sequence's tokens; n_gpus / tp
    # ranks hold the same slice of the weights and shard it further under ZeRO/FSDP
    tp: int = 1
    cp: int = 1
    sequence_parallel: bool = False  # with tp: the residual stream and the norms hold 1/tp of the positions

    @property
    def compiled(self) -> bool:
        return self.compile != "none"


def estimate_memory(config: PretrainedConfig, layout: TrainingLayout) -> MemoryEstimate:
    """Estimated peak memory of one GPU training ``config`` on ``layout.micro_batch × layout.seq_len`` tokens."""
    from hfpretrain.models.flops import matmul_params
    from hfpretrain.models.params import count_params

    if layout.compile not in COMPILE_SCOPES:
        raise ValueError(f"compile must be one of {COMPILE_SCOPES}, got {layout.compile!r}")
    if layout.zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0..3, got {layout.zero_stage}")
    if layout.attn_implementation not in KNOWN_IMPLEMENTATIONS:
        raise ValueError(f"unknown attn_implementation {layout.attn_implementation!r}")
    experts_known = known_experts_implementations()
    if layout.experts_implementation not in experts_known:
        raise ValueError(
            f"unknown experts_implementation {layout.experts_implementation!r}; known: {', '.join(experts_known)}"
        )
    from hfpretrain.models.parallel import params_per_gpu, tp_layer_config

    tp, cp = max(1, int(layout.tp)), max(1, int(layout.cp))
    # MoE: every expert's weights, gradients and optimizer states; under tp, one GPU's slice
    n = count_params(config).total if tp == 1 else params_per_gpu(config, tp)
    shard = max(1, int(layout.n_gpus) // tp)
    weights = 4 * n // (shard if layout.zero_stage >= 3 else 1)
    grads = 4 * n // (shard if layout.zero_stage >= 2 else 1)
    optimizer = 8 * n // (shard if layout.zero_stage >= 1 else 1)
    opt_temp = 4 * n // (shard if layout.zero_stage >= 1 else 1)

    x = _dims(config)
    tokens = layout.micro_batch * layout.seq_len // cp  # context parallelism: each GPU's part of every sequence
    mixed = layout.dtype not in ("fp32", "float32")
    a = 2 if mixed else 4
    local = tp_layer_config(config, tp)  # one GPU's heads and MLP width (the whole layer at tp 1)
    per_layer = activation_bytes_per_token_per_layer(
        local,
        layout.seq_len,
        layout.attn_implementation,
        layout.dtype,
        layout.compiled,
        layout.residual_bytes,
        layout.float8,
    )
    # the document mask as SDPA's additive bias: one for all layers (measured on an H100, compiled decoder, 16k:
    # +2.0 GiB over no mask at micro-batch 4, i.e. a bytes per mask element, not one bias per layer)
    mask_bias = a * layout.seq_len if layout.document_mask and layout.attn_implementation in MASKED_SDPA else 0
    if layout.sequence_parallel and tp > 1:  # the residual stream's part of a layer, split over the tp ranks
        per_layer -= stream_bytes_per_token_per_layer(config, layout.compiled, layout.residual_bytes) * (tp - 1) // tp
    moe = moe_shape(config)
    all_layers = x["L"] * per_layer
    if moe is not None:  # the expert layers keep the routed tokens' activations instead of a dense MLP's
        moe_per_layer = activation_bytes_per_token_per_layer(
            config,
            layout.seq_len,
            layout.attn_implementation,
            layout.dtype,
            layout.compiled,
            layout.residual_bytes,
            layout.float8,
            moe=moe,
            experts_implementation=layout.experts_implementation,
        )
        if layout.compile == "layers":
            moe_per_layer += moe.top_k * a * (x["d"] + moe.expert_ff)  # fitted, see the module notes
        all_layers = (x["L"] - moe.moe_layers) * per_layer + moe.moe_layers * moe_per_layer
        per_layer = max(per_layer, moe_per_layer) if moe.moe_layers < x["L"] else moe_per_layer
    outside = 8 + 8 * x["d"] + a * x["d"]  # input ids, final norm (in + out), LM-head cast input
    if layout.sequence_parallel and tp > 1:  # the final norm and the head's input: this rank's positions
        outside = 8 + (8 * x["d"] + a * x["d"]) // tp
    if layout.attn_implementation == "eager":
        outside += 4 * layout.seq_len  # the materialised causal mask (shared by all layers)
    outside += mask_bias
    if layout.grad_checkpointing:
        every = max(1, int(layout.checkpoint_every_n_layers))
        checkpointed = -(-x["L"] // every)  # layers 0, n, 2n, ...
        kept_input = 0 if layout.checkpoint_offload else layout.residual_bytes * x["d"]
        # the others keep all their activations (the average layer's, for an MoE with dense layers among them)
        layers_bytes = tokens * (checkpointed * kept_input + (x["L"] - checkpointed) * all_layers // x["L"] + per_layer)
    else:
        layers_bytes = tokens * all_layers
    # under tp each rank of the group runs the head and loss over its share of the rows (training/loss.py
    # tensor_parallel_loss), where the group divides them; else over all of them
    # (sequence parallelism: its positions, whatever the rows)
    splits = layout.micro_batch % tp == 0 or (layout.sequence_parallel and layout.seq_len % tp == 0)
    loss_tokens = tokens // tp if splits else tokens
    if layout.fused_loss == "compiled":
        # Head + loss in one graph: the bf16 logits, saved for backward; inductor's fused backward
        # writes their gradient over them (measured: one copy, within 2% at GPT-2 124M and scale_12m..146m).
        logits = loss_tokens * x["V"] * a + a * loss_tokens * x["d"]
    elif layout.fused_loss_chunk:
        # One chunk of logits: liger turns its bf16 logits into their gradient in place (a bytes each);
        # the chunked loss holds the bf16 matmul output, fp32 logits and logsumexp's two fp32
        # temporaries (a + 12). Measured on an H100/H200 to within 4% (docs/benchmarks.md).
        # Beside them: fp32 dW, the bf16 W copy, bf16 dX.
        per_logit = a if layout.fused_loss == "liger" else a + 12
        logits = (
            min(loss_tokens, layout.fused_loss_chunk) * x["V"] * per_logit
            + (4 + a) * x["V"] * x["d"]
            + a * loss_tokens * x["d"]
        )
    else:
        logits = loss_tokens * 12 * x["V"]
    weight_cache = 2 * matmul_params(config, active=False) // tp if mixed and not layout.compiled else 0  # all experts
    activations = layers_bytes + tokens * outside + logits + weight_cache

    backward_start = weights + optimizer + activations + (grads if layout.grad_accum > 1 else 4 * x["V"] * x["d"])
    step = weights + grads + optimizer + opt_temp
    total = max(backward_start, step)
    return MemoryEstimate(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        activations=activations,
        total=total,
        activations_per_layer=per_layer * tokens,
        logits=logits,
        optimizer_step_peak=step,
        backward_start_peak=backward_start,
    )
