"""Two processes (torchrun, gloo) check in at one point; rank ``LATE`` sleeps ``SLEEP`` seconds first: what
``tests/training/test_late_rank.py`` runs (training/barrier.py's check-in, with the recipe's parallel.timeout_s).

    torchrun --nproc_per_node 2 tests/training/late_rank.py TIMEOUT_S SLEEP_S LATE
"""

from __future__ import annotations

import os
import sys
import time

import torch.distributed as dist


def main() -> int:
    from hfpretrain.training.barrier import LateRankError, wait_for_ranks

    timeout, sleep, late = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    if rank == late:
        time.sleep(sleep)
    try:
        wait_for_ranks("checkpoint-3", timeout)
    except LateRankError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        os._exit(1)  # gloo's teardown would wait on the rank that never answered
    print(f"rank {rank} passed", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
