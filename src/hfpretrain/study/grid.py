"""A scaling / ablation study: a spec, its expansion into runs, running them, the results table.

A study is the product  arms × sizes × budgets.  Each cell is one ordinary ``pretrain`` run of
the base recipe with three groups of overrides appended (common, size, arm, then the step count
derived from the budget). Output folders are deterministic, ``OUT/runs/<arm>/<size>__<budget>``,
so a study is resumable: a run whose ``summary.json`` exists is read back, never re-trained.

With ``isoflop`` (a compute grid), each budget trains only the sizes nearest a target tokens-per-parameter
ratio; ``seeds`` repeat cells with other seeds (at ``seed_budgets``; ``added_seeds`` more at some budgets);
``rules`` derive batch, learning rate and warmup per run. See :mod:`hfpretrain.study.design`; ``plan_study``
resolves all of it with dry runs (no model is built) and checks the plan before any run starts.

Budgets are one of (per spec):
  tokens: [...]   training tokens per run        -> max_steps = round(tokens / tokens_per_step)
  steps:  [...]   optimizer steps per run
  flops:  [...]   training FLOPs per run (a compute grid: each size gets its own token count)
                                                 -> max_steps = round(flops / (flops_per_token · tokens_per_step))
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gc
import json
import logging
import math
import multiprocessing
import os
import re
import signal
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml

from hfpretrain.study.design import (
    IsoFlop,
    PlannedRun,
    Rules,
    check_plan,
    extra_sizes,
    pick_sizes,
    ratio_params,
    rule_overrides,
)

logger = logging.getLogger(__name__)

BUDGET_KINDS = ("tokens", "steps", "flops")


@dataclass(frozen=True)
class Size:
    """One model size: a zoo config and/or config-field overrides and/or raw recipe overrides.

    ``arms`` gives an arm its own version of the size (an architecture ablation: the MoE arm's experts in place
    of the dense arm's MLP at the same width and depth): its ``config`` replaces the size's, its ``fields`` are
    merged over the size's, its ``overrides`` follow the size's."""

    name: str
    config: str | None = None  # zoo name: tiny, scale_7m, ...
    fields: dict = field(default_factory=dict)  # config fields -> model.overrides.<key>=<value>
    overrides: tuple[str, ...] = ()  # raw recipe overrides, e.g. "training.learning_rate=1e-3"
    arms: dict = field(default_factory=dict)  # arm name -> {config, fields, overrides} for that arm
    # False: an intermediate size no IsoFLOP window picks (the windows' sizes stay consecutive as before it was
    # added); only ``isoflop.extra`` trains it, in the cells that name it
    window: bool = True

    def recipe_overrides(self, arm: str | None = None) -> list[str]:
        own = self.arms.get(arm, {})
        config = own.get("config") or self.config
        out = [f"model.config={config}"] if config else []
        out += [f"model.overrides.{k}={_yaml_value(v)}" for k, v in {**self.fields, **own.get("fields", {})}.items()]
        return out + list(self.overrides) + list(own.get("overrides", ()))


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
    isoflop: IsoFlop | None = None  # flops budgets only: sizes per budget around a tokens/parameter target
    seeds: list[int] = field(default_factory=list)  # [] = the recipe's seed, one run per cell
    seed_budgets: list[float] | None = None  # budgets that run every seed (None: all; others the first)
    # [{budget, seeds, overrides?}]: seeds beyond ``seeds`` at a grid budget (a third seed where the decision's
    # noise is read), written after the runs of ``seeds`` and dated in the spec; ``overrides`` (SCORING_KEYS only)
    # add scores to those runs (per validation set, say) without changing their training or measure
    added_seeds: list = field(default_factory=list)
    rules: Rules = field(default_factory=Rules)
    mfu: dict = field(default_factory=dict)  # size name or "default" -> measured MFU, for the GPU-time estimate
    gpu: str | None = None  # GPU the estimate is for (default: this machine's)
    overhead_s: float = 0.0  # per run, for the estimate: start, compile, final evaluation (measure it once)
    workers: int = 1  # runs trained at a time on each GPU (small models leave a GPU mostly idle)
    # the report's parametric bootstrap: draws of the optima (every interval of the cells, gaps and multipliers) and
    # of the L(N, D) fits (each draw refits every arm, so fewer); more draws steady the 2.5%/97.5% ends
    bootstrap: dict = field(default_factory=lambda: dict(BOOTSTRAP))
    data: str = ""  # what text the runs read (which sets, how much): the report's Data section
    reproduce: list[str] = field(default_factory=list)  # commands, paths relative to the repository or $DATA_ROOT
    decision: dict = field(default_factory=dict)  # the rule the report applies, written before the runs
    # [{budget, factors, arms?, seeds?}]: per arm (default every arm), the budget's central size (D/N nearest the
    # target) again at the rule's LR times each factor, with the first seed (or each of seeds): is the LR rule near
    # each arm's optimum? Not part of the IsoFLOP cells. A spec may write one entry as a mapping. The budget: a grid
    # budget or a multiplier check's (there the central size is among that check's sizes); so for setting_checks.
    lr_checks: list = field(default_factory=list)
    # [{budget, settings: {name: {arms, overrides}}, seeds?}]: each named setting (recipe overrides, after the arm's
    # and the rules') on each of its arms' central size at that budget (the size lr_checks picks), first seed (or
    # each of seeds): does the grid's setting of that arm matter? Not part of the IsoFLOP cells either.
    setting_checks: list = field(default_factory=list)
    # [{arm, budget, sizes, seeds?}]: the arm's cell at a budget beyond the grid (the sizes listed, each of seeds;
    # default all), measured, not fitted: the baseline at the decision's multiplier threshold (1.2 x 2.5e16) reads
    # the multiplier from runs where the grid's fits extrapolate. Not part of the cells or fits either.
    multiplier_checks: list = field(default_factory=list)

    def seeds_for(self, budget: float) -> list[int | None]:
        if not self.seeds:
            return [None]
        added = [s for e in self.added_seeds if math.isclose(budget, e["budget"], rel_tol=1e-9) for s in e["seeds"]]
        if self.seed_budgets is None or any(math.isclose(budget, b, rel_tol=1e-9) for b in self.seed_budgets):
            return [*self.seeds, *added]
        return [*self.seeds[:1], *added]

    def added_overrides(self, budget: float, seed: int | None) -> list[str]:
        """The scoring overrides of an ``added_seeds`` entry, for its seeds at its budget."""
        return [
            o
            for e in self.added_seeds
            if seed in e["seeds"] and math.isclose(budget, e["budget"], rel_tol=1e-9)
            for o in e.get("overrides", [])
        ]

    def to_dict(self) -> dict:
        d = asdict(self)
        d = {k: v for k, v in d.items() if v not in (None, [], {}, "")}
        d["sizes"] = [
            {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(s).items() if v and k != "window"}
            | ({} if s.window else {"window": False})
            for s in self.sizes
        ]
        d[d.pop("budget_kind")] = d.pop("budgets")
        if "isoflop" in d and not d["isoflop"]["extra"]:
            del d["isoflop"]["extra"]
        if d.get("bootstrap") == BOOTSTRAP:  # the default: specs written before the key read back unchanged
            del d["bootstrap"]
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
    seed: int | None = None
    lr_factor: float | None = None  # a learning-rate check: the rule's LR times this (not part of the grid)
    setting: str | None = None  # a setting check: the name of its setting_checks setting (not part of the grid)
    multiplier_check: bool = False  # a run of a multiplier_checks cell (not part of the grid)

    @property
    def done(self) -> bool:
        """Trained to its last step and evaluated. A preempted run writes a summary.json too, at the step it
        stopped, and without the final evaluation when the signal came during its last steps: run again, it
        resumes from that checkpoint (nothing left to train) and evaluates."""
        path = self.out_dir / "summary.json"
        if not path.is_file():
            return False
        try:
            summary = json.loads(path.read_text())
        except ValueError:  # being written by another worker (it is replaced whole): not done yet
            return False
        evaluates = (_run_recipe(self.out_dir).get("training") or {}).get("eval_strategy", "steps") != "no"
        return summary["global_step"] >= summary["plan"]["max_steps"] and (
            not evaluates or "eval_loss" in (summary.get("final_eval") or {})
        )


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
    unknown = set(entry) - {"config", "fields", "overrides", "arms", "window"}
    if unknown:
        raise ValueError(f"size {name}: unknown keys {sorted(unknown)} (config, fields, overrides, arms, window)")
    if not isinstance(entry.get("window", True), bool):
        raise ValueError(f"size {name}: window is true or false, got {entry['window']!r}")
    arms = {}
    for arm, own in (entry.get("arms") or {}).items():
        if not isinstance(own, dict) or set(own) - {"config", "fields", "overrides"}:
            raise ValueError(f"size {name}: arms.{arm} must be a mapping of config, fields, overrides; got {own!r}")
        arms[str(arm)] = {
            "config": own.get("config"),
            "fields": dict(own.get("fields") or {}),
            "overrides": [str(o) for o in own.get("overrides") or ()],
        }
    return Size(
        name=str(name),
        config=entry.get("config"),
        fields=dict(entry.get("fields") or {}),
        overrides=tuple(entry.get("overrides") or ()),
        arms=arms,
        window=entry.get("window", True),
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping: YAML keeps the last, so a second arm of the same
    name silently replaced the first (one arm, the wrong overrides)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{key!r} is given twice in one mapping (the last would replace the first)",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _budget_list(key: str, value, empty: bool = False) -> list[float]:
    """``value`` as a list of finite positive budgets; one line naming ``key`` otherwise (a scalar was a TypeError,
    NaN passed ``<= 0`` and failed later with an unrelated message). YAML 1.1 reads ``1e18`` as a string: taken."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{key}: a list of budgets, e.g. {key}: [{value}], got {value!r}")
    try:
        budgets = [float(b) for b in value if not isinstance(b, bool)]
    except (TypeError, ValueError):
        budgets = []
    if len(budgets) != len(value) or not (budgets or empty) or not all(math.isfinite(b) and b > 0 for b in budgets):
        raise ValueError(f"{key}: needs finite positive budgets, got {list(value)}")
    return budgets


