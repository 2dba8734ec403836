"""Reward informativeness across denoising steps: Rényi discriminability and its telescoping gains (docs/method.md §5).

For reward k the reward-induced positive policy is π_k⁺ ∝ p_k · π. Pushed through the forward process to noise
level σ, its density ratio to π_σ is ρ = V_{k,σ} / E[p_k] with V_{k,σ}(x) = E[p_k(x_0) | x_σ = x], and

    D_k(σ) = 1/(α − 1) · log E_{x∼π_σ}[ρ(x)^α]      (α → 1: E[ρ log ρ], the KL divergence).

D_k(1) = 0, D_k(0) = D_α(π_k⁺ ‖ π), and D_k is non-increasing in σ. Along the sampler grid σ_0 = 1 > … > σ_T = 0
(columns in sampling order) D is therefore non-decreasing, and the gain of step j is g[k, j] = D(σ_{j+1}) − D(σ_j).

This module holds the pure estimators; each returns D over the grid.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "gains_centre_of_mass",
    "renyi_discriminability",
    "renyi_rows",
    "pav_nondecreasing",
    "telescoping_gains",
    "loo_calibrated_values",
    "tweedie_discriminability",
    "posterior_discriminability",
]


def _as_numpy(x, name: str) -> np.ndarray:
    """float64 numpy copy of a tensor or array-like."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().to(torch.float64).numpy()
    try:
        return np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric: {err}") from None


def renyi_discriminability(values, alpha: float = 2.0) -> float:
    """Rényi-α discriminability of the density ratio ρ = V / E[V].

    Args:
        values: samples of V ≥ 0 drawn under π_σ, shape (N,), N ≥ 1.
        alpha: order α > 0; α = 1 is the KL limit E[ρ log ρ]. α = 2 gives log(1 + Var V / (E V)²).

    Returns:
        D_α ≥ 0 as a Python float (0 when V is constant).

    Raises:
        ValueError: values not 1-D, empty, NaN/inf, negative or all zero; alpha not > 0.
    """
    v = _as_numpy(values, "values")
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError("values contain NaN or inf")
    if (v < 0).any():
        raise ValueError(f"values must be >= 0 (they are conditional expectations of p in [0, 1]), min {v.min():.3g}")
    if not (alpha > 0) or not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite and > 0, got {alpha}")
    mean = v.mean()
    if mean <= 0:
        raise ValueError("values are all zero: the density ratio V / E[V] is undefined")
    if v.max() == v.min():
        return 0.0  # a constant V carries no information; skip the round-off of the general formula
    rho = v / mean
    with np.errstate(divide="ignore"):
        log_rho = np.log(rho)  # -inf where V = 0; those terms vanish below
    if alpha == 1.0:
        pos = rho > 0
        D = float(np.sum(rho[pos] * log_rho[pos]) / v.size)
    else:
        # log E[ρ^α] by log-sum-exp, stable for large α and heavy tails.
        terms = alpha * log_rho
        top = terms.max()
        log_moment = top + math.log(np.exp(terms - top).sum()) - math.log(v.size)
        D = float(log_moment / (alpha - 1.0))
    return max(D, 0.0)  # Jensen gives D ≥ 0; clip round-off


def pav_nondecreasing(D) -> torch.Tensor:
    """Least-squares non-decreasing fit of each row (pool-adjacent-violators).

    Args:
        D: shape (T+1,) or (K, T+1), finite.

    Returns:
        float64 tensor of the same shape. Rows that are already non-decreasing come back unchanged, bit for bit.
    """
    arr = _as_numpy(D, "D")
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"D must be (T+1,) or (K, T+1) with T+1 >= 1, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("D contains NaN or inf")
    rows = arr.reshape(-1, arr.shape[-1])
    fit = rows.copy()
    for k in np.flatnonzero((np.diff(rows, axis=1) < 0).any(axis=1)):
        fit[k] = _pav_row(rows[k])
    return torch.from_numpy(fit.reshape(arr.shape))


def _pav_row(y: np.ndarray) -> np.ndarray:
    """Pool-adjacent-violators on one row: merge neighbouring blocks while their means decrease (O(n))."""
    means, sizes = [], []
    for v in y.tolist():
        means.append(v)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m2, n2 = means.pop(), sizes.pop()
            m1, n1 = means.pop(), sizes.pop()
            means.append((m1 * n1 + m2 * n2) / (n1 + n2))
            sizes.append(n1 + n2)
    return np.repeat(means, sizes)


