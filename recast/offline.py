"""The paper's W: built once, offline, per λ, from density-ratio profiles (docs/method.md §0 "The paper's recipe").

A profile holds, per reward k, ratios ρ_k[n, j] = E[r_k | x_{σ_{j+1}}] / E[r_k | prompt] ≥ 0 for N observations
(proposal samples noised to the destination σ_{j+1} of scheduler step j, column 0 the noisiest). From it:

    D_k[j]   = log(max(mean_n ρ_k[n, j]^α, 1e-30)) / (α − 1)          (α > 1; the Rényi-α divergence at σ_{j+1})
    gain_k[j] = max(D_k[j] − D_k[j − 1], 0),   D_k[−1] = 0             (pure noise carries no information)
    log K[k, j] = gain_k[j] / mean_j gain_k / τ_k                        (all ones where a reward's mean gain is 0)
    W = diag(a) · K · diag(b)  with rows λ / Σλ and columns 1 / T        (log-domain Sinkhorn)

A flat gain curve gives exactly the static W = λ / T. Every function is pure (arrays in, arrays out) and works in
float64 numpy; `recast.archives` reads and writes the files.
"""

from __future__ import annotations

import numpy as np

from recast.solver import ConvergenceError, check_budgets

__all__ = ["MOMENT_FLOOR", "ratio_divergence", "exp_kernel", "log_sinkhorn", "paper_weights"]

MOMENT_FLOOR = 1e-30  # the moment mean_n ρ^α is floored here before the log


def _matrix(x, name: str) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric: {err}") from None
    if a.ndim != 2 or 0 in a.shape:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or inf")
    return a


def ratio_divergence(ratios, alpha: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Rényi-α divergence at each destination σ and the step gains, from one reward's density ratios.

    Args:
        ratios: (N, T) ρ ≥ 0, column j the destination σ_{j+1} of scheduler step j (noise → clean).
        alpha: Rényi order, > 1.

    Returns:
        (D (T,), gains (T,)): D[j] = log(max(mean_n ρ[n, j]^α, 1e-30)) / (α − 1); gains the differences of
        (0, D[0], …, D[T−1]) clipped at 0. Before the clip they telescope: their sum is D[T − 1].

    Raises:
        ValueError: alpha ≤ 1, a non-2-D or empty array, NaN/inf, or a negative ratio.
    """
    if not (isinstance(alpha, (int, float)) and alpha > 1 and np.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number > 1, got {alpha!r}")
    rho = _matrix(ratios, "ratios")
    if (rho < 0).any():
        raise ValueError("ratios must be >= 0 (they are E[r | x_t] / E[r | prompt] of a non-negative reward)")
    moment = np.mean(rho ** float(alpha), axis=0)
    D = np.log(np.maximum(moment, MOMENT_FLOOR)) / (float(alpha) - 1.0)
    return D, np.maximum(np.diff(D, prepend=0.0), 0.0)


def exp_kernel(gains, temperatures) -> np.ndarray:
    """log K[k, j] = gains[k, j] / mean_j gains[k] / τ_k, with a row of zeros where a reward's mean gain is 0.

    Args:
        gains: (K, T) ≥ 0.
        temperatures: τ, a float or (K,), each > 0 and finite.

    Returns:
        (K, T) float64 log-kernel.
    """
    g = _matrix(gains, "gains")
    if (g < 0).any():
        raise ValueError("gains must be >= 0")
    tau = np.broadcast_to(np.asarray(temperatures, dtype=np.float64), (g.shape[0],))
    if not (np.isfinite(tau).all() and (tau > 0).all()):
        raise ValueError(f"temperatures must be finite and > 0, got {tau.tolist()}")
    mean = g.mean(axis=1, keepdims=True)
    scaled = np.divide(g, mean, out=np.ones_like(g), where=mean > 0)
    return scaled / tau[:, None]


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True)), axis=axis)


def log_sinkhorn(log_kernel, rows, cols, *, max_iter: int = 1_000, tol: float = 1e-9) -> np.ndarray:
    """The matrix diag(a) · exp(log_kernel) · diag(b) with the given row and column sums (rows, then columns).

    Args:
        log_kernel: (K, T) finite.
        rows: (K,) ≥ 0; cols: (T,) > 0, with rows.sum() == cols.sum().
        max_iter: sweeps (one row and one column update each).
        tol: both marginals within this max absolute error.

    Returns:
        (K, T) float64.

    Raises:
        ConvergenceError: the marginals are not met within ``max_iter`` sweeps.
    """
    L = _matrix(log_kernel, "log_kernel")
    rows, cols = np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64)
    if rows.shape != (L.shape[0],) or cols.shape != (L.shape[1],):
        raise ValueError(f"rows {rows.shape} and cols {cols.shape} must match the kernel's shape {L.shape}")
    with np.errstate(divide="ignore"):
        log_r, log_c = np.log(rows), np.log(cols)
    log_v = np.zeros(L.shape[1])
    for _ in range(int(max_iter)):
        log_u = log_r - _logsumexp(L + log_v[None, :], axis=1)
        log_v = log_c - _logsumexp(L + log_u[:, None], axis=0)
        W = np.exp(log_u[:, None] + L + log_v[None, :])
        if max(np.abs(W.sum(1) - rows).max(), np.abs(W.sum(0) - cols).max()) <= tol:
            return W
    raise ConvergenceError(f"the log-domain Sinkhorn projection did not meet the marginals to {tol:g} in {max_iter} "
                           "sweeps: raise the temperature or the iteration limit")


def paper_weights(gains, lam, temperature=1.0, *, max_iter: int = 1_000, tol: float = 1e-9) -> np.ndarray:
    """The paper's W (K, T) from clipped gains: rows λ / Σλ, columns 1 / T, inside them the exp kernel.

    Args:
        gains: (K, T) ≥ 0 (`ratio_divergence`'s second output, one row per reward).
        lam: budgets (K,) ≥ 0 with a positive, finite sum.
        temperature: τ, a float or one per reward.

    Returns:
        (K, T) float64. A flat gain row (or a zero one) gets exactly its static share λ_k / Σλ / T when every row is
        flat.

    Raises:
        ValueError: bad gains, budgets or temperatures; ConvergenceError: the projection did not converge.
    """
    g = _matrix(gains, "gains")
    lam = check_budgets(lam, g.shape[0], name="lam").numpy()
    total = lam.sum()
    if not np.isfinite(total):
        raise ValueError(f"lam sums to {total} (overflow): give budgets of a smaller scale, e.g. 1, 2, 1")
    log_kernel = exp_kernel(g, temperature)
    T = g.shape[1]
    if np.all(log_kernel == log_kernel[:, :1]):  # flat rows: the static W, exactly (no Sinkhorn round-off)
        return np.repeat((lam / total / T)[:, None], T, axis=1)
    return log_sinkhorn(log_kernel, lam / total, np.full(T, 1.0 / T), max_iter=max_iter, tol=tol)
