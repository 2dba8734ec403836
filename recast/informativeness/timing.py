"""Where a reward's gains land on any sampling grid, from its discriminability curve measured on other grids.

D_k(σ) is a property of the model, the reward and the noise level σ, not of the grid that samples it (with an exact
posterior sampler). So with the curve normalised to F_k(σ) = D_k(σ) / D_k(0) (0 at σ = 1, 1 at σ = 0, non-increasing
in σ), the centre of mass of a reward's telescoping gains on a T-step grid σ_0 = 1 > σ_1 > … > σ_T = 0 is a sum of
one term per interior grid point (Abel summation of Σ_j j (F_{j+1} − F_j)):

    com = Σ_{j=1}^{T−1} (1 − F(σ_j)).

Each interior point adds what is still undecided there. Two consequences that need no search:

- a reward decided in the noisiest third (com ≤ T/3 − 1/2) and one decided in the cleanest third (com ≥ 2T/3 − 1/2)
  need Σ_j (F_early(σ_j) − F_late(σ_j)) ≥ T/3, so some σ must have F_early − F_late ≥ T / (3 (T − 1)) (0.4 at T = 6);
- which grids meet a set of such bounds is a search over the interior points alone (`feasible_grids`).

The curve between measured points is either interpolated linearly in σ or bracketed by monotonicity: for
σ_a > σ > σ_b, F(σ_a) ≤ F(σ) ≤ F(σ_b). The bracket gives the feasible set of every monotone curve through the points,
so a grid it rules out is ruled out whatever the curve does between them.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "TimingCurve",
    "normalised_curve",
    "pool_curves",
    "curve_at",
    "centre_of_mass_on_grid",
    "third_bounds",
    "gap_needed",
    "feasible_grids",
]

_MAX_GRIDS = 5_000_000


def normalised_curve(D) -> torch.Tensor:
    """F = fit / fit[..., −1] for the monotone fit (`pav_nondecreasing`) of each row of D over the grid σ_0 = 1 … σ_T.

    Args:
        D: (T + 1,) or (K, T + 1), finite, D[..., 0] = 0.

    Returns:
        float64 tensor of D's shape, non-decreasing along each row from 0 to 1; a row whose fit ends at ≤ 0 (no
        information anywhere) is NaN.
    """
    from recast.informativeness.discriminability import pav_nondecreasing

    fit = pav_nondecreasing(D)
    end = fit[..., -1:]
    return torch.where(end > 0, fit / torch.where(end > 0, end, torch.ones(())), torch.full_like(fit, math.nan))


@dataclass(frozen=True)
class TimingCurve:
    """Normalised discriminability curves of K rewards at P measured noise levels (`pool_curves`).

    Attributes:
        sigma: (P,) float64 from 1 down to 0.
        F: (K, P) float64, each row non-decreasing from 0 (σ = 1) to 1 (σ = 0).
    """

    sigma: np.ndarray
    F: np.ndarray

    def at(self, sigma, mode: str = "linear") -> np.ndarray:
        """`curve_at` on this curve: (K, G)."""
        return curve_at(self.sigma, self.F, sigma, mode)


def pool_curves(profiles: Sequence[tuple]) -> TimingCurve:
    """One normalised curve per reward from profiles measured on several grids (several batches or shifts).

    Args:
        profiles: (sigmas (T + 1,), D (K, T + 1)) pairs; the K rows are the same rewards in every profile.

    Returns:
        TimingCurve: every profile's interior points and the two ends σ = 1 (F = 0) and σ = 0 (F = 1), sorted from
        noisy to clean (profiles that share a σ are averaged there), each row then projected onto non-decreasing
        sequences (equal weights).

    Raises:
        ValueError: no profiles, rows that disagree in number, a grid that is not 1 > … > 0, or a row without
        information (D(0) ≤ 0).
    """
    from recast.informativeness.discriminability import pav_nondecreasing

    if not profiles:
        raise ValueError("need at least one (sigmas, D) profile")
    sig, F = [], []
    K = None
    for sigmas, D in profiles:
        s = np.asarray(torch.as_tensor(sigmas, dtype=torch.float64))
        f = normalised_curve(torch.as_tensor(D, dtype=torch.float64).reshape(-1, len(s))).numpy()
        if K is None:
            K = f.shape[0]
        if f.shape[0] != K:
            raise ValueError(f"every profile needs the same {K} rewards, got {f.shape[0]}")
        if s.ndim != 1 or len(s) < 2 or s[0] != 1.0 or s[-1] != 0.0 or not (np.diff(s) < 0).all():
            raise ValueError(f"sigmas must run from 1 down to 0, strictly decreasing, got {s.tolist()}")
        if np.isnan(f).any():
            raise ValueError("a reward has no information on this grid (D(0) <= 0): it has no timing to pool")
        sig.append(s[1:-1])
        F.append(f[:, 1:-1])
    sig = np.concatenate([[1.0], *sig, [0.0]])
    F = np.concatenate([np.zeros((K, 1)), *F, np.ones((K, 1))], axis=1)
    levels, inverse = np.unique(-sig, return_inverse=True)  # noisy to clean; one point per distinct σ
    merged = np.stack([F[:, inverse == i].mean(1) for i in range(levels.size)], axis=1)
    return TimingCurve(-levels, pav_nondecreasing(merged).numpy())


def curve_at(sigma_pts, F, sigma, mode: str = "linear") -> np.ndarray:
    """The pooled curve at other noise levels.

    Args:
        sigma_pts: (P,) measured σ from 1 down to 0 (`pool_curves`); F: (K, P) non-decreasing rows.
        sigma: (G,) noise levels in [0, 1].
        mode: ``"linear"`` (interpolation in σ), ``"upper"`` / ``"lower"`` (the largest / smallest value any
            non-increasing curve through the points can take: F at the next measured point on the clean / noisy side).

    Returns:
        (K, G) float64.
    """
    s = np.asarray(sigma_pts, dtype=np.float64)
    F = np.asarray(F, dtype=np.float64)
    q = np.asarray(sigma, dtype=np.float64)
    if s.ndim != 1 or F.ndim != 2 or F.shape[1] != s.size or s[0] != 1.0 or s[-1] != 0.0 or (np.diff(s) > 0).any():
        raise ValueError(f"sigma_pts must run from 1 down to 0 with F (K, {s.size}), got F {F.shape}")
    if (q < 0).any() or (q > 1).any():
        raise ValueError("sigma must lie in [0, 1]")
    if mode == "linear":
        return np.stack([np.interp(q, s[::-1], row[::-1]) for row in F])
    if mode not in ("upper", "lower"):
        raise ValueError(f"mode must be 'linear', 'upper' or 'lower', got {mode!r}")
    asc = s[::-1]
    if mode == "upper":  # the first measured point at or below σ (cleaner): F there bounds F(σ) from above
        idx = s.size - 1 - (np.searchsorted(asc, q, side="right") - 1)
    else:  # the first measured point at or above σ (noisier)
        idx = s.size - 1 - np.searchsorted(asc, q, side="left")
    return F[:, idx]


def centre_of_mass_on_grid(F_interior) -> np.ndarray:
    """com = Σ_j (1 − F(σ_j)) over a grid's T − 1 interior points: ``F_interior`` (..., T − 1) -> (...).

    Equals `gains_centre_of_mass(telescoping_gains(D))` when F is `normalised_curve(D)` at the interior points.
    """
    F = np.asarray(F_interior, dtype=np.float64)
    return (1.0 - F).sum(-1)


def third_bounds(num_steps: int) -> dict[str, tuple[float, float]]:
    """The centre-of-mass ranges of the noisiest, middle and cleanest third of a grid of ``num_steps`` columns.

    Column j spans [j − 1/2, j + 1/2] in index units, so the thirds split [−1/2, T − 1/2] at T/3 − 1/2 and
    2T/3 − 1/2: at T = 6, early ≤ 1.5 and late ≥ 3.5.
    """
    if num_steps < 3:
        raise ValueError(f"thirds need num_steps >= 3, got {num_steps}")
    a, b = num_steps / 3 - 0.5, 2 * num_steps / 3 - 0.5
    return {"early": (0.0, a), "mid": (a, b), "late": (b, num_steps - 1.0)}


def gap_needed(num_steps: int) -> float:
    """The least max_σ (F_early(σ) − F_late(σ)) with which any grid of ``num_steps`` columns can put one reward in
    the noisiest third and another in the cleanest: T / (3 (T − 1))."""
    if num_steps < 3:
        raise ValueError(f"thirds need num_steps >= 3, got {num_steps}")
    return num_steps / (3 * (num_steps - 1))


@functools.lru_cache(maxsize=4)
def _combinations(n: int, r: int) -> np.ndarray:
    """Every r-subset of range(n) in lexicographic order, (C(n, r), r) int32, read-only (cached for bootstraps)."""
    idx = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), r)), dtype=np.int32,
                      count=math.comb(n, r) * r).reshape(-1, r)
    idx.flags.writeable = False
    return idx


def feasible_grids(curve: TimingCurve, lattice, num_steps: int, bounds: Mapping[int, tuple[float, float]], *,
                   mode: str = "linear") -> np.ndarray:
    """Every grid with interior points on ``lattice`` whose centres of mass meet ``bounds``.

    Args:
        curve: the pooled curves (`pool_curves`), K rows.
        lattice: (G,) candidate interior σ in (0, 1); a grid takes T − 1 distinct ones.
        num_steps: T.
        bounds: row index -> (lo, hi), the closed range its centre of mass must reach (`third_bounds`).
        mode: ``"linear"``: the interpolated curve must meet every bound. ``"bracket"``: some non-increasing curve
            through the points must (each row's com ranges over [com with the upper curve, com with the lower one]
            and that range must meet [lo, hi]), so a grid left out here is ruled out by the points alone.

    Returns:
        (M, T − 1) float64 interior points of the feasible grids, each row from noisy to clean.

    Raises:
        ValueError: a bound on a row that does not exist, lo > hi, a lattice point outside (0, 1), or more than
        5,000,000 grids to search.
    """
    F = curve.F
    lat = np.unique(np.asarray(lattice, dtype=np.float64))[::-1]
    if (lat <= 0).any() or (lat >= 1).any():
        raise ValueError("lattice points must lie in (0, 1)")
    r = num_steps - 1
    if r < 1 or lat.size < r:
        raise ValueError(f"need num_steps >= 2 and at least {r} distinct lattice points, got {lat.size}")
    for k, (lo, hi) in bounds.items():
        if not 0 <= k < F.shape[0] or lo > hi:
            raise ValueError(f"bad bound {k}: ({lo}, {hi}) for {F.shape[0]} rows")
    total = math.comb(lat.size, r)
    if total > _MAX_GRIDS:
        raise ValueError(f"{total} grids to search; use a coarser lattice (at most {_MAX_GRIDS})")
    idx = _combinations(lat.size, r)
    ok = np.ones(total, dtype=bool)
    if mode == "linear":
        curves = {"mid": curve.at(lat, "linear")}
    elif mode == "bracket":
        curves = {"upper": curve.at(lat, "upper"), "lower": curve.at(lat, "lower")}
    else:
        raise ValueError(f"mode must be 'linear' or 'bracket', got {mode!r}")
    for k, (lo, hi) in bounds.items():
        if mode == "linear":
            com = centre_of_mass_on_grid(curves["mid"][k][idx])
            ok &= (com >= lo) & (com <= hi)
        else:
            com_min = centre_of_mass_on_grid(curves["upper"][k][idx])
            com_max = centre_of_mass_on_grid(curves["lower"][k][idx])
            ok &= (com_max >= lo) & (com_min <= hi)
    return lat[idx[ok]]