def _arms(arms) -> dict:
    if isinstance(arms, list):  # a list of arm names with no overrides is not an ablation
        raise ValueError("arms must be a mapping name -> list of overrides")
    if not isinstance(arms, dict):
        raise ValueError(f"arms must be a mapping name -> list of overrides, got {arms!r}")
    for name, overrides in arms.items():
        # a string was split into characters, each taken as an override
        if overrides is not None and (
            not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides)
        ):
            raise ValueError(f"arms.{name}: a list of overrides, e.g. [{overrides}], got {overrides!r}")
    return arms


def _read_spec(path: Path) -> dict:
    """The spec file as a dict; FileNotFoundError / ValueError with one line naming the file (and line)."""
    if not path.is_file():
        raise FileNotFoundError(f"study spec {path} does not exist")
    from hfpretrain.training.config import yaml_problem

    try:
        d = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(yaml_problem(path, err)) from None
    if not isinstance(d, dict):
        raise ValueError(
            f"{path}: a study spec is a mapping (recipe:, sizes:, flops: ...), got "
            f"{'an empty file' if d is None else type(d).__name__}"
        )
    return d


def load_spec(path_or_dict: str | Path | dict) -> StudySpec:
    """Read a study spec from YAML (or a dict of the same shape); validate it."""
    d = dict(path_or_dict) if isinstance(path_or_dict, dict) else _read_spec(Path(path_or_dict))
    kinds = [k for k in BUDGET_KINDS if k in d]
    if len(kinds) != 1:
        raise ValueError(f"a study spec needs exactly one of {BUDGET_KINDS}, got {kinds or 'none'}")
    known = {
        "name",
        "recipe",
        "sizes",
        "arms",
        "overrides",
        "out",
        "description",
        "isoflop",
        "seeds",
        "seed_budgets",
        "added_seeds",
        "rules",
        "mfu",
        "gpu",
        "overhead_s",
        "workers",
        "bootstrap",
        "data",
        "reproduce",
        "decision",
        "lr_checks",
        "setting_checks",
        "multiplier_checks",
        *BUDGET_KINDS,
    }
    if set(d) - known:
        raise ValueError(f"unknown spec keys {sorted(set(d) - known)}; known: {sorted(known)}")
    if not d.get("sizes"):
        raise ValueError("a study spec needs a non-empty list of sizes")
    for key in ("sizes", "overrides", "seeds", "reproduce"):  # a string was split into characters, each taken as one
        if d.get(key) is not None and not isinstance(d[key], list):
            raise ValueError(f"{key}: a list, e.g. {key}: [{d[key]}], got {d[key]!r}")
    if not d.get("recipe"):
        raise ValueError("a study spec needs a recipe (the base recipe YAML every run starts from)")
    budgets = _budget_list(kinds[0], d[kinds[0]])
    arms = _arms(d.get("arms") or {"baseline": []})
    sizes = [_size(s) for s in d["sizes"]]
    if len({s.name for s in sizes}) != len(sizes):
        raise ValueError("size names must be unique")
    for size in sizes:
        if set(size.arms) - {str(a) for a in arms}:
            raise ValueError(
                f"size {size.name}: arms {sorted(set(size.arms) - {str(a) for a in arms})} are not "
                f"among the spec's arms {sorted(str(a) for a in arms)}"
            )
    name = str(d.get("name") or "study")
    isoflop = IsoFlop.from_dict(d.get("isoflop"))
    if isoflop and kinds[0] != "flops":
        raise ValueError("isoflop needs a compute grid (flops: [...]), not " + kinds[0])
    for arm, cells in (isoflop.extra if isoflop else {}).items():
        for budget, names in cells.items():
            if (
                arm not in {str(a) for a in arms}
                or not any(math.isclose(budget, b, rel_tol=1e-9) for b in budgets)
                or set(names) - {s.name for s in sizes}
            ):
                raise ValueError(
                    f"isoflop.extra: {arm} at {budget:g} [{', '.join(names)}]: needs one of the arms "
                    f"{sorted(str(a) for a in arms)}, one of the budgets {budgets} and the spec's sizes"
                )
    outside = [s.name for s in sizes if not s.window]
    if outside and not isoflop:
        raise ValueError(f"size {outside[0]}: window: false needs an IsoFLOP grid (isoflop:), whose extra trains it")
    seeds = list(d.get("seeds") or [])
    if seeds and not _int_list(seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: distinct integers, got {seeds!r}")
    seed_budgets = (
        None if d.get("seed_budgets") is None else _budget_list("seed_budgets", d["seed_budgets"], empty=True)
    )
    if seed_budgets and not all(any(math.isclose(b, x, rel_tol=1e-9) for x in budgets) for b in seed_budgets):
        raise ValueError(f"seed_budgets {seed_budgets} must be among the budgets {budgets}")
    added_seeds = _added_seeds(d.get("added_seeds"), budgets, seeds)
    all_seeds = sorted({*seeds, *(s for e in added_seeds for s in e["seeds"])})
    multiplier_checks = _distinct_check_seeds(
        [
            _multiplier_check(e, budgets, {str(a) for a in arms}, {s.name for s in sizes}, all_seeds)
            for e in _entries(d.get("multiplier_checks"))
        ],
        seeds,
    )
    # a learning-rate or setting check may sit at a multiplier check's budget too: there the check's runs are the
    # cell it is set beside
    check_budgets = sorted({*budgets, *(e["budget"] for e in multiplier_checks)})
    return StudySpec(
        name=name,
        recipe=str(d["recipe"]),
        sizes=sizes,
        budget_kind=kinds[0],
        budgets=sorted(budgets),
        arms={str(k): [str(o) for o in (v or [])] for k, v in arms.items()},
        overrides=[str(o) for o in d.get("overrides") or []],
        out=str(d.get("out") or f"studies/{name}"),
        description=str(d.get("description") or ""),
        isoflop=isoflop,
        seeds=seeds,
        seed_budgets=seed_budgets,
        added_seeds=added_seeds,
        rules=Rules.from_dict(d.get("rules")),
        mfu=dict(d.get("mfu") or {}),
        gpu=d.get("gpu"),
        overhead_s=float(d.get("overhead_s") or 0.0),
        workers=_workers(d.get("workers", 1)),
        bootstrap=_bootstrap(d.get("bootstrap")),
        data=str(d.get("data") or ""),
        reproduce=[str(c) for c in d.get("reproduce") or []],
        decision=_decision(d.get("decision"), arms),
        lr_checks=[_lr_checks(e, check_budgets, {str(a) for a in arms}, seeds) for e in _entries(d.get("lr_checks"))],
        setting_checks=_unique_settings(
            [
                _setting_checks(e, check_budgets, {str(a) for a in arms}, seeds)
                for e in _entries(d.get("setting_checks"))
            ]
        ),
        multiplier_checks=multiplier_checks,
    )


def _added_seeds(d, budgets: list[float], seeds: list[int]) -> list[dict]:
    """``added_seeds: [{budget, seeds, overrides?}]``: grid budgets, seeds not among ``seeds`` (nor another
    entry's at that budget), overrides that only add scores."""
    out: list[dict] = []
    for e in _entries(d):
        if not seeds:
            raise ValueError("added_seeds: needs the spec's seeds (none given): it adds to them")
        form = f"added_seeds: {{budget: one of {budgets}, seeds: [not in {seeds}], overrides: [evaluation.K=V]}}"
        if not isinstance(e, dict) or not {"budget", "seeds"} <= set(e) <= {"budget", "seeds", "overrides"}:
            raise ValueError(f"{form}, got {e!r}")
        budget = _budget_list("added_seeds.budget", [e["budget"]])[0]
        if not any(math.isclose(budget, b, rel_tol=1e-9) for b in budgets):
            raise ValueError(f"added_seeds.budget: {budget:g} is not a grid budget {budgets}")
        taken = set(seeds) | {s for o in out if math.isclose(o["budget"], budget, rel_tol=1e-9) for s in o["seeds"]}
        chosen = e["seeds"]
        if not _int_list(chosen) or len(set(chosen)) < len(chosen) or set(chosen) & taken:
            raise ValueError(
                f"added_seeds.seeds at {budget:g}: distinct integers not in {sorted(taken)}, got {chosen!r}"
            )
        out.append({"budget": budget, "seeds": list(chosen), **_scoring("added_seeds", e.get("overrides"))})
    return out


def _int_list(values) -> bool:
    """A non-empty list of integers (not booleans, not floats YAML wrote as 2.0)."""
    return isinstance(values, list) and bool(values) and all(type(v) is int for v in values)


# evaluation keys that only add scores after training: the overall validation measure the cells use is unchanged
# (final_eval_tokens, eval_tokens and the rest would change it or the run)
SCORING_KEYS = (
    "per_set",
    "lm_eval_task",
    "lm_eval_limit",
    "long_context_lengths",
    "long_context_samples",
    "long_context_blocks",
    "long_context_min_document_tokens",
)


def _scoring(key: str, overrides) -> dict:
    """A run group's ``overrides`` that only add scores (``evaluation.<one of SCORING_KEYS>=...``): the runs train
    and are measured as the grid's are."""
    overrides = overrides or []
    if not isinstance(overrides, list) or any(
        str(o).partition("=")[0] not in {f"evaluation.{k}" for k in SCORING_KEYS} or "=" not in str(o)
        for o in overrides
    ):
        raise ValueError(
            f"{key}.overrides: evaluation.KEY=VALUE with KEY one of {', '.join(SCORING_KEYS)} (scores added, "
            f"the measure unchanged), got {overrides!r}"
        )
    return {"overrides": [str(o) for o in overrides]} if overrides else {}


def _distinct_check_seeds(entries: list[dict], seeds: list[int]) -> list[dict]:
    """Two multiplier-check entries of one arm and budget (seeds scored differently, say) share no seed: each
    run has one entry."""
    seen: dict = {}
    for e in entries:
        key = (e["arm"], e["budget"])
        mine = set(e.get("seeds", seeds) or [None])  # an entry without seeds runs the spec's
        if seen.get(key, set()) & mine:
            raise ValueError(
                f"multiplier_checks: two entries of {e['arm']} at {e['budget']:g} share seeds "
                f"{sorted(seen[key] & mine, key=str)}; give each entry its own seeds"
            )
        seen[key] = seen.get(key, set()) | mine
    return entries


def _entries(d) -> list:
    """A check key's entries: one mapping, or a list of them (one per budget); none for an empty value."""
    return [] if not d else [d] if isinstance(d, dict) else list(d) if isinstance(d, list) else [d]


def _check_seeds(d: dict, key: str, seeds: list[int]) -> dict:
    """An entry's optional ``seeds`` (the spec's seeds the checks run with; default: the budget's first)."""
    if "seeds" not in d:
        return {}
    chosen = d["seeds"]
    if not _int_list(chosen) or any(s not in seeds for s in chosen) or len(set(chosen)) < len(chosen):
        raise ValueError(f"{key}.seeds: distinct seeds among the spec's {seeds}, got {chosen!r}")
    return {"seeds": [int(s) for s in chosen]}


def _arm_list(own, arms: set[str], key: str) -> list[str]:
    """A check's ``arms``: a non-empty list of distinct arms of the spec, else one line naming ``key``."""
    if not isinstance(own, list) or not own or any(a not in arms for a in own) or len(set(own)) != len(own):
        raise ValueError(f"{key}: a list of distinct arms among {sorted(arms)}, got {own!r}")
    return list(own)


def _lr_checks(d, budgets: list[float], arms: set[str], seeds: list[int]) -> dict:
    form = (
        f"lr_checks: {{budget: one of {budgets}, factors: [positive, not 1], arms: [...] (optional), "
        "seeds: [...] (optional)}"
    )
    if (
        not isinstance(d, dict)
        or set(d) - {"budget", "factors", "arms", "seeds"}
        or not any(math.isclose(float(d.get("budget", 0)), b, rel_tol=1e-9) for b in budgets)
        or not d.get("factors")
        or any(float(f) <= 0 or float(f) == 1 for f in d["factors"])
    ):
        raise ValueError(f"{form}, got {d}")
    return {
        "budget": float(d["budget"]),
        "factors": [float(f) for f in d["factors"]],
        **({"arms": _arm_list(d["arms"], arms, "lr_checks.arms")} if d.get("arms") is not None else {}),
        **_check_seeds(d, "lr_checks", seeds),
    }


def _multiplier_check(d, budgets: list[float], arms: set[str], sizes: set[str], seeds: list[int]) -> dict:
    """One entry of ``multiplier_checks: {arm, budget, sizes: [3 or more], seeds?, overrides?}``: a budget outside
    the grid's (inside, it would be a cell of its own) and enough sizes to bracket an optimum. ``overrides`` add
    scores to its runs (SCORING_KEYS only: a check trains and is measured as the grid is)."""
    form = (
        "multiplier_checks: {arm: ARM, budget: B (not a grid budget), sizes: [3+ of the spec's], seeds: [...], "
        "overrides: [evaluation.KEY=VALUE, ...]}"
    )
    allowed = {"arm", "budget", "sizes", "seeds", "overrides"}
    if not isinstance(d, dict) or not {"arm", "budget", "sizes"} <= set(d) <= allowed:
        raise ValueError(f"{form}, got {d!r}")
    if d["arm"] not in arms:
        raise ValueError(f"multiplier_checks.arm: one of the arms {sorted(arms)}, got {d['arm']!r}")
    budget = _budget_list("multiplier_checks.budget", [d["budget"]])[0]
    if any(math.isclose(budget, b, rel_tol=1e-9) for b in budgets):
        raise ValueError(f"multiplier_checks.budget: {budget:g} is a grid budget; a check's lies outside {budgets}")
    names = d["sizes"]
    if not isinstance(names, list) or len(names) < 3 or len(set(names)) < len(names) or set(names) - sizes:
        raise ValueError(f"multiplier_checks.sizes: 3 or more distinct sizes among {sorted(sizes)}, got {names!r}")
    return {
        "arm": d["arm"],
        "budget": budget,
        "sizes": list(names),
        **_check_seeds(d, "multiplier_checks", seeds),
        **_scoring("multiplier_checks", d.get("overrides")),
    }


def _unique_settings(entries: list[dict]) -> list[dict]:
    """Setting checks at several budgets: a name means one setting (its folders differ by budget only)."""
    seen = {}
    for entry in entries:
        for name, setting in entry["settings"].items():
            if seen.setdefault(name, setting) != setting:
                raise ValueError(f"setting_checks.settings.{name}: defined twice, differently")
    return entries


# A setting's name is a folder token (<size>__<budget>__<name>__seed<seed>): letters, digits, '.', '+', '-' and
# single underscores, not the LR checks' lr<factor> nor a seed<n> (CELL would read those back as such)
SETTING_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.+-]|_(?=[A-Za-z0-9.+-]))*")
_RESERVED_NAME = re.compile(r"lr[0-9.e+-]+|seed-?\d+")
_OVERRIDE = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)+=.*")  # section.key=value (section.a.b=value)
# Keys the study sets for every run (its budget, batch, folder, seed and resume): a check that changed one would
# spend another budget, land in another folder or break its pairing with the grid run
STUDY_KEYS = (
    "training_flops",
    "training.max_steps",
    "training.per_device_train_batch_size",
    "training.gradient_accumulation_steps",
    "training.output_dir",
    "training.seed",
    "training.data_seed",
    "training.resume_from_checkpoint",
)


