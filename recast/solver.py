"""The ReCAST weight solver: a reward-by-timestep matrix W with fixed marginals (RECAST.md §6).

W (K rewards × T denoising steps) keeps the user's budgets exactly in its row sums (Σ_j W[k, j] = λ_k) and gives
every denoising step the same total weight (Σ_k W[k, j] = Σλ / T). Inside those marginals it is the matrix closest
in KL to the informativeness kernel

    K[k, j] = (q[k, j] + floor) ** (1 / temperature),    q[k, j] = g[k, j] / Σ_j g[k, j],

so W = diag(a) · K · diag(b), found by Sinkhorn / iterative proportional fitting in log space.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["ConvergenceError", "check_budgets", "solve_weights", "static_weights", "gain_profiles"]


class ConvergenceError(RuntimeError):
    """Sinkhorn did not meet the marginals to `tol` within `max_iter` iterations."""


def _as_float64(x, name: str) -> torch.Tensor:
    """Convert array-likes to a float64 CPU tensor, with a named error for non-numeric input."""
    try:
        if isinstance(x, torch.Tensor):
            return x.detach().to(device="cpu", dtype=torch.float64)
        return torch.as_tensor(np.asarray(x, dtype=np.float64))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric, got {type(x).__name__}: {err}") from None


def check_budgets(budgets, K: int | None = None, name: str = "budgets") -> torch.Tensor:
    """Validate λ: 1-D, finite, ≥ 0, Σ > 0, and of length K when K is given.

    Args:
        budgets: λ as a tensor or array-like.
        K: the number of rewards it must match, or None.
        name: what the caller calls λ, so the error speaks the caller's language.

    Returns:
        λ as a float64 CPU tensor (not normalised).

    Raises:
        ValueError: naming the problem (shape, length, NaN/inf, a negative entry, all zero).
    """
    lam = _as_float64(budgets, name)
    if lam.ndim != 1:
        raise ValueError(f"{name} must be 1-D (K,), got shape {tuple(lam.shape)}")
    if K is not None and lam.numel() != K:
        raise ValueError(f"{name} has length {lam.numel()} but there are K={K} rewards: give one budget per reward")
    if not torch.isfinite(lam).all():
        raise ValueError(f"{name} contain NaN or inf: {lam.tolist()}")
    if (lam < 0).any():
        raise ValueError(f"{name} must be >= 0, got {lam.tolist()}")
    if lam.sum() <= 0:
        raise ValueError(f"{name} are all zero: at least one reward needs a positive budget")
    return lam


def static_weights(budgets, T: int) -> torch.Tensor:
    """The static baseline W[k, j] = λ_k / T.

    Args:
        budgets: λ, shape (K,), ≥ 0 with Σ > 0.
        T: number of denoising steps (columns), ≥ 1.

    Returns:
        float64 tensor (K, T) with row sums λ and column sums Σλ / T.
    """
    if int(T) != T or T < 1:
        raise ValueError(f"T must be a positive integer, got {T}")
    lam = check_budgets(budgets)
    return (lam / T)[:, None].expand(-1, int(T)).clone()


def gain_profiles(gains: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Per-reward profiles q[k, j] = g[k, j] / Σ_j g[k, j]; uniform where a row's total is ≈ 0.

    Args:
        gains: float tensor (K, T), ≥ 0.
        eps: totals at or below this count as zero.

    Returns:
        q, same shape, each row summing to 1.
    """
    total = gains.sum(dim=1, keepdim=True)
    uniform = torch.full_like(gains, 1.0 / gains.shape[1])
    return torch.where(total > eps, gains / total.clamp_min(eps), uniform)


