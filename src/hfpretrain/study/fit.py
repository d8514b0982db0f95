"""Fit L(C) = E + A · C^(−α) (loss against training compute) with numpy only; several curves with one
shared E (``fit_shared_floor``).

For a fixed irreducible loss E the law is a straight line in log space,
    log(L − E) = log A − α · log C,
so A and α come from linear least squares. E is found by a 1-D search over [0, min L): a grid,
then repeated zooms around the best point, minimising the squared error of log L (the predicted
log loss against the observed log loss, so every point weighs the same whatever its scale).
With fewer than 3 points E cannot be identified: it is fixed at 0 (a pure power law).

The compute-efficient frontier: in each compute bucket (``bucket_decades`` wide in log10 C) the
lowest loss; the classic scaling-law fit is on those points, not on every (size, budget) cell.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class PowerLawFit:
    E: float
    A: float
    alpha: float
    n: int  # points fitted
    r2: float  # R² of log L (1 = perfect)
    rmse: float  # root-mean-square error of log L (≈ relative error of L)
    fixed_E: bool = False  # E held at 0 (too few points)

    def predict(self, compute):
        return self.E + self.A * np.asarray(compute, dtype=float) ** (-self.alpha)

    def as_dict(self) -> dict:
        return asdict(self)

    def formula(self) -> str:
        return f"L(C) = {self.E:.4g} + {self.A:.4g} · C^(−{self.alpha:.4g})"


MIN_COMPUTE_SPAN = 1.5  # a fit of L(C) needs points of more than one budget


def _fit_given_Es(logc: np.ndarray, loss: np.ndarray, es: np.ndarray) -> tuple[np.ndarray, ...]:
    """(log A, alpha, sse of log L) for each fixed E of ``es``: log(L − E) is a line in log C, fitted in closed
    form for all of them in one array operation (the bootstrap of a study fits thousands of times)."""
    y = np.log(loss[None, :] - es[:, None])
    x = -logc
    xc = x - x.mean()
    alpha = (y * xc).sum(axis=1) / (xc * xc).sum()
    log_a = y.mean(axis=1) - alpha * x.mean()
    pred = es[:, None] + np.exp(log_a[:, None] - alpha[:, None] * logc[None, :])
    return log_a, alpha, ((np.log(pred) - np.log(loss)[None, :]) ** 2).sum(axis=1)


def _search_E(sses, hi: float, grid: int, zooms: int) -> float:
    """argmin of the sum of squares over E in [0, hi) (``sses``: an array of E values -> their sums of squares):
    a grid, then repeated zooms around the best point (the sum of squares is not convex in E and often flat: a
    grid does not get stuck where a local optimiser can)."""
    lo, top = 0.0, hi * (1 - 1e-9)
    best_e, best_sse = 0.0, math.inf
    for _ in range(zooms):
        es = np.linspace(lo, top, grid)
        here = sses(es)
        i = int(np.argmin(here))
        if here[i] < best_sse:
            best_e, best_sse = float(es[i]), float(here[i])
        step = (top - lo) / (grid - 1)
        lo, top = max(0.0, best_e - step), min(hi * (1 - 1e-12), best_e + step)
        if top - lo < 1e-14 * max(hi, 1.0):
            break
    return best_e


def _points(compute, loss) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(compute, dtype=float)
    y = np.asarray(loss, dtype=float)
    keep = np.isfinite(c) & np.isfinite(y) & (c > 0) & (y > 0)
    c, y = c[keep], y[keep]
    if len(c) < 2 or len(np.unique(c)) < 2:
        raise ValueError(f"need at least 2 points with distinct compute, got {len(c)}")
    if c.max() / c.min() < MIN_COMPUTE_SPAN:
        # the sizes of one IsoFLOP budget differ in compute only by max_steps' rounding (0.1%): a fit through
        # them has no slope to find (alpha ran to ~1e3 and A overflowed)
        raise ValueError(f"need points spanning at least {MIN_COMPUTE_SPAN}x in compute, got "
                         f"{c.min():.4g}..{c.max():.4g} (one budget)")
    return c, y


def _result(c: np.ndarray, y: np.ndarray, E: float, fixed: bool) -> PowerLawFit:
    # Normalise C so the intercept stays well-conditioned (C ~ 1e12..1e20); A is converted back.
    c0 = float(np.exp(np.mean(np.log(c))))
    log_a, alpha, sse = (float(v[0]) for v in _fit_given_Es(np.log(c / c0), y, np.array([E])))
    A = math.exp(log_a) * c0**alpha  # A·(C/c0)^-α = A·c0^α · C^-α
    ly = np.log(y)
    sst = float(np.sum((ly - ly.mean()) ** 2))
    r2 = 1 - sse / sst if sst > 0 else 1.0
    return PowerLawFit(E=E, A=A, alpha=alpha, n=len(c), r2=r2, rmse=math.sqrt(sse / len(c)), fixed_E=fixed)


def fit_power_law(compute, loss, grid: int = 200, zooms: int = 30) -> PowerLawFit:
    """Fit E + A·C^(−α) to points (C, L); C > 0, L > 0, at least 2 points with distinct C."""
    c, y = _points(compute, loss)
    if len(c) < 3:
        return _result(c, y, 0.0, True)
    logc = np.log(c / float(np.exp(np.mean(np.log(c)))))
    E = _search_E(lambda es: _fit_given_Es(logc, y, es)[2], float(y.min()), grid, zooms)
    return _result(c, y, E, False)


def fit_shared_floor(points: dict, grid: int = 200, zooms: int = 30) -> dict[str, PowerLawFit]:
    """One E for every curve, A and α per curve: L_k(C) = E + A_k·C^(−α_k), ``points`` = {key: (C, L)}.

    For losses of the same text in the same unit (bits per byte of one validation set, whatever the tokenizer)
    the irreducible part is a property of the text, not of the model family: sharing it is the primary model of
    an ablation, and it lets curves with few points each pin E together. E minimises the summed squared error of
    log L over all curves; with fewer than 3 points in all, E is fixed at 0."""
    data = {k: _points(c, y) for k, (c, y) in points.items()}
    total = sum(len(c) for c, _ in data.values())
    fixed = total < 3 or total <= len(data) * 2  # 2 parameters per curve + E: identifiable only with more points
    E = 0.0
    if not fixed:
        logs = {k: (np.log(c / float(np.exp(np.mean(np.log(c))))), y) for k, (c, y) in data.items()}
        hi = min(float(y.min()) for _, y in data.values())
        E = _search_E(lambda es: sum(_fit_given_Es(lc, y, es)[2] for lc, y in logs.values()), hi, grid, zooms)
    return {k: _result(c, y, E, fixed) for k, (c, y) in data.items()}


def frontier(rows: list[dict], bucket_decades: float = 0.25, x: str = "flops", y: str = "val_loss") -> list[dict]:
    """The compute-efficient frontier: per log10-compute bucket, the row with the lowest loss.

    Buckets are centred on multiples of w (bucket k holds log10 C in [(k-½)·w, (k+½)·w)), so they
    do not move when runs are added, and a grid's nominal budgets (1e15, 3e15, 1e16) sit in the
    middle of theirs: the runs of one budget land in one bucket although rounding max_steps moves
    each run's compute by a little (with edges at 1e15, a GPU study's 9.96e14 and 1.002e15 runs
    landed on both sides, and the worse one made the frontier). A bucket's point is also dropped
    when a lower-compute bucket already reached a lower loss (a bigger budget that did worse is not
    on the frontier).
    """
    best: dict[int, dict] = {}
    for r in rows:
        if r.get(y) is None or not r.get(x):
            continue
        k = round(math.log10(r[x]) / bucket_decades)
        if k not in best or r[y] < best[k][y]:
            best[k] = r
    out, lowest = [], math.inf
    for k in sorted(best):
        if best[k][y] < lowest:
            out.append(best[k])
            lowest = best[k][y]
    return out


def fit_arms(rows: list[dict], bucket_decades: float = 0.25, y: str = "val_loss") -> dict[str, dict]:
    """Per arm: the frontier points and the fit on them (on every point if the frontier has < 3
    points and the arm has more), of ``y`` (val_loss, or val_bpb across tokenizers).
    Value: {"fit": PowerLawFit | None, "frontier": rows, "on": str}."""
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        arm_rows = [r for r in rows if r["arm"] == arm and r.get(y) is not None]
        front = frontier(arm_rows, bucket_decades, y=y)
        points, on = front, "frontier"
        if len(front) < 3 and len(arm_rows) > len(front):
            points, on = arm_rows, "all points"
        try:
            fit = fit_power_law([r["flops"] for r in points], [r[y] for r in points])
        except ValueError:
            fit = None
        out[arm] = {"fit": fit, "frontier": front, "on": on}
    return out
