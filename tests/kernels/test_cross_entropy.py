"""kernels/cross_entropy.py: the Triton kernel under Triton's CPU interpreter (CI) and on a GPU (marked gpu),
its PyTorch reference against torch's cross-entropy, and the tile setting."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from hfpretrain import kernels
from hfpretrain.kernels.cross_entropy import IGNORE_INDEX, check_tile, cross_entropy_, loss_tile

REPO = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(kernels.triton is None, reason="Triton not installed: pip install -e '.[test]'")
# Triton 3.6's interpreter cannot loop to a runtime bound (range(0, n_cols, ...): "only 0-dimensional arrays can be
# converted"); 3.7 on can. The test extra installs a current one; a GPU machine's older one runs the CUDA test.
old_interpreter = pytest.mark.skipif(
    kernels.triton is not None and tuple(int(v) for v in kernels.triton.__version__.split(".")[:2]) < (3, 7),
    reason="Triton < 3.7's interpreter cannot loop to a runtime bound (the CUDA test covers the kernel)",
)


def _reference(logits, targets, z_loss):
    """Per-token loss and the gradient of the summed loss, with torch's autograd."""
    x = logits.detach().float().requires_grad_()
    keep = targets != IGNORE_INDEX
    loss = (
        F.cross_entropy(x, targets, ignore_index=IGNORE_INDEX, reduction="none")
        + z_loss * torch.logsumexp(x, -1).square() * keep
    )
    loss.sum().backward()
    return loss.detach(), x.grad


@pytest.mark.parametrize("z_loss", [0.0, 1e-3])
def test_reference_equals_cross_entropy(z_loss):
    torch.manual_seed(0)
    logits = 3 * torch.randn(48, 301)
    targets = torch.randint(0, 301, (48,))
    targets[[2, 7]] = IGNORE_INDEX
    want_loss, want_grad = _reference(logits, targets, z_loss)
    loss = cross_entropy_(logits, targets, z_loss)
    torch.testing.assert_close(loss, want_loss)
    torch.testing.assert_close(logits, want_grad)  # the logits now hold the gradient of the summed loss
    assert logits[2].abs().max() == 0


def test_loss_alone_leaves_the_logits():
    logits = torch.randn(6, 50)
    before = logits.clone()
    loss = cross_entropy_(logits, torch.arange(6), write_grad=False)
    torch.testing.assert_close(loss, F.cross_entropy(before, torch.arange(6), reduction="none"))
    assert torch.equal(logits, before)


def test_tile_by_vocabulary_and_checked():
    assert loss_tile(50304) == (16384, 8) and loss_tile(151936) == (8192, 8)
    assert loss_tile(5000) == (8192, 8) and loss_tile(512) == (512, 8)  # no wider than the row
    assert check_tile([4096, 4]) == (4096, 4)
    for bad in ([16384], [3000, 8], ["a", "b"], 8192, [8192, 64], [1 << 21, 8]):  # the last two: no launch
        with pytest.raises(ValueError, match="kernels.loss_tile"):
            check_tile(bad)


INTERPRETED = """
import math, torch
from hfpretrain.kernels import cross_entropy as K
torch.manual_seed(0)
wide = (8 * torch.randn(37, 5120)).to(torch.bfloat16)
x = wide[:, :5000]  # a row stride wider than the row, as a slice of padded logits
x[5, 123] = 300.0
x[6, :4096] = float("-inf")  # a whole first block of -inf
t = torch.randint(0, 5000, (37,))
t[3], t[7] = -100, 5000  # ignored; out of range
source = x.clone()
ok = torch.ones(37, dtype=torch.bool); ok[7] = False
want = source.clone()
want_loss = K._reference_(want, t, 1e-3, True)
for write_grad in (False, True):
    for block in (4096, K.loss_tile(5000)[0]):  # the -inf block above; the tile training runs (a partial block)
        x.copy_(source)
        loss = torch.empty(37)
        K._cross_entropy_kernel[(37,)](x, t, loss, 5000, x.stride(0), 1e-3, IGNORE=-100, BLOCK_COLS=block,
                                       WRITE_GRAD=write_grad)
        torch.testing.assert_close(loss[ok], want_loss[ok])
        assert math.isnan(loss[7].item()) and math.isnan(want_loss[7].item()) and loss[3] == 0
        if write_grad:
            torch.testing.assert_close(x[ok].float(), want[ok].float(), atol=4e-3, rtol=1e-2)
            assert (x[3] == 0).all()
        else:
            assert torch.equal(x, source)
print("ok")
"""


@needs_triton
@old_interpreter
def test_kernel_under_the_interpreter():
    """The Triton kernel (TRITON_INTERPRET=1, CPU tensors) equals the PyTorch reference: padded rows, a block of
    -inf, an ignored and an out-of-range target (NaN, so the run's non-finite check stops it), with and without
    the gradient."""
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
@pytest.mark.parametrize("vocab", [50304, 151936])
def test_kernel_on_the_gpu(vocab):
    """bf16 logits at GPT-2's and Qwen3's vocabularies, the default tile: loss and gradient against torch."""
    torch.manual_seed(0)
    logits = (4 * torch.randn(300, vocab, device="cuda")).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (300,), device="cuda")
    targets[:5] = IGNORE_INDEX
    want_loss, want_grad = _reference(logits, targets, 1e-4)
    loss = cross_entropy_(logits, targets, 1e-4)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(logits.float(), want_grad, rtol=2e-2, atol=1e-3)
    assert not math.isnan(loss.sum().item())
