"""Training callbacks that can be checked without a Trainer run."""

import pytest


def test_line_progress_prints_one_readable_line_per_log(capsys):
    """Off a terminal: `step s/N | loss | val loss | lr | tok/s | MFU | eta`, no dicts, no carriage returns. The eta
    is timed from the first logged step (the steps before it include compilation): none on that line."""
    from types import SimpleNamespace

    from hfpretrain.training.callbacks import LineProgressCallback

    capsys.readouterr()  # what imports printed
    cb = LineProgressCallback()
    state = SimpleNamespace(is_world_process_zero=True, global_step=0, max_steps=100)
    cb.on_train_begin(None, state, None)
    logs = {"loss": 3.21, "learning_rate": 1e-3, "tokens_per_s": 512000.0, "mfu": 0.41}
    state.global_step = 10
    cb.on_log(None, state, None, logs=logs)
    state.global_step = 50
    cb.on_log(None, state, None, logs=logs)
    cb.on_log(None, state, None, logs={"eval_loss": 3.5, "eval_bpb": 1.25})
    cb.on_log(None, state, None, logs={"epoch": 0.5})  # nothing to show: no line
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(out) == 3 and "\r" not in "".join(out)
    assert out[0] == "step 10/100 | loss 3.21 | lr 0.001 | 512,000 tok/s | MFU 41.0%"
    assert out[1].startswith("step 50/100 | loss 3.21 | lr 0.001 | 512,000 tok/s | MFU 41.0% | eta ")
    assert out[2] == "step 50/100 | val loss 3.5 | val bpb 1.25"


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
    model = torch.nn.ModuleDict(
        {"layers": torch.nn.ModuleList([torch.nn.Linear(300, 70) for _ in range(2)]), "head": torch.nn.Linear(70, 5)}
    ).to(torch.bfloat16)
    for p in model.parameters():
        p.grad = (torch.randn_like(p) * 10 ** torch.randint(-8, 1, p.shape)).to(p.dtype)
    records = _Records()
    cb = GradStatsCallback(records, interval=5)
    cb.on_pre_optimizer_step(None, SimpleNamespace(global_step=4), None, model=model)
    ((event, data),) = records.events
    assert event == "grad_stats" and data["step"] == 5
    expected = {}
    for name, p in model.named_parameters():
        key = "layer_" + name.split(".")[1] if name.startswith("layers.") else name.rsplit(".", 1)[0]
        expected[key] = expected.get(key, 0.0) + p.grad.float().pow(2).sum().item()
    assert data["per_layer_norm"] == pytest.approx({k: v**0.5 for k, v in expected.items()}, rel=1e-5)
    old = torch.cat([p.grad.float().abs().clamp_min(1e-30).log10().flatten()[::97] for p in model.parameters()])
    assert data["log10_abs_grad_hist"]["counts"] == torch.histc(old, bins=40, min=-12, max=2).tolist()

    cb.record(6, torch.tensor(2.5))
    cb.record(7, torch.tensor(4.0, dtype=torch.bfloat16))
    logs = {"loss": 1.0}
    cb.on_log(None, None, None, logs=logs)
    assert logs["grad_norm_max"] == 4.0 and records.events[-1] == ("grad_norm", {"first_step": 6, "values": [2.5, 4.0]})


def test_callbacks_run_in_their_declared_order(tmp_path):
    """Handed over in any order, the callbacks run by their ``order``, sorted once: the bookkeeping (a mixture's
    tokens, the experts' load), the telemetry, the JSONL log, SIGTERM and the profiler, the caller's, transformers'
    own (flow control, the report_to integrations), the trainer's resume, the console (in place of transformers'
    bar, which stays where no console is given), the compile check, our W&B additions."""
    from types import SimpleNamespace

    import torch
    from transformers import TrainerCallback, TrainingArguments

    from hfpretrain.models import build_model, load_config
    from hfpretrain.training.callbacks import (
        CompileCheckCallback,
        GradStatsCallback,
        JsonlLogCallback,
        LineProgressCallback,
        MemoryCallback,
        MixtureLogCallback,
        PreemptionCallback,
        ProfilerCallback,
        ThroughputCallback,
        WandbConfigCallback,
    )
    from hfpretrain.training.lineage import WandbLineageCallback
    from hfpretrain.training.moe import ExpertBalanceCallback
    from hfpretrain.training.trainer import PretrainTrainer

    class Callers(TrainerCallback):  # e.g. eval/'s lm-eval scoring: no order of its own
        pass

    jsonl = JsonlLogCallback(tmp_path / "log.jsonl", {})
    ours = [
        WandbLineageCallback({}, tmp_path),
        WandbConfigCallback({}),
        CompileCheckCallback(0),
        LineProgressCallback(),
        Callers(),
        ProfilerCallback(tmp_path),
        PreemptionCallback(),
        jsonl,
        GradStatsCallback(jsonl),
        MemoryCallback(),
        ThroughputCallback(1, 1.0, None, 1),
        ExpertBalanceCallback(SimpleNamespace(counts=torch.zeros(2, 4))),
        MixtureLogCallback(None, 1),
    ]
    model = build_model(load_config("tiny", {}, vocab_size=512), attn_implementation="sdpa")
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = PretrainTrainer(model=model, args=args, train_sampler=None, samples_per_step=1, callbacks=ours)
    assert [type(cb).__name__ for cb in trainer.callback_handler.callbacks] == [
        "MixtureLogCallback",
        "ExpertBalanceCallback",
        "ThroughputCallback",
        "MemoryCallback",
        "GradStatsCallback",
        "JsonlLogCallback",
        "PreemptionCallback",
        "ProfilerCallback",
        "Callers",
        "DefaultFlowCallback",
        "_Resume",
        "LineProgressCallback",
        "CompileCheckCallback",
        "WandbConfigCallback",
        "WandbLineageCallback",
    ]
    trainer.add_callback(Callers())  # once the trainer exists: not sorted, after every other
    assert type(trainer.callback_handler.callbacks[-1]) is Callers
    plain = PretrainTrainer(model=model, args=args, train_sampler=None, samples_per_step=1)
    assert [type(cb).__name__ for cb in plain.callback_handler.callbacks] == [
        "DefaultFlowCallback",
        "ProgressCallback",
        "_Resume",
    ]


def test_each_rank_profiles_into_its_own_files(tmp_path):
    """Two ranks profiling into one folder (every rank profiles its own work: under tensor or context parallelism
    they differ) write two sets of files, not one overwritten by the other; one process keeps the plain names."""
    from types import SimpleNamespace

    import torch

    from hfpretrain.training.callbacks import ProfilerCallback

    for rank in (0, 1, None):
        cb, state = ProfilerCallback(tmp_path, [0, 1], rank=rank), SimpleNamespace(global_step=0)
        cb.on_step_begin(None, state, None)
        torch.ones(64, 64) @ torch.ones(64, 64)
        state.global_step = 1
        cb.on_step_end(None, state, None)
    names = sorted(p.name for p in tmp_path.iterdir())
    for suffix in ("-rank0", "-rank1", ""):
        assert f"trace-steps0-1{suffix}.json" in names and f"kernels-steps0-1{suffix}.txt" in names, names
    assert "aten::mm" in (tmp_path / "kernels-steps0-1-rank1.txt").read_text()
