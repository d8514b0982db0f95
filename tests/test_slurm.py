"""scripts/slurm_pretrain.sbatch makes one `accelerate launch` per node: the launch lines that two launchers on one
4-GPU host ran as two nodes (docs/benchmarks.md § Several GPUs, results/gpu_4gpu), with the node count, rank and
first host Slurm gives. Slurm itself is not here: `srun` and `scontrol` are small stand-ins that run the script's
per-node command for each node and print what `accelerate` was given."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        "scontrol": 'printf "gpu-node-a\\ngpu-node-b\\n"',  # scontrol show hostnames $SLURM_JOB_NODELIST
        # srun OPTIONS bash -c CMD: one task per node, SLURM_NODEID set
        "srun": 'shift; for n in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$n "$@"; done',
        "accelerate": 'printf "%q " accelerate "$@"; echo',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_the_slurm_script_launches_one_accelerate_per_node(tmp_path):
    env = {
        **os.environ,
        "PATH": f"{_bin(tmp_path)}:{os.environ['PATH']}",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "gpu-node-[a-b]",
    }
    override = "model.overrides={num_hidden_layers: 2}"  # a value with spaces reaches the recipe whole
    proc = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "slurm_pretrain.sbatch"),
            "recipes/qwen3_1p8b.yaml",
            "training.max_steps=1000",
            override,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [shlex.split(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 2
    for rank, argv in enumerate(lines):
        assert argv == [
            "accelerate",
            "launch",
            "--config_file",
            "accelerate_configs/multinode_zero1.yaml",
            "--num_machines",
            "2",
            "--num_processes",
            "16",
            "--machine_rank",
            str(rank),
            "--main_process_ip",
            "gpu-node-a",
            "--main_process_port",
            "29500",
            "scripts/pretrain.py",
            "recipes/qwen3_1p8b.yaml",
            "training.max_steps=1000",
            override,
        ]
    # the config it names is the one the one-host two-node runs used
    assert (REPO / "accelerate_configs" / "multinode_zero1.yaml").is_file()