def telescoping_gains(D) -> torch.Tensor:
    """Per-step gains g[k, j] = fit[k, j+1] − fit[k, j] of the monotone fit of D.

    Args:
        D: discriminability over the grid σ_0 = 1 … σ_T = 0, shape (K, T+1) (or (T+1,)); it should be
            non-decreasing along each row, and is projected onto such sequences by pool-adjacent-violators first.

    Returns:
        g, float64 tensor (K, T) (or (T,)), ≥ 0. Where a row of D is already non-decreasing g == diff(D) exactly,
        and always g.sum(-1) == fit[..., -1] − fit[..., 0] (the gains telescope).
    """
    fit = pav_nondecreasing(D)
    if fit.shape[-1] < 2:
        raise ValueError(f"D needs at least 2 grid points (T >= 1), got shape {tuple(fit.shape)}")
    return torch.diff(fit, dim=-1).clamp_min(0.0)


def gains_centre_of_mass(gains) -> torch.Tensor:
    """Where along the grid each reward's gains sit: the gain-weighted mean column index, 0 = the noisiest step.

    Args:
        gains: (K, T) (or (T,)) non-negative per-step gains (`telescoping_gains`).

    Returns:
        float64 tensor (K,) (or scalar) in [0, T − 1]; NaN for a row with no gain (no timing to read).
    """
    g = torch.as_tensor(gains, dtype=torch.float64)
    if g.ndim not in (1, 2) or g.shape[-1] < 1:
        raise ValueError(f"gains must be (T,) or (K, T) with T >= 1, got shape {tuple(g.shape)}")
    if (g < 0).any():
        raise ValueError("gains must be non-negative")
    tot = g.sum(-1)
    com = (g * torch.arange(g.shape[-1], dtype=torch.float64)).sum(-1) / torch.where(tot > 0, tot, 1.0)
    return torch.where(tot > 0, com, torch.full_like(com, float("nan")))


def centre_of_mass_band(D_boot, quantiles: tuple[float, float] = (0.05, 0.95)) -> tuple[torch.Tensor, torch.Tensor]:
    """The band of `gains_centre_of_mass` over bootstrap replicates of D: ``(lo (K,), hi (K,))``, the quantiles of
    the centre of mass of each replicate's telescoping gains, replicates without gain left out.

    Args:
        D_boot: (R, K, T + 1) replicates of D (e.g. the rollout estimate's bootstrap).
    """
    D_boot = torch.as_tensor(D_boot, dtype=torch.float64)
    if D_boot.ndim != 3:
        raise ValueError(f"D_boot must be (R, K, T + 1), got shape {tuple(D_boot.shape)}")
    R, K, T1 = D_boot.shape
    com_boot = gains_centre_of_mass(telescoping_gains(D_boot.reshape(R * K, T1))).reshape(R, K)
    lo, hi = torch.nanquantile(com_boot, torch.tensor(quantiles, dtype=com_boot.dtype), dim=0)
    return lo, hi


