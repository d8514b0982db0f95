"""Tensor parallelism through transformers' own ``tp_plan`` (no parallelism of our own): which shapes have one, what
a degree ``tp`` leaves on each GPU, and loading a model sharded by it.

transformers' plan for Qwen3 and Llama (``config.base_model_tp_plan``, the model class's ``_tp_plan``): q, k, v,
gate and up projections column-wise, o and down projections row-wise (one all-reduce after each of the two, forward
and backward), the LM head column-wise with its logits gathered, the embedding as the installed plan says (5.24:
``embedding_rowwise``, split over the vocabulary), norms replicated. Per GPU, then: the sharded weights / tp, the
replicated ones whole; per token of a layer, the heads and the MLP's width /
tp while the residual stream, the norms and the projections' inputs stay whole (no sequence parallelism in the
plan). GPT-2 and the MoE shapes have no plan usable here (MoE: expert parallelism is out of scope).

For training, the loaded plan adds one rule of ours per block (``BLOCK_INPUT``, on ``self_attn`` and ``mlp``): the
block's input becomes one replicated DTensor, in the autocast dtype, before its column-wise projections see it. In
transformers' plan each of them wraps the input itself, so the backward all-reduces the input's gradient once per
projection (q, k, v; gate, up) and in float32 (the residual stream's dtype, before autocast's cast); with one wrap
the projections' partial gradients are summed locally and all-reduced once per block, in bfloat16: 2 backward
all-reduces a layer in place of 5, half the bytes each (2×H200: results/gpu_2gpu_2026-11-29b). The per-head norms
(Qwen3's q_norm, k_norm) take ``PARTIAL_NORM`` in place of transformers' style: their gradients summed per
micro-batch, inside the compiled graph (results/gpu_2gpu_2026-11-29c).

Sequence parallelism (``sequence_parallel``, training only; Megatron's, as torchtitan applies it): between the blocks
each rank holds its 1/tp of the sequence's positions instead of all of them, so the norms, the residual adds and
their saved activations are not repeated on every rank. Four rules of ours do it: ``SEQUENCE_SPLIT`` on the
decoder layers (the first, which gets every position, keeps each rank's; the backward gathers their gradients),
``SEQUENCE_BLOCK_INPUT`` (the block's positions all-gathered in the autocast dtype; the backward reduce-scatters the
projections' gradients), ``SEQUENCE_ROWWISE`` for o and down (their partial outputs reduce-scattered over positions
in place of all-reduced: the same bytes as the all-reduce's two halves) and ``PARTIAL_NORM`` on every norm (each
rank's weight gradient covers its positions). The final norm's output stays split: the trainer's loss takes each
rank's positions (training/loss.py ``sequence_parallel_loss``). The rules follow the modules' training mode: in eval
mode transformers' plan runs unchanged. On two H200s it saved 4-8 GiB and cost 1-2% of the tokens/s
(results/gpu_2gpu_2026-11-30, -30b), so the planner takes it only where tp does not fit without it
(training/layout.py). ``enable_async_tp`` micro-pipelines its collectives with the matmuls (inductor's pass; on
two H200s within noise of it, off unless asked)."""

from __future__ import annotations

import copy
import fnmatch

import torch
from transformers import PretrainedConfig

SHARDED_STYLES = (
    "colwise",
    "rowwise",
    "colwise_gather_output",
    "rowwise_split_input",
    "packed_colwise",
    "packed_rowwise",
    "embedding_rowwise",
)


def tp_plan(config: PretrainedConfig) -> dict[str, str]:
    """transformers' tensor-parallel plan of ``config``'s causal LM, parameter-module pattern -> style, with the
    base model's entries under ``model.``; empty for a shape without one."""
    from hfpretrain.models.params import meta_model
    from hfpretrain.models.zoo import is_moe

    if is_moe(config) or not getattr(config, "base_model_tp_plan", None):
        return {}
    model = meta_model(config)
    plan = {f"model.{k}": v for k, v in (config.base_model_tp_plan or {}).items()}
    plan.update(getattr(model, "_tp_plan", None) or {})
    return plan


