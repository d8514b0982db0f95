"""GELU's tanh approximation, compiled, on GPT-2 124M's MLP activations (one micro-batch of 128 x 1024 tokens,
3,072 wide, bf16):
1. transformers' tanh form against models/gelu.py's sigmoid form, forward and forward + backward;
2. the bias gradient summed in GELU's backward (kernels/gelu_bias.py): the kernel for each tile in a
   sweep against inductor's two kernels (GELU's backward, then the column sum), checked against PyTorch;
3. the whole MLP (c_fc, GELU, c_proj) forward + backward under bf16 autocast, compiled: stock (with the sigmoid
   GELU) against fuse_bias_gelu's.

    python benchmarks/bench_gelu.py [--rows 131072] [--cols 3072]
"""

from __future__ import annotations

import argparse

import torch
from transformers.activations import NewGELUActivation

from hfpretrain.kernels import gelu_bias as G
from hfpretrain.models.gelu import fuse_bias_gelu
from hfpretrain.models.gelu import SigmoidGELU
from cuda_timing import cuda_ms  # benchmarks/ (the script's folder)


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
        print(f"{name:26s} forward {fwd:.3f} ms ({moved / fwd / 1e9:.2f} TB/s), forward + backward {total:.3f} ms")
    bias_gradient(x, grad)
    mlp(args.rows, args.cols)


def bias_gradient(h, grad):
    """GELU's backward with the bias gradient: inductor's kernels against gelu_grad_bias, per tile."""
    want_h, want_b = G.gelu_grad_reference(grad, h)
    inductor = torch.compile(G.gelu_grad_reference)
    moved = 3 * h.numel() * h.element_size()  # reads the gradient and h, writes GELU's input gradient
    ms = cuda_ms(lambda: inductor(grad, h))
    print(f"bias gradient, inductor (pointwise, then column sum): {ms:.3f} ms ({moved / ms / 1e9:.2f} TB/s)")
    default = dict(G.BIAS_GRAD_TILE)
    for rows, block_m, block_n, warps in (
        (1024, 32, 128, 4),
        (1024, 64, 128, 4),
        (1024, 64, 128, 8),
        (512, 32, 128, 4),
        (2048, 64, 64, 4),
        (1024, 32, 256, 4),
        (1024, 16, 256, 4),
        (1024, 128, 64, 8),
        (1024, 64, 256, 8),
        (256, 32, 128, 4),
        (1024, 16, 128, 2),
    ):
        G.BIAS_GRAD_TILE.update(ROWS=rows, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)
        got_h, got_b = G.gelu_grad_bias(grad, h)
        err_h = (got_h.float() - want_h.float()).abs().max().item()
        err_b = ((got_b - want_b).abs().max() / want_b.abs().max()).item()
        assert err_h < 0.07 and err_b < 1e-4, (err_h, err_b)  # bf16 rounding of values up to ~8
        ms = cuda_ms(lambda: G.gelu_grad_bias(grad, h))
        print(
            f"  gelu_grad_bias ROWS={rows:4d} BLOCK_M={block_m:3d} BLOCK_N={block_n:3d} warps={warps}: {ms:.3f} ms "
            f"({moved / ms / 1e9:.2f} TB/s); max |grad - ref| {err_h:.1e}, bias rel {err_b:.1e}"
        )
    G.BIAS_GRAD_TILE.update(default)


def mlp(rows: int, cols: int):
    """GPT-2 124M's MLP, forward + backward, compiled, under bf16 autocast: stock (sigmoid GELU) against fused."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    config = GPT2Config(n_embd=cols // 4, resid_pdrop=0.0)
    torch.manual_seed(0)
    stock = GPT2MLP(cols, config).cuda()
    stock.act = SigmoidGELU()
    fused = GPT2MLP(cols, config).cuda()
    fused.load_state_dict(stock.state_dict())
    assert fuse_bias_gelu(fused) == 1
    x = torch.randn(rows // 1024, 1024, cols // 4, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn_like(x)
    results = {}
    for name, module in (("stock", stock), ("fused", fused)):
        forward = torch.compile(module)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = forward(x)
            return torch.autograd.grad(out, [x, *module.parameters()], dout)

        results[name] = step()
        print(f"GPT-2 MLP {rows} x {cols // 4}, forward + backward, {name}: {cuda_ms(step):.3f} ms")
    for a, b in zip(*results.values()):
        print(
            f"  gradient {tuple(a.shape)}: max |fused - stock| / max |stock| "
            f"{((a.float() - b.float()).abs().max() / b.float().abs().max()).item():.1e}"
        )


if __name__ == "__main__":
    main()
