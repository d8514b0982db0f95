"""Score a checkpoint 0-shot on local copies of lm-eval tasks (ARC-Easy, ARC-Challenge, OpenBookQA by default).

    python scripts/evaluate.py CKPT [--tasks arc_easy,arc_challenge,openbookqa|all] [--limit N]
        [--out DIR] [--scoring lm_eval|avg_logprob|both] [--batch-size 8] [--dtype auto]
        [--device cuda] [--data-root DIR]

Thin wrapper around hfpretrain.eval.evaluate_checkpoint (lm_eval.simple_evaluate + the project's
task directory). Writes DIR/results.json (lm-eval's output + run info) and DIR/summary.md. A task named in
--tasks whose file the data root lacks runs as lm-eval's built-in task, downloading its Hub dataset, unless
HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set (then one error line names the file and the dataset).
"""

from __future__ import annotations

import argparse
import os
import sys

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("checkpoint", help="save_pretrained directory (model + tokenizer)")
    p.add_argument(
        "--tasks",
        default=None,
        help="comma-separated, of arc_easy, arc_challenge, openbookqa, hellaswag, piqa, winogrande, "
        "lambada_openai (default: those of the first three the data root has); all: those of the "
        "seven the data root has",
    )
    p.add_argument("--limit", type=float, default=None, help="first N docs per task (or a fraction < 1)")
    p.add_argument("--out", default=None, help="output dir (default: CKPT/eval)")
    p.add_argument("--scoring", choices=("lm_eval", "avg_logprob", "both"), default="both")
    p.add_argument("--batch-size", default="8")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default=None)
    p.add_argument("--data-root", default=None, help="default: $DATA_ROOT, else the embedded sample data")
    a = p.parse_args(argv)

    from hfpretrain.eval.extras import MissingExtraError, require_lm_eval

    try:
        require_lm_eval("hfpretrain eval")
    except MissingExtraError as err:
        return error(err)
    from hfpretrain.eval.task_data import MissingEvalDataError
    from hfpretrain.eval.harness import CheckpointNotFoundError, evaluate_checkpoint, summary_markdown

    if a.limit is not None and not a.limit > 0:
        return error(f"--limit must be > 0 (documents per task, or a fraction < 1), got {a.limit:g}")
    if (
        not (a.batch_size.isdigit() and int(a.batch_size) >= 1)
        and a.batch_size != "auto"
        and not (a.batch_size.startswith("auto:") and a.batch_size[5:].isdigit())
    ):
        return error(f"--batch-size must be an integer >= 1, auto or auto:N, got {a.batch_size!r}")
    limit = None if a.limit is None else (int(a.limit) if a.limit >= 1 else a.limit)
    batch_size = int(a.batch_size) if a.batch_size.isdigit() else a.batch_size
    out = a.out or os.path.join(a.checkpoint, "eval")
    try:
        results = evaluate_checkpoint(
            a.checkpoint,
            tasks=None if a.tasks is None else [t for t in a.tasks.split(",") if t],
            limit=limit,
            batch_size=batch_size,
            dtype=a.dtype,
            device=a.device,
            out_dir=out,
            data_root=a.data_root,
            scoring=a.scoring,
        )
    except (CheckpointNotFoundError, MissingEvalDataError, ValueError) as err:
        return error(err)
    except OSError as err:  # a Hub task's download that failed after the check (network, dataset gone)
        return error(err, 1)
    print(summary_markdown(results))
    card = results["hfpretrain"].get("model_card")
    print(
        f"wrote {os.path.join(out, 'results.json')} and {os.path.join(out, 'summary.md')}"
        + (f"; the scores are in the model card {card}" if card else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
