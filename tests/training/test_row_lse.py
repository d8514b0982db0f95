"""The compiled loss's row reduction (training/row_lse.py): value and gradient against PyTorch's cross-entropy,
eager and inside a compiled graph, and the Triton kernel itself under Triton's CPU interpreter."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from hfpretrain.training import row_lse as R
from hfpretrain.training.loss import IGNORE_INDEX


def _loss(logits, targets, z_loss):
    keep = targets != IGNORE_INDEX
    lse, picked = R.row_lse(logits, targets.clamp(min=0))
    return torch.where(keep, lse - picked + z_loss * lse.square(), 0.0).sum()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("z_loss", [0.0, 1e-3])
def test_row_lse_loss_and_gradient_equal_cross_entropy(compiled, z_loss):
    torch.manual_seed(0)
    logits = (3 * torch.randn(48, 301)).requires_grad_()
    targets = torch.randint(0, 301, (48,))
    targets[[2, 7]] = IGNORE_INDEX
    fn = torch.compile(_loss, backend="inductor") if compiled else _loss
    loss = fn(logits, targets, z_loss)
    loss.backward()
    ref_logits = logits.detach().clone().requires_grad_()
    keep = targets != IGNORE_INDEX
    ref = (F.cross_entropy(ref_logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
           + z_loss * (torch.logsumexp(ref_logits, -1).square() * keep).sum())
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    assert logits.grad[2].abs().max() == 0  # an ignored token gives no gradient


def test_gradient_keeps_the_logits_dtype():
    logits = torch.randn(4, 10, dtype=torch.bfloat16, requires_grad=True)
    _loss(logits, torch.tensor([1, 2, 3, 4]), 0.0).backward()
    assert logits.grad.dtype == torch.bfloat16


def test_enabled_only_where_measured(monkeypatch):
    assert not R.enabled(torch.zeros(2, 2))  # a CPU tensor: inductor's own reduction
    monkeypatch.setattr(R, "triton", R.triton or object())  # as if on a GPU with Triton
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert R.enabled(torch.zeros(2, 50304))
    assert not R.enabled(torch.zeros(2, 151936))  # its gradient pass measured slower at Qwen3's vocabulary
    monkeypatch.setenv("HFPRETRAIN_ROW_LSE", "0")
    assert not R.enabled(torch.zeros(2, 50304))


@pytest.mark.skipif(R.triton is None, reason="Triton not installed (the CPU wheel of torch comes without it)")
def test_triton_kernel_under_the_interpreter():
    # bf16 logits, a vocabulary that is not a multiple of the block, a large spread of values
    code = textwrap.dedent("""
        import torch
        from hfpretrain.training import row_lse as R
        torch.manual_seed(0)
        x = (8 * torch.randn(37, 5000)).to(torch.bfloat16)
        x[5, 123] = 300.0
        t = torch.randint(0, 5000, (37,))
        lse, picked = torch.empty(37), torch.empty(37)
        R._row_lse_kernel[(37,)](x, t, lse, picked, 5000, x.stride(0), BLOCK_COLS=1024)
        ref_lse, ref_picked = R._reference(x, t)
        torch.testing.assert_close(lse, ref_lse)
        torch.testing.assert_close(picked, ref_picked, rtol=0, atol=0)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