def _setting_checks(d, budgets: list[float], arms: set[str], seeds: list[int]) -> dict:
    """One entry of ``setting_checks: {budget, settings: {NAME: {arms: [...], overrides: [section.key=value,
    ...]}}, seeds: [...] (optional)}``, checked: one line naming the key at fault."""
    form = (
        "setting_checks: {budget: B, settings: {NAME: {arms: [ARM, ...], overrides: [section.key=value, ...]}}, "
        "seeds: [...] (optional)}"
    )
    if not isinstance(d, dict) or not {"budget", "settings"} <= set(d) <= {"budget", "settings", "seeds"}:
        raise ValueError(f"{form}, got {d!r}")
    try:
        budget = float(d["budget"])
    except (TypeError, ValueError):
        budget = math.nan
    if isinstance(d["budget"], bool) or not any(math.isclose(budget, b, rel_tol=1e-9) for b in budgets):
        raise ValueError(
            f"setting_checks.budget: one of the spec's budgets or multiplier checks' {budgets}, got {d['budget']!r}"
        )
    if not isinstance(d["settings"], dict) or not d["settings"]:
        raise ValueError(f"setting_checks.settings: a mapping NAME -> {{arms, overrides}}, got {d['settings']!r}")
    settings = {}
    for name, setting in d["settings"].items():
        key = f"setting_checks.settings.{name}"
        if not isinstance(name, str) or not SETTING_NAME.fullmatch(name) or _RESERVED_NAME.fullmatch(name):
            raise ValueError(
                f"{key}: a setting's name is a folder token (letters, digits, '.', '+', '-', single '_'), not "
                "lr<factor> (the LR checks' folders) nor seed<n>"
            )
        if name.lower() in {n.lower() for n in settings}:  # one folder on a case-insensitive file system
            raise ValueError(f"{key}: names must be unique (letter case aside)")
        if not isinstance(setting, dict) or set(setting) != {"arms", "overrides"}:
            raise ValueError(
                f"{key}: a mapping {{arms: [ARM, ...], overrides: [section.key=value, ...]}}, got {setting!r}"
            )
        own = _arm_list(setting["arms"], arms, f"{key}.arms")
        overrides = setting["overrides"]
        if (
            not isinstance(overrides, list)
            or not overrides
            or not all(isinstance(o, str) and _OVERRIDE.fullmatch(o) for o in overrides)
        ):
            raise ValueError(f"{key}.overrides: a list of recipe overrides section.key=value, got {overrides!r}")
        owned = [o for o in overrides if o.split("=", 1)[0].strip() in STUDY_KEYS]
        if owned:
            raise ValueError(
                f"{key}.overrides: {owned[0]} sets a key the study sets for every run (budget, batch, folder, seed, "
                f"resume: {', '.join(STUDY_KEYS)}); a check changes a setting, not the run's budget or pairing"
            )
        settings[name] = {"arms": list(own), "overrides": list(overrides)}
    return {"budget": budget, "settings": settings, **_check_seeds(d, "setting_checks", seeds)}


