"""The whole pipeline, small, on CPU: tokenize the mini corpus, train a tiny model, evaluate it,
generate from it, plot the curves. ``make demo`` runs this; every step is a public function."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hfpretrain.data import tokenize_corpus
from hfpretrain.eval import evaluate_checkpoint, generate
from hfpretrain.eval.callback import recipe_callbacks
from hfpretrain.eval.task_data import available_tasks
from hfpretrain.eval.local_tasks import DEFAULT_TASKS
from hfpretrain.paths import MissingDataError, data_root, recipe_path
from hfpretrain.study.plots import plot_run
from hfpretrain.training import pretrain
from hfpretrain.training.checkpoints import is_run_folder
from hfpretrain.training.config import load_recipe


def run_demo(out: str | Path = "out/demo", max_steps: int = 300, eval_limit: int = 200,
             overrides: list[str] | None = None, dry_run: bool = False) -> dict:
    """``overrides``: more ``section.key=value`` recipe overrides for the training step. ``dry_run``: find the
    data, the tokenizer and the recipe (the shipped ``tiny_cpu``, also from an installed wheel) and return the
    training plan, without running anything."""
    out, root, t0 = Path(out), data_root(), time.time()
    mix = root / "pretrain" / "mix"
    inputs = [mix / "mini_train.jsonl.zst", mix / "mini_val.jsonl.zst", root / "tokenizers" / "gpt2"]
    recipe, run_dir = recipe_path("tiny_cpu"), out / "run"
    # a demo run of earlier is replaced, as its tokenized data is; a folder of anyone else's is refused
    again = ["overwrite_output_dir=true"] if is_run_folder(run_dir) else []
    train_overrides = [f"training.output_dir={run_dir}", f"training.max_steps={max_steps}", "training.save_steps=100",
                       "training.eval_steps=100", *again, *(overrides or [])]
    # the recipe with its overrides, checked before any work: a misspelt --override key is one line, not a
    # traceback after minutes of tokenizing
    planned = [f"data.path={out / 'data'}", f"data.tokenizer={inputs[2]}", *train_overrides]
    load_recipe(recipe, planned)
    if dry_run:
        missing = [str(p) for p in inputs if not p.exists()]
        if missing:
            raise MissingDataError(f"the demo's inputs are missing: {', '.join(missing)}")
        plan = pretrain(recipe, planned, dry_run=True)["plan"]
        report = {"data_root": str(root), "inputs": [str(p) for p in inputs], "recipe": str(recipe), "plan": plan}
        print(json.dumps(report, indent=2, default=str))
        return report
    print("[1/5] tokenize the mini corpus (gpt2 tokenizer, 128-token blocks)")
    data = tokenize_corpus([str(inputs[0])], out / "data", tokenizer=str(inputs[2]), seq_len=128,
                           val_inputs=[str(inputs[1])], val_docs=500, num_proc=2)
    print(f"[2/5] train recipes/tiny_cpu.yaml for {max_steps} steps")
    # the recipe's evaluation.lm_eval_task (an --override) is scored by eval's callback, as in `hfpretrain train`
    summary = pretrain(recipe, [f"data.path={data}", *train_overrides], callbacks=recipe_callbacks)
    checkpoint = run_dir / "final"
    tasks = available_tasks(DEFAULT_TASKS, root)
    missing = [t for t in DEFAULT_TASKS if t not in tasks]
    print(f"[3/5] evaluate with lm-eval ({', '.join(tasks)}; first {eval_limit} questions each"
          + (f"; {', '.join(missing)}: not in {root}" if missing else "") + ")")
    results = evaluate_checkpoint(checkpoint, tasks=tasks, limit=eval_limit, batch_size=32, out_dir=out / "eval",
                                  data_root=root)
    print("[4/5] generate")
    samples = generate(checkpoint, ["The history of", "def main():"], max_new_tokens=40, temperature=0.8, top_p=0.95,
                       seed=0)
    for s in samples:
        print(f"  prompt: {s['prompt']!r}\n  completion: {s['completion']!r}")
    print("[5/5] plot")
    plot = plot_run(run_dir / "log.jsonl", out / "loss.png", title="tiny model on the mini corpus")
    report = {
        "validation_loss": summary["final_eval"].get("eval_loss"),
        "lm_eval": {task: {k: v for k, v in r.items() if k.startswith("acc")} for task, r in results["results"].items()},
        "data_root": str(root), "log": str(run_dir / "log.jsonl"), "plot": str(plot), "checkpoint": str(checkpoint),
        "eval_summary": str(out / "eval" / "summary.md"), "minutes": round((time.time() - t0) / 60, 1),
    }
    print(json.dumps(report, indent=2))
    return report
