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

from train_utils import REPO


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


def test_compiled_head_loss_with_the_kernel_path(monkeypatch):
    """loss.py's branch that uses row_lse (taken on a GPU), run here on a CPU: value and gradients equal HF's loss
    plus the z-loss term, with ignored tokens."""
    from hfpretrain.training import loss as L

    monkeypatch.setattr(L, "row_lse_enabled", lambda logits: True)
    torch.manual_seed(0)
    hidden, weight = torch.randn(40, 16, requires_grad=True), torch.randn(96, 16, requires_grad=True)
    targets = torch.randint(0, 96, (40,))
    targets[:3] = IGNORE_INDEX
    total = torch.compile(L._head_cross_entropy_sum)(hidden, weight, targets, 1e-3)
    total.backward()
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    logits = h2 @ w2.T
    ref = (F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
           + 1e-3 * (torch.logsumexp(logits, -1).square() * (targets != IGNORE_INDEX)).sum())
    ref.backward()
    torch.testing.assert_close(total, ref)
    torch.testing.assert_close(hidden.grad, h2.grad)
    torch.testing.assert_close(weight.grad, w2.grad)


INTERPRETED = """
import math, torch
from hfpretrain.training import row_lse as R
torch.manual_seed(0)
wide = (8 * torch.randn(37, 5120)).to(torch.bfloat16)
x = wide[:, :5000]  # a row stride wider than the row, as a slice of padded logits
x[5, 123] = 300.0
x[6, :4096] = float("-inf")  # a whole first block of -inf (the real BLOCK)
t = torch.randint(0, 5000, (37,))
t[7] = 5000  # out of range
lse, picked = torch.empty(37), torch.empty(37)
R._row_lse_kernel[(37,)](x, t, lse, picked, 5000, x.stride(0), BLOCK_COLS=R.BLOCK)
ok = torch.ones(37, dtype=torch.bool); ok[7] = False
ref_lse, ref_picked = R._reference(x, t.clamp(max=4999))
torch.testing.assert_close(lse, ref_lse)
torch.testing.assert_close(picked[ok], ref_picked[ok], rtol=0, atol=0)
assert math.isnan(picked[7].item())
print("ok")
"""


@pytest.mark.skipif(R.triton is None, reason="Triton not installed (the CPU wheel of torch comes without it)")
def test_triton_kernels_under_the_interpreter():
    """The loss's reduction kernel: padded rows, the real block size, a block of -inf, an out-of-range target (NaN,
    so the run's non-finite check stops it)."""
    out = subprocess.run([sys.executable, "-c", INTERPRETED], env={**os.environ, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernel_on_the_gpu():
    logits = (4 * torch.randn(300, 50304, device="cuda")).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 50304, (300,), device="cuda")
    loss = torch.compile(_loss)(logits, targets, 0.0)
    loss.backward()
    ref_logits = logits.detach().clone().requires_grad_()
    ref = F.cross_entropy(ref_logits.float(), targets, reduction="sum")
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-2)
    torch.testing.assert_close(logits.grad.float(), ref_logits.grad.float(), rtol=2e-2, atol=1e-3)


FUSED_INTERPRETED = """
import math, torch, torch.nn.functional as F
from hfpretrain.training import row_lse as R
torch.manual_seed(0)
wide = (8 * torch.randn(37, 5120)).to(torch.bfloat16)
x = wide[:, :5000]  # padded rows, as above
x[6, :4096] = float("-inf")  # a whole first block of -inf
t = torch.randint(0, 5000, (37,))
t[3], t[7] = -100, 5000  # ignored; out of range
want = x.clone()
want_loss = R.loss_and_gradient_(want, t, 1e-3)  # the PyTorch branch, on the same rows
source = x.clone()
ok = torch.ones(37, dtype=torch.bool); ok[7] = False
for block in (R.BLOCK, R.loss_tile(5000)[0]):  # the -inf block above; the tile training runs (one partial block)
    x.copy_(source)
    loss = torch.empty(37)
    R._loss_grad_kernel[(37,)](x, t, loss, 5000, x.stride(0), 1e-3, IGNORE=-100, BLOCK_COLS=block)
    torch.testing.assert_close(loss[ok], want_loss[ok])
    assert math.isnan(loss[7].item()) and math.isnan(want_loss[7].item())
    torch.testing.assert_close(x[ok].float(), want[ok].float(), atol=4e-3, rtol=1e-2)
    assert loss[3] == 0 and (x[3] == 0).all()
print("ok")
"""