DECISION_KEYS = (
    "written",
    "at",
    "criterion",
    "multiplier_min",
    "margin",
    "noise",
    "fit",
    "amended",
    "comparisons",
    "rule",
)
DECISION_FITS = ("optima", "frontier")


def _decision(d, arms: dict) -> dict:
    """The decision rule, checked at load: every comparison names two of the spec's arms."""
    if not d:
        return {}
    if not isinstance(d, dict) or not isinstance(d.get("comparisons"), list) or not d["comparisons"]:
        raise ValueError("decision: a mapping with a non-empty list of comparisons ({arm, baseline})")
    unknown = sorted(set(d) - set(DECISION_KEYS))
    if unknown:
        raise ValueError(f"decision.{unknown[0]}: not a key of the rule (known: {', '.join(DECISION_KEYS)})")
    for c in d["comparisons"]:
        if not isinstance(c, dict) or c.get("arm") not in arms or c.get("baseline") not in arms:
            raise ValueError(f"decision: comparison {c} must name two of the arms {sorted(arms)} (arm, baseline)")
    noise = d.get("noise")
    fixed = (
        isinstance(noise, dict)
        and noise
        and all(not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0 for v in noise.values())
    )
    if noise is not None and noise not in ("per_budget", "pooled") and not fixed:
        raise ValueError(
            "decision.noise: per_budget (σ of each budget from its seeds), pooled (one σ from every "
            f"seed pair) or {{BUDGET: σ, ...}} written before the runs, got {noise!r}"
        )
    if d.get("criterion", "gap") not in ("gap", "multiplier"):
        raise ValueError(f"decision.criterion: gap or multiplier, got {d['criterion']!r}")
    if d.get("fit", "optima") not in DECISION_FITS:
        raise ValueError(
            "decision.fit: optima (the baseline's power law on the per-budget optima, shared floor) or frontier "
            f"(the baseline's L(N, D) fit on its runs), got {d['fit']!r}"
        )
    if d.get("fit", "optima") != "optima" and d.get("criterion") != "multiplier":
        raise ValueError("decision.fit: read by criterion: multiplier only (a gap rule reads the measured optima)")
    if "amended" in d and not (isinstance(d["amended"], str) and d["amended"].strip()):
        raise ValueError("decision.amended: a line saying when and before which runs the rule was changed, and why")
    out = dict(d)
    if fixed:
        out["noise"] = {float(b): float(v) for b, v in noise.items()}
    return out


