"""Pretrain a model from a recipe.

hfpretrain train recipes/X.yaml [section.key=value ...]      # one process: a CPU or one GPU
hfpretrain train recipes/X.yaml --dry-run                    # the plan, no training
accelerate launch [--config_file accelerate_configs/X.yaml] scripts/pretrain.py recipes/X.yaml [...]   # several GPUs
"""

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from hfpretrain.cli import RecipeArgumentParser, error


def main() -> int:
    # --help: also every recipe key, with its type and default; --learning_rate=...: the override to write instead
    parser = RecipeArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="recipe YAML (recipes/*.yaml)")
    parser.add_argument("overrides", nargs="*", help="section.key=value, e.g. training.max_steps=100")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and plan, do not train")
    parser.add_argument("--world-size", type=int, help="--dry-run: plan for this many GPUs (default: this launch)")
    parser.add_argument(
        "--zero-stage", type=int, help="--dry-run: plan with this ZeRO stage (default: from the launch)"
    )
    args = parser.parse_intermixed_args()
    # --dry-run's stdout is one JSON document; libraries print on import (transformers: "[INFO] Running in WANDB
    # offline mode"), so until the JSON is written, stdout goes to stderr
    json_out = sys.stdout
    if args.dry_run:
        sys.stdout = sys.stderr
    from hfpretrain.paths import recipe_path

    try:  # before torch and transformers load (seconds): a mistyped recipe name is said at once
        # outside the repository (an installed wheel) recipes/X.yaml is the shipped recipe X, as in the demo
        recipe = recipe_path(args.recipe)
    except FileNotFoundError as err:
        return error(err, once_per_node=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    # imported after parsing so that --help and usage errors need no torch (seconds)
    from hfpretrain.training import RecipeError, load_recipe

    try:  # the recipe's keys and values, before the Trainer and the model code load (seconds more)
        load_recipe(recipe, args.overrides)
    except (RecipeError, FileNotFoundError, ValueError) as err:
        return error(err, once_per_node=True)
    from hfpretrain.eval.callback import recipe_callbacks
    from hfpretrain.training import pretrain, shutdown_distributed
    from hfpretrain.training.barrier import LateRankError
    from hfpretrain.training.checkpoints import NoCompleteCheckpointError
    from hfpretrain.training.trainer import NonFiniteLossError

    try:
        if recipe != Path(args.recipe).expanduser():
            logging.getLogger("hfpretrain").info(
                "%s is not a file here: training the shipped recipe %s", args.recipe, recipe
            )
        result = pretrain(
            recipe,
            args.overrides,
            dry_run=args.dry_run,
            world_size=args.world_size,
            zero_stage=args.zero_stage,
            callbacks=recipe_callbacks,
        )
    except (RecipeError, NoCompleteCheckpointError) as err:  # checks before any work: the same on every rank
        return error(err, once_per_node=True)
    except (FileNotFoundError, ValueError) as err:  # a missing input, or a file or value gone wrong on one rank only
        return error(err)
    except (NonFiniteLossError, OSError) as err:  # the run failed: a NaN stop, disk full (its checkpoints stay)
        return error(err, 1)
    except LateRankError as err:  # a rank did not check in: no teardown, which would wait on it
        error(err, 1)
        sys.stderr.flush()
        os._exit(1)
    except KeyboardInterrupt:  # a second Ctrl-C during training, or one before it started: at once, no traceback
        print(
            "stopped at once by Ctrl-C: what the last checkpoint holds is kept, the steps after it are not",
            file=sys.stderr,
        )
        return 130
    finally:
        shutdown_distributed()
    if args.dry_run:
        from hfpretrain.training.plan import plan_summary

        print(plan_summary(result["plan"]), file=sys.stderr)  # stdout stays the JSON document alone
        data = result["plan"].get("data")
        if data:  # a mixture: the phases, as a table (stderr; stdout stays JSON)
            from hfpretrain.data.mixture import phase_lines
            from hfpretrain.training.plan import MAX_PASSES_WITHOUT_WARNING

            print(
                "\n".join(phase_lines(data, MAX_PASSES_WITHOUT_WARNING, result["plan"].get("lr_schedule"))),
                file=sys.stderr,
            )
        print(json.dumps(result, indent=2, default=str), file=json_out)
        return 0
    # stopped by a signal (its checkpoint saved): the shell's status for that signal, so a script sees it unfinished
    return {"Ctrl-C": 130, "SIGTERM": 143}.get(result.get("stopped"), 0)


if __name__ == "__main__":
    sys.exit(main())
