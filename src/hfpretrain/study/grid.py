"""A scaling / ablation study: a spec, its expansion into runs, running them, the results table.

A study is the product  arms × sizes × budgets.  Each cell is one ordinary ``pretrain`` run of
the base recipe with three groups of overrides appended (common, size, arm, then the step count
derived from the budget). Output folders are deterministic, ``OUT/runs/<arm>/<size>__<budget>``,
so a study is resumable: a run whose ``summary.json`` exists is read back, never re-trained.

Budgets are one of (per spec):
  tokens: [...]   training tokens per run        -> max_steps = round(tokens / tokens_per_step)
  steps:  [...]   optimizer steps per run
  flops:  [...]   training FLOPs per run (a compute grid: each size gets its own token count)
                                                 -> max_steps = round(flops / (flops_per_token · tokens_per_step))
"""

from __future__ import annotations

import csv
import gc
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import yaml

logger = logging.getLogger(__name__)

BUDGET_KINDS = ("tokens", "steps", "flops")


@dataclass(frozen=True)
class Size:
    """One model size: a zoo config and/or config-field overrides and/or raw recipe overrides."""

    name: str
    config: str | None = None  # zoo name: tiny, scale_7m, ...
    fields: dict = field(default_factory=dict)  # config fields -> model.overrides.<key>=<value>
    overrides: tuple[str, ...] = ()  # raw recipe overrides, e.g. "training.learning_rate=1e-3"

    def recipe_overrides(self) -> list[str]:
        out = [f"model.config={self.config}"] if self.config else []
        out += [f"model.overrides.{k}={_yaml_value(v)}" for k, v in self.fields.items()]
        return out + list(self.overrides)


@dataclass
class StudySpec:
    name: str
    recipe: str  # base recipe YAML (relative paths: to the current directory)
    sizes: list[Size]
    budget_kind: str  # tokens | steps | flops
    budgets: list[float]
    arms: dict[str, list[str]] = field(default_factory=lambda: {"baseline": []})
    overrides: list[str] = field(default_factory=list)  # common to every run (data.path, eval, ...)
    out: str = "studies/study"
    description: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sizes"] = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(s).items() if v}
                      for s in self.sizes]
        d[d.pop("budget_kind")] = d.pop("budgets")
        return d


@dataclass(frozen=True)
class Run:
    name: str  # <arm>/<size>__<budget>
    arm: str
    size: str
    budget_kind: str
    budget: float
    out_dir: Path
    overrides: tuple[str, ...]  # everything but max_steps, which needs the plan (seq_len, batch)

    @property
    def done(self) -> bool:
        """Trained to its last step. A preempted run writes a summary.json too, at the step it stopped."""
        path = self.out_dir / "summary.json"
        if not path.is_file():
            return False
        summary = json.loads(path.read_text())
        return summary["global_step"] >= summary["plan"]["max_steps"]


def _yaml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _size(entry) -> Size:
    if isinstance(entry, str):
        return Size(name=entry, config=entry)
    entry = dict(entry)
    name = entry.pop("name", None) or entry.get("config")
    if not name:
        raise ValueError(f"size {entry} needs a name (or a config)")
    unknown = set(entry) - {"config", "fields", "overrides"}
    if unknown:
        raise ValueError(f"size {name}: unknown keys {sorted(unknown)} (config, fields, overrides)")
    return Size(name=str(name), config=entry.get("config"), fields=dict(entry.get("fields") or {}),
                overrides=tuple(entry.get("overrides") or ()))


def load_spec(path_or_dict: str | Path | dict) -> StudySpec:
    """Read a study spec from YAML (or a dict of the same shape); validate it."""
    d = dict(path_or_dict) if isinstance(path_or_dict, dict) else yaml.safe_load(Path(path_or_dict).read_text())
    kinds = [k for k in BUDGET_KINDS if k in d]
    if len(kinds) != 1:
        raise ValueError(f"a study spec needs exactly one of {BUDGET_KINDS}, got {kinds or 'none'}")
    known = {"name", "recipe", "sizes", "arms", "overrides", "out", "description", *BUDGET_KINDS}
    if set(d) - known:
        raise ValueError(f"unknown spec keys {sorted(set(d) - known)}; known: {sorted(known)}")
    if not d.get("sizes"):
        raise ValueError("a study spec needs a non-empty list of sizes")
    budgets = [float(b) for b in d[kinds[0]]]
    if not budgets or any(b <= 0 for b in budgets):
        raise ValueError(f"{kinds[0]}: needs positive budgets, got {budgets}")
    arms = d.get("arms") or {"baseline": []}
    if isinstance(arms, list):  # a list of arm names with no overrides is not an ablation
        raise ValueError("arms must be a mapping name -> list of overrides")
    sizes = [_size(s) for s in d["sizes"]]
    if len({s.name for s in sizes}) != len(sizes):
        raise ValueError("size names must be unique")
    name = str(d.get("name") or "study")
    return StudySpec(name=name, recipe=str(d["recipe"]), sizes=sizes, budget_kind=kinds[0],
                     budgets=sorted(budgets), arms={str(k): [str(o) for o in (v or [])] for k, v in arms.items()},
                     overrides=[str(o) for o in d.get("overrides") or []], out=str(d.get("out") or f"studies/{name}"),
                     description=str(d.get("description") or ""))


