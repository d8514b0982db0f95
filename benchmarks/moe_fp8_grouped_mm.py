"""The experts' matmuls alone, bf16 against fp8, forward and backward, at the shipped MoE shapes (issue 60's fp8
lever, measured before any wiring): torch._grouped_mm in bf16 against torchao's rowwise-fp8 grouped matmul
(`torchao.prototype.moe_training._to_fp8_rowwise_then_scaled_grouped_mm`, torch._scaled_grouped_mm inside), one
SwiGLU expert layer (gate and up fused, then down) on the routed rows of one step, expert loads as uneven as a
dropless router's (each a multiple of 16: torchao's kernel takes no other; the router's counts would be padded).
Prints ms per forward+backward, the speedup, and the fp8 result's relative error against bf16 (output and the
weights' gradient). Needs an H100/H200 (fp8 tensor cores) and torchao; run on the GPU machine (results/
moe_fp8_grouped_2026-12-01: fp8 0.69x and 0.63x bf16's speed on H200, so model.precision=fp8 leaves the experts bf16):

    source .carry/setup.sh && python3 benchmarks/moe_fp8_grouped_mm.py --out $OUT/moe_fp8_grouped_mm.json
"""

import argparse
import json
import sys

import torch
from cuda_timing import cuda_ms  # benchmarks/ (the script's folder)

# name: (routed rows of one step = tokens x top-k, hidden, expert width, experts)
SHAPES = {"best_small_moe": (128 * 1024 * 4, 1024, 704, 32), "qwen3_moe_856m_a152m": (16 * 2048 * 4, 1024, 512, 32)}


def loads(rows: int, experts: int, gen: torch.Generator) -> torch.Tensor:
    """Uneven expert loads (max/mean 3.4, the studies' trained routers read 3.5-7) summing to ``rows``, each a
    multiple of 16: the grouped matmuls' end offsets (int32)."""
    weights = torch.rand(experts, generator=gen) ** 3 + 0.05
    counts = (weights / weights.sum() * rows / 16).floor().long() * 16
    counts[0] += rows - int(counts.sum())  # the remainder (a multiple of 16) to one expert
    return torch.cumsum(counts, 0).to(torch.int32)


def layer(grouped_mm, a, w_up, w_down, offs):
    """One expert layer: (rows, d) -> gate|up (rows, 2I) -> SwiGLU -> down (rows, d)."""
    h = grouped_mm(a, w_up.transpose(-2, -1), offs)
    inter = h.shape[1] // 2
    g = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    return grouped_mm(g, w_down.transpose(-2, -1), offs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        print("error: needs a GPU with fp8 tensor cores (H100/H200 or newer)", file=sys.stderr)
        return 2
    from torchao.prototype.moe_training import _to_fp8_rowwise_then_scaled_grouped_mm

    def bf16(a, b_t, offs):
        return torch._grouped_mm(a, b_t, offs=offs, out_dtype=torch.bfloat16)

    def fp8(a, b_t, offs):
        return _to_fp8_rowwise_then_scaled_grouped_mm(a, b_t, offs, torch.bfloat16, torch.float8_e4m3fn, False)

    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": {}}
    for name, (rows, hidden, width, experts) in SHAPES.items():
        gen = torch.Generator().manual_seed(0)
        offs = loads(rows, experts, gen).cuda()
        a = torch.randn(rows, hidden, generator=gen).to("cuda", torch.bfloat16).requires_grad_()
        w_up = (torch.randn(experts, 2 * width, hidden, generator=gen) * hidden**-0.5).to("cuda", torch.bfloat16)
        w_down = (torch.randn(experts, hidden, width, generator=gen) * width**-0.5).to("cuda", torch.bfloat16)
        w_up.requires_grad_()
        w_down.requires_grad_()
        dy = torch.randn(rows, hidden, generator=gen).to("cuda", torch.bfloat16)
        figures, outputs = {}, {}
        for label, mm in (("bf16", bf16), ("fp8", fp8)):

            def step(mm=mm):
                a.grad = w_up.grad = w_down.grad = None
                layer(mm, a, w_up, w_down, offs).backward(dy)

            figures[label] = cuda_ms(step, args.iters)
            step()
            outputs[label] = (layer(mm, a, w_up, w_down, offs).detach().float(), w_up.grad.float().clone())
        # fwd + bwd of the two matmuls: 3 x 2 x rows x d x (2I + I)
        flops = 3 * 2 * rows * hidden * 3 * width

        def rel(x, y):
            return float((x - y).norm() / y.norm())

        entry = {
            "rows": rows,
            "hidden": hidden,
            "expert_width": width,
            "experts": experts,
            "max_over_mean_load": float(offs.diff(prepend=offs.new_zeros(1)).max() * experts / rows),
            "ms": figures,
            "tflops": {k: flops / v / 1e9 for k, v in figures.items()},
            "speedup": figures["bf16"] / figures["fp8"],
            "rel_error_output": rel(outputs["fp8"][0], outputs["bf16"][0]),
            "rel_error_grad_w_up": rel(outputs["fp8"][1], outputs["bf16"][1]),
        }
        results["shapes"][name] = entry
        print(
            f"{name}: bf16 {figures['bf16']:.2f} ms ({entry['tflops']['bf16']:.0f} TFLOP/s), fp8 {figures['fp8']:.2f} "
            f"ms ({entry['tflops']['fp8']:.0f}): x{entry['speedup']:.2f}; fp8 error: output "
            f"{entry['rel_error_output']:.3%}, grad {entry['rel_error_grad_w_up']:.3%}; load max/mean "
            f"{entry['max_over_mean_load']:.1f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
