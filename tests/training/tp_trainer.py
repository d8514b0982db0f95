"""``scripts/pretrain.py`` with the two checks that keep tensor parallelism off a CPU launch relaxed: accelerate's
(a ParallelismConfig on MULTI_CPU) and ours (``training.layout.check_accelerator``, which says the same before any
work). Past them the Trainer's path under tp (transformers' tp_plan, DTensor over gloo, our loss, evaluation and
save) runs on CPU processes as on GPUs: what ``test_parallel.py`` compares with one process.

    accelerate launch --config_file accelerate_configs/cpu_2proc_ddp.yaml tests/training/tp_trainer.py RECIPE ...
    accelerate launch --config_file accelerate_configs/cpu_2proc_ddp.yaml tests/training/tp_trainer.py RUNS.json

Given a RUNS.json (tests/training/pretrain_runs.py), its runs one after another in the processes of the one launch
(a run and its resume: a launch's start costs more than its few steps)."""

import sys

import accelerate.parallelism_config

import hfpretrain.training.layout as layout
from hfpretrain.cli import interruptible
from hfpretrain.cli.pretrain import main

accelerate.parallelism_config.ParallelismConfig._validate_accelerator = lambda self, accelerator: None
layout.check_accelerator = lambda tp, cp, machine: None

if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        import pretrain_runs  # beside this script: on sys.path as the script's folder

        sys.exit(pretrain_runs.main())
    sys.exit(interruptible("train", main))
