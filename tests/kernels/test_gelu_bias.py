"""kernels/gelu_bias.py: the Triton kernel under Triton's CPU interpreter (CI) and on a GPU (marked gpu), and the
op inside a compiled graph."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hfpretrain import kernels
from hfpretrain.kernels.gelu_bias import gelu_grad_bias, gelu_grad_reference

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_op_in_a_compiled_graph_equals_the_reference(device):
    """The op traced by torch.compile (its fake implementation and registration; on a CPU the op runs the
    reference inside, so this checks the wiring), and on a GPU the Triton kernel inside a compiled graph."""
    torch.manual_seed(0)
    grad, h = torch.randn(40, 300, device=device), torch.randn(40, 300, device=device)
    got = torch.compile(lambda g, x: gelu_grad_bias(g, x))(grad, h)
    want = gelu_grad_reference(grad, h)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


INTERPRETED = """
import torch, triton
from hfpretrain.kernels import gelu_bias as G
torch.manual_seed(0)
h = (3 * torch.randn(300, 200)).bfloat16()  # rows and columns that fill no tile exactly
grad = torch.randn(300, 200).bfloat16()
want_h, want_b = G.gelu_grad_reference(grad, h)
tile = dict(ROWS=64, BLOCK_M=16, BLOCK_N=128)
grid = (triton.cdiv(300, 64), triton.cdiv(200, 128))
grad_h, partial = torch.empty_like(h), torch.empty(grid[0], 200)
G._gelu_grad_bias_kernel[grid](grad, h, grad_h, partial, 300, 200, **tile)
torch.testing.assert_close(grad_h, want_h)  # bf16 tolerance: the interpreter's cast rounds otherwise than a GPU's
torch.testing.assert_close(partial.sum(0), want_b)
print("ok")
"""


@pytest.mark.skipif(kernels.triton is None, reason="Triton not installed: pip install -e '.[test]'")
def test_kernel_under_the_interpreter():
    out = subprocess.run(
        [sys.executable, "-c", INTERPRETED],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


@pytest.mark.gpu
def test_kernel_on_the_gpu():
    """bf16 on shapes no tile divides, and GPT-2 124M's [131,072 x 3,072], against PyTorch."""
    for rows, cols in ((1000, 3000), (131072, 3072)):
        h = (3 * torch.randn(rows, cols, device="cuda")).bfloat16()
        grad = torch.randn_like(h)
        got_h, got_b = gelu_grad_bias(grad, h)
        want_h, want_b = gelu_grad_reference(grad, h)
        torch.testing.assert_close(got_h, want_h)
        torch.testing.assert_close(got_b, want_b, rtol=1e-4, atol=rows * 2e-6)