BOOTSTRAP = {"draws": 300, "frontier_draws": 100}


def _bootstrap(value) -> dict:
    """``bootstrap: {draws, frontier_draws}`` (either may be left out: the defaults)."""
    value = {} if value is None else value
    if (
        not isinstance(value, dict)
        or set(value) - set(BOOTSTRAP)
        or not all(type(v) is int and v >= 0 for v in value.values())
    ):
        raise ValueError(f"bootstrap: {{draws: N, frontier_draws: N}}, whole numbers ≥ 0, got {value!r}")
    return {**BOOTSTRAP, **value}


def _workers(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"workers: needs a whole number ≥ 1, got {value!r}")
    return value


def budget_label(kind: str, budget: float) -> str:
    """A short, filesystem-safe, deterministic label: tok2.0e+05, s8, c1.0e+12."""
    if kind == "steps":
        return f"s{int(budget)}"
    return f"{'tok' if kind == 'tokens' else 'c'}{budget:.2e}"


def expand(spec: StudySpec, out: str | Path | None = None, sizes_for=None) -> list[Run]:
    """All runs of the study in a fixed order: budget (ascending), seed, arm, size (as listed), so that a study
    stopped part-way has whole cells (every arm of its smaller budgets) rather than one arm.

    ``sizes_for(arm, budget)``: the size names that budget trains (an IsoFLOP grid); default all."""
    root = Path(out or spec.out)
    runs = []
    for budget in spec.budgets:
        for seed in spec.seeds_for(budget):
            for arm, arm_overrides in spec.arms.items():
                for size in spec.sizes:
                    if sizes_for is not None and size.name not in sizes_for(arm, budget):
                        continue
                    name = f"{arm}/{size.name}__{budget_label(spec.budget_kind, budget)}"
                    name += f"__seed{seed}" if seed is not None else ""
                    out_dir = root / "runs" / name
                    overrides = (
                        *spec.overrides,
                        *size.recipe_overrides(arm),
                        *arm_overrides,
                        *([f"training.seed={seed}"] if seed is not None else []),
                        *spec.added_overrides(budget, seed),
                        f"training.output_dir={out_dir}",
                    )
                    runs.append(
                        Run(
                            name=name,
                            arm=arm,
                            size=size.name,
                            budget_kind=spec.budget_kind,
                            budget=budget,
                            out_dir=out_dir,
                            overrides=tuple(overrides),
                            seed=seed,
                        )
                    )
    return runs


def multiplier_check_runs(spec: StudySpec, out: str | Path | None = None) -> list[Run]:
    """The multiplier checks' runs: grid runs in every respect (folders ``<arm>/<size>__<budget>__seed<seed>``, the
    rules' steps and learning rate) but at a budget the grid does not have, in no cell of it."""
    runs = []
    for entry in spec.multiplier_checks:
        arms = {entry["arm"]: spec.arms[entry["arm"]]}
        check = replace(
            spec,
            budgets=[entry["budget"]],
            arms=arms,
            seeds=entry.get("seeds", spec.seeds),
            seed_budgets=None,
            added_seeds=[],
        )
        scoring = tuple(entry.get("overrides") or ())
        runs += [
            replace(r, multiplier_check=True, overrides=r.overrides + scoring)
            for r in expand(check, out, lambda arm, budget: entry["sizes"])
        ]
    return runs


def central_runs(spec: StudySpec, grid: list[Run], plan_of, budget: float, seed: int | None = None) -> dict[str, Run]:
    """Per arm, its grid run at ``budget`` with ``seed`` (default the first) whose size's D/N is nearest the IsoFLOP
    target (in log; 20 without ``isoflop``): the size the learning-rate and setting checks train again.
    ``plan_of(arm, size)``: the size's dry-run plan (FLOPs per token, parameters). An arm without a run at
    ``budget`` has none."""
    target = spec.isoflop.tokens_per_param if spec.isoflop else 20.0
    out = {}
    for arm in spec.arms:
        cell = [
            r
            for r in grid
            if r.arm == arm and math.isclose(r.budget, budget, rel_tol=1e-9) and r.lr_factor is None and not r.setting
        ]
        # the first seed by the spec, not by the grid's order: a check pairs with that seed's grid run
        cell = [r for r in cell if r.seed == (spec.seeds_for(budget)[0] if seed is None else seed)]
        if not cell:
            continue

        def distance(run):
            plan = plan_of(arm, run.size)
            return abs(math.log(budget / plan["flops_per_token"] / ratio_params(plan) / target))

        out[arm] = min(cell, key=distance)
    return out


def _check_run(centre: Run, token: str, **fields) -> Run:
    """``centre`` again in its own folder ``<size>__<budget>__<token>__seed<seed>`` beside it."""
    name = f"{centre.size}__{budget_label(centre.budget_kind, centre.budget)}__{token}"
    name += f"__seed{centre.seed}" if centre.seed is not None else ""
    out_dir = centre.out_dir.parent / name
    overrides = tuple(
        o if not o.startswith("training.output_dir=") else f"training.output_dir={out_dir}" for o in centre.overrides
    )
    # a check beside a multiplier check's run is no run of that check's cell
    return replace(
        centre, name=f"{centre.arm}/{name}", out_dir=out_dir, overrides=overrides, multiplier_check=False, **fields
    )


def _entry_centres(spec: StudySpec, grid: list[Run], plan_of, entry: dict) -> list[tuple[str, Run]]:
    """(arm, central run) of a check entry: per seed it names (default the budget's first), per arm."""
    return [
        (arm, centre)
        for seed in entry.get("seeds") or [None]
        for arm, centre in central_runs(spec, grid, plan_of, entry["budget"], seed).items()
    ]


def lr_check_runs(spec: StudySpec, grid: list[Run], plan_of) -> list[Run]:
    """The learning-rate checks: for each ``lr_checks`` entry, per arm, at its budget, the central size
    (:func:`central_runs`), once per factor and seed; folders ``<size>__<budget>__lr<factor>__seed<seed>``."""
    return [
        _check_run(centre, f"lr{factor:g}", lr_factor=factor)
        for entry in spec.lr_checks
        for arm, centre in _entry_centres(spec, grid, plan_of, entry)
        if arm in entry.get("arms", spec.arms)
        for factor in entry["factors"]
    ]


def setting_check_runs(spec: StudySpec, grid: list[Run], plan_of) -> list[Run]:
    """The setting checks: for each ``setting_checks`` entry, per arm, at its budget, the central size (the one the
    LR checks take), once per setting that names the arm and per seed; folders
    ``<size>__<budget>__<setting>__seed<seed>``. The setting's overrides are added by :func:`plan_study` (after the
    rules')."""
    return [
        _check_run(centre, name, setting=name)
        for entry in spec.setting_checks
        for arm, centre in _entry_centres(spec, grid, plan_of, entry)
        for name, setting in entry["settings"].items()
        if arm in setting["arms"]
    ]


def check_settings(spec: StudySpec) -> dict[str, dict]:
    """Every setting check's name -> {arms, overrides}, over all the entries (a name means one setting)."""
    return {name: s for entry in spec.setting_checks for name, s in entry["settings"].items()}


def setting_overrides(spec: StudySpec, run: Run) -> list[str]:
    """The recipe overrides of ``run``'s setting check ([] for any other run)."""
    return list(check_settings(spec)[run.setting]["overrides"]) if run.setting is not None else []


def steps_for(run: Run, plan: dict) -> int:
    """Optimizer steps that spend the run's budget, from the dry-run plan (at least 1)."""
    if run.budget_kind == "steps":
        return max(1, int(run.budget))
    tokens = run.budget if run.budget_kind == "tokens" else run.budget / plan["flops_per_token"]
    return max(1, round(tokens / plan["tokens_per_step"]))