def solve_weights(
    gains,
    budgets,
    *,
    temperature: float = 1.0,
    floor: float = 1e-6,
    tol: float = 1e-9,
    max_iter: int = 10_000,
    uniform_mix: float = 0.0,
) -> torch.Tensor:
    """Solve for the ReCAST weight matrix W from per-step informativeness gains.

    Args:
        gains: g, shape (K, T), finite and ≥ 0 (torch tensor or array-like). Only each row's profile matters:
            scaling a row by a positive constant leaves W unchanged.
        budgets: λ, shape (K,), finite, ≥ 0 with Σλ > 0. A zero budget gives an all-zero row.
        temperature: τ > 0. Large τ flattens the kernel towards the static λ/T (τ = inf gives it exactly);
            small τ sharpens it towards a hard transport plan.
        floor: added to each profile before the power, > 0; keeps every entry reachable so Sinkhorn converges.
        tol: largest allowed absolute error on any row or column sum.
        max_iter: most Sinkhorn sweeps (one row and one column scaling each).
        uniform_mix: γ in [0, 1]; returns (1 − γ) W + γ λ / T, which keeps both marginals.

    Returns:
        W, float64 tensor (K, T) ≥ 0 with Σ_j W[k, j] = λ_k and Σ_k W[k, j] = Σλ / T, both to `tol`.

    Raises:
        ValueError: gains not 2-D, T = 0 or K = 0, NaN/inf or negative gains, budgets of the wrong length,
            negative, NaN or all zero, or a temperature, floor, tol, max_iter or uniform_mix out of range.
        ConvergenceError: the marginals are not met to `tol` after `max_iter` sweeps.
    """
    g = _as_float64(gains, "gains")
    if g.ndim != 2:
        raise ValueError(f"gains must be 2-D (K rewards, T steps), got shape {tuple(g.shape)}")
    K, T = g.shape
    if K == 0 or T == 0:
        raise ValueError(f"gains must have K >= 1 rewards and T >= 1 steps, got shape {(K, T)}")
    if not torch.isfinite(g).all():
        raise ValueError("gains contain NaN or inf")
    if (g < 0).any():
        raise ValueError(f"gains must be >= 0, found min {g.min().item():.3g}")
    lam = check_budgets(budgets, K)
    if not (temperature > 0):  # also rejects NaN
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not (floor > 0) or not math.isfinite(floor):
        raise ValueError(f"floor must be finite and > 0, got {floor}")
    if not (tol > 0):
        raise ValueError(f"tol must be > 0, got {tol}")
    if int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter}")
    if not (0.0 <= uniform_mix <= 1.0):
        raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix}")

    static = (lam / T)[:, None].expand(K, T)
    # Rows whose budget is below what `tol` can resolve keep the static λ_k/T: they add the same amount to every
    # column, so the other rows still face equal column targets, and they keep the solver away from log(1e-38).
    active = lam > 1e-3 * tol
    W = static.clone()
    if not (K == 1 or T == 1 or active.sum() <= 1 or math.isinf(temperature)):
        # (otherwise the marginals alone pin W down, or τ = inf flattens the kernel to a constant)
        log_kernel = torch.log(gain_profiles(g[active]) + floor) / temperature
        W[active] = _sinkhorn(log_kernel, torch.log(lam[active]), math.log(lam[active].sum().item() / T), tol,
                              max_iter)
    if uniform_mix > 0:
        W = (1.0 - uniform_mix) * W + uniform_mix * static
    return W


def _sinkhorn(log_kernel: torch.Tensor, log_rows: torch.Tensor, log_col: float, tol: float, max_iter: int):
    """Log-domain IPF on the row potentials u, polished by Newton's method on the same dual.

    For potentials u (K,), W(u)[k, j] = c · softmax_k(log_kernel[:, j] + u)[k] meets every column sum c exactly, and
    the row sums match λ at the minimiser of the convex dual F(u) = c Σ_j logsumexp_k(log_kernel[k, j] + u_k) − λ·u.
    A Sinkhorn sweep is the fixed-point step u ← u + log λ − log rowsum(W); it stalls when the kernel's dynamic range
    is huge (small τ, tiny floor), so after a few sweeps we switch to damped Newton steps on F, whose gradient is
    rowsum(W) − λ and whose Hessian is diag(rowsum(W)) − W Wᵀ / c. Both reach the same unique KL projection.
    """
    rows = log_rows.exp()
    col = math.exp(log_col)
    u = log_rows.clone()

    def weights(u):
        return col * torch.softmax(log_kernel + u[:, None], dim=0)

    def dual(u):
        return col * torch.logsumexp(log_kernel + u[:, None], dim=0).sum() - rows @ u

    sweeps = 0
    W = weights(u)
    while sweeps < max_iter:
        err = (W.sum(dim=1) - rows).abs().max().item()
        if err <= tol:
            return W
        sweeps += 1
        if sweeps <= 50:
            u = u + log_rows - torch.log(W.sum(dim=1))
        else:
            row_sums = W.sum(dim=1)
            grad = row_sums - rows
            # Jacobi-preconditioned Newton system: rows of very different mass stay well conditioned.
            d = row_sums.clamp_min(1e-300).rsqrt()
            hess = torch.eye(len(rows), dtype=W.dtype) - d[:, None] * (W @ W.T) * d[None, :] / col
            step = -d * torch.linalg.lstsq(hess, (d * grad)[:, None], rcond=1e-13).solution[:, 0]
            # Near the optimum F's decrease (~ err²) drops below float64 resolution of F itself, so an Armijo search
            # on F would shrink every step to nothing: take the full step whenever it lowers the row error.
            if (weights(u + step).sum(dim=1) - rows).abs().max().item() < err:
                u = u + step
            else:
                f0, t = dual(u), 1.0
                while dual(u + t * step) > f0 + 1e-4 * t * (grad @ step) and t > 1e-10:
                    t *= 0.5
                # No descent along Newton's direction: a Sinkhorn sweep always makes progress on the dual.
                u = u + t * step if t > 1e-10 else u + log_rows - torch.log(row_sums)
        W = weights(u)
    raise ConvergenceError(
        f"weight solver did not reach tol={tol:g} in max_iter={max_iter} iterations "
        f"(row error {(W.sum(dim=1) - rows).abs().max().item():.3g}); raise max_iter, temperature or floor"
    )
