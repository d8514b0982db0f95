"""nan_policy=skip's optimizer wrapper (training/nonfinite.py) under what drives it in a run: torch's GradScaler and an
LR scheduler, which both write attributes on the optimizer object they are handed."""

from __future__ import annotations

import pytest
import torch

from hfpretrain.training.nonfinite import NonFinitePolicy, SkipStepOptimizer


def _fp16_step(wrap: bool, grad: list[float]) -> tuple[torch.Tensor, float]:
    """One GradScaler step of a fused AdamW (wrapped or not) on a gradient ``grad``; the parameter after it."""
    param = torch.nn.Parameter(torch.ones(len(grad)))
    inner = torch.optim.AdamW([param], lr=0.1, fused=True)
    optimizer = SkipStepOptimizer(inner, NonFinitePolicy("skip")) if wrap else inner
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)  # re-binds optimizer.step
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    scaler.scale((param * torch.tensor(grad)).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    schedule.step()
    assert not hasattr(inner, "grad_scale") and not hasattr(inner, "found_inf")  # the scaler deleted them again
    return param.detach(), scaler.get_scale()


@pytest.mark.parametrize("grad", [[1.0, 2.0, -3.0], [1.0, float("inf"), 1.0]], ids=["finite", "inf"])
def test_the_fp16_scaler_reaches_the_fused_adamw_inside_the_wrapper(grad):
    # Fused AdamW unscales and skips inside its kernel from grad_scale/found_inf, which GradScaler sets on the
    # object it is given: through the wrapper they must land on the wrapped optimizer (an inf gradient made NaN
    # weights when they did not)
    plain, wrapped = _fp16_step(False, grad), _fp16_step(True, grad)
    assert torch.isfinite(wrapped[0]).all()
    assert torch.equal(plain[0], wrapped[0]) and plain[1] == wrapped[1]


def test_the_wrapper_keeps_its_own_attributes():
    inner = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    optimizer = SkipStepOptimizer(inner, NonFinitePolicy("skip"))
    optimizer.skip_next = True
    optimizer.custom = 1
    assert optimizer.skip_next and not hasattr(inner, "skip_next")
    assert inner.custom == 1 and optimizer.custom == 1
    del optimizer.custom
    assert not hasattr(inner, "custom")
