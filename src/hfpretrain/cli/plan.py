"""Plan a pretraining run from a compute budget: Chinchilla-optimal size, nearest zoo shapes,
memory fit at the micro-batch, steps and wall time.

    python scripts/plan.py --gpu B200 --num-gpus 8 --hours 46.6 --mfu 0.4 --seq-len 2048 --micro-batch 8
"""

from __future__ import annotations

import argparse
import json

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", required=True, help="B200, H200, H100, H100-PCIe, A100, L40S, A6000, V100")
    p.add_argument("--num-gpus", type=int, default=8)
    p.add_argument("--hours", type=float, required=True)
    p.add_argument("--mfu", type=float, default=0.4)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--global-batch-tokens", type=int, default=2**20)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--zero-stage", type=int, default=1)
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--attn", default="flash_attention_2", choices=["flash_attention_2", "sdpa", "eager"])
    p.add_argument("--fit", default="hoffmann", choices=["hoffmann", "rule20"])
    p.add_argument("--nearest", type=int, default=3)
    p.add_argument("--vocab-size", type=int, default=151669, help="tokenizer length for tokenizer-sized shapes")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    a = p.parse_args(argv)
    from hfpretrain.models.planner import PlanRequest, plan  # imports transformers: after parsing (--help)

    try:
        result = plan(PlanRequest(
            a.gpu, a.num_gpus, a.hours, mfu=a.mfu, seq_len=a.seq_len, micro_batch=a.micro_batch,
            global_batch_tokens=a.global_batch_tokens, dtype=a.dtype, zero_stage=a.zero_stage,
            grad_checkpointing=a.grad_checkpointing, attn_implementation=a.attn, fit=a.fit, n_nearest=a.nearest,
            vocab_size=a.vocab_size))
    except ValueError as err:  # an unknown GPU or dtype, a negative size: one line naming it
        return error(err)
    print(json.dumps(result.as_dict(), indent=2) if a.json else result.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