def _last(overrides: list[str], key: str, default):
    values = [o.split("=", 1)[1] for o in overrides if o.startswith(key + "=")]
    return type(default)(float(values[-1])) if values and isinstance(default, (int, float)) else default


def plan_study(spec: StudySpec, out: str | Path | None = None) -> list[tuple[Run, PlannedRun]]:
    """Every run with its full override list (max_steps and the rules resolved) and its planned figures.

    One dry run per (arm, size), and one per setting check (no model is built): FLOPs per token, parameters,
    batch, data size."""
    from hfpretrain.models import peak_flops
    from hfpretrain.training import pretrain

    probes: dict[tuple[str, str, tuple[str, ...]], dict] = {}
    by_name = {s.name: s for s in spec.sizes}

    def probe(arm: str, size: str, extra: tuple[str, ...] = ()) -> dict:
        # extra: a setting check's overrides (its FLOPs, batch and recipe checked as its own)
        if (arm, size, extra) not in probes:
            overrides = [*spec.overrides, *by_name[size].recipe_overrides(arm), *spec.arms[arm], *extra]
            probes[arm, size, extra] = pretrain(spec.recipe, overrides, dry_run=True)
        return probes[arm, size, extra]

    sizes_for = None
    if spec.isoflop:

        def sizes_for(arm: str, budget: float) -> list[str]:
            # a size that would read its data more than max_passes times at this budget is no candidate:
            # the window moves up to larger models (data-limited budgets), instead of failing the plan
            costs, plans = [], {s.name: probe(arm, s.name)["plan"] for s in spec.sizes if s.window}
            for name, plan in plans.items():
                passes = budget / plan["flops_per_token"] / (plan["train_blocks"] * plan["seq_len"])
                if passes <= spec.rules.max_passes or spec.rules.over_passes != "exclude":
                    costs.append((name, plan["flops_per_token"], ratio_params(plan)))
            if not costs:
                raise ValueError(
                    f"{arm} at {budget:.3g} FLOPs: every size reads the training data more than "
                    f"rules.max_passes={spec.rules.max_passes:g} times: a smaller budget or more data"
                )
            window = pick_sizes(sorted(costs, key=lambda c: c[2]), budget, spec.isoflop)
            return window + [n for n in extra_sizes(spec.isoflop, arm, budget) if n not in window]

    grid = expand(spec, out, sizes_for) + multiplier_check_runs(spec, out)
    if spec.lr_checks:
        grid += lr_check_runs(spec, grid, lambda arm, size: probe(arm, size)["plan"])
    if spec.setting_checks:
        grid += setting_check_runs(spec, grid, lambda arm, size: probe(arm, size)["plan"])
    planned = []
    for run in grid:
        dry = probe(run.arm, run.size, tuple(setting_overrides(spec, run)))
        plan, training = dry["plan"], dry["recipe"]["training"]
        steps, extra = rule_overrides(spec.rules, plan, steps_for(run, plan), run.budget_kind, training)
        # a run stopped by SIGTERM left a checkpoint: the next pass continues from it
        overrides = [
            *run.overrides,
            *extra,
            "training.resume_from_checkpoint=auto",
            "training_flops=null",
            f"training.max_steps={steps}",
        ]
        if run.lr_factor is not None:  # after the rule's learning rate: the last value of a key wins
            lr = _last(overrides, "training.learning_rate", float(training.get("learning_rate", 5e-5)))
            overrides.append(f"training.learning_rate={lr * run.lr_factor:.6g}")
        overrides += setting_overrides(spec, run)  # last, as the LR factor: the setting's values win over the rules'
        micro = _last(
            overrides, "training.per_device_train_batch_size", int(training.get("per_device_train_batch_size", 8))
        )
        accum = _last(
            overrides, "training.gradient_accumulation_steps", int(training.get("gradient_accumulation_steps", 1))
        )
        samples = micro * accum * plan["world_size"]
        tokens = steps * samples * plan["seq_len"]
        flops = tokens * plan["flops_per_token"]
        peak = peak_flops(spec.gpu) if spec.gpu else plan["peak_flops_per_gpu"]
        mfu = float(spec.mfu.get(run.size, spec.mfu.get("default", plan["assumed_mfu"])))
        planned.append(
            (
                run,
                PlannedRun(
                    name=run.name,
                    arm=run.arm,
                    size=run.size,
                    budget=run.budget,
                    seed=run.seed,
                    params=ratio_params(plan),
                    tokens=tokens,
                    steps=steps,
                    batch_tokens=samples * plan["seq_len"],
                    learning_rate=_last(
                        overrides, "training.learning_rate", float(training.get("learning_rate", 5e-5))
                    ),
                    warmup_steps=_last(overrides, "training.warmup_steps", int(training.get("warmup_steps", 0))),
                    passes=steps * samples / plan["train_blocks"],
                    flops=flops,
                    gpu_hours=(flops / (peak * mfu * plan["world_size"]) + spec.overhead_s) / 3600 if peak else None,
                    overrides=overrides,
                    assumed=(plan.get("assumed") or {}).get("why"),
                ),
            )
        )
    return planned


def checked_plan(spec: StudySpec, out: str | Path | None = None, only_existing: bool = False, planned=None):
    """``plan_study`` (or the caller's part of it) with its warnings logged; its errors raised unless only
    finished runs are wanted."""
    planned = planned if planned is not None else plan_study(spec, out)
    errors, warnings = check_plan([p for _, p in planned], spec.rules)
    for w in warnings:
        logger.warning("plan: %s", w)
    if errors and not only_existing:
        raise ValueError(
            f"the study plan has {len(errors)} error(s), first: {errors[0]} "
            "(scripts/study.py SPEC --plan lists them all)"
        )
    return planned


def run_study(
    spec: StudySpec, out: str | Path | None = None, only_existing: bool = False, planned: list | None = None
) -> list[dict]:
    """Run every unfinished run of the study (in process, one after another); return the results rows.

    The plan is checked first: an error (a run shorter than its warmup, data repeated too often) stops
    the study before any training. ``only_existing``: train nothing, collect the finished runs
    (--report-only). On SIGTERM the run in progress saves a checkpoint and the study stops; the next
    call continues from there. ``planned``: the checked plan, where the caller has it (the workers').
    """
    import torch

    from hfpretrain.eval.callback import recipe_callbacks
    from hfpretrain.training import pretrain
    from hfpretrain.training.callbacks import STOP_REQUESTED

    planned = planned if planned is not None else checked_plan(spec, out, only_existing)
    runs = [run for run, _ in planned]
    # What exists now (the libraries' modules, the plan) outlives every run: frozen, it leaves the full collection
    # after each run (and accelerate's at the end of each Trainer), which otherwise walks it (the CPU micro study of
    # tests/study: 62.8 s -> 56.9 s).
    gc.freeze()
    for i, (run, p) in enumerate(planned, 1):
        if run.done:
            logger.info("[%d/%d] %s: done, skipped", i, len(runs), run.name)
            continue
        if only_existing:
            logger.warning("[%d/%d] %s: not finished, left out", i, len(runs), run.name)
            continue
        if STOP_REQUESTED.is_set():
            break
        with claim(run) as mine:
            if not mine:
                logger.info("[%d/%d] %s: another worker is training it", i, len(runs), run.name)
                continue
            if run.done:  # another worker finished it a moment ago
                continue
            logger.info("[%d/%d] %s: training (%d steps)", i, len(runs), run.name, p.steps)
            pretrain(spec.recipe, p.overrides, callbacks=recipe_callbacks)
        if not run.done:  # SIGTERM (preemption, a time limit): the whole study stops, resumable
            logger.warning(
                "[%d/%d] %s: stopped before its last step; the study stops here (run it again to "
                "continue from the run's checkpoint)",
                i,
                len(runs),
                run.name,
            )
            break
        gc.collect()  # the finished run's model and optimizer (the Trainer holds reference cycles)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return collect(runs)


