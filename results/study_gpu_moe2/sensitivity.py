"""Other readings of the MoE compute multiplier at 2.5e16 than the report's (README § Result): the same per-budget
optima (analysis.json) fitted other ways with the project's own fit code. Each reading also gives the multiplier at
every budget and its trend (the slope of a line in ln C through them, as a factor per decade of compute): the trend
depends on the floor E of the dense fit. Run from the repository root:

    python results/study_gpu_moe2/sensitivity.py > results/study_gpu_moe2/sensitivity.txt
"""

import json
import math
from pathlib import Path

import numpy as np

from hfpretrain.study.analysis import compute_multiplier
from hfpretrain.study.fit import PowerLawFit, fit_power_law, fit_power_law_at, fit_shared_floor

HERE = Path(__file__).parent
BUDGETS = ("8e+14", "2.5e+15", "8e+15", "2.5e+16")
optima = json.loads((HERE / "analysis.json").read_text())["optima"]


def points(arm: str, measured: tuple = (), drop: tuple = ()) -> tuple[list, list]:
    """(C, L) of an arm's optima; at the budgets in ``measured`` the best measured seed mean instead."""
    cells = [optima[f"{arm} @ {b}"] for b in BUDGETS if b not in drop]
    keys = [b for b in BUDGETS if b not in drop]
    return [o["flops"] for o in cells], [
        o["best_measured"]["loss"] if b in measured else o["loss_opt"] for b, o in zip(keys, cells)
    ]


def shared(measured: tuple = (), drop: tuple = ()) -> PowerLawFit:
    return fit_shared_floor({"dense": points("dense", measured, drop), "moe": points("moe", measured, drop)})["dense"]


c_top, moe_top = optima["moe @ 2.5e+16"]["flops"], optima["moe @ 2.5e+16"]["loss_opt"]
readings = {
    "shared floor, as reported": shared(),
    "shared floor, the flagged 8e14 optima replaced by the best measured means": shared(measured=("8e+14",)),
    "shared floor, without 8e14": shared(drop=("8e+14",)),
    "the dense arm's own floor (separate-E fit)": fit_power_law(*points("dense")),
}
vocab2 = json.loads((HERE.parent / "study_gpu_vocab2" / "fits.json").read_text())["arms"]["bpe_8k"]["fit"]
readings["the vocabulary study's fit of the same dense runs (its floor shared with two other arms)"] = PowerLawFit(
    E=vocab2["E"], A=vocab2["A"], alpha=vocab2["alpha"], n=vocab2["n"], r2=vocab2["r2"], rmse=vocab2["rmse"]
)
moe_c, moe_l = points("moe")


def trend(fit: PowerLawFit, drop: tuple = ()) -> str:
    """The multiplier at every budget (those of ``drop`` left out) on ``fit`` and its slope per decade."""
    keep = [i for i, b in enumerate(BUDGETS) if b not in drop]
    m = [compute_multiplier(fit, moe_l[i], moe_c[i]) for i in keep]
    per_decade = 10 ** np.polyfit(np.log([moe_c[i] for i in keep]), np.log(m), 1)[0]
    return f"{' / '.join(f'{x:.2f}' for x in m)} at {', '.join(BUDGETS[i] for i in keep)}: x{per_decade:.2f} per decade"


for name, fit in readings.items():
    drop = ("8e+14",) if "without 8e14" in name else ()
    print(f"{compute_multiplier(fit, moe_top, c_top):5.2f}  {name} (E = {fit.E:.3f}); {trend(fit, drop)}")
# a straight line in ln C through the dense optima at 8e15 and 2.5e16, extended to the MoE optimum's loss
(c1, c2), (l1, l2) = (x[2:] for x in points("dense"))
slope = (l2 - l1) / math.log(c2 / c1)
print(f"{math.exp((moe_top - l2) / slope):5.2f}  a straight line in ln C through the dense optima at 8e15 and 2.5e16")

# the trend at other floors: the dense arm's curve refitted (A, α) at each E, the MoE optima read on it
print("The trend at other floors of the dense fit (A and alpha refitted at each E):")
for E in (
    0.869,
    0.95,
    1.0,
    readings["shared floor, as reported"].E,
    readings["the dense arm's own floor (separate-E fit)"].E,
):
    print(f"  E = {E:.3f}: {trend(fit_power_law_at(*points('dense'), E))}")
