"""How often `solve_weights` fails at small τ and at extreme scales, over random instances.

Run: `PYTHONPATH=$PWD python benchmarks/solver_small_tau.py` (prints one line per τ and one per scale test).
Each instance: K ∈ [2, 6] rewards, T ∈ [2, 25] steps, gains uniform in [0, 10] with a third of the entries zero,
budgets uniform in [0, 5] (seeded; the same 60 instances at every τ). An outcome is "ok" when W meets both
marginals to the solver's tolerance, "refused" when the solver raises a ValueError that names the smallest τ that
works, "no convergence" for ConvergenceError, and "crash" for anything else (e.g. a PyTorch internal assert).
"""

from __future__ import annotations

import argparse
import collections

import numpy as np
import torch

from recast.solver import ConvergenceError, solve_weights


def instance(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One random (gains (K, T), budgets (K,)) pair."""
    K, T = int(rng.integers(2, 7)), int(rng.integers(2, 26))
    gains = rng.uniform(0, 10, (K, T)) * (rng.uniform(size=(K, T)) > 1 / 3)
    lam = rng.uniform(0, 5, K)
    lam[0] = max(lam[0], 0.1)
    return gains, lam


def outcome(gains, lam, tau: float, tol: float = 1e-9) -> str:
    """'ok', 'wrong marginals', 'refused', 'no convergence' or 'crash: <type>'."""
    try:
        W = solve_weights(gains, lam, temperature=tau, tol=tol)
    except ConvergenceError:
        return "no convergence"
    except ValueError as err:
        return "refused" if "smallest" in str(err) else f"crash: ValueError {err}"
    except Exception as err:  # noqa: BLE001 — counting every failure mode is the point
        return f"crash: {type(err).__name__}"
    scale = max(1.0, float(np.sum(lam)))
    rows_ok = np.abs(W.sum(1).numpy() - lam).max() <= tol * scale * 1.01
    cols_ok = np.abs(W.sum(0).numpy() - lam.sum() / gains.shape[1]).max() <= tol * scale * 1.01
    finite = bool(torch.isfinite(W).all())
    return "ok" if rows_ok and cols_ok and finite else "wrong marginals"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="random instances per temperature")
    ap.add_argument("--taus", default="0.02,0.01,0.001")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    cases = [instance(rng) for _ in range(args.n)]
    for tau in (float(t) for t in args.taus.split(",")):
        counts = collections.Counter(outcome(g, lam, tau) for g, lam in cases)
        print(f"tau={tau:g}: " + ", ".join(f"{k} {v}/{args.n}" for k, v in sorted(counts.items())))
    g, lam = cases[0]
    for scale in (1e-155, 1e155):
        print(f"budgets x {scale:g} (tau=1): {outcome(g, lam * scale, 1.0)}")
    tiny = g.copy()
    tiny[0] = tiny[0] / tiny[0].sum() * 1e-13
    W1 = solve_weights(g, lam, temperature=0.5)
    W2 = solve_weights(tiny, lam, temperature=0.5)
    print(f"gain row totalling 1e-13: max |W change| = {float((W1 - W2).abs().max()):.3g} (scale invariance: 0)")


if __name__ == "__main__":
    main()
