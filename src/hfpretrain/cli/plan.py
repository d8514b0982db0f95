r"""Plan a pretraining run from a compute budget: Chinchilla-optimal size, nearest zoo shapes,
memory fit at the micro-batch, steps and wall time.

    python scripts/plan.py --gpu B200 --num-gpus 8 --hours 46.6 --mfu 0.4 --seq-len 2048 --micro-batch 8

With --layout (and --shape), a step-time prediction instead (or after the plan, with --hours): tokens/s,
per-GPU efficiency and MFU of --num-gpus GPUs on --nodes nodes (hfpretrain.models.step_time):

    hfpretrain plan --gpu B200 --num-gpus 16 --nodes 2 --layout zero1,fsdp2 --shape qwen3_1p8b \
        --micro-batch 22 --global-batch-tokens 720896
"""

from __future__ import annotations

import argparse
import json
import math

from hfpretrain.cli import error


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and every option's default in --help (--num-gpus 8 is a choice to see)."""

    def _get_help_string(self, action):
        if action.default in (None, False):  # no default to show
            return action.help
        return super()._get_help_string(action)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--gpu", required=True, help="B200, H200, H100, H100-PCIe, A100, L40S, A6000, V100")
    p.add_argument("--num-gpus", type=int, default=8, help="GPUs of the run")
    p.add_argument("--hours", type=float, help="the compute budget (required unless --layout)")
    p.add_argument("--mfu", type=float, default=0.4, help="the MFU the wall time assumes")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per GPU per forward")
    p.add_argument("--global-batch-tokens", type=int, default=2**20, help="tokens per optimizer step")
    p.add_argument("--dtype", default="bf16", help="the weights' training dtype (memory fit)")
    p.add_argument("--zero-stage", type=int, default=1, help="0-3: what the memory fit shards")
    p.add_argument("--grad-checkpointing", action="store_true", help="activation checkpointing (memory fit)")
    p.add_argument(
        "--attn", default="flash_attention_2", choices=["flash_attention_2", "sdpa", "eager"], help="attention (memory)"
    )
    p.add_argument(
        "--fit", default="hoffmann", choices=["hoffmann", "rule20"], help="the compute-optimal rule: N and D"
    )
    p.add_argument("--nearest", type=int, default=3, help="zoo shapes listed around the optimum")
    p.add_argument("--vocab-size", type=int, default=151669, help="tokenizer length for tokenizer-sized shapes")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    s = p.add_argument_group("step-time model (docs/models.md § Step-time model)")
    s.add_argument("--layout", help="ddp, zero1, fsdp2, or several separated by commas: predict each")
    s.add_argument("--shape", help="the zoo shape to predict (with --layout)")
    s.add_argument("--nodes", type=int, default=1, help="nodes the --num-gpus GPUs are spread over")
    s.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel degree (within a node; also the compute plan's memory fit per GPU)",
    )
    s.add_argument(
        "--cp",
        type=int,
        default=1,
        help="context-parallel degree (within a node; also the compute plan's memory fit per GPU)",
    )
    s.add_argument("--grad-accum", type=int, help="micro-batches per step (default: from --global-batch-tokens)")
    s.add_argument("--precision", default="bf16", choices=["bf16", "fp8"], help="the linears' matmuls")
    s.add_argument(
        "--one-gpu-mfu",
        type=float,
        help="one GPU's MFU (default: measured for the shape and GPU where one exists, else 0.40)",
    )
    s.add_argument("--one-gpu-tokens-per-s", type=float, help="one GPU's measured tokens/s (replaces the MFU)")
    s.add_argument("--intra-node-gb-s", type=float, help="NVLink GB/s per GPU and direction (default per GPU)")
    s.add_argument("--inter-node-gbit-s", type=float, help="InfiniBand Gbit/s per GPU and direction (default 400)")
    a = p.parse_args(argv)
    if a.hours is None and not a.layout:
        return error("--hours is required (or --layout and --shape for a step-time prediction)")
    if a.layout and not a.shape:
        return error("--shape is required with --layout (the zoo shape to predict, e.g. qwen3_1p8b)")
    if a.shape and not a.layout:  # the compute plan chooses its own shapes: a --shape alone would be ignored
        return error("--shape is read with --layout only (a step-time prediction): add --layout, e.g. fsdp2")
    if a.micro_batch < 1 or (a.grad_accum is not None and a.grad_accum < 1):
        bad = "--micro-batch" if a.micro_batch < 1 else "--grad-accum"
        return error(f"{bad} must be an integer >= 1, got {a.micro_batch if a.micro_batch < 1 else a.grad_accum}")
    from hfpretrain.models.planner import PlanRequest, plan  # imports transformers: after parsing (--help)
    from hfpretrain.models.step_time import StepTimeRequest, predict, table

    try:
        if a.hours is not None:
            result = plan(
                PlanRequest(
                    a.gpu,
                    a.num_gpus,
                    a.hours,
                    mfu=a.mfu,
                    seq_len=a.seq_len,
                    micro_batch=a.micro_batch,
                    global_batch_tokens=a.global_batch_tokens,
                    dtype=a.dtype,
                    zero_stage=a.zero_stage,
                    grad_checkpointing=a.grad_checkpointing,
                    attn_implementation=a.attn,
                    fit=a.fit,
                    n_nearest=a.nearest,
                    vocab_size=a.vocab_size,
                    tp=a.tp,
                    cp=a.cp,
                )
            )
        predictions = []
        for layout in a.layout.split(",") if a.layout else []:
            dp = a.num_gpus // max(1, a.tp * a.cp) or 1
            accum = (
                a.grad_accum
                if a.grad_accum is not None
                else max(1, math.ceil(a.global_batch_tokens / (a.micro_batch * a.seq_len * dp)))
            )
            predictions.append(
                predict(
                    StepTimeRequest(
                        a.shape,
                        a.gpu,
                        a.num_gpus,
                        a.nodes,
                        layout.strip(),
                        tp=a.tp,
                        cp=a.cp,
                        seq_len=a.seq_len,
                        micro_batch=a.micro_batch,
                        grad_accum=accum,
                        dtype=a.precision,
                        one_gpu_mfu=a.one_gpu_mfu,
                        one_gpu_tokens_per_s=a.one_gpu_tokens_per_s,
                        intra_node_gb_s=a.intra_node_gb_s,
                        inter_node_gbit_s=a.inter_node_gbit_s,
                    )
                )
            )
    except ValueError as err:  # an unknown GPU, layout or dtype, a negative size, tp or nodes that do not divide
        return error(err)
    if a.json:
        out = {"plan": result.as_dict()} if a.hours is not None else {}
        if predictions:
            out["step_time"] = [s.as_dict() for s in predictions]
        print(json.dumps(out if predictions else out["plan"], indent=2))
        return 0
    if a.hours is not None:
        print(result.table())
    if predictions:
        print(("\n" if a.hours is not None else "") + table(predictions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
