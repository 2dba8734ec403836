"""How much of a judge change is the evaluation draw's: the uniform baseline's three runs, each scored on many draws.

    python research/probes/draw_spread.py quality              # 16 shared draws of 256 samples, noise seeds 0..15
    python research/probes/draw_spread.py compose --draws 16 --num-prompts 256 --out-root runs/sweep
    python research/probes/draw_spread.py quality --table research/tables/draw_spread_quality.csv   # re-print, no sampling
    python research/probes/draw_spread.py quality --budget sharpness-heavy --first-draw 16   # another cell, fresh draws

Notebook 06 scores every run on one shared draw (noise seed 0); `recast.experiments.alone.reevaluate` gives each seed its own.
On 256 samples the two disagreed on blur in both settings. Here each run of the sweep's uniform cell (uniform
budget, seeds 0, 1, 2) is re-scored on ``--draws`` shared draws, base and final policy on the same samples
(`recast.experiments.alone.reevaluate` with ``noise_seed``); draw 0 is notebook 06's. From that matrix of paired changes Δ[run,
draw] it prints, per judge:

- ``first draw`` (draw 0 by default): notebook 06's test (mean over seeds ± seed-std);
- ``shared draws``: the same test on every draw: the spread of its mean over draws and how often it fails;
- ``per-seed draws``: seed i on draw (k + i) mod N, as `reevaluate` does: how often that test fails;
- ``pooled``: each run's Δ averaged over all draws (N × 256 samples per run), mean ± seed-std: the test with the
  draw's error averaged out;
- ``corr(base, Δ)``: across draws, the correlation of the draw's base value with its mean Δ.

``--budget`` scores the uniform method's runs of another budget of the sweep, and ``--first-draw`` starts the noise
seeds elsewhere (draws ``first .. first + N - 1``), so a cell chosen on one set of draws is checked on draws it was
not chosen on. Writes every (run, draw) row to research/tables/draw_spread_<setting>.csv, or
draw_spread_<setting>_<budget>_from<first>.csv when either is not its default.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    from recast.experiments.alone import reevaluate
    from recast.io import read_csv, write_csv
    from recast.experiments.sweep import is_finished, plan_sweep, results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting")
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--out-root", default="runs/sweep")
    ap.add_argument("--budget", default="uniform", help="the sweep budget whose uniform-method runs are scored")
    ap.add_argument("--first-draw", type=int, default=0, help="noise seed of the first draw")
    ap.add_argument("--table", help="print the table of a CSV this script wrote, without sampling")
    args = ap.parse_args(argv)
    if args.table:
        return report(read_csv(args.table), args.setting)

    runs = plan_sweep(settings=(args.setting,), budgets=(args.budget,), methods=("uniform",), seeds=(0, 1, 2),
                      out_root=args.out_root)
    missing = [str(r.out_dir) for r in runs if not is_finished(r)]
    if missing:
        raise SystemExit(f"unfinished runs (run notebook 05 first): {missing}")
    rows = []
    for draw in range(args.first_draw, args.first_draw + args.draws):
        rows += reevaluate(runs, num_prompts=args.num_prompts, noise_seed=draw)
        print(f"draw {draw} done", flush=True)
    name = args.setting if (args.budget, args.first_draw) == ("uniform", 0) else \
        f"{args.setting}_{args.budget}_from{args.first_draw}"
    write_csv(results_dir() / f"draw_spread_{name}.csv", rows)

    report(rows, args.setting)


def report(rows: list[dict], setting: str) -> None:
    """Print one line per judge and reward: notebook 06's draw (noise seed 0), the shared and per-seed tests, pooled."""
    from recast.experiments.alone import draw_spread

    n = len({r["noise_seed"] for r in rows})
    metrics = [k for k in rows[0] if k.startswith(("judge/", "reward/")) and f"base:{k}" in rows[0]]
    print(f"\n{setting}, uniform baseline, seeds {sorted({r['seed'] for r in rows})}, {n} draws of "
          f"{rows[0]['eval_prompts']} samples")
    print(f"{'metric':24s} {'first draw':>16s} {'shared: mean Δ ± sd over draws':>32s} {'fails':>6s} "
          f"{'per-seed fails':>15s} {'pooled Δ ± seed-std':>22s} {'corr(base, Δ)':>14s}")
    for m in metrics:
        d = draw_spread(rows, m)
        d0, pooled = d["shared"][0], d["pooled"]
        print(f"{m:24s} {d0['delta']:+8.3f} ± {d0['seed_std']:.3f}{'*' if d0['worse'] else ' '} "
              f"{d['draw_mean']:+20.3f} ± {d['draw_sd']:.3f} {sum(c['worse'] for c in d['shared']):3d}/{n:<2d} "
              f"{sum(c['worse'] for c in d['per_seed']):9d}/{n:<2d} "
              f"{pooled['delta']:+13.3f} ± {pooled['seed_std']:.3f}{'*' if pooled['worse'] else ' '} "
              f"{d['corr_base']:+13.2f}")
    print("(* and fails: worse by more than one seed-std, the uniform-baseline rule)")


if __name__ == "__main__":
    main()
