"""Where a run trains: the launch (processes, the sharding engine accelerate was told to use) and the GPU's name,
memory and count, read once from this process (``Machine.detect``): resolve() reads the launch and the memory from
here, not from the environment. Not everything yet: the fast path still asks torch and the installed packages
whether fp8, flash-attn and liger can run (models/fp8.py, models/zoo.py, loss.py), and context.check_fits names the
GPU with hardware.device_name(). A dry run may describe another launch than its own (``--world-size 8 --zero-stage
1`` from a CPU login node)."""

from __future__ import annotations

import os
from dataclasses import dataclass

# ZeRO stage of each launch engine, for the memory estimate: FSDP's full sharding is stage 3; DeepSpeed is stage 1
# (the stage of every ds_configs/ file)
ENGINE_STAGE = {"ddp": 0, "deepspeed": 1, "fsdp": 3}


def launched_processes() -> int:
    """The processes of this launch: accelerate and torchrun set WORLD_SIZE; 1 without a launcher."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launch_engine() -> str:
    """The engine ``accelerate launch`` set up for this process (its config file's distributed_type)."""
    if os.environ.get("ACCELERATE_USE_FSDP") == "true":
        return "fsdp"
    return "deepspeed" if os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true" else "ddp"


@dataclass(frozen=True)
class Machine:
    """The machine and launch a run is resolved for."""

    world_size: int  # processes that train together (the launch's, or the one a dry run plans)
    engine: str  # ddp | deepspeed | fsdp: what the launch set up (the recipe's training.fsdp/deepspeed add to it)
    zero_stage: int | None  # a dry run's planned ZeRO stage; None: the launch's and the recipe's
    device: str  # the GPU's name (torch.cuda.get_device_name()), or "cpu"
    gpu_memory: int | None  # bytes of the first visible GPU; None: no GPU. Every rank assumes GPUs of one model
    gpu_count: int  # GPUs this process sees
    launched: int  # processes of this launch (WORLD_SIZE), whatever a dry run plans
    planning: bool = False  # a dry run: it may plan a GPU run from a CPU login node

    @property
    def cuda(self) -> bool:
        return self.gpu_memory is not None

    @classmethod
    def detect(cls, planning: bool = False, world_size: int | None = None, zero_stage: int | None = None) -> "Machine":
        """This process's machine; a dry run (``planning``) may plan ``world_size`` processes at ``zero_stage``."""
        import torch

        cuda = torch.cuda.is_available()
        launched = launched_processes()
        return cls(
            world_size=world_size or launched,
            engine=launch_engine(),
            zero_stage=zero_stage,
            device=torch.cuda.get_device_name() if cuda else "cpu",
            gpu_memory=torch.cuda.get_device_properties(0).total_memory if cuda else None,
            gpu_count=torch.cuda.device_count() if cuda else 0,
            launched=launched,
            planning=planning,
        )

    def sharding(self, training: dict) -> int:
        """The ZeRO stage the run amounts to: the planned one, else the launch's, or the recipe's ``training.fsdp``
        (stage 3) / ``training.deepspeed`` (stage 1)."""
        if self.zero_stage is not None:
            return self.zero_stage
        if training.get("fsdp") or self.engine == "fsdp":
            return 3
        return 1 if training.get("deepspeed") or self.engine == "deepspeed" else 0
