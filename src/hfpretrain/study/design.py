"""Study design as code: which sizes each budget trains, per-run hyper-parameters, plan-time checks.

* **IsoFLOP grids** (spec key ``isoflop``): for each compute budget C, the candidate sizes are ranked by
  how far their tokens-per-parameter ratio D/N (D = C / FLOPs-per-token) is from a target (~20,
  Chinchilla), and the ``sizes_per_budget`` nearest, consecutive in the candidate list, are trained:
  the predicted optimum sits in the middle of each budget's sizes, so a parabola through them can find
  it. N counts the LM head (at small sizes it is a large share of the compute). Sizes that would read
  the data more than ``rules.max_passes`` times at a budget are not candidates there (a data-limited
  budget moves to larger models).
* **Rules** (spec key ``rules``) derive hyper-parameters per run instead of one constant for every size
  and budget: warmup as a fraction of the run's steps, a learning rate scaled with width, and a batch
  that shrinks (accumulation first, then micro-batch) until a small budget still gets ``min_steps``
  optimizer steps. What each run got is in the plan table and the run table of the report.
* **Checks** at plan time: a run shorter than its warmup, data read more than ``max_passes`` times, and
  the total FLOPs and GPU time at each shape's MFU (measured values go in the spec's ``mfu``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields


@dataclass
class Rules:
    warmup_fraction: float | None = None  # warmup = this share of each run's steps (None: the recipe's)
    lr: float | None = None  # peak LR at width lr_width (None: the recipe's, for every size)
    lr_width: int = 768
    lr_power: float = 0.0  # lr = lr · (lr_width / width)^lr_power; 1 ≈ muP's hidden-matrix rule for Adam
    min_steps: int = 0  # halve the batch until the run has at least this many optimizer steps
    max_passes: float = 4.0  # a run would read its data more often (repeated tokens teach less)
    # what a run over max_passes does: "exclude" moves the budget's sizes up (the cut-off optima of the first
    # vocabulary study), "error" stops the plan, "flag" runs it and names it in the plan and the report
    over_passes: str = "exclude"

    @classmethod
    def from_dict(cls, d: dict | None) -> "Rules":
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        if set(d) - known:
            raise ValueError(f"rules: unknown keys {sorted(set(d) - known)}; known: {sorted(known)}")
        rules = cls(**d)
        if rules.over_passes not in ("exclude", "error", "flag"):
            raise ValueError(f"rules.over_passes={rules.over_passes!r}: exclude, error or flag")
        if rules.warmup_fraction is not None and not 0 <= rules.warmup_fraction < 1:
            raise ValueError(f"rules.warmup_fraction={rules.warmup_fraction}: must be in [0, 1)")
        return rules


@dataclass
class IsoFlop:
    tokens_per_param: float = 20.0
    sizes_per_budget: int = 3
    # {arm: {budget: [size, ...]}}: sizes a cell trains beyond its window, written in the spec when a cell's
    # optimum lies at the window's edge (a decision rule's "move its sizes"); checked against the spec at load
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict | None) -> "IsoFlop | None":
        if d is None:
            return None
        d = dict(d)
        known = {f.name for f in fields(cls)}
        if set(d) - known:
            raise ValueError(f"isoflop: unknown keys {sorted(set(d) - known)}; known: {sorted(known)}")
        extra = d.pop("extra", None) or {}
        if not isinstance(extra, dict) or not all(isinstance(cells, dict) for cells in extra.values()):
            raise ValueError(f"isoflop.extra: {{arm: {{budget: [size, ...]}}}}, got {extra!r}")
        # YAML reads 2.5e16 (no dot before the exponent's sign) as a string: every budget key becomes a float here
        iso = cls(
            **d,
            extra={
                str(arm): {float(b): [str(n) for n in names] for b, names in cells.items()}
                for arm, cells in extra.items()
            },
        )
        if iso.tokens_per_param <= 0 or iso.sizes_per_budget < 1:
            raise ValueError("isoflop: tokens_per_param must be > 0 and sizes_per_budget >= 1")
        return iso


def ratio_params(plan: dict) -> int:
    """N for tokens per parameter: everything but the embedding tables, with the LM head counted once; for an
    MoE the active parameters (what a token's FLOPs pay for), so an MoE arm gets the dense arm's sizes."""
    parameters = plan["parameters"]
    return int(parameters.get("active_non_embedding", parameters["non_embedding"]) + plan["flops_per_token_head"] / 6)


def pick_sizes(costs: list[tuple[str, float, int]], budget: float, iso: IsoFlop) -> list[str]:
    """Of ``costs`` = [(size, flops_per_token, N)] (ascending N), the ``sizes_per_budget`` consecutive
    sizes centred on the one whose D/N at this budget is nearest the target (in log)."""
    distance = [abs(math.log((budget / fpt) / n / iso.tokens_per_param)) for _, fpt, n in costs]
    k = min(iso.sizes_per_budget, len(costs))
    centre = min(range(len(costs)), key=distance.__getitem__)
    lo = min(max(0, centre - k // 2), len(costs) - k)
    return [name for name, _, _ in costs[lo : lo + k]]


def extra_sizes(iso: IsoFlop, arm: str, budget: float) -> list[str]:
    """The sizes ``iso.extra`` adds to one cell (arm, budget)."""
    return next((names for b, names in iso.extra.get(arm, {}).items() if math.isclose(b, budget, rel_tol=1e-9)), [])


def rule_overrides(rules: Rules, plan: dict, steps: int, budget_kind: str, training: dict) -> tuple[int, list[str]]:
    """(steps, overrides) for one run: batch, learning rate and warmup by the rules.

    ``training`` is the run's ``training`` section as written, its overrides merged (the dry run's ``recipe``:
    batch, accumulation, warmup), not the resolved split a GPU's ``batch.micro_batch=auto`` may choose."""
    out: list[str] = []
    micro = int(training.get("per_device_train_batch_size", 8))
    accum = int(training.get("gradient_accumulation_steps", 1))
    micro0, accum0 = micro, accum
    if rules.min_steps and budget_kind != "steps":
        tokens = steps * plan["tokens_per_step"]
        per_sample = plan["seq_len"] * plan["world_size"]
        while micro * accum > 1 and round(tokens / (per_sample * micro * accum)) < rules.min_steps:
            if accum > 1:
                accum //= 2
            else:
                micro //= 2
        steps = max(1, round(tokens / (per_sample * micro * accum)))
        if (micro, accum) != (micro0, accum0):
            out += [f"training.gradient_accumulation_steps={accum}", f"training.per_device_train_batch_size={micro}"]
    if rules.lr is not None:
        width = plan["shape"]["hidden_size"]
        out.append(f"training.learning_rate={rules.lr * (rules.lr_width / width) ** rules.lr_power:.6g}")
    if rules.warmup_fraction is not None:
        out.append(f"training.warmup_steps={max(1, round(rules.warmup_fraction * steps))}")
    return steps, out


