"""Milliseconds per call of a CUDA function, for the isolated benches (bench_gelu.py, bench_doc_attention.py)."""

import torch


def cuda_ms(fn, repeats: int = 20) -> float:
    """Mean milliseconds of ``fn()`` over ``repeats`` calls after 3 warm-up calls, timed by CUDA events."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats
