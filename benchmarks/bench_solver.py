"""Time `solve_weights` on one CPU thread against the static λ/T baseline, over K, T and τ.

Run: `.venv/bin/python benchmarks/bench_solver.py` (writes benchmarks/results/solver.json and prints a table).
The contract is < 50 ms for K ≤ 16 and T ≤ 1000 on one core; the ratio column is ReCAST's solve time over the time
to build the static matrix in the same process, so it travels between machines better than seconds do.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from recast.examples import synthetic_discriminability
from recast.informativeness import telescoping_gains
from recast.io import write_json
from recast.solver import solve_weights, static_weights


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "solver.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for K in (2, 4, 16):
        for T in (10, 100, 1000):
            kinds = [("early", "mid", "late", "flat")[k % 4] for k in range(K)]
            gains = telescoping_gains(synthetic_discriminability(T, kinds))
            gains = gains * (1 + 0.1 * torch.rand(gains.shape, generator=gen, dtype=torch.float64))
            lam = torch.rand(K, generator=gen, dtype=torch.float64) + 0.1
            t_static = _time(lambda: static_weights(lam, T), args.repeats)
            for tau in (0.25, 1.0, 4.0):
                t = _time(lambda: solve_weights(gains, lam, temperature=tau), args.repeats)
                rows.append({"K": K, "T": T, "temperature": tau, "solve_ms": 1e3 * t, "ratio_vs_static": t / t_static})
    worst = max(r["solve_ms"] for r in rows)
    print("| K | T | τ | solve (ms) | × static |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['K']} | {r['T']} | {r['temperature']} | {r['solve_ms']:.2f} | {r['ratio_vs_static']:.0f} |")
    print(f"\nworst case {worst:.2f} ms (contract: < 50 ms)")
    write_json(args.out, {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
                          "threads": 1, "rows": rows, "worst_ms": worst})


if __name__ == "__main__":
    main()
