"""Two processes (torchrun, gloo) check in at points, as a run does at its start and after each checkpoint; at each,
rank ``LATE`` sleeps ``SLEEP`` seconds first: what ``tests/training/test_parallel.py`` runs (training/barrier.py's
check-in, with the recipe's parallel.timeout_s). One triple a check-in, in order, in the same process group.

    torchrun --nproc_per_node 2 tests/training/late_rank.py TIMEOUT_S SLEEP_S LATE [TIMEOUT_S SLEEP_S LATE ...]
"""

from __future__ import annotations

import os
import sys
import time

import torch.distributed as dist


def main() -> int:
    from hfpretrain.training.barrier import LateRankError, wait_for_ranks

    args = sys.argv[1:]
    assert args and len(args) % 3 == 0, "one TIMEOUT_S SLEEP_S LATE triple a check-in"
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    for n in range(len(args) // 3):
        timeout, sleep, late = float(args[3 * n]), float(args[3 * n + 1]), int(args[3 * n + 2])
        where = "start of training" if n == 0 else f"checkpoint-{3 * n}"
        if rank == late:
            time.sleep(sleep)
        try:
            wait_for_ranks(where, timeout)
        except LateRankError as err:
            print(f"error: {err}", file=sys.stderr, flush=True)
            os._exit(1)  # gloo's teardown would wait on the rank that never answered
        print(f"rank {rank} passed {where}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
