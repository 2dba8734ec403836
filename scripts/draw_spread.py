"""How much of a judge change is the evaluation draw's: the uniform baseline's three runs, each scored on many draws.

    python scripts/draw_spread.py quality              # 16 shared draws of 256 samples, noise seeds 0..15
    python scripts/draw_spread.py compose --draws 16 --num-prompts 256 --out-root runs/sweep

Notebook 06 scores every run on one shared draw (noise seed 0); `recast.alone.reevaluate` gives each seed its own.
On 256 samples the two disagreed on blur in both settings. Here each run of the sweep's uniform cell (uniform
budget, seeds 0, 1, 2) is re-scored on ``--draws`` shared draws, base and final policy on the same samples
(`recast.alone.reevaluate` with ``noise_seed``); draw 0 is notebook 06's. From that matrix of paired changes Δ[run,
draw] it prints, per judge:

- ``draw 0``: notebook 06's test (mean over seeds ± seed-std);
- ``shared draws``: the same test on every draw: the spread of its mean over draws and how often it fails;
- ``per-seed draws``: seed i on draw (k + i) mod N, as `reevaluate` does: how often that test fails;
- ``pooled``: each run's Δ averaged over all draws (N × 256 samples per run), mean ± seed-std: the test with the
  draw's error averaged out;
- ``corr(base, Δ)``: across draws, the correlation of the draw's base value with its mean Δ.

Writes every (run, draw) row to data/results/draw_spread_<setting>.csv.
"""

from __future__ import annotations

import argparse

import numpy as np


def main(argv: list[str] | None = None) -> None:
    from recast.alone import change_over_seeds, reevaluate
    from recast.stats import lower_is_better
    from recast.io import write_csv
    from recast.sweep import is_finished, plan_sweep, results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting")
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--out-root", default="runs/sweep")
    args = ap.parse_args(argv)

    runs = plan_sweep(settings=(args.setting,), budgets=("uniform",), methods=("uniform",), seeds=(0, 1, 2),
                      out_root=args.out_root)
    missing = [str(r.out_dir) for r in runs if not is_finished(r)]
    if missing:
        raise SystemExit(f"unfinished runs (run notebook 05 first): {missing}")
    rows = []
    for draw in range(args.draws):
        rows += reevaluate(runs, num_prompts=args.num_prompts, noise_seed=draw)
        print(f"draw {draw} done", flush=True)
    write_csv(results_dir() / f"draw_spread_{args.setting}.csv", rows)

    seeds = sorted({r["seed"] for r in rows})
    by = {(r["seed"], r["noise_seed"]): r for r in rows}
    n = args.draws
    metrics = [k for k in rows[0] if k.startswith(("judge/", "reward/")) and f"base:{k}" in rows[0]]
    print(f"\n{args.setting}, uniform baseline, seeds {seeds}, {n} draws of {args.num_prompts} samples")
    print(f"{'metric':24s} {'draw 0':>16s} {'shared: mean Δ ± sd over draws':>32s} {'fails':>6s} "
          f"{'per-seed fails':>15s} {'pooled Δ ± seed-std':>22s} {'corr(base, Δ)':>14s}")
    for m in metrics:
        shared = [change_over_seeds([by[s, d] for s in seeds], m) for d in range(n)]
        per_seed = [change_over_seeds([by[s, (k + i) % n] for i, s in enumerate(seeds)], m) for k in range(n)]
        pooled = np.array([np.mean([by[s, d][m] - by[s, d][f"base:{m}"] for d in range(n)]) for s in seeds])
        means = np.array([c["delta"] for c in shared])
        base = np.array([np.mean([by[s, d][f"base:{m}"] for s in seeds]) for d in range(n)])
        corr = float(np.corrcoef(base, means)[0, 1]) if means.std() > 0 and base.std() > 0 else float("nan")
        d0 = shared[0]
        worse = (pooled.mean() if lower_is_better(m) else -pooled.mean()) > pooled.std(ddof=1)
        print(f"{m:24s} {d0['delta']:+8.3f} ± {d0['seed_std']:.3f}{'*' if d0['worse'] else ' '} "
              f"{means.mean():+20.3f} ± {means.std(ddof=1):.3f} {sum(c['worse'] for c in shared):3d}/{n:<2d} "
              f"{sum(c['worse'] for c in per_seed):9d}/{n:<2d} "
              f"{pooled.mean():+13.3f} ± {pooled.std(ddof=1):.3f}{'*' if worse else ' '} {corr:+13.2f}")
    print("(* and fails: worse by more than one seed-std, the uniform-baseline rule)")


if __name__ == "__main__":
    main()