def budget_label(kind: str, budget: float) -> str:
    """A short, filesystem-safe, deterministic label: tok2.0e+05, s8, c1.0e+12."""
    if kind == "steps":
        return f"s{int(budget)}"
    return f"{'tok' if kind == 'tokens' else 'c'}{budget:.2e}"


def expand(spec: StudySpec, out: str | Path | None = None) -> list[Run]:
    """All runs of the study in a fixed order: arm, then size (as listed), then budget (ascending)."""
    root = Path(out or spec.out)
    runs = []
    for arm, arm_overrides in spec.arms.items():
        for size in spec.sizes:
            for budget in spec.budgets:
                name = f"{arm}/{size.name}__{budget_label(spec.budget_kind, budget)}"
                out_dir = root / "runs" / name
                overrides = (*spec.overrides, *size.recipe_overrides(), *arm_overrides,
                             f"training.output_dir={out_dir}")
                runs.append(Run(name=name, arm=arm, size=size.name, budget_kind=spec.budget_kind,
                                budget=budget, out_dir=out_dir, overrides=tuple(overrides)))
    return runs


def steps_for(run: Run, plan: dict) -> int:
    """Optimizer steps that spend the run's budget, from the dry-run plan (at least 1)."""
    if run.budget_kind == "steps":
        return max(1, int(run.budget))
    tokens = run.budget if run.budget_kind == "tokens" else run.budget / plan["flops_per_token"]
    return max(1, round(tokens / plan["tokens_per_step"]))


def run_overrides(spec: StudySpec, run: Run) -> list[str]:
    """The full override list of one run, max_steps resolved with a dry run (no model built)."""
    from hfpretrain.training import pretrain

    plan = pretrain(spec.recipe, list(run.overrides), dry_run=True)["plan"]
    # a run stopped by SIGTERM left a checkpoint: the next pass continues from it
    return [*run.overrides, "training.resume_from_checkpoint=auto", f"training.max_steps={steps_for(run, plan)}"]


def run_study(spec: StudySpec, out: str | Path | None = None, only_existing: bool = False) -> list[dict]:
    """Run every unfinished run of the study (in process, one after another); return the results rows.

    ``only_existing``: train nothing, collect the finished runs (--report-only). On SIGTERM the run in
    progress saves a checkpoint and the study stops; the next call continues from there.
    """
    from hfpretrain.training import pretrain
    from hfpretrain.training.callbacks import SIGTERM_RECEIVED

    runs = expand(spec, out)
    for i, run in enumerate(runs, 1):
        if run.done:
            logger.info("[%d/%d] %s: done, skipped", i, len(runs), run.name)
            continue
        if only_existing:
            logger.warning("[%d/%d] %s: not finished, left out", i, len(runs), run.name)
            continue
        if SIGTERM_RECEIVED.is_set():
            break
        overrides = run_overrides(spec, run)
        logger.info("[%d/%d] %s: training (%s)", i, len(runs), run.name, overrides[-1])
        pretrain(spec.recipe, overrides)
        if not run.done:  # SIGTERM (preemption, a time limit): the whole study stops, resumable
            logger.warning("[%d/%d] %s: stopped before its last step; the study stops here (run it again to "
                           "continue from the run's checkpoint)", i, len(runs), run.name)
            break
        gc.collect()  # the finished run's model and optimizer (the Trainer holds reference cycles)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return collect(runs)


def result_row(run: Run) -> dict:
    """One results row from a finished run's summary.json."""
    summary = json.loads((run.out_dir / "summary.json").read_text())
    plan = summary["plan"]
    tokens = plan["tokens_per_step"] * summary.get("global_step", plan["max_steps"])
    return {
        "run": run.name, "arm": run.arm, "size": run.size, "budget": run.budget,
        "params": plan["parameters"]["total"], "non_embedding_params": plan["parameters"]["non_embedding"],
        "steps": summary.get("global_step", plan["max_steps"]), "tokens": tokens,
        "flops_per_token": plan["flops_per_token"], "flops": plan["flops_per_token"] * tokens,
        "val_loss": _final_loss(run.out_dir, summary),
        "out_dir": str(run.out_dir),
    }


def _final_loss(out_dir: Path, summary: dict) -> float | None:
    """The final evaluation's loss; else the last eval event of log.jsonl (eval_strategy=no gives none)."""
    loss = (summary.get("final_eval") or {}).get("eval_loss")
    if loss is None and (out_dir / "log.jsonl").is_file():
        from hfpretrain.study.plots import read_log

        evals = [e["eval_loss"] for e in read_log(out_dir / "log.jsonl") if e.get("event") == "eval" and "eval_loss" in e]
        loss = evals[-1] if evals else None
    return loss


COLUMNS = ["run", "arm", "size", "budget", "params", "non_embedding_params", "steps", "tokens", "flops_per_token",
           "flops", "val_loss", "out_dir"]


def collect(runs: list[Run]) -> list[dict]:
    return [result_row(r) for r in runs if r.done]


def write_results(rows: list[dict], out: str | Path) -> tuple[Path, Path]:
    """results.csv and results.json in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    return out / "results.csv", out / "results.json"
