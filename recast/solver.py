"""The ReCAST weight solver: a reward-by-timestep matrix W with fixed marginals (docs/method.md §6).

W (K rewards × T denoising steps) keeps the user's budgets exactly in its row sums (Σ_j W[k, j] = λ_k) and gives
every denoising step the same total weight (Σ_k W[k, j] = Σλ / T). Inside those marginals it is the matrix closest
in KL to the informativeness kernel

    K[k, j] = (q[k, j] + floor) ** (1 / temperature),    q[k, j] = g[k, j] / Σ_j g[k, j],

so W = diag(a) · K · diag(b), found in log space by Newton's method on the Sinkhorn dual, with Sinkhorn sweeps as
the fallback and τ-annealing (ε-scaling) for small temperatures. Nothing is exponentiated outside a softmax, so
budgets of any scale and temperatures down to `min_temperature(floor, tol)` converge; smaller ones are refused.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["ConvergenceError", "check_budgets", "solve_weights", "static_weights", "gain_profiles", "min_temperature"]

_EPS = float(np.finfo(np.float64).eps)


class ConvergenceError(RuntimeError):
    """The solver did not meet the marginals to `tol` within `max_iter` iterations."""


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
    if not torch.isfinite(lam.sum()):
        raise ValueError(f"{name} sum past the largest float ({lam.max().item():.3g} is the largest of {lam.numel()}): "
                         "budgets are relative weights; scale them down (e.g. divide each by the largest)")
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


def gain_profiles(gains: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Per-reward profiles q[k, j] = g[k, j] / Σ_j g[k, j]; uniform where a row's total is zero.

    Each row is divided by its largest entry first, so the profile of a row is the same at every positive scale
    (a row totalling 1e-300 has the same profile as one totalling 1e300).

    Args:
        gains: float tensor (K, T), ≥ 0.
        eps: rows whose total is at or below this count as zero (0: only all-zero rows).

    Returns:
        q, same shape, each row summing to 1.
    """
    peak = gains.amax(dim=1, keepdim=True)
    scaled = gains / torch.where(peak > 0, peak, torch.ones_like(peak))
    total = scaled.sum(dim=1, keepdim=True)
    uniform = torch.full_like(gains, 1.0 / gains.shape[1])
    zero = (peak <= 0) | (gains.sum(dim=1, keepdim=True) <= eps)
    return torch.where(zero, uniform, scaled / torch.where(total > 0, total, torch.ones_like(total)))


