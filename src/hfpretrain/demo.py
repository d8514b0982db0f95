"""The whole pipeline, small, on CPU: train a tokenizer on the mini corpus, tokenize it, train a small model,
evaluate it, generate from it, plot the curves. ``make demo`` runs this; every step is a public function."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hfpretrain.data import tokenize_corpus
from hfpretrain.data.train_tokenizer import train_tokenizer
from hfpretrain.eval import evaluate_checkpoint, generate
from hfpretrain.eval.callback import recipe_callbacks
from hfpretrain.eval.task_data import available_tasks
from hfpretrain.eval.local_tasks import DEFAULT_TASKS
from hfpretrain.paths import MissingDataError, data_root, recipe_path
from hfpretrain.study.plots import plot_run
from hfpretrain.training import pretrain
from hfpretrain.training.checkpoints import is_run_folder
from hfpretrain.training.config import load_recipe


# The demo's vocabulary, trained on the mini corpus in seconds: with GPT-2's 50,257 tokens the head took 97% of the
# tiny model's FLOPs and the demo most of an hour on 2 cores; at 2,048 the model can afford the width that makes its
# text look like the corpus.
DEMO_VOCAB = 2048
DEMO_SEQ_LEN = 128
DEMO_RECIPE = "demo_cpu"


def run_demo(
    out: str | Path = "out/demo",
    max_steps: int | None = None,
    eval_limit: int = 200,
    overrides: list[str] | None = None,
    dry_run: bool = False,
) -> dict:
    """``max_steps``: None keeps the recipe's (``recipes/demo_cpu.yaml``). ``overrides``: more ``section.key=value``
    recipe overrides for the training step. ``dry_run``: find the data and the recipe (the shipped ``demo_cpu``,
    also from an installed wheel) and return the training plan, without running anything."""
    out, root, t0 = Path(out), data_root(), time.time()
    mix = root / "pretrain" / "mix"
    inputs = [mix / "mini_train.jsonl.zst", mix / "mini_val.jsonl.zst"]
    recipe, run_dir, tokenizer = recipe_path(DEMO_RECIPE), out / "run", out / "tokenizer"
    # a demo run of earlier is replaced, as its tokenized data is; a folder of anyone else's is refused
    again = ["overwrite_output_dir=true"] if is_run_folder(run_dir) else []
    steps = [f"training.max_steps={max_steps}"] if max_steps is not None else []
    train_overrides = [f"training.output_dir={run_dir}", *steps, *again, *(overrides or [])]
    # the recipe with its overrides, checked before any work: a misspelt --override key is one line, not a
    # traceback after minutes of tokenizing
    planned = [f"data.path={out / 'data'}", *train_overrides]
    load_recipe(recipe, planned)
    if dry_run:
        missing = [str(p) for p in inputs if not p.exists()]
        if missing:
            raise MissingDataError(f"the demo's inputs are missing: {', '.join(missing)}")
        plan = pretrain(recipe, planned, dry_run=True)["plan"]
        report = {"data_root": str(root), "inputs": [str(p) for p in inputs], "recipe": str(recipe), "plan": plan}
        print(json.dumps(report, indent=2, default=str))
        return report
    print(f"[1/6] train a {DEMO_VOCAB:,}-token BPE tokenizer on the mini corpus")
    train_tokenizer([str(inputs[0])], DEMO_VOCAB, tokenizer, force=True)
    print(f"[2/6] tokenize the mini corpus ({DEMO_SEQ_LEN}-token blocks)")
    data = tokenize_corpus(
        [str(inputs[0])],
        out / "data",
        tokenizer=str(tokenizer),
        seq_len=DEMO_SEQ_LEN,
        val_inputs=[str(inputs[1])],
        val_docs=500,
        num_proc=2,
    )
    print(f"[3/6] train recipes/{DEMO_RECIPE}.yaml" + (f" for {max_steps} steps" if max_steps is not None else ""))
    # the recipe's evaluation.lm_eval_task (an --override) is scored by eval's callback, as in `hfpretrain train`
    summary = pretrain(recipe, [f"data.path={data}", *train_overrides], callbacks=recipe_callbacks)
    checkpoint = run_dir / "final"
    tasks = available_tasks(DEFAULT_TASKS, root)
    missing = [t for t in DEFAULT_TASKS if t not in tasks]
    print(
        f"[4/6] evaluate with lm-eval ({', '.join(tasks)}; at most {eval_limit} questions each"
        + (f"; {', '.join(missing)}: not in {root}" if missing else "")
        + ")"
    )
    results = evaluate_checkpoint(
        checkpoint, tasks=tasks, limit=eval_limit, batch_size=32, out_dir=out / "eval", data_root=root
    )
    print("[5/6] generate")
    samples = generate(
        checkpoint, ["The history of", "def main():"], max_new_tokens=40, temperature=0.6, top_p=0.95, seed=0
    )
    for s in samples:
        print(f"  prompt: {s['prompt']!r}\n  completion: {s['completion']!r}")
    print("[6/6] plot")
    plot = plot_run(run_dir / "log.jsonl", out / "loss.png", title="the demo model on the mini corpus")
    report = {
        "validation_loss": summary["final_eval"].get("eval_loss"),
        "lm_eval": {
            task: {k: v for k, v in r.items() if k.startswith("acc")} for task, r in results["results"].items()
        },
        "samples": {s["prompt"]: s["completion"] for s in samples},
        "data_root": str(root),
        "log": str(run_dir / "log.jsonl"),
        "plot": str(plot),
        "checkpoint": str(checkpoint),
        "eval_summary": str(out / "eval" / "summary.md"),
        "minutes": round((time.time() - t0) / 60, 1),
    }
    print(json.dumps(report, indent=2))
    return report
