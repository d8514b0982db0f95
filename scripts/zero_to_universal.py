#!/usr/bin/env python
"""Convert a DeepSpeed ZeRO checkpoint-N to DeepSpeed's universal format ahead of a resume on another number of
GPUs (DeepSpeed refuses optimizer shards saved at another data-parallel size). A resume at another GPU count does
this by itself, once, while every other process of the launch waits; converting first (on a CPU node, say)
spares that wait, and the resume reuses the copy:

    python scripts/zero_to_universal.py runs/qwen3_1p8b/checkpoint-1000
    accelerate launch --config_file accelerate_configs/8gpu_zero1.yaml --num_processes NEW_GPU_COUNT \\
        scripts/pretrain.py RECIPE training.resume_from_checkpoint=runs/qwen3_1p8b/checkpoint-1000

The resume keeps the checkpoint's global batch (micro-batch x GPUs x accumulation) on the new GPU count.
"""

import argparse
import sys

from hfpretrain.training.reshard import convert_to_universal


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a checkpoint-N folder written under DeepSpeed (holds global_stepN/)")
    p.add_argument("--workers", type=int, default=None, help="processes (default: one per core, at most 8)")
    args = p.parse_args()
    try:
        tag = convert_to_universal(args.checkpoint, args.workers)
    except (FileNotFoundError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    print(f"wrote {args.checkpoint}/{tag} (universal): a ZeRO-1 resume on any GPU count reads it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
