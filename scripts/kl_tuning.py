"""The kl_beta tuning of the cpu preset, on the uniform baseline only: one row per (setting, kl_beta, metric).

    python scripts/kl_tuning.py quality 1 3 30      # trains what is missing under runs/kl/<kl_beta>/, then tabulates

Each cell is the paired change final − base over seeds 0, 1, 2 (mean, seed-std) and whether it falls by more than a
seed-std (for the Fréchet distance and defect rates: rises). Writes data/results/kl_tuning_<setting>.csv.
"""

from __future__ import annotations

import sys

import numpy as np


def main(setting: str, kls: list[str]) -> None:
    from recast.alone import change_over_seeds
    from recast.io import write_csv
    from recast.sweep import plan_sweep, results_dir, run_sweep
    from recast.sweep_results import collect

    out = []
    for kl in kls:
        runs = plan_sweep(settings=(setting,), budgets=("uniform",), methods=("uniform",), seeds=(0, 1, 2),
                          sets={"kl_beta": kl}, out_root=f"runs/kl/{kl}")
        run_sweep(runs, jobs=2)
        rows = collect(runs)
        for m in [k for k in rows[0] if k.startswith(("judge/", "reward/")) and f"base:{k}" in rows[0]]:
            c = change_over_seeds(rows, m)
            out.append({"setting": setting, "kl_beta": float(kl), "metric": m, "n": c["n"],
                        "base": float(np.mean([r[f"base:{m}"] for r in rows])), "delta": c["delta"],
                        "seed_std": c["seed_std"], "worse_by_more_than_std": c["worse"]})
            flag = "  WORSE" if c["worse"] else ""
            print(f"kl_beta={kl:>4} {m:24s} Δ {c['delta']:+9.3f} ± {c['seed_std']:.3f}{flag}")
    write_csv(results_dir() / f"kl_tuning_{setting}.csv", out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