def renyi_rows(values: np.ndarray, alpha: float = 2.0) -> np.ndarray:
    """`renyi_discriminability` of every row of values (R, n) at once (no input checks; for bootstraps).

    Rows whose mean is 0 give 0 (no signal), like a constant row.
    """
    v = np.asarray(values, dtype=np.float64)
    mean = v.mean(axis=-1, keepdims=True)
    safe = np.where(mean > 0, mean, 1.0)
    rho = v / safe
    if alpha == 1.0:
        with np.errstate(divide="ignore", invalid="ignore"):
            D = np.where(rho > 0, rho * np.log(np.where(rho > 0, rho, 1.0)), 0.0).mean(axis=-1)
    else:
        with np.errstate(divide="ignore"):
            log_rho = np.log(rho)
        terms = alpha * log_rho
        top = np.max(terms, axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        log_moment = top[..., 0] + np.log(np.exp(terms - top).mean(axis=-1))
        D = log_moment / (alpha - 1.0)
    return np.where(mean[..., 0] > 0, np.maximum(D, 0.0), 0.0)


def loo_calibrated_values(p_clean: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Least-squares calibration of p_clean on the proxy f, with its variance set by leave-one-out (docs/method.md §5).

    In-sample least squares over-estimates R² by about (1 − R²)/(n − 1), which at small n swamps the signal. The
    leave-one-out R² (1 − PRESS / SST, PRESS from the hat matrix in closed form) is not inflated, so the in-sample
    fitted values are shrunk towards the mean until their variance is R²_loo · Var(p_clean), then clipped at ≥ 0.

    Args:
        p_clean: (..., n) targets; f: (..., n) proxies (leading dims are independent problems, e.g. bootstraps).

    Returns:
        calibrated values V̂ (..., n) ≥ 0. Exactly p_clean when f is an affine function of it; the constant mean
        when f is constant, n < 3, or the leave-one-out R² is ≤ 0.
    """
    y = np.asarray(p_clean, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    n = y.shape[-1]
    y_bar = y.mean(-1, keepdims=True)
    yc, fc = y - y_bar, f - f.mean(-1, keepdims=True)
    sff = (fc * fc).sum(-1, keepdims=True)
    syy = (yc * yc).sum(-1, keepdims=True)
    ok = (sff > 1e-24 * np.maximum(1.0, (f * f).sum(-1, keepdims=True))) & (syy > 0) & (n >= 3)
    sff_safe = np.where(ok, sff, 1.0)
    slope = (fc * yc).sum(-1, keepdims=True) / sff_safe
    fitted = slope * fc
    resid = yc - fitted
    h = 1.0 / n + fc * fc / sff_safe  # leverage of each point in a line fit with intercept
    press = ((resid / np.maximum(1.0 - h, 1e-12)) ** 2).sum(-1, keepdims=True)
    syy_safe = np.where(syy > 0, syy, 1.0)
    r2_in = (fitted * fitted).sum(-1, keepdims=True) / syy_safe
    r2_loo = np.clip(1.0 - press / syy_safe, 0.0, None)
    shrink = np.sqrt(np.clip(r2_loo / np.where(r2_in > 0, r2_in, 1.0), 0.0, 1.0))
    shrink = np.where(ok & (r2_in > 0), shrink, 0.0)
    return np.clip(y_bar + shrink * fitted, 0.0, None)


def _fill_missing(D: np.ndarray) -> np.ndarray:
    """Fill NaN grid points by linear interpolation in the grid index between known neighbours."""
    known = np.isfinite(D)
    if known.all():
        return D
    idx = np.arange(D.size)
    return np.interp(idx, idx[known], D[known])


def tweedie_discriminability(p_clean, p_proxy, alpha: float = 2.0, *, bootstrap: int = 0,
                             rng: np.random.Generator | None = None) -> torch.Tensor:
    """The `tweedie` estimator of D over the grid, from one-step predictions (docs/method.md §5, estimator 1).

    At each interior grid point j the predictor f = p_k(x0_hat(x_{σ_j})) is calibrated against the clean p_k(x_0) out
    of sample (`loo_calibrated_values`), and D_j is the Rényi discriminability of the calibrated values. At σ_T = 0
    the same estimator runs with f = p_clean (x0_hat = x_0 there), which gives the clean value. Any function of x_σ
    under-estimates Var V, so D_j is a lower bound that becomes exact as σ → 0. With α = 2 and a predictor of
    correlation R with p, D_j ≈ log(1 + R² · CV(p)²), without the in-sample (1 − R²)/(n − 1) inflation.

    With ``bootstrap = R`` the same estimator runs on R resamples at once (the tracker's noise band): each grid row
    is resampled with replacement on its own pairs (rows hold different samples: each was trained at a few steps),
    the clean row on all N, with one draw per row shared by every reward (they score the same samples). Draws are
    made row by row in grid order from ``rng``.

    Args:
        p_clean: p_k(x_0) for N samples, shape (N,), or (K, N) for K rewards at once.
        p_proxy: p_k(x̂_0) at each grid point for the same samples, shape (T+1, N) (or (K, T+1, N)). Rows 0 (σ = 1)
            and T (σ = 0) are not used and may be NaN. NaN entries inside a row are left out of its calibration;
            a row with fewer than 3 pairs (a column not evaluated) is filled by linear interpolation of D.
        alpha: Rényi order α > 0.
        bootstrap: resamples (0: the point estimate). Needs every reward's row to hold the same samples.
        rng: the resamples' generator (required with bootstrap).

    Returns:
        D, float64 tensor (T+1,) (or (K, T+1)); with bootstrap, (R, T+1) (or (R, K, T+1)): D[0] = 0, D[T] = the
        clean-sample value. Not yet projected onto monotone sequences (the tracker does that).
    """
    pc = _as_numpy(p_clean, "p_clean")
    pp = _as_numpy(p_proxy, "p_proxy")
    if pc.ndim == 2:
        if pp.ndim != 3 or pp.shape[0] != pc.shape[0]:
            raise ValueError(f"p_proxy must be (K, T+1, N) for p_clean (K, N), got {pp.shape} and {pc.shape}")
    elif pc.ndim != 1 or pp.ndim != 2 or pp.shape[1] != pc.shape[0]:
        raise ValueError(f"p_clean must be (N,) and p_proxy (T+1, N) with the same N, got {pc.shape} and {pp.shape}")
    if pp.shape[-2] < 2:
        raise ValueError(f"p_proxy needs T+1 >= 2 grid rows, got {pp.shape[-2]}")
    if not np.isfinite(pc).all():
        raise ValueError("p_clean contains NaN or inf")
    if not (alpha > 0) or not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite and > 0, got {alpha}")
    if bootstrap < 0 or (bootstrap and rng is None):
        raise ValueError(f"bootstrap must be >= 0 and needs rng, got {bootstrap} and {rng!r}")
    one = pc.ndim == 1
    pc, pp = (pc[None], pp[None]) if one else (pc, pp)
    if bootstrap:
        if not (np.isfinite(pp) == np.isfinite(pp[:1])).all():
            raise ValueError("bootstrap needs every reward scored on the same samples at each grid row")
        D = _tweedie_resampled(pc, pp, alpha, bootstrap, rng)
        return torch.from_numpy(D[:, 0] if one else D)
    D = np.stack([_tweedie_rows(pc[k], pp[k], alpha) for k in range(pc.shape[0])])
    return torch.from_numpy(D[0] if one else D)


def _tweedie_rows(pc: np.ndarray, pp: np.ndarray, alpha: float) -> np.ndarray:
    """D (T+1,) of one reward: pc (N,), pp (T+1, N), checked."""
    T = pp.shape[0] - 1
    D = np.full(T + 1, np.nan)
    D[0] = 0.0
    D[T] = renyi_rows(loo_calibrated_values(pc, pc), alpha)
    for j in range(1, T):
        ok = np.isfinite(pp[j])
        if ok.sum() >= 3:
            D[j] = renyi_rows(loo_calibrated_values(pc[ok], pp[j, ok]), alpha)
    return _fill_missing(D)


def _tweedie_resampled(pc: np.ndarray, pp: np.ndarray, alpha: float, R: int, rng: np.random.Generator) -> np.ndarray:
    """D (R, K, T+1) of R resamples (`tweedie_discriminability`'s bootstrap): every row is `_tweedie_rows`' row on
    resampled pairs, all R at once."""
    K, N = pc.shape
    T = pp.shape[1] - 1
    D = np.full((R, K, T + 1), np.nan)
    D[:, :, 0] = 0.0
    idx = rng.integers(0, N, size=(R, N))
    D[:, :, T] = np.stack([renyi_rows(loo_calibrated_values(pc[k][idx], pc[k][idx]), alpha) for k in range(K)], 1)
    for j in range(1, T):
        ok = np.isfinite(pp[0, j])
        n = int(ok.sum())
        if n < 3:
            continue
        sel = rng.integers(0, n, size=(R, n))
        for k in range(K):
            D[:, k, j] = renyi_rows(loo_calibrated_values(pc[k][ok][sel], pp[k, j][ok][sel]), alpha)
    return np.stack([np.stack([_fill_missing(D[r, k]) for k in range(K)]) for r in range(R)])


def posterior_discriminability(x0, p, sigmas, alpha: float = 2.0, generator: torch.Generator | None = None):
    """The `posterior` estimator: V from the batch's leave-one-out empirical posterior (docs/method.md §5, estimator 3).

    For sample i, x_σ = (1 − σ) x_0^i + σ ε, and V̂(x_σ) = Σ_{m≠i} w_m p_m with w_m ∝ N(x_σ; (1 − σ) x_0^m, σ² I).
    Cheap and honest in low dimension; in high dimension the posterior collapses onto the nearest neighbour early.

    Args:
        x0: clean samples, shape (N, ...), N ≥ 2.
        p: their p_k values, shape (N,), in [0, 1].
        sigmas: the grid σ_0 = 1 … σ_T = 0, shape (T+1,).
        alpha: Rényi order α > 0.
        generator: torch generator for the forward-process noise (determinism under a seed).

    Returns:
        D, float64 tensor (T+1,), with D[0] = 0 and D[T] = the clean-sample value.
    """
    x = torch.as_tensor(x0, dtype=torch.float64)
    pv = torch.as_tensor(p, dtype=torch.float64)
    s = torch.as_tensor(sigmas, dtype=torch.float64)
    N = x.shape[0]
    if N < 2 or pv.shape != (N,):
        raise ValueError(f"x0 must be (N, ...) with N >= 2 and p (N,), got {tuple(x.shape)} and {tuple(pv.shape)}")
    if s.ndim != 1 or s.numel() < 2:
        raise ValueError(f"sigmas must be 1-D with T+1 >= 2 points, got shape {tuple(s.shape)}")
    flat = x.reshape(N, -1)
    T = s.numel() - 1
    D = torch.zeros(T + 1, dtype=torch.float64)
    D[T] = renyi_discriminability(pv, alpha)
    eye = torch.eye(N, dtype=torch.bool)
    for j in range(1, T):
        sigma = float(s[j])
        if not (0.0 < sigma < 1.0):
            raise ValueError(f"interior sigmas must lie in (0, 1), got sigma_{j} = {sigma}")
        eps = torch.randn(flat.shape, generator=generator, dtype=torch.float64)
        x_sigma = (1 - sigma) * flat + sigma * eps
        logits = -torch.cdist(x_sigma, (1 - sigma) * flat).pow(2) / (2 * sigma**2)
        weights = torch.softmax(logits.masked_fill(eye, -math.inf), dim=1)
        D[j] = renyi_discriminability(weights @ pv, alpha)
    return D
