"""Fit L(C) = E + A · C^(−α) (loss against training compute) with numpy only; several curves with one
shared E (``fit_shared_floor``).

For a fixed irreducible loss E the law is a straight line in log space,
    log(L − E) = log A − α · log C,
so A and α come from linear least squares *of log(L − E)*. E is found by a 1-D search over [0, min L) (a grid,
then repeated zooms around the best point): the E whose curve, with that E's A and α as the line gives them, has
the smallest squared error of log L (the predicted log loss against the observed one, so every point weighs the
same whatever its scale). A and α are not refitted on log L: the result is a profile over E of this two-step
fit, not the least-squares minimum of log L over E, A and α together, which can lie elsewhere (lower sum of
squares, another E; results/study_gpu_moe2/sensitivity.txt sets the joint fit's multiplier beside the reported
one). With fewer than 3 points E cannot be identified: it is fixed at 0 (a pure power law).

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
    fixed_E: bool = False  # E not fitted: held at 0 (too few points) or given (``fit_power_law_at``)

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
        raise ValueError(
            f"need points spanning at least {MIN_COMPUTE_SPAN}x in compute, got "
            f"{c.min():.4g}..{c.max():.4g} (one budget)"
        )
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


def fit_power_law_at(compute, loss, E: float) -> PowerLawFit:
    """A and α of E + A·C^(−α) for a given floor E (below every loss): the line through log(L − E) against
    log C. The floor's sensitivity: a figure read off a fit changes with E, which few budgets do not pin down."""
    c, y = _points(compute, loss)
    if not 0 <= E < float(y.min()):
        raise ValueError(f"the floor E = {E:.4g} must lie in [0, {float(y.min()):.4g}) (the lowest loss)")
    return _result(c, y, float(E), True)


def fit_shared_floor(points: dict, grid: int = 200, zooms: int = 30) -> dict[str, PowerLawFit]:
    """One E for every curve, A and α per curve: L_k(C) = E + A_k·C^(−α_k), ``points`` = {key: (C, L)}.

    For losses of the same text in the same unit (bits per byte of one validation set, whatever the tokenizer)
    the irreducible part is a property of the text, not of the model family: sharing it is the main model of
    an ablation, and it lets curves with few points each pin E together. E is searched as in ``fit_power_law``:
    each curve's A and α from the line through its log(L − E), E the value whose curves have the smallest summed
    squared error of log L (not a joint least-squares fit of every parameter); with fewer than 3 points in all, E
    is fixed at 0."""
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


@dataclass(frozen=True)
class NDFit:
    """L(N, D) = E + A·N^(−α) + B·D^(−β) (Hoffmann et al. 2022, approach 3): loss of a model of N parameters
    trained on D tokens, fitted on every run of an arm (not on per-budget optima)."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    n: int  # runs fitted
    rmse: float  # root-mean-square error of L (in the loss' unit)

    def predict(self, n, d):
        n, d = np.asarray(n, dtype=float), np.asarray(d, dtype=float)
        return self.E + self.A * n ** (-self.alpha) + self.B * d ** (-self.beta)

    def as_dict(self) -> dict:
        return asdict(self)

    def formula(self) -> str:
        return f"L(N, D) = {self.E:.4g} + {self.A:.4g}·N^(−{self.alpha:.4g}) + {self.B:.4g}·D^(−{self.beta:.4g})"


ND_STARTS = dict(alpha=(0.2, 0.5, 1.0), beta=(0.2, 0.5, 1.0), e_frac=(0.0, 0.5))


def fit_nd(n, d, loss, start: NDFit | None = None) -> NDFit:
    """Least squares of log L (every run weighs the same whatever its loss) with scipy, E ≥ 0 and below the lowest
    loss, exponents in [0.01, 3]. N and D are scaled by their geometric means so A and B stay well-conditioned.
    The sum of squares has several local minima: a grid of starts (``ND_STARTS``), the best kept; ``start`` (a
    previous fit, in the bootstrap) replaces the grid. Needs more runs than its 5 parameters."""
    from scipy.optimize import least_squares

    n, d, y = (np.asarray(v, dtype=float) for v in (n, d, loss))
    keep = np.isfinite(n) & np.isfinite(d) & np.isfinite(y) & (n > 0) & (d > 0) & (y > 0)
    n, d, y = n[keep], d[keep], y[keep]
    if len(y) < 6:
        raise ValueError(f"L(N, D) has 5 parameters: need at least 6 runs, got {len(y)}")
    n0, d0 = float(np.exp(np.log(n).mean())), float(np.exp(np.log(d).mean()))
    ln_n, ln_d, ly, top = np.log(n / n0), np.log(d / d0), np.log(y), float(y.min())

    def residual(p):  # p = E, ln A', α, ln B', β (A' = A·n0^−α: the scaled coefficient)
        pred = p[0] + np.exp(p[1] - p[2] * ln_n) + np.exp(p[3] - p[4] * ln_d)
        return np.log(pred) - ly

    lo, hi = [0.0, -30, 0.01, -30, 0.01], [top * (1 - 1e-6), 10, 3.0, 10, 3.0]
    if start is not None:
        starts = [
            [
                min(start.E, top * 0.99),
                math.log(start.A) - start.alpha * math.log(n0),
                start.alpha,
                math.log(start.B) - start.beta * math.log(d0),
                start.beta,
            ]
        ]
    else:
        starts = [
            [f * top, math.log(0.3 * top), a, math.log(0.3 * top), b]
            for f in ND_STARTS["e_frac"]
            for a in ND_STARTS["alpha"]
            for b in ND_STARTS["beta"]
        ]
    best = None
    for p0 in starts:
        p0 = np.clip(p0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
        sol = least_squares(residual, p0, bounds=(lo, hi), x_scale="jac")
        if best is None or sol.cost < best.cost:
            best = sol
    E, la, alpha, lb, beta = (float(v) for v in best.x)
    fit = NDFit(E=E, A=math.exp(la) * n0**alpha, alpha=alpha, B=math.exp(lb) * d0**beta, beta=beta, n=len(y), rmse=0.0)
    return NDFit(**{**fit.as_dict(), "rmse": float(np.sqrt(np.mean((fit.predict(n, d) - y) ** 2)))})
