"""GELU's tanh approximation, compiled: transformers' tanh form against models/gelu.py's sigmoid form, forward
and forward + backward, on GPT-2 124M's MLP activations (one micro-batch of 128 x 1024 tokens, 3,072 wide, bf16).

    python benchmarks/bench_gelu.py [--rows 131072] [--cols 3072]
"""

from __future__ import annotations

import argparse

import torch
from transformers.activations import NewGELUActivation

from hfpretrain.models.gelu import SigmoidGELU


def cuda_ms(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=131072)
    parser.add_argument("--cols", type=int, default=3072)
    args = parser.parse_args()
    x = torch.randn(args.rows, args.cols, device="cuda", dtype=torch.bfloat16) * 2
    grad = torch.randn_like(x)
    moved = 2 * x.numel() * x.element_size()  # the forward reads x and writes its GELU
    for name, module in (("tanh (transformers)", NewGELUActivation()), ("sigmoid (models/gelu.py)", SigmoidGELU())):
        forward = torch.compile(module)
        xg = x.clone().requires_grad_()

        def both():
            torch.autograd.grad(forward(xg), xg, grad)

        with torch.no_grad():
            fwd = cuda_ms(lambda: forward(x))
        total = cuda_ms(both)
        print(f"{name:26s} forward {fwd:.3f} ms ({moved / fwd / 1e9:.2f} TB/s), forward + backward "
              f"{total:.3f} ms")


if __name__ == "__main__":
    main()
