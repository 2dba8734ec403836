"""Reward informativeness across denoising steps: Rényi discriminability and its telescoping gains (RECAST.md §5).

For reward k the reward-induced positive policy is π_k⁺ ∝ p_k · π. Pushed through the forward process to noise
level σ, its density ratio to π_σ is ρ = V_{k,σ} / E[p_k] with V_{k,σ}(x) = E[p_k(x_0) | x_σ = x], and

    D_k(σ) = 1/(α − 1) · log E_{x∼π_σ}[ρ(x)^α]      (α → 1: E[ρ log ρ], the KL divergence).

D_k(1) = 0, D_k(0) = D_α(π_k⁺ ‖ π), and D_k is non-increasing in σ. Along the sampler grid σ_0 = 1 > … > σ_T = 0
(columns in sampling order) D is therefore non-decreasing, and the gain of step j is g[k, j] = D(σ_{j+1}) − D(σ_j).

This module holds the pure estimators (each returns D over the grid) and a small stateful tracker that smooths D
across training iterations and turns it into W through `recast.solver.solve_weights`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from recast.solver import solve_weights

__all__ = [
    "renyi_discriminability",
    "pav_nondecreasing",
    "telescoping_gains",
    "tweedie_discriminability",
    "posterior_discriminability",
    "InformativenessTracker",
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
    from sklearn.isotonic import isotonic_regression  # imported here: sklearn costs seconds at `import recast`

    rows = arr.reshape(-1, arr.shape[-1])
    fit = np.empty_like(rows)
    for k, row in enumerate(rows):
        fit[k] = row if np.all(np.diff(row) >= 0) else isotonic_regression(row, increasing=True)
    return torch.from_numpy(fit.reshape(arr.shape))


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


def _calibrated_values(p_clean: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Least-squares calibration V̂ = a + b f of p_clean on the proxy f, clipped at ≥ 0."""
    f_c = f - f.mean()
    var_f = float(f_c @ f_c)
    if var_f <= 1e-24 * max(1.0, float(f @ f)):
        return np.full_like(p_clean, p_clean.mean())
    slope = float(f_c @ (p_clean - p_clean.mean())) / var_f
    return np.clip(p_clean.mean() + slope * f_c, 0.0, None)


def _fill_missing(D: np.ndarray) -> np.ndarray:
    """Fill NaN grid points by linear interpolation in the grid index between known neighbours."""
    known = np.isfinite(D)
    if known.all():
        return D
    idx = np.arange(D.size)
    return np.interp(idx, idx[known], D[known])


def tweedie_discriminability(p_clean, p_proxy, alpha: float = 2.0) -> torch.Tensor:
    """The `tweedie` estimator of D over the grid, from one-step predictions (RECAST.md §5, estimator 1).

    At each interior grid point j the predictor f = p_k(x̂_0(x_{σ_j})) is calibrated by least squares of the clean
    p_k(x_0) on f over the batch, clipped at ≥ 0, and D_j is the Rényi discriminability of the calibrated values.
    Any function of x_σ under-estimates Var V, so D_j is a lower bound that becomes exact as σ → 0. With α = 2 and a
    predictor of correlation R with p, D_j = log(1 + R² · CV(p)²).

    Args:
        p_clean: p_k(x_0) for N samples, shape (N,), or (K, N) for K rewards at once.
        p_proxy: p_k(x̂_0) at each grid point for the same samples, shape (T+1, N) (or (K, T+1, N)). Rows 0 (σ = 1)
            and T (σ = 0) are not used and may be NaN. NaN entries inside a row are left out of its calibration;
            a row that is all NaN (a column not evaluated) is filled by linear interpolation of D.
        alpha: Rényi order α > 0.

    Returns:
        D, float64 tensor (T+1,) (or (K, T+1)): D[0] = 0, D[T] = the clean-sample value. Not yet projected onto
        monotone sequences (the tracker does that, after pooling iterations).
    """
    pc = _as_numpy(p_clean, "p_clean")
    pp = _as_numpy(p_proxy, "p_proxy")
    if pc.ndim == 2:
        if pp.ndim != 3 or pp.shape[0] != pc.shape[0]:
            raise ValueError(f"p_proxy must be (K, T+1, N) for p_clean (K, N), got {pp.shape} and {pc.shape}")
        return torch.stack([tweedie_discriminability(pc[k], pp[k], alpha) for k in range(pc.shape[0])])
    if pc.ndim != 1 or pp.ndim != 2 or pp.shape[1] != pc.shape[0]:
        raise ValueError(f"p_clean must be (N,) and p_proxy (T+1, N) with the same N, got {pc.shape} and {pp.shape}")
    if pp.shape[0] < 2:
        raise ValueError(f"p_proxy needs T+1 >= 2 grid rows, got {pp.shape[0]}")
    if not np.isfinite(pc).all():
        raise ValueError("p_clean contains NaN or inf")
    T = pp.shape[0] - 1
    D = np.full(T + 1, np.nan)
    D[0] = 0.0
    D[T] = renyi_discriminability(pc, alpha)
    for j in range(1, T):
        ok = np.isfinite(pp[j])
        if ok.sum() >= 2:
            D[j] = renyi_discriminability(_calibrated_values(pc[ok], pp[j, ok]), alpha)
    return torch.from_numpy(_fill_missing(D))


