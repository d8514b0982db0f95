"""Training callbacks that can be checked without a Trainer run."""

import pytest


def test_line_progress_prints_one_readable_line_per_log(capsys):
    """Off a terminal: `step s/N | loss | val loss | lr | tok/s | MFU | eta`, no dicts, no carriage returns."""
    from types import SimpleNamespace

    from hfpretrain.training.callbacks import LineProgressCallback

    capsys.readouterr()  # what imports printed
    cb = LineProgressCallback()
    state = SimpleNamespace(is_world_process_zero=True, global_step=0, max_steps=100)
    cb.on_train_begin(None, state, None)
    state.global_step = 50
    cb.on_log(None, state, None, logs={"loss": 3.21, "learning_rate": 1e-3, "tokens_per_s": 512000.0, "mfu": 0.41})
    cb.on_log(None, state, None, logs={"eval_loss": 3.5, "eval_bpb": 1.25})
    cb.on_log(None, state, None, logs={"epoch": 0.5})  # nothing to show: no line
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(out) == 2 and "\r" not in "".join(out)
    assert out[0].startswith("step 50/100 | loss 3.21 | lr 0.001 | 512,000 tok/s | MFU 41.0% | eta ")
    assert out[1] == "step 50/100 | val loss 3.5 | val bpb 1.25"


class _Records:
    """Stands in for JsonlLogCallback: keeps what is written."""

    def __init__(self):
        self.events = []

    def write(self, event, **data):
        self.events.append((event, data))


def test_grad_stats_sample_before_the_transform():
    """Per-layer norms and the log10|g| histogram mean what they meant when every whole gradient was copied to
    fp32 and transformed before every 97th element was kept; a window's norms are read in one copy."""
    from types import SimpleNamespace

    import torch

    from hfpretrain.training.callbacks import GradStatsCallback

    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"layers": torch.nn.ModuleList([torch.nn.Linear(300, 70) for _ in range(2)]),
                                 "head": torch.nn.Linear(70, 5)}).to(torch.bfloat16)
    for p in model.parameters():
        p.grad = (torch.randn_like(p) * 10 ** torch.randint(-8, 1, p.shape)).to(p.dtype)
    records = _Records()
    cb = GradStatsCallback(records, interval=5)
    cb.on_pre_optimizer_step(None, SimpleNamespace(global_step=4), None, model=model)
    (event, data), = records.events
    assert event == "grad_stats" and data["step"] == 5
    expected = {}
    for name, p in model.named_parameters():
        key = "layer_" + name.split(".")[1] if name.startswith("layers.") else name.rsplit(".", 1)[0]
        expected[key] = expected.get(key, 0.0) + p.grad.float().pow(2).sum().item()
    assert data["per_layer_norm"] == pytest.approx({k: v ** 0.5 for k, v in expected.items()}, rel=1e-5)
    old = torch.cat([p.grad.float().abs().clamp_min(1e-30).log10().flatten()[::97] for p in model.parameters()])
    assert data["log10_abs_grad_hist"]["counts"] == torch.histc(old, bins=40, min=-12, max=2).tolist()

    cb.record(6, torch.tensor(2.5))
    cb.record(7, torch.tensor(4.0, dtype=torch.bfloat16))
    logs = {"loss": 1.0}
    cb.on_log(None, None, None, logs=logs)
    assert logs["grad_norm_max"] == 4.0 and records.events[-1] == ("grad_norm", {"first_step": 6, "values": [2.5, 4.0]})
