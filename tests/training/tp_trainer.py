"""``scripts/pretrain.py`` with the two checks that keep tensor parallelism off a CPU launch relaxed: accelerate's
(a ParallelismConfig on MULTI_CPU) and ours (``training.layout.check_accelerator``, which says the same before any
work). Past them the Trainer's path under tp (transformers' tp_plan, DTensor over gloo, our loss, evaluation and
save) runs on CPU processes as on GPUs: what ``test_parallel.py`` compares with one process.

    accelerate launch --config_file accelerate_configs/cpu_2proc_ddp.yaml tests/training/tp_trainer.py RECIPE ..."""

import sys

import accelerate.parallelism_config

import hfpretrain.training.layout as layout
from hfpretrain.cli import interruptible
from hfpretrain.cli.pretrain import main

accelerate.parallelism_config.ParallelismConfig._validate_accelerator = lambda self, accelerator: None
layout.check_accelerator = lambda tp, cp, machine: None

if __name__ == "__main__":
    sys.exit(interruptible("train", main))