def posterior_discriminability(x0, p, sigmas, alpha: float = 2.0, generator: torch.Generator | None = None):
    """The `posterior` estimator: V from the batch's leave-one-out empirical posterior (RECAST.md §5, estimator 3).

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


class InformativenessTracker:
    """Smooths per-reward D across training iterations and turns it into W (RECAST.md §5 post-processing, §6).

    Each `update` projects every row onto non-decreasing sequences (pool-adjacent-violators) and folds it into an
    exponential moving average; `weights` solves for W from the telescoping gains of the smoothed D. Before the first
    update the gains are zero, so W is the static λ/T.

    Args:
        K: number of rewards.
        T: number of denoising steps (D has T+1 grid points).
        alpha: Rényi order used by whoever feeds the tracker (kept for provenance in the state).
        ema: weight of the past in the moving average, in [0, 1); 0 keeps only the latest estimate.
    """

    def __init__(self, K: int, T: int, alpha: float = 2.0, ema: float = 0.9):
        if K < 1 or T < 1:
            raise ValueError(f"need K >= 1 rewards and T >= 1 steps, got K={K}, T={T}")
        if not (0.0 <= ema < 1.0):
            raise ValueError(f"ema must be in [0, 1), got {ema}")
        self.K, self.T, self.alpha, self.ema = int(K), int(T), float(alpha), float(ema)
        self.D: torch.Tensor | None = None
        self.num_updates = 0

    def update(self, D) -> torch.Tensor:
        """Fold a new estimate D (K, T+1) into the average; NaN entries keep the previous value. Returns the average."""
        new = torch.as_tensor(D, dtype=torch.float64).clone()
        if new.shape != (self.K, self.T + 1):
            raise ValueError(f"D must have shape {(self.K, self.T + 1)}, got {tuple(new.shape)}")
        missing = ~torch.isfinite(new)
        if self.D is not None:
            new[missing] = self.D[missing]
        elif missing.any():
            raise ValueError("the first D given to the tracker must be finite everywhere")
        new = pav_nondecreasing(new)
        self.D = new if self.D is None else self.ema * self.D + (1.0 - self.ema) * new
        self.num_updates += 1
        return self.D.clone()

    def gains(self) -> torch.Tensor:
        """Telescoping gains (K, T) of the smoothed D (zeros before the first update)."""
        if self.D is None:
            return torch.zeros(self.K, self.T, dtype=torch.float64)
        return telescoping_gains(self.D)

    def weights(self, lam, temperature: float = 1.0, floor: float = 1e-6, uniform_mix: float = 0.0) -> torch.Tensor:
        """W (K, T) from the current gains through `solve_weights`, with rows λ and equal columns."""
        return solve_weights(self.gains(), lam, temperature=temperature, floor=floor, uniform_mix=uniform_mix)

    def state_dict(self) -> dict:
        """Everything needed to continue exactly: shapes, settings, the average and the update count."""
        return {"K": self.K, "T": self.T, "alpha": self.alpha, "ema": self.ema,
                "D": None if self.D is None else self.D.clone(), "num_updates": self.num_updates}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict`; raises ValueError if the shapes differ from this tracker's."""
        if (state["K"], state["T"]) != (self.K, self.T):
            raise ValueError(f"tracker state is for K={state['K']}, T={state['T']}, this tracker is K={self.K}, T={self.T}")
        self.alpha, self.ema = float(state["alpha"]), float(state["ema"])
        self.D = None if state["D"] is None else torch.as_tensor(state["D"], dtype=torch.float64).clone()
        self.num_updates = int(state["num_updates"])