def run_study_workers(spec: StudySpec, out: str | Path, workers: int, planned: list | None = None) -> list[dict]:
    """``run_study`` in ``workers`` processes per visible GPU (or ``workers`` on a CPU machine), each taking
    the next unclaimed run (see :func:`claim`) on the GPU it was given; logs in OUT/logs/worker<i>.log.
    Small models leave a GPU mostly idle and spend tens of seconds per run compiling on one CPU core, so a
    few runs side by side finish a grid of them sooner; the runs' own tokens/s and wall times are then those
    of a shared GPU. SIGTERM (a time limit, a preemption) reaches every worker: each saves its run in
    progress, as one process would. ``planned``: the runs to train, already checked (default: the whole plan,
    checked here)."""
    out = Path(out)
    # planned once, here or by the caller: a bad plan fails before any worker starts, and the workers do not each
    # repeat its dry runs (24 workers x 33 of them took 3 minutes of a 4-GPU machine)
    planned = planned if planned is not None else checked_plan(spec, out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
    gpus = worker_gpus(workers, visible_gpus())
    procs = [
        ctx.Process(target=_worker, args=(spec, out, out / "logs" / f"worker{i}.log", gpu, planned), name=f"worker{i}")
        for i, gpu in enumerate(gpus)
    ]
    previous = signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs if p.pid and p.is_alive()])
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = [
        f"{p.name} (exit {p.exitcode}, see logs/{p.name}.log)" for p in procs if p.exitcode not in (0, -signal.SIGTERM)
    ]
    if failed:
        raise RuntimeError(f"study workers failed: {', '.join(failed)}")
    return run_study(spec, out, only_existing=True, planned=planned)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (none on a CPU machine)."""
    import torch  # here, not at the top: a spec is read and checked without it

    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def worker_gpus(workers: int, gpus: list[str]) -> list[str | None]:
    """The GPU of each worker process: ``workers`` on every GPU, round robin so that the first runs of
    the plan spread over all of them (None: no GPU, ``workers`` processes in all)."""
    return [gpus[i % len(gpus)] if gpus else None for i in range(workers * max(1, len(gpus)))]


def _worker(spec: StudySpec, out: Path, log_path: Path, gpu: str | None, planned: list) -> None:
    if gpu is not None:  # before anything touches CUDA in this fresh (spawned) process
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    from hfpretrain.data.order import kill_loader_workers

    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)  # the descriptors, not sys.stdout: loader workers and compiler subprocesses write there too
    os.dup2(log, 2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", force=True)
    try:
        run_study(spec, out, planned=planned)
    finally:
        # A Process ends through multiprocessing's exit, not atexit: after a crash it would SIGTERM the
        # loader workers (which ignore it) and wait for them forever.
        kill_loader_workers()


@contextlib.contextmanager
def claim(run: Run):
    """Yield whether this process holds ``run``: an exclusive lock file per run under OUT/runs/.claims, so
    that several study processes (``--workers``) on one machine never train the same run. The operating
    system drops the lock when its process ends, killed or not: no stale claims after a preemption."""
    from hfpretrain.training.machine import launched_processes

    if launched_processes() > 1:  # the ranks of one launch train the same run, together
        yield True
        return
    from filelock import FileLock, Timeout

    folder = run.out_dir.parent.parent / ".claims"  # OUT/runs/<arm>/<cell> -> OUT/runs/.claims
    folder.mkdir(parents=True, exist_ok=True)
    # is_singleton=False: a second claim in this process is refused as another process's would be
    lock = FileLock(str(folder / f"{run.arm}__{run.out_dir.name}.lock"), timeout=0, is_singleton=False)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def study_folder(run_dir: str | Path) -> str | None:
    """The study folder a run folder sits in (``STUDY/runs/ARM/CELL``: the part before the last ``/runs/``)."""
    run_dir = str(run_dir)
    return os.path.normpath(run_dir.rsplit("/runs/", 1)[0]) if "/runs/" in run_dir else None


def trained_by(out_dir: str | Path) -> str | None:
    """The study folder a run was trained in (from its recipe's ``output_dir``): a run copied from another study
    (the MoE study's dense arm) says where it ran, and so under which spec's ``workers``."""
    return study_folder((_run_recipe(Path(out_dir)).get("training") or {}).get("output_dir") or "")


def _run_recipe(out_dir: Path) -> dict:
    """The run's recipe: recipe.yaml, else the config event its log.jsonl starts with (a run
    folder copied without its recipe.yaml still says what it was)."""
    if (out_dir / "recipe.yaml").is_file():
        return yaml.safe_load((out_dir / "recipe.yaml").read_text()) or {}
    from hfpretrain.study.plots import first_record, run_log

    log = run_log(out_dir)
    if log is not None:
        return first_record(log).get("recipe") or {}
    return {}


@functools.lru_cache(maxsize=None)
def _validation_tokens_per_byte(data_path: str) -> float | None:
    """Per data folder, once: a study's runs share a few (one per arm)."""
    from hfpretrain.data.manifest import read_manifest, tokens_per_byte

    manifest = read_manifest(data_path)
    return tokens_per_byte(manifest) if manifest else None


def _bits_per_byte(final_eval: dict, recipe: dict, plan: dict) -> float | None:
    """The final loss in bits per byte, from the data's manifest when it has the text's bytes; else the
    run's own figure if it was made from them (runs made before ``text_bytes`` logged bits per byte of the
    Arrow files: None for those)."""
    from hfpretrain.data.manifest import bits_per_byte

    data_path = (recipe.get("data") or {}).get("path")
    ratio = _validation_tokens_per_byte(str(data_path)) if data_path else None
    if ratio and "eval_loss" in final_eval:
        return bits_per_byte(final_eval["eval_loss"], ratio)
    return final_eval.get("eval_bpb") if plan.get("validation_text_bytes") else None


def result_row(run: Run) -> dict:
    """One results row from a finished run: summary.json, recipe.yaml (hyper-parameters), the plan."""
    summary = json.loads((run.out_dir / "summary.json").read_text())
    plan = summary["plan"]
    recipe = _run_recipe(run.out_dir)
    training = recipe.get("training") or {}
    steps = summary.get("global_step", plan["max_steps"])
    tokens = plan["tokens_per_step"] * steps
    final = summary.get("final_eval") or {}
    shape = plan.get("shape") or {}
    return {
        "run": run.name,
        "arm": run.arm,
        "size": run.size,
        "budget": run.budget,
        "seed": training.get("seed", run.seed),
        "params": plan["parameters"]["total"],
        "non_embedding_params": plan["parameters"]["non_embedding"],
        "ratio_params": ratio_params(plan) if "flops_per_token_head" in plan else None,
        "hidden_size": shape.get("hidden_size"),
        "layers": shape.get("num_hidden_layers"),
        "vocab_size": shape.get("vocab_size"),
        "steps": steps,
        "tokens": tokens,
        "batch_tokens": plan["tokens_per_step"],
        "learning_rate": training.get("learning_rate"),
        "warmup_steps": training.get("warmup_steps"),
        "schedule": training.get("lr_scheduler_type"),
        "flops_per_token": plan["flops_per_token"],
        "flops": plan["flops_per_token"] * tokens,
        "passes": plan.get("passes_over_data"),
        "device": plan.get("device"),
        **run_wall_time(run.out_dir, summary),
        "val_loss": _final_loss(run.out_dir, summary),
        "val_bpb": _bits_per_byte(final, recipe, plan),
        "lr_factor": run.lr_factor,
        # a setting check's name (only in its rows: the studies without setting checks keep their files' columns)
        **({"setting": run.setting} if run.setting is not None else {}),
        **({"multiplier_check": True} if run.multiplier_check else {}),  # only in its rows, as "setting"
        "out_dir": str(run.out_dir),
        # per validation set (runs made since the manifest has text_bytes_per_set): only in results.json
        **({"val_bpb_per_set": final["eval_bpb_per_set"]} if final.get("eval_bpb_per_set") else {}),
    }


def run_wall_time(out_dir: Path, summary: dict) -> dict:
    """Training wall time of a run made of several processes (a preempted run resumed, a killed one restarted).

    ``summary.json``'s ``train_runtime`` is the Trainer's clock of the *last* process only, so a run resumed
    from a checkpoint reported its post-resume part alone (the 2.5e16 vocabulary runs: 299 s of 664). log.jsonl
    holds every process: each starts with a ``config`` event (at the step it resumed from) and a finished one
    ends with a ``summary`` event. ``wall_time_s`` sums the processes behind the result, from the last one that
    started at step 0; ``wall_time_all_s`` also counts attempts the result does not descend from (a restart from
    scratch when no checkpoint survived). A process killed before its summary counts from its config event to
    its last event: a lower bound, flagged by ``wall_time_partial``."""
    segments: list[dict] = []
    from hfpretrain.study.plots import read_log, run_log

    log = run_log(out_dir)
    if log is not None:
        for e in read_log(log):
            if e.get("event") == "config":
                segments.append({"start": e.get("step", 0), "t0": e["time"], "t1": e["time"], "runtime": None})
            elif segments and "time" in e:
                segments[-1]["t1"] = e["time"]
                if e.get("event") == "summary":
                    segments[-1]["runtime"] = (e.get("train") or {}).get("train_runtime")
    if not segments:  # no log: the summary's figure is all there is
        runtime = (summary.get("train") or {}).get("train_runtime")
        return {"wall_time_s": runtime, "wall_time_all_s": runtime, "processes": 1, "wall_time_partial": False}
    times = [s["runtime"] if s["runtime"] is not None else s["t1"] - s["t0"] for s in segments]
    fresh = max(i for i, s in enumerate(segments) if not s["start"]) if any(not s["start"] for s in segments) else 0
    return {
        "wall_time_s": float(sum(times[fresh:])),
        "wall_time_all_s": float(sum(times)),
        "processes": len(segments),
        "wall_time_partial": any(s["runtime"] is None for s in segments[fresh:]),
    }


def _final_loss(out_dir: Path, summary: dict) -> float | None:
    """The final evaluation's loss; else the last eval event of log.jsonl (eval_strategy=no gives none)."""
    loss = (summary.get("final_eval") or {}).get("eval_loss")
    from hfpretrain.study.plots import read_log, run_log

    log = run_log(out_dir)
    if loss is None and log is not None:
        evals = [e["eval_loss"] for e in read_log(log) if e.get("event") == "eval" and "eval_loss" in e]
        loss = evals[-1] if evals else None
    return loss


COLUMNS = [
    "run",
    "arm",
    "size",
    "budget",
    "seed",
    "params",
    "non_embedding_params",
    "ratio_params",
    "hidden_size",
    "layers",
    "vocab_size",
    "steps",
    "tokens",
    "batch_tokens",
    "learning_rate",
    "warmup_steps",
    "schedule",
    "flops_per_token",
    "flops",
    "passes",
    "device",
    "wall_time_s",
    "wall_time_all_s",
    "processes",
    "wall_time_partial",
    "val_loss",
    "val_bpb",
    "lr_factor",
    "setting",  # only where a row has one (setting checks)
    "multiplier_check",  # only where a row has one
    "out_dir",
]


def collect(runs: list[Run]) -> list[dict]:
    return [result_row(r) for r in runs if r.done]


CELL = re.compile(
    r"^(?P<size>.+?)__(?P<label>tok[^_]+|s\d+|c[^_]+)(?:__lr(?P<lr>[0-9.e+-]+))?"
    rf"(?:__(?!seed-?\d+$)(?P<setting>{SETTING_NAME.pattern}))?(?:__seed(?P<seed>-?\d+))?$"
)


def _planned_check(spec: StudySpec, arm: str, budget: float, lr_factor: float | None, setting: str | None) -> bool:
    """Whether a folder's check (or grid run: neither) is one of the spec's: its arm, budget, factor or setting
    named."""
    at = functools.partial(math.isclose, budget, rel_tol=1e-9)
    if setting is not None:
        return any(
            at(e["budget"]) and setting in e["settings"] and arm in e["settings"][setting]["arms"]
            for e in spec.setting_checks
        )
    if lr_factor is not None:
        return any(
            at(e["budget"])
            and arm in e.get("arms", spec.arms)
            and any(math.isclose(lr_factor, f) for f in e["factors"])
            for e in spec.lr_checks
        )
    return True


def folder_runs(spec: StudySpec, out: str | Path) -> list[Run]:
    """The finished runs under OUT/runs/<arm>/<cell>, read from their folders alone: no dry run, so a study's
    committed results re-analyse on a machine without its tokenized data (``plan_study`` needs the data).
    Order: the spec's arms, sizes and budgets, then seed; a folder the spec does not name is left out."""
    root = Path(out) / "runs"
    sizes = {s.name: i for i, s in enumerate(spec.sizes)}
    labels = {budget_label(spec.budget_kind, b): b for b in spec.budgets}
    # an LR or setting check may sit at a multiplier check's budget too
    check_labels = labels | {budget_label(spec.budget_kind, e["budget"]): e["budget"] for e in spec.multiplier_checks}
    checked: dict = {}  # (arm, label) -> (budget, {(size, seed)}) of the multiplier checks there
    for e in spec.multiplier_checks:
        budget, pairs = checked.setdefault(
            (e["arm"], budget_label(spec.budget_kind, e["budget"])), (e["budget"], set())
        )
        pairs |= {(n, s) for n in e["sizes"] for s in e.get("seeds", spec.seeds) or [None]}
    runs = []
    for a, arm in enumerate(spec.arms):
        for folder in sorted((root / arm).iterdir()) if (root / arm).is_dir() else []:
            m = CELL.match(folder.name)
            if not m or m["size"] not in sizes:
                continue
            seed = int(m["seed"]) if m["seed"] is not None else None
            check = checked.get((arm, m["label"]))
            grid_run = not m["lr"] and not m["setting"]
            multiplier = bool(check) and grid_run and (m["size"], seed) in check[1]
            if not multiplier and (
                m["label"] not in (labels if grid_run else check_labels)
                or not _planned_check(
                    spec, arm, check_labels[m["label"]], float(m["lr"]) if m["lr"] else None, m["setting"]
                )
                or (grid_run and seed not in spec.seeds_for(labels[m["label"]]))
            ):
                continue  # another budget or seed, or a check this spec does not plan (another study's folder)
            run = Run(
                name=f"{arm}/{folder.name}",
                arm=arm,
                size=m["size"],
                budget_kind=spec.budget_kind,
                budget=check[0] if multiplier else check_labels[m["label"]],
                out_dir=folder,
                overrides=(),
                seed=seed,
                lr_factor=float(m["lr"]) if m["lr"] else None,
                setting=m["setting"],
                multiplier_check=multiplier,
            )
            if run.done:
                order = (run.lr_factor or 1.0, run.setting or "", seed if seed is not None else -1)
                runs.append((a, sizes[run.size], run.budget, *order, run))
    return [r for *_, r in sorted(runs, key=lambda t: t[:6])]


def write_results(rows: list[dict], out: str | Path) -> tuple[Path, Path]:
    """results.csv and results.json in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    optional = ("setting", "multiplier_check")
    columns = [c for c in COLUMNS if c not in optional or any(c in r for r in rows)]
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    return out / "results.csv", out / "results.json"
