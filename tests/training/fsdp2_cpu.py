"""``scripts/pretrain.py`` under accelerate's FSDP2 on CPU processes, as on GPUs: accelerate runs an FSDP launch on
CPUs as plain data parallelism (MULTI_CPU, its FSDP plugin ignored), so the sharding itself would go untested here.
This keeps the launch's FSDP2 plugin in accelerate's state (``fully_shard`` over gloo works on CPU tensors); past that
the Trainer's path is the GPU's: the model sharded by ``accelerate.prepare``, DTensor gradients, the sharded
checkpoints, the gathered ``final/``. What ``test_distributed.py``'s FSDP2 tests compare with one process.

    accelerate launch --config_file accelerate_configs/cpu_2proc_fsdp2.yaml tests/training/fsdp2_cpu.py RUNS.json
"""

import sys

import accelerate.state as state
from accelerate.utils import DistributedType

_init = state.AcceleratorState.__init__


def _fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs):
    _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        if self._mixed_precision != "no":  # as accelerate's GPU branch does
            fsdp_plugin.set_mixed_precision(self._mixed_precision)
        self.fsdp_plugin = fsdp_plugin
        # every later AcceleratorState() copies PartialState's fields over its own: there too
        state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP


state.AcceleratorState.__init__ = _fsdp_on_cpu

if __name__ == "__main__":
    import pretrain_runs  # beside this script: on sys.path as the script's folder

    sys.exit(pretrain_runs.main())