def min_temperature(floor: float = 1e-6, tol: float = 1e-9) -> float:
    """The smallest τ at which `solve_weights` can meet `tol` (for budgets summing to at most 1).

    W's entries are exponentials of (log-kernel + potential) / τ, whose arguments span up to log(1 + 1/floor) / τ.
    float64 rounds them to about `eps · log(1 + 1/floor) / τ` (relative), so below this τ rounding alone can move a
    row sum by more than `tol`. (Measured on random instances, the error the solver reaches stalls at 0.003-0.3
    times that bound; the factor 2 keeps a margin.)
    """
    return 2 * _EPS * math.log1p(1.0 / floor) / tol


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
            scaling a row by any positive constant leaves W unchanged.
        budgets: λ, shape (K,), finite, ≥ 0 with Σλ > 0. A zero budget gives an all-zero row. W scales with λ:
            multiplying every budget by s multiplies W by s.
        temperature: τ > 0. Large τ flattens the kernel towards the static λ/T (τ = inf gives it exactly);
            small τ sharpens it towards a hard transport plan. τ below `min_temperature(floor, tol)` is refused.
        floor: added to each profile before the power, > 0; keeps every entry reachable so Sinkhorn converges.
        tol: largest allowed absolute error on any row or column sum (relative to Σλ when Σλ > 1, and never finer
            than 1e-12 · Σλ, so that budgets of any magnitude stay solvable in float64).
        max_iter: most solver iterations (Sinkhorn sweeps or Newton steps, over all annealing stages).
        uniform_mix: γ in [0, 1]; returns (1 − γ) W + γ λ / T, which keeps both marginals.

    Returns:
        W, float64 tensor (K, T) ≥ 0 with Σ_j W[k, j] = λ_k and Σ_k W[k, j] = Σλ / T, both to `tol`.

    Raises:
        ValueError: gains not 2-D, T = 0 or K = 0, NaN/inf or negative gains, budgets of the wrong length,
            negative, NaN or all zero, a temperature below the smallest one float64 resolves (the message names
            it), or a floor, tol, max_iter or uniform_mix out of range.
        ConvergenceError: the marginals are not met to `tol` after `max_iter` iterations.
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
    if not (tol > 0) or not math.isfinite(tol):
        raise ValueError(f"tol must be finite and > 0, got {tol}")
    if int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter}")
    if not (0.0 <= uniform_mix <= 1.0):
        raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix}")

    # Solve for budgets summing to 1 and scale back: W is linear in λ, and this keeps budgets of any magnitude
    # (1e-155 or 1e155) inside float64's range. The normalised tolerance makes the scaled error at most `tol`
    # (or tol · Σλ when Σλ > 1), but never asks for a relative accuracy finer than 1e-12.
    total = lam.sum().item()
    tol_n = max(tol / max(total, 1.0), min(tol, 1e-12))
    tau_min = min_temperature(floor, tol_n)
    if temperature < tau_min:
        raise ValueError(f"temperature {temperature:g} is below the smallest temperature the solver resolves at "
                         f"floor={floor:g} and tol={tol:g}: {tau_min:.3g}; raise the temperature (or floor, or tol)")
    lam_n = lam / total
    static = (lam / T)[:, None].expand(K, T)
    # Rows whose budget is below what `tol` can resolve keep the static λ_k/T: they add the same amount to every
    # column, so the other rows still face equal column targets, and they keep the solver away from log(1e-38).
    active = lam_n > 1e-3 * tol_n
    W = static.clone()
    if not (K == 1 or T == 1 or active.sum() <= 1 or math.isinf(temperature)):
        # (otherwise the marginals alone pin W down, or τ = inf flattens the kernel to a constant)
        share = lam_n[active].sum()
        log_kernel = torch.log(gain_profiles(g[active]) + floor)
        W_n = _anneal(log_kernel - log_kernel.max(), lam_n[active] / share, temperature, tol_n / share.item(),
                      max_iter)
        W[active] = W_n * (share * total)
    if uniform_mix > 0:
        W = (1.0 - uniform_mix) * W + uniform_mix * static
    return W


def _anneal(C: torch.Tensor, rows: torch.Tensor, tau: float, tol: float, max_iter: int) -> torch.Tensor:
    """W (K, T) with row sums `rows` (Σ = 1) and columns 1/T closest in KL to exp(C / τ), by τ-annealing.

    A small τ makes the dual nearly piecewise linear, where Newton's method from a cold start wanders. Solving at
    τ' = 1/2, 1/4, ... first and warm-starting each stage from the last keeps every stage's start inside Newton's
    basin (ε-scaling). Potentials are kept in units of C (ũ = τ u), so they carry over between stages unchanged.
    """
    stages = [tau]
    while stages[-1] < 0.5:
        stages.append(stages[-1] * 2.0)
    u = torch.zeros(C.shape[0], dtype=C.dtype)
    used = 0
    for i, t in enumerate(reversed(stages)):
        last = i == len(stages) - 1
        u, used = _stage(C, rows, t, tol if last else max(tol, 1e-6), max_iter, u, used)
    return _log_weights(C, u, tau).exp()


def _log_weights(C: torch.Tensor, u: torch.Tensor, tau: float) -> torch.Tensor:
    """log W for potentials u: every column is (1/T) · softmax over rewards, so columns hold exactly."""
    return torch.log_softmax((C + u[:, None]) / tau, dim=0) - math.log(C.shape[1])


