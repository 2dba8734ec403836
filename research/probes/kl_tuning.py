"""The kl_beta tuning of the cpu preset, on the uniform baseline only: one row per (setting, kl_beta, metric).

    python research/probes/kl_tuning.py quality 1 3 30      # trains what is missing under runs/kl/<kl_beta>/, then tabulates
    python research/probes/kl_tuning.py --reeval 256 compose 1 3 10   # the same runs, re-scored on 256 samples per policy
    python research/probes/kl_tuning.py --budget sharpness-heavy quality 1   # another budget of the sweep's grid

Each cell is the paired change final − base over seeds 0, 1, 2 (mean, seed-std) and whether it falls by more than a
seed-std (for the Fréchet distance and defect rates: rises). Writes research/tables/kl_tuning_<setting>.csv, or with
``--reeval N`` kl_tuning_<setting>_reeval<N>.csv from `recast.experiments.alone.reevaluate` (base and final policy on the same N
samples; the 64-sample training-time evaluations leave a pass rate a binomial s.e. of about 0.06 per run).
``--budget NAME`` trains that budget of `recast.experiments.sweep.budget_grid` instead of the uniform one (runs under
runs/kl/<kl_beta>/<setting>/<NAME>/, table kl_tuning_<setting>_<NAME>[_reeval<N>].csv): quality's default budgets
are its sharpness-heavy ones since the KL weight was tuned.
"""

from __future__ import annotations

import numpy as np


def main(setting: str, kls: list[str], reeval: int = 0, budget: str = "uniform") -> None:
    from recast.experiments.alone import changes_over_seeds, reevaluate
    from recast.io import write_csv
    from recast.experiments.sweep import plan_sweep, results_dir, run_sweep
    from recast.experiments.sweep_results import collect

    out = []
    for kl in kls:
        runs = plan_sweep(settings=(setting,), budgets=(budget,), methods=("uniform",), seeds=(0, 1, 2),
                          sets={"kl_beta": kl}, out_root=f"runs/kl/{kl}")
        run_sweep(runs, jobs=2)
        rows = reevaluate(runs, num_prompts=reeval) if reeval else collect(runs)
        for m, c in changes_over_seeds(rows).items():
            out.append({"setting": setting, "budget": budget, "kl_beta": float(kl), "metric": m, "n": c["n"],
                        "base": float(np.mean([r[f"base:{m}"] for r in rows])), "delta": c["delta"],
                        "seed_std": c["seed_std"], "worse_by_more_than_std": c["worse"]})
            flag = "  WORSE" if c["worse"] else ""
            print(f"kl_beta={kl:>4} {m:24s} Δ {c['delta']:+9.3f} ± {c['seed_std']:.3f}{flag}")
    name = setting if budget == "uniform" else f"{setting}_{budget}"
    write_csv(results_dir() / f"kl_tuning_{name}{f'_reeval{reeval}' if reeval else ''}.csv", out)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting")
    ap.add_argument("kl_betas", nargs="+")
    ap.add_argument("--reeval", type=int, default=0, help="re-score on N samples per policy (0: training-time evals)")
    ap.add_argument("--budget", default="uniform", help="budget of recast.experiments.sweep.budget_grid to train")
    a = ap.parse_args()
    main(a.setting, a.kl_betas, reeval=a.reeval, budget=a.budget)
