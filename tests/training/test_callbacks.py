"""Training callbacks that can be checked without a Trainer run."""


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
