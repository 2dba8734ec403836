"""A synthetic stand-in for training that measures how far noise alone moves the live W (issue: noise floor of W).

Each iteration draws B samples; every reward k has a clean signal z ~ N(0, 1), p_k = 0.5 + clip(z, −c, c) / (2c) as
the trainer's normalisation gives, and at grid row j a proxy f = √R²[k, j] · z + √(1 − R²[k, j]) · η, η ~ N(0, 1).
Each sample trains `train_columns` of the T columns at random (as the cpu preset does), and only those rows get a
proxy. The true D_j is then log(1 + R²[k, j] · CV(p)²) (α = 2, up to the clip), which fixes the true gains and the
true W. Identical rows of R² make the true W exactly λ/T, whatever the common shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from recast.informativeness.tracker import InformativenessTracker
from recast.solver import solve_weights, static_weights

__all__ = ["SimulationResult", "simulate_tracker", "true_weights", "max_relative_deviation", "profiles",
           "early_share_null"]


@dataclass(frozen=True)
class SimulationResult:
    """Result of `simulate_tracker`.

    Attributes:
        W: (iterations, K, T) the W the tracker returned after each iteration.
        W_true: (K, T) the W of the true gains.
        noise_share: (K,) the tracker's noise share at the end.
    """

    W: torch.Tensor
    W_true: torch.Tensor
    noise_share: torch.Tensor


def true_weights(r2, lam, temperature: float = 1.0, adv_clip_max: float = 5.0) -> torch.Tensor:
    """W (K, T) of the true gains of R² profiles (K, T+1) with R²[:, 0] = 0 and R²[:, T] = 1."""
    r2 = torch.as_tensor(r2, dtype=torch.float64)
    cv2 = (1.0 / (2 * adv_clip_max)) ** 2 / 0.25  # Var p / (E p)² for an unclipped standard normal z
    D = torch.log1p(r2 * cv2)
    return solve_weights(torch.diff(D, dim=1).clamp_min(0), lam, temperature=temperature)


def max_relative_deviation(W, lam) -> float:
    """max_kj |W[k, j] − λ_k/T| / (λ_k/T) over rewards with λ_k > 0."""
    W = torch.as_tensor(W, dtype=torch.float64)
    static = static_weights(torch.as_tensor(lam, dtype=torch.float64), W.shape[-1])
    live = static[:, 0] > 0
    return float(((W[..., live, :] - static[live]).abs() / static[live]).amax(dim=(-1, -2)).max())


def simulate_tracker(r2, *, lam=None, iterations: int = 30, batch: int = 32, train_columns: int = 3,
                     adv_clip_max: float = 5.0, temperature: float = 1.0, window: int = 16, min_pairs: int = 96,
                     bootstrap: int = 64, ema: float = 0.0, seed: int = 0) -> SimulationResult:
    """Run the tracker on synthetic pairs with known R² profiles, at a trainer's sample counts.

    Args:
        r2: (K, T+1) true squared correlation of the proxy with the clean signal at each grid row, non-decreasing,
            r2[:, 0] = 0 and r2[:, T] = 1.
        lam: budgets (K,), default equal.
        iterations, batch, train_columns: the trainer's iterations, samples per iteration B and columns per sample m
            (the cpu preset: 30, 32, 3).
        adv_clip_max, temperature, window, min_pairs, bootstrap, ema: as in TrainConfig / InformativenessTracker.
        seed: seeds the draws and the tracker's bootstrap.

    Returns:
        SimulationResult.
    """
    r2 = torch.as_tensor(r2, dtype=torch.float64)
    K, T = r2.shape[0], r2.shape[1] - 1
    if (r2 < 0).any() or (r2 > 1).any() or (torch.diff(r2, dim=1) < 0).any():
        raise ValueError("r2 must lie in [0, 1] and be non-decreasing along each row")
    lam = torch.full((K,), 1.0 / K, dtype=torch.float64) if lam is None else torch.as_tensor(lam, dtype=torch.float64)
    rng = np.random.default_rng(seed)
    tracker = InformativenessTracker(K, T, ema=ema, window=window, min_pairs=min_pairs, bootstrap=bootstrap,
                                     seed=seed)
    a, b = np.sqrt(r2.numpy()), np.sqrt(1.0 - r2.numpy())
    Ws = []
    for _ in range(iterations):
        z = rng.standard_normal((K, batch))
        p = 0.5 + np.clip(z, -adv_clip_max, adv_clip_max) / (2 * adv_clip_max)
        cols = np.argsort(rng.random((batch, T)), axis=1)[:, :train_columns]
        trained = np.zeros((batch, T), dtype=bool)
        np.put_along_axis(trained, cols, True, axis=1)
        proxy = np.full((K, T + 1, batch), np.nan)
        for j in range(1, T):
            s = trained[:, j]
            f = a[:, j, None] * z[:, s] + b[:, j, None] * rng.standard_normal((K, int(s.sum())))
            proxy[:, j, s] = f  # any affine map of f calibrates the same, so f itself stands in for p_k(x0_hat)
        tracker.add(p, proxy)
        Ws.append(tracker.weights(lam, temperature=temperature))
    return SimulationResult(W=torch.stack(Ws), W_true=true_weights(r2, lam, temperature, adv_clip_max),
                            noise_share=tracker.noise_share.clone())


def profiles(kind: str, T: int = 6) -> torch.Tensor:
    """Named R² profiles (K = 4, T+1 rows) for the noise-floor checks: "identical" (four late rewards) or
    "split" (two early, two late)."""
    x = torch.linspace(0, 1, T + 1, dtype=torch.float64)  # grid position, 0 = σ_0 = 1
    early = 1 - (1 - x) ** 3  # most of the signal in the first steps
    late = x**3
    if kind == "identical":
        rows = [late] * 4
    elif kind == "split":
        rows = [early, early, late, late]
    else:
        raise ValueError(f"unknown profile kind {kind!r}; choose 'identical' or 'split'")
    r2 = torch.stack(rows)
    r2[:, 0], r2[:, -1] = 0.0, 1.0
    return r2


def early_share_null(seeds: int = 100, *, iterations: int = 30, quantile: float = 0.95) -> float:
    """How far noise alone moves a W row's early-half share (`recast.stats.row_timing`) from 0.5: the `quantile` of
    |share − 0.5| over every row and seed of `simulate_tracker` runs with identical true profiles (true W = λ/T), at
    the cpu preset's sample counts. A row whose share sits beyond it, on the same side in every seed, has timing.

    Raises:
        ValueError: seeds < 1 or quantile outside (0, 1).
    """
    from recast.stats import row_timing

    if seeds < 1 or not 0 < quantile < 1:
        raise ValueError(f"need seeds >= 1 and quantile in (0, 1), got {seeds} and {quantile}")
    dev = [np.abs(row_timing(simulate_tracker(profiles("identical"), seed=seed, iterations=iterations).W[-1])[0] - 0.5)
           for seed in range(seeds)]
    return float(np.quantile(np.concatenate(dev), quantile))


def main(argv: list[str] | None = None) -> dict:
    """`python -m recast.informativeness.simulate --seeds 100`: the noise-floor numbers of the live W."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=30)
    args = ap.parse_args(argv)
    lam = [0.25] * 4
    dev, corr = [], []
    for seed in range(args.seeds):
        dev.append(max_relative_deviation(simulate_tracker(profiles("identical"), seed=seed,
                                                           iterations=args.iterations).W[-1], lam))
        res = simulate_tracker(profiles("split"), seed=seed, iterations=args.iterations)
        a, b = (res.W[-1] - 0.25 / 6).flatten(), (res.W_true - 0.25 / 6).flatten()
        corr.append(float(torch.corrcoef(torch.stack([a, b]))[0, 1]))
    out = {name: {"median": float(np.median(v)), "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90))}
           for name, v in (("identical_max_dev", dev), ("split_corr", corr))}
    out["early_share_null_95"] = early_share_null(args.seeds, iterations=args.iterations)
    out["seeds"], out["iterations"] = args.seeds, args.iterations
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