BLOCK_INPUT = "hfpretrain_block_input"
BLOCKS = ("self_attn", "mlp")
# transformers' style for a replicated weight that sees only this rank's heads (Qwen3's q_norm, k_norm), and ours,
# which re-states the norm's forward: only for the classes whose forward it is
HF_HEAD_NORM_STYLE, PARTIAL_NORM = "replicated_with_grad_allreduce", "hfpretrain_partial_norm"
NORM_CLASSES = ("Qwen3RMSNorm", "LlamaRMSNorm")
# sequence parallelism (the module's docstring)
SEQUENCE_SPLIT = "hfpretrain_sequence_split"
SEQUENCE_BLOCK_INPUT = "hfpretrain_sequence_block_input"
SEQUENCE_ROWWISE = "hfpretrain_sequence_rowwise"
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")


class _SumOverTP(torch.autograd.Function):
    """The identity forward; the backward sums the gradient over the tensor-parallel group, so each micro-batch's
    share is summed before it is accumulated (functional collectives: traced by torch.compile, no graph break)."""

    @staticmethod
    def forward(ctx, weight, group: str):
        ctx.group = group
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad):
        functional = torch.ops._c10d_functional
        return functional.wait_tensor(functional.all_reduce(grad.contiguous(), "sum", ctx.group)), None