@dataclass
class PlannedRun:
    name: str
    arm: str
    size: str
    budget: float
    seed: int | None
    params: int  # N for tokens per parameter (ratio_params)
    tokens: int
    steps: int
    batch_tokens: int
    learning_rate: float
    warmup_steps: int
    passes: float
    flops: float
    gpu_hours: float | None
    overrides: list[str] = field(default_factory=list)
    assumed: str | None = None  # why its dry run had no data (its figures, and the sizes chosen, are guesses)

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


def check_plan(runs: list[PlannedRun], rules: Rules) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a planned study; errors stop it before any GPU time is spent."""
    errors, warnings = [], []
    for r in runs:
        if r.steps <= r.warmup_steps:
            errors.append(
                f"{r.name}: {r.steps} steps, not more than its {r.warmup_steps} warmup steps "
                "(rules.warmup_fraction, or a smaller batch with rules.min_steps)"
            )
        if r.passes > rules.max_passes:
            message = (
                f"{r.name}: reads the training data {r.passes:.1f} times (> rules.max_passes {rules.max_passes:g})"
            )
            if rules.over_passes == "flag":
                warnings.append(message + ": run and flagged (rules.over_passes: flag)")
            else:
                errors.append(message + ": a smaller budget or more data")
        if not 0.5 <= r.tokens_per_param <= 2000:
            warnings.append(
                f"{r.name}: {r.tokens_per_param:.2g} tokens per parameter: far from compute-optimal "
                "(~20); its loss says little about the size's potential"
            )
    return errors, warnings


def format_plan(runs: list[PlannedRun], errors: list[str], warnings: list[str]) -> str:
    header = (
        f"{'run':<38} {'N':>9} {'tokens':>10} {'D/N':>6} {'steps':>6} {'batch':>8} {'lr':>8} "
        f"{'warmup':>6} {'passes':>6} {'FLOPs':>9} {'GPU min':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in runs:
        minutes = f"{60 * r.gpu_hours:8.1f}" if r.gpu_hours is not None else f"{'?':>8}"
        lines.append(
            f"{r.name:<38} {r.params:>9.3g} {r.tokens:>10.3g} {r.tokens_per_param:>6.1f} {r.steps:>6} "
            f"{r.batch_tokens:>8} {r.learning_rate:>8.2g} {r.warmup_steps:>6} {r.passes:>6.2f} "
            f"{r.flops:>9.2e} {minutes}"
        )
    total = sum(r.flops for r in runs)
    hours = [r.gpu_hours for r in runs]
    gpu = f"{sum(hours) * 60:.0f} GPU minutes" if all(h is not None for h in hours) else "GPU time unknown (no peak)"
    lines += ["", f"{len(runs)} runs, {total:.3e} training FLOPs, {gpu}"]
    lines += [f"warning: {w}" for w in warnings] + [f"error: {e}" for e in errors]
    return "\n".join(lines)