@pytest.mark.skipif(R.triton is None, reason="Triton not installed (the CPU wheel of torch comes without it)")
def test_fused_loss_kernel_under_the_interpreter():
    """row_lse._loss_grad_kernel (loss and gradient in place) equals
    loss_and_gradient_'s PyTorch branch: padded rows, a block of -inf, an ignored and an out-of-range target."""
    out = subprocess.run([sys.executable, "-c", FUSED_INTERPRETED], env={**os.environ, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


@pytest.mark.parametrize("z_loss", [0.0, 1e-3])
def test_loss_and_gradient_in_place_equal_cross_entropy(z_loss):
    torch.manual_seed(0)
    logits = 3 * torch.randn(48, 301)
    targets = torch.randint(0, 301, (48,))
    targets[[2, 7]] = IGNORE_INDEX
    ref_logits = logits.clone().requires_grad_()
    keep = targets != IGNORE_INDEX
    ref = (F.cross_entropy(ref_logits, targets, ignore_index=IGNORE_INDEX, reduction="none")
           + z_loss * torch.logsumexp(ref_logits, -1).square() * keep)
    ref.sum().backward()
    loss = R.loss_and_gradient_(logits, targets, z_loss)
    torch.testing.assert_close(loss, ref.detach())
    torch.testing.assert_close(logits, ref_logits.grad)  # the logits now hold the gradient of the summed loss
    assert logits[2].abs().max() == 0


@pytest.mark.parametrize("autocast", [False, True])
def test_fused_head_loss_equals_hf_loss(autocast):
    """loss._HeadCrossEntropy (a GPU's path for fused_loss=compiled in training): value and both gradients equal
    the plain head + cross-entropy, scaled by the incoming gradient; under bf16 autocast the matmuls are bf16."""
    from hfpretrain.training.loss import _HeadCrossEntropy

    torch.manual_seed(0)
    hidden, weight = torch.randn(40, 16, requires_grad=True), torch.randn(96, 16, requires_grad=True)
    targets = torch.randint(0, 96, (40,))
    targets[:3] = IGNORE_INDEX
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        total = _HeadCrossEntropy.apply(hidden, weight, targets, 1e-3)
        logits = (h2 @ w2.T).float()
    (total / 37).backward()
    ref = (F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
           + 1e-3 * (torch.logsumexp(logits, -1).square() * (targets != IGNORE_INDEX)).sum())
    (ref / 37).backward()
    tol = {"rtol": 2e-2, "atol": 2e-2} if autocast else {}
    torch.testing.assert_close(total, ref, **tol)
    torch.testing.assert_close(hidden.grad, h2.grad, **tol)
    torch.testing.assert_close(weight.grad, w2.grad, **tol)
    assert hidden.grad.dtype == weight.grad.dtype == torch.float32


@pytest.mark.parametrize("autocast", [False, True])
def test_training_loss_through_the_fused_head_equals_the_compiled_one(monkeypatch, autocast):
    """causal_lm_loss with fused_loss=compiled takes _HeadCrossEntropy in GPU training (fused_head_enabled; forced
    here on a CPU): on a tied GPT-2 with ignored labels, num_items_in_batch and a z-loss, the loss and every
    parameter's gradient equal the compiled path's."""
    from hfpretrain.models import build_model, load_config
    from hfpretrain.training import loss as L

    torch.manual_seed(0)
    config = load_config("gpt2_124m", {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 512}, vocab_size=512)
    models = [build_model(config, attn_implementation="sdpa") for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    assert models[0].lm_head.weight is models[0].transformer.wte.weight
    ids = torch.randint(0, 512, (2, 16))
    labels = ids.clone()
    labels[0, :5] = IGNORE_INDEX
    results = []
    for model, fused in zip(models, (True, False)):
        monkeypatch.setattr(L, "fused_head_enabled", lambda hidden, weight, fused=fused: fused)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            hidden = model.transformer(input_ids=ids).last_hidden_state
            loss = L.causal_lm_loss(hidden, model.lm_head.weight, labels, num_items_in_batch=torch.tensor(20),
                                    impl="compiled", compile_backend="eager", z_loss=1e-3)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (fused_loss, fused_grads), (ref_loss, ref_grads) = results
    tol = {"rtol": 2e-2, "atol": 2e-3} if autocast else {}
    torch.testing.assert_close(fused_loss, ref_loss, **tol)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, **tol, msg=name)


def test_loss_tile_by_vocabulary(monkeypatch):
    """The loss kernel's tiling as measured: 16,384 columns per iteration up to a 64k vocabulary, 8,192 above;
    HFPRETRAIN_LOSS_TILE overrides both (A/B benchmarks)."""
    assert R.loss_tile(50304) == (16384, 8) and R.loss_tile(151936) == (8192, 8)
    assert R.loss_tile(5000) == (8192, 8) and R.loss_tile(512) == (512, 8)  # no wider than the row
    monkeypatch.setenv("HFPRETRAIN_LOSS_TILE", "4096,4")
    assert R.loss_tile(50304) == R.loss_tile(151936) == (4096, 4)
    for bad in ("16384", "3000,8", "a,b"):
        monkeypatch.setenv("HFPRETRAIN_LOSS_TILE", bad)
        with pytest.raises(ValueError, match="HFPRETRAIN_LOSS_TILE"):
            R.loss_tile(50304)