def _register_styles() -> None:
    """Our styles (``BLOCK_INPUT``, ``PARTIAL_NORM`` and sequence parallelism's) in transformers' registry of
    parallel styles (once per process, every rank)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from transformers.integrations.tensor_parallel import ALL_PARALLEL_STYLES, TensorParallelLayer

    if SEQUENCE_ROWWISE in ALL_PARALLEL_STYLES:
        return
    from transformers.distributed.tensor_parallel import RowwiseParallel

    def _block_input(args, kwargs):
        return args[0] if args else kwargs["hidden_states"]

    def _with_block_input(args, kwargs, x):
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    class BlockInput(TensorParallelLayer):
        """The hidden states entering a block as one replicated DTensor, so that the gradients of the block's
        column-wise projections meet there and are all-reduced once (see the module's docstring); with
        ``positions_split`` (sequence parallelism) each rank's positions, all-gathered here, their gradients
        reduce-scattered back."""

        def __init__(self, positions_split: bool):
            self.positions_split = positions_split
            self.placement = Shard(1) if positions_split else Replicate()

        def transform_inputs_pre_forward(self, module, args, kwargs, mesh):
            # evaluation: transformers' local path, no gradient to sum; split positions follow the module's mode,
            # as a reentrant checkpoint runs the training forward without gradients
            if not (module.training if self.positions_split else torch.is_grad_enabled()):
                return args, kwargs
            x = _block_input(args, kwargs)
            if isinstance(x, DTensor):
                return args, kwargs
            if torch.is_autocast_enabled(x.device.type):  # the projections would cast it each; once here
                x = x.to(torch.get_autocast_dtype(x.device.type))
            x = DTensor.from_local(x, mesh, [self.placement], run_check=False)
            if self.placement != Replicate():
                x = x.redistribute(placements=[Replicate()])
            return _with_block_input(args, kwargs, x)

    class SequenceSplit(TensorParallelLayer):
        """On every decoder layer, in training: where the hidden states still hold every position (the first
        layer's, which the rotary embedding's cos and sin cover whole), each rank keeps its 1/tp of them (a slice;
        the backward all-gathers the slices' gradients, which the embedding's ranks then all hold whole). A rule on
        every layer: transformers 5.17 matches a plan's module names with their layer numbers as wildcards."""

        def transform_inputs_pre_forward(self, module, args, kwargs, mesh):
            if not module.training:  # the module's mode, not grad mode: see BlockInput
                return args, kwargs
            x, rotary = _block_input(args, kwargs), kwargs.get("position_embeddings")
            if rotary is None:
                raise ValueError(
                    f"parallel.sequence_parallel: {type(module).__name__} is called without position_embeddings "
                    "(the positions it would split are those the rotary embedding covers)"
                )
            if x.shape[1] != rotary[0].shape[-2]:  # already split
                return args, kwargs
            if x.shape[1] % mesh.size():
                raise ValueError(
                    f"parallel.sequence_parallel: {x.shape[1]} positions do not split {mesh.size()} ways (tp)"
                )
            x = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
            return _with_block_input(args, kwargs, x.redistribute(placements=[Shard(1)]).to_local())

    class SequenceRowwise(TensorParallelLayer):
        """transformers' row-wise style whose partial output is reduce-scattered over positions in training (each
        rank keeps its own), all-reduced in evaluation (the module's mode: see BlockInput)."""

        def __init__(self):
            self.training = RowwiseParallel(output_layouts=Shard(1))
            self.evaluation = RowwiseParallel()

        def _style(self, module):
            return self.training if module.training else self.evaluation

        def should_use_local_tensors(self, module):
            return self._style(module).should_use_local_tensors(module)

        def shard_param(self, module, param, mesh):
            return self.training.shard_param(module, param, mesh)

        def install_forward(self, module, mesh):
            if not hasattr(module, "in_features"):
                raise ValueError(f"{type(module).__name__} has no `in_features`: rowwise shards linear layers.")
            return super().install_forward(module, mesh)

        def transform_inputs_pre_forward(self, module, args, kwargs, mesh):
            return self._style(module).transform_inputs_pre_forward(module, args, kwargs, mesh)

        def context_around_forward(self, module, mesh):
            return self._style(module).context_around_forward(module, mesh)

        def transform_output_post_forward(self, module, output, mesh):
            return self._style(module).transform_output_post_forward(module, output, mesh)

    class PartialNorm(TensorParallelLayer):
        """An RMSNorm whose replicated weight sees part of the data: this rank's heads (Qwen3's q_norm, k_norm) or,
        under sequence parallelism, this rank's positions. Its gradient is summed over the group inside the
        forward's graph. transformers' own style for the heads all-reduces ``weight.grad`` in a hook after it is
        accumulated (5.17: a module backward hook, 5.24: a post-accumulate hook), which counts every earlier
        micro-batch of a step again (wrong under gradient accumulation; measured on CPU) and, in 5.17, breaks the
        compiled layer into graphs around the module."""

        def install_forward(self, module, mesh):
            if type(module).__name__ not in NORM_CLASSES:
                raise ValueError(
                    f"parallel.tp: a norm of class {type(module).__name__}, whose forward {PARTIAL_NORM} does "
                    f"not re-state (it knows {', '.join(NORM_CLASSES)})"
                )
            eps = module.variance_epsilon
            if mesh.ndim != 1:  # transformers hands each style its tp sub-mesh
                raise ValueError(f"parallel.tp: {PARTIAL_NORM} expects the tensor-parallel mesh, got {mesh.ndim} dims")
            group = mesh.get_group().group_name

            def forward(hidden_states):  # the model's RMSNorm (float32 statistics), its weight through _SumOverTP
                dtype = hidden_states.dtype
                x = hidden_states.to(torch.float32)
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                return _SumOverTP.apply(module.weight, group) * x.to(dtype)

            module.forward = forward
            return module

    ALL_PARALLEL_STYLES.register(BLOCK_INPUT, BlockInput(positions_split=False))
    ALL_PARALLEL_STYLES.register(PARTIAL_NORM, PartialNorm())
    ALL_PARALLEL_STYLES.register(SEQUENCE_SPLIT, SequenceSplit())
    ALL_PARALLEL_STYLES.register(SEQUENCE_BLOCK_INPUT, BlockInput(positions_split=True))
    ALL_PARALLEL_STYLES.register(SEQUENCE_ROWWISE, SequenceRowwise())


def training_tp_plan(config: PretrainedConfig, sequence_parallel: bool = False) -> dict[str, str]:
    """``tp_plan(config)`` with ``BLOCK_INPUT`` on every block whose input feeds column-wise projections and
    ``PARTIAL_NORM`` in place of transformers' style for per-head norms; with ``sequence_parallel``, the positions
    split between the blocks (the module's docstring): the blocks' inputs gathered, their row-wise outputs
    reduce-scattered, every norm's gradient summed."""
    plan = {key: PARTIAL_NORM if style == HF_HEAD_NORM_STYLE else style for key, style in tp_plan(config).items()}
    blocks = {
        key.rsplit(".", 1)[0] for key, style in plan.items() if style == "colwise" and key.rsplit(".", 2)[-2] in BLOCKS
    }
    if not sequence_parallel:
        return {**plan, **dict.fromkeys(sorted(blocks), BLOCK_INPUT)}
    rowwise = {
        key: SEQUENCE_ROWWISE for key, style in plan.items() if style == "rowwise" and key.startswith("model.layers.")
    }
    norms = {f"model.layers.*.{name}": PARTIAL_NORM for name in LAYER_NORMS}
    return {
        **plan,
        **rowwise,
        **dict.fromkeys(sorted(blocks), SEQUENCE_BLOCK_INPUT),
        **norms,
        "model.norm": PARTIAL_NORM,
        "model.layers.*": SEQUENCE_SPLIT,
    }


def fsdp_beside_tp_supported() -> bool:
    """Whether this transformers applies FSDP2 to the other dimension of a (dp_shard, tp) mesh when it loads a model
    by its plan (5.2x: ``is_distributed_loading_by_transformers``). 5.17 applies tp only and accelerate then leaves
    the model unsharded and its data-parallel groups unsynchronised: the ranks of each tp group trained on their
    own rows (on CPU, 4 processes: the gradient norm 1.581 for one process's 1.565, the loss off from step 3)."""
    from transformers import PreTrainedModel

    return hasattr(PreTrainedModel, "is_distributed_loading_by_transformers")


def tp_group_name(model) -> str:
    """The process group of ``model``'s tensor-parallel dimension: that of its first sharded (DTensor) weight's
    ``tp`` mesh dimension, or its whole mesh where that has one unnamed dimension (transformers 5.17 with tp over
    every rank; 5.24's meshes are ``(tp,)`` and ``(pp, fsdp, tp)``; 5.17's beside FSDP2 ours, ``(dp_shard, tp)``)."""
    from torch.distributed.tensor import DTensor

    for param in model.parameters():
        mesh = param.device_mesh if isinstance(param, DTensor) else None
        if mesh is not None and "tp" in (mesh.mesh_dim_names or ()):
            return mesh["tp"].get_group().group_name
        if mesh is not None and mesh.ndim == 1 and not mesh.mesh_dim_names:
            return mesh.get_group().group_name
    raise ValueError("parallel.tp: the model has no weight sharded over a 'tp' mesh dimension")


def enable_async_tp(model) -> str:
    """Inductor's micro-pipelined tensor parallelism for ``model``'s tp group (torchtitan's async TP): its
    post-grad pass replaces an all-gather followed by the matmuls that read it (a block's input, gathered over
    positions) with one fused op that multiplies each rank's chunk while the next arrives, and a matmul followed by
    a reduce-scatter (o and down) likewise; both over symmetric memory, which the group must have before the first
    compile. Sequence parallelism's collectives only (a plain all-reduce is not cut). Returns the group's name."""
    import warnings

    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    group = tp_group_name(model)
    torch._inductor.config._micro_pipeline_tp = True
    with warnings.catch_warnings():  # torch 2.11 enables it itself and says the call is no longer needed
        warnings.filterwarnings("ignore", message=".*enable_symm_mem_for_group.*deprecated", category=FutureWarning)
        enable_symm_mem_for_group(group)
    return group


def order_tp_collectives() -> None:
    """Inductor's comm/compute reordering for the compiled layers' tensor-parallel collectives. By default a
    collective's wait follows it at once, so the backward's all-reduce of a block input's gradient stalls the stream
    although the block's weight gradients do not need it; the passes issue each collective as early, and wait for
    it as late, as the graph allows, with independent compute between. On two H200s (tp 2, the 1.8B shape) they hid
    45% of the collectives' time and gained nothing: the all-reduces and the matmuls beside them share the SMs and
    both slowed (results/gpu_2gpu_2026-11-30c). A process-wide inductor setting: set before the first compile."""
    import torch._inductor.config as inductor

    inductor.reorder_for_compute_comm_overlap = True
    inductor.reorder_for_compute_comm_overlap_passes = ["sink_waits", "raise_comms", "reorder_compute_for_overlap"]


def check_tp(config: PretrainedConfig, tp: int, key: str = "parallel.tp") -> None:
    """ValueError (one line naming ``key``) when ``config`` cannot be split ``tp`` ways by its plan."""
    if tp == 1:
        return
    if not tp_plan(config):
        raise ValueError(
            f"{key}={tp}: transformers has no tensor-parallel plan for {config.model_type} shapes "
            "(Qwen3 and Llama have one; MoE shapes would need expert parallelism): use tp 1"
        )
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    if heads % tp or kv % tp:
        raise ValueError(f"{key}={tp} does not divide the model's {heads} attention heads and {kv} KV heads")
    ff = getattr(config, "intermediate_size", None) or 4 * config.hidden_size
    if ff % tp:
        raise ValueError(f"{key}={tp} does not divide the model's MLP width {ff}")


def _sharded(name: str, plan: dict[str, str]) -> bool:
    module = name.rsplit(".", 1)[0]
    return any(fnmatch.fnmatchcase(module, pattern) and style in SHARDED_STYLES for pattern, style in plan.items())


def params_per_gpu(config: PretrainedConfig, tp: int) -> int:
    """Parameters one GPU holds under tensor parallelism of degree ``tp`` (before any FSDP/ZeRO sharding): the
    plan's sharded weights / tp, the rest whole. A tied LM head is the embedding, counted once, whole."""
    from hfpretrain.models.params import meta_model

    model = meta_model(config)
    if tp == 1:
        return sum(p.numel() for p in model.parameters())
    plan = tp_plan(config)
    return sum(p.numel() // tp if _sharded(name, plan) else p.numel() for name, p in model.named_parameters())


def tp_layer_config(config: PretrainedConfig, tp: int) -> PretrainedConfig:
    """A copy of ``config`` with one GPU's share of each layer under tensor parallelism: heads, KV heads and the MLP
    width / tp, the hidden size and the head size unchanged (what the activation model counts per GPU)."""
    if tp == 1:
        return config
    local = copy.deepcopy(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    local.head_dim = head_dim
    local.num_attention_heads = config.num_attention_heads // tp
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    local.num_key_value_heads = kv // tp
    if getattr(config, "intermediate_size", None):
        local.intermediate_size = config.intermediate_size // tp
    return local


def load_tensor_parallel(
    weights: str,
    config: PretrainedConfig,
    tp: int,
    world: int,
    device: str = "cuda",
    mesh=None,
    sequence_parallel: bool = False,
    **kwargs,
):
    """``weights`` loaded sharded ``tp`` ways by transformers' plan over this launch's ``world`` processes
    (torch.distributed set up by the launcher; transformers starts the process group if nobody has), with our
    ``BLOCK_INPUT`` rule added and ``PARTIAL_NORM`` for the per-head norms, and with ``sequence_parallel`` the
    positions split between the blocks (``training_tp_plan``). With ranks left over
    for FSDP2 (world > tp), the tensor-parallel groups are the inner dimension of a (world / tp, tp) mesh:
    transformers 5.2x (whose models have ``is_distributed_loading_by_transformers``) builds it and applies FSDP2
    itself from ``DistributedConfig(fsdp_size=...)``; 5.17 applies tp only, over the ``tp`` dimension of ``mesh``
    (accelerate's; ours when none is given), and accelerate then does not shard it: a run refuses that layout there
    (``fsdp_beside_tp_supported``). Checked on CPU at 2×2 (tests/training/test_parallel.py: this function's
    steps, and the Trainer's against one process, resumed from its checkpoint)."""
    from transformers import AutoModelForCausalLM, PreTrainedModel
    from transformers.distributed.configuration_utils import DistributedConfig

    check_tp(config, tp)
    _register_styles()
    plan = training_tp_plan(config, sequence_parallel)  # whole: 5.17 replaces the installed plan, 5.24 merges it in
    if world == tp:  # tp over every rank: transformers' default tp_size (the world size) in both versions
        return AutoModelForCausalLM.from_pretrained(
            weights, config=config, distributed_config=DistributedConfig(tp_plan=plan, tp_size=tp), **kwargs
        )
    distributed = DistributedConfig(tp_plan=plan, tp_size=tp, fsdp_size=world // tp)
    if hasattr(PreTrainedModel, "is_distributed_loading_by_transformers"):  # 5.2x: tp and FSDP2 at load
        return AutoModelForCausalLM.from_pretrained(weights, config=config, distributed_config=distributed, **kwargs)
    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device, (world // tp, tp), mesh_dim_names=("dp_shard", "tp"))
    return AutoModelForCausalLM.from_pretrained(
        weights, config=config, distributed_config=distributed, device_mesh=mesh, **kwargs
    )
