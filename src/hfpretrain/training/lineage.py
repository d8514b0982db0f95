"""Lineage: which data a run trained on, and with which code, recorded where its outputs are.

``lineage(...)`` describes the tokenized outputs (absolute path, manifest fingerprint, sha256 of
manifest.json, tokenizer hash), the phases (steps, weights, samples and tokens per source) and the code
(``code_record``: the package's version, a SHA-256 of its source, and its git commit where it has one). It is
written to ``log.jsonl``'s config event, to every checkpoint's ``data.json`` (beside what a resume
compares), to ``lineage.json`` in the run folder and in ``final/``, and the code to ``summary.json``.

With ``report_to`` including wandb (``logging.wandb_artifacts``, default ``reference``), each tokenized
output is a ``dataset`` artifact that the run uses: its manifest.json uploaded (a new manifest, a new
version) and its folder added as a reference without checksums (nothing of the GBs is read or uploaded);
``final/`` (and with ``logging.wandb_checkpoint_artifacts`` each checkpoint) is a ``model`` artifact the
run logs, so W&B's lineage graph reads data -> run -> model. Offline (no API key: ``WANDB_MODE=offline``)
wandb refuses ``use_artifact``; the dataset is then logged the way ``use_artifact`` logs a new artifact
(``use_after_commit``), so ``wandb sync`` records it as the run's input.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

from transformers import TrainerCallback

from hfpretrain.data.mixture import MixtureSchedule, source_record

from .callbacks import WANDB

logger = logging.getLogger("hfpretrain")

FORMAT = "hfpretrain.lineage/1"
LINEAGE_FILE = "lineage.json"


def code_record(root: str | Path | None = None) -> dict:
    """The code a run trains with: the package's version; a SHA-256 over its Python sources (name and bytes, in
    order), which names the code with or without git (a GPU machine's copy of the tree has no .git); and, where
    ``root`` (default: the installed package) is tracked by git, the commit and whether its files differ from it.
    A study's run then says which commit trained it, and whether a rule's change came before it."""
    package = Path(__file__).resolve().parents[1]  # this module's package, read without importing it upwards
    root = Path(root or package)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    commit = dirty = None

    def git(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=20)

    try:  # a package inside someone else's checkout (a venv in a repository) is not that repository's code
        if git("ls-files", "--error-unmatch", "--", ".").returncode == 0:
            head = git("rev-parse", "HEAD")
            if head.returncode == 0:
                commit = head.stdout.strip()
                dirty = bool(git("status", "--porcelain", "--", ".").stdout.strip())
    except (OSError, subprocess.SubprocessError):  # no git on the machine, or it hung
        pass
    return {
        "package_version": getattr(sys.modules.get(package.name), "__version__", None),
        "source_sha256": digest.hexdigest(),
        "git_commit": commit,
        "git_dirty": dirty,
    }


def lineage(
    data_path: str,
    manifest: dict,
    tokenizer: str,
    tokenizer_sha256: str | None,
    seq_len: int,
    samples_per_step: int,
    max_steps: int,
    seed: int,
    schedule: MixtureSchedule | None = None,
) -> dict:
    """The run's data: sources and phases (one source and one phase for a plain ``data.path`` run)."""
    if schedule is None:
        name = "data"
        sources = {name: source_record(name, data_path, manifest)}
        samples = max_steps * samples_per_step
        phases = [
            {
                "index": 1,
                "name": "phase1",
                "start_step": 0,
                "end_step": max_steps,
                "mixture": {name: 1.0},
                "samples": {name: samples},
                "tokens": {name: samples * seq_len},
            }
        ]
    else:
        sources = {n: source_record(n, s.path, s.manifest) for n, s in schedule.sources.items()}
        phases = []
        for k, p in enumerate(schedule.phases):
            samples = schedule.phase_samples(k)
            phases.append(
                {
                    "index": p.index,
                    "name": p.name,
                    "start_step": p.start_step,
                    "end_step": p.end_step,
                    "mixture": {n: float(w) for n, w in p.weights.items()},
                    "samples": samples,
                    "tokens": {n: c * seq_len for n, c in samples.items()},
                }
            )
    return {
        "format": FORMAT,
        "seq_len": seq_len,
        "tokenizer": {"path": tokenizer, "sha256": tokenizer_sha256},
        "samples_per_step": samples_per_step,
        "max_steps": max_steps,
        "data_seed": seed,
        "validation": source_record("validation", data_path, manifest),
        "sources": sources,
        "phases": phases,
        "code": code_record(),
    }


def write_lineage(folder: str | Path, record: dict) -> Path:
    path = Path(folder) / LINEAGE_FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def _artifact_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "data"


class WandbLineageCallback(TrainerCallback):
    """Dataset artifacts used by the run (at the start), checkpoints and final/ as model artifacts. Its ``order`` puts
    it after transformers' WandbCallback, which starts the W&B run."""

    order = WANDB + 10

    def __init__(self, record: dict, run_dir: str | Path, mode: str = "reference", checkpoints: bool = False):
        self.record, self.mode, self.checkpoints = record, mode, checkpoints
        self.run_name = Path(run_dir).resolve().name
        self.datasets = []  # the dataset artifacts, in source order

    @staticmethod
    def _run():
        import wandb

        return wandb.run

    def on_train_begin(self, args, state, control, **kwargs):
        run = self._run()
        if run is None or not state.is_world_process_zero or self.datasets:
            return
        import wandb

        records = {}  # one artifact per folder (two sources may share one; validation may be another)
        for name, src in [*self.record["sources"].items(), ("validation", self.record["validation"])]:
            records.setdefault(src["path"], (name, src))
        for name, src in records.values():
            folder = Path(src["path"])
            art = wandb.Artifact(
                _artifact_name(f"data-{folder.name}"),
                type="dataset",
                description=f"tokenized output {folder} (source '{name}' of this run)",
                metadata={k: v for k, v in src.items() if k != "name"},
            )
            if (folder / "manifest.json").is_file():
                art.add_file(str(folder / "manifest.json"), name="manifest.json")
            art.add_reference(folder.as_uri(), name="data", checksum=False)  # paths and sizes, no contents read
            if getattr(run.settings, "_offline", False):
                # wandb refuses use_artifact offline; this is what it does with a new artifact online
                run._log_artifact(art, is_user_created=True, use_after_commit=True)
            else:
                run.use_artifact(art)
            self.datasets.append(art)

    def on_save(self, args, state, control, **kwargs):
        if self.checkpoints and state.is_world_process_zero and self._run() is not None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.log_model(folder, aliases=[f"step-{state.global_step}"], reference=True)

    def log_model(self, folder: str | Path, aliases: list[str], reference: bool | None = None):
        """``folder`` (final/ or a checkpoint) as a model artifact of this run, with the lineage."""
        run = self._run()
        if run is None:
            return None
        import wandb

        folder = Path(folder)
        name = _artifact_name(f"model-{self.run_name}")
        art = wandb.Artifact(name, type="model", metadata={"lineage": self.record, "folder": str(folder.resolve())})
        if reference if reference is not None else self.mode != "upload":
            for small in ("config.json", LINEAGE_FILE):  # a new model, a new version
                if (folder / small).is_file():
                    art.add_file(str(folder / small), name=small)
            art.add_reference(folder.resolve().as_uri(), name="files", checksum=False)
        else:
            art.add_dir(str(folder))
        run.log_artifact(art, aliases=aliases)
        return art
