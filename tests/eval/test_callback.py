"""LmEvalCallback scores the live model during a real Trainer run and logs next to the loss."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_importable_without_training_package():
    code = (
        "import sys; from hfpretrain.eval.callback import LmEvalCallback; "
        "assert not [m for m in sys.modules if m.startswith('hfpretrain.training')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_callback_logs_during_training(tiny_checkpoint, data_root, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from hfpretrain.eval.callback import LmEvalCallback

    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint))
    ids = tok("Plants need sunlight and water to make food." * 2)["input_ids"]
    rows = [{"input_ids": ids, "labels": ids} for _ in range(8)]

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            return {k: torch.tensor(v) for k, v in rows[i].items()}

    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=4,
        per_device_train_batch_size=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-3,
        disable_tqdm=True,
    )
    cb = LmEvalCallback(tok, every_n_steps=2, task="arc_easy", limit=4, data_root=data_root)
    trainer = Trainer(model=model, args=args, train_dataset=DS(), callbacks=[cb])
    cb.attach(trainer)
    trainer.train()
    assert [h["step"] for h in cb.history] == [2, 4]
    logged = [e for e in trainer.state.log_history if "eval/arc_easy_acc" in e]
    assert [e["step"] for e in logged] == [2, 4]
    for e in logged:
        assert 0.0 <= e["eval/arc_easy_acc"] <= 1.0 and "eval/arc_easy_acc_norm" in e
    assert any("loss" in e for e in trainer.state.log_history)
    assert model.training  # restored after scoring


def test_callback_without_trainer_appends_to_state(tiny_checkpoint, data_root):
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerControl, TrainerState

    from hfpretrain.eval.callback import LmEvalCallback

    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint))
    cb = LmEvalCallback(tok, every_n_steps=5, limit=3, data_root=data_root)
    state, control = TrainerState(), TrainerControl()
    state.global_step = 5
    cb.on_step_end(None, state, control, model=model)
    metrics = {}
    cb.on_evaluate(None, state, control, metrics=metrics, model=model)  # same step: not re-scored
    assert len(cb.history) == 1 and state.log_history[-1]["step"] == 5
    assert metrics["eval/arc_easy_acc"] == state.log_history[-1]["eval/arc_easy_acc"]
    with pytest.raises(ValueError):
        LmEvalCallback(tok, every_n_steps=0)


@pytest.mark.full_data("HellaSwag and PIQA")
@pytest.mark.parametrize("task", ["hellaswag", "piqa"])
def test_callback_scores_the_other_multiple_choice_tasks(task, tiny_checkpoint, data_root):
    """The in-loop tasks beyond ARC/OpenBookQA (evaluation.lm_eval_task): their validation split, lm-eval's prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hfpretrain.eval.callback import LmEvalCallback

    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint))
    metrics = LmEvalCallback(tok, every_n_steps=5, task=task, limit=3, data_root=data_root).score(model)
    assert 0.0 <= metrics[f"eval/{task}_acc"] <= 1.0 and f"eval/{task}_acc_norm" in metrics


def test_callback_refuses_tasks_it_cannot_score(tiny_checkpoint):
    from transformers import AutoTokenizer

    from hfpretrain.eval.callback import LmEvalCallback

    tok = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    for task in ("winogrande", "lambada_openai"):
        with pytest.raises(ValueError, match=f"{task} cannot be scored during training"):
            LmEvalCallback(tok, every_n_steps=5, task=task)


def test_callback_checks_its_file_at_the_start(tmp_path, monkeypatch):
    """Offline, a missing validation file stops the run when the callback is made, not at the first scoring step
    hours in; the line names the file and the Hub dataset lm-eval would read online."""
    from hfpretrain.eval.callback import LmEvalCallback
    from hfpretrain.eval.task_data import MissingEvalDataError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MissingEvalDataError, match=r"piqa_validation.jsonl; .*Hub dataset baber/piqa, but HF_HUB_OFF"):
        LmEvalCallback(None, every_n_steps=5, task="piqa", data_root=tmp_path)


def test_recipe_callbacks_check_the_task_when_the_recipe_loads():
    """training imports nothing from eval: the caller hands pretrain() eval's recipe_callbacks, which checks
    evaluation.lm_eval_task (one line naming the key) before any work; without a task, no callback."""
    from hfpretrain.eval.callback import LmEvalCallback, recipe_callbacks
    from hfpretrain.training import load_recipe

    assert recipe_callbacks(load_recipe(None, ["data.path=x"])) == []
    with pytest.raises(ValueError, match="evaluation.lm_eval_task=winogrande: winogrande cannot be scored"):
        recipe_callbacks(load_recipe(None, ["data.path=x", "evaluation.lm_eval_task=winogrande"]))
    (cb,) = recipe_callbacks(
        load_recipe(None, ["data.path=x", "evaluation.lm_eval_task=arc_easy", "evaluation.lm_eval_limit=3"])
    )
    assert isinstance(cb, LmEvalCallback) and cb.limit == 3 and cb.tokenizer is None and cb.every_n_steps is None