def _stage(C, rows, tau, tol, max_iter, u, used):
    """Damped Newton on the dual at one τ, every quantity in the log domain, with a Sinkhorn sweep as the fallback.

    The dual F(u) = τ Σ_j (1/T) logsumexp_k((C[k, j] + u_k) / τ) − rows · u is convex; its gradient is
    rowsum(W) − rows and its Hessian (diag(rowsum) − T · W Wᵀ) / τ. The Sinkhorn sweep u += τ (log rows −
    log rowsum) reads log rowsum from a logsumexp, so it stays finite even where every entry of a row underflows.
    """
    log_rows = rows.log()
    T = C.shape[1]

    def dual(v):
        return tau * torch.logsumexp((C + v[:, None]) / tau, dim=0).sum() / T - rows @ v

    best_err, best_f, since_best = math.inf, math.inf, 0
    while True:
        lw = _log_weights(C, u, tau)
        log_sums = torch.logsumexp(lw, dim=1)
        sums = log_sums.exp()
        grad = sums - rows
        err = grad.abs().max().item()
        if err <= tol:
            return u, used
        f0 = dual(u).item()
        slack = 1e-13 * (1.0 + abs(f0))  # F's own rounding: below it, "no decrease" is noise
        if err < best_err * 0.999 or f0 < best_f - slack:
            since_best = 0
        else:
            since_best += 1
        best_err, best_f = min(best_err, err), min(best_f, f0)
        if used >= max_iter or since_best > 200:
            why = f"max_iter={max_iter} iterations" if used >= max_iter else "200 iterations without progress"
            raise ConvergenceError(f"weight solver did not reach tol={tol:g} at temperature {tau:g} in {why} "
                                   f"(row error {err:.3g}); raise max_iter, temperature or floor")
        used += 1
        sweep = u + tau * (log_rows - log_sums)
        step = _newton_step(lw.exp(), sums, grad, tau, T)
        if step is None:
            u = sweep
            continue
        # Near the optimum F's decrease (~ err²) drops below its float64 resolution, so an Armijo test on F alone
        # would shrink every step to nothing: take the full step when it lowers the row error without raising F.
        # (Accepting on the row error alone can cycle far from the optimum.)
        trial = u + step
        if _row_error(C, trial, tau, rows) < err and dual(trial).item() <= f0 + slack:
            u = trial
            continue
        slope, t = (grad @ step).item(), 1.0
        while t > 1e-10 and not dual(u + t * step).item() <= f0 + 1e-4 * t * slope:
            t *= 0.5
        # Every Sinkhorn sweep lowers F (it is exact minimisation over u with the column potentials fixed).
        u = u + t * step if t > 1e-10 and slope < 0 else sweep


def _row_error(C, u, tau, rows) -> float:
    """Largest |rowsum(W(u)) − rows| (inf if u is not finite)."""
    if not torch.isfinite(u).all():
        return math.inf
    return (torch.logsumexp(_log_weights(C, u, tau), dim=1).exp() - rows).abs().max().item()


def _newton_step(W, sums, grad, tau, T):
    """The Jacobi-preconditioned Newton direction, or None where it cannot be trusted (tiny rows, non-finite)."""
    if sums.min().item() < 1e-200:
        return None  # a row's whole mass underflowed: only the log-domain sweep can bring it back
    d = sums.rsqrt()
    M = torch.eye(len(sums), dtype=W.dtype) - T * (d[:, None] * W) @ (W.T * d[None, :])
    M = 0.5 * (M + M.T)
    if not torch.isfinite(M).all():
        return None
    vals, vecs = torch.linalg.eigh(M)
    # M is singular along the constant shift of u (it does not change W); invert only the well-resolved part.
    keep = vals > 1e-12 * vals.abs().max().clamp_min(1e-300)
    inv = torch.where(keep, 1.0 / torch.where(keep, vals, torch.ones_like(vals)), torch.zeros_like(vals))
    step = -tau * d * (vecs @ (inv * (vecs.T @ (d * grad))))
    return step if torch.isfinite(step).all() else None
