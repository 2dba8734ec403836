"""Train ``method=fixed`` at ReCAST's time-averaged W: does ReCAST's timing, or its re-solving, make the difference?

    python scripts/fixed_w_runs.py quality --budgets uniform,sharpness-heavy      # 6 runs, about 7 min on 2 cores
    python scripts/fixed_w_runs.py compose --budgets uniform --evaluate           # + notebook 06's judges, 1,024/seed
    python scripts/fixed_w_runs.py compose --budgets uniform --rewards-only       # training rewards, no sampling
    python scripts/pairwise_probe.py --method fixed --budgets uniform,sharpness-heavy --out-root runs/fixed \\
        --baseline-root runs/sweep --name pairwise_probe_quality_fixed

For each budget of a finished λ-sweep cell (notebook 05's runs under ``--from-root``), the W that ReCAST applied is
averaged over every iteration and seed (``weights.jsonl``; the iterations before the tracker is ready hold λ/T and
count too). The mean of matrices with the same row and column sums has those sums, so it is a valid fixed W. The
fixed-W runs then train the same seeds, budgets, preset and rewards with that W from the first iteration, so they
keep ReCAST's average timing and drop its iteration-to-iteration re-solving. The W used is written to
``<out-root>/<setting>/<budget>/mean_W.json``.

``--evaluate`` then scores the fixed-W runs beside the sweep's ReCAST and uniform runs with notebook 06's evaluation
at its 1,024-sample protocol (`recast.judge_eval.evaluate_sweep`, method ``fixed``, 4 per-seed draws of 256 test
prompts): pairwise win rates against each, and the paired per-judge differences. Writes
data/results/fixed_w_<setting>{,_compare}.csv. Every run (training skipped where finished) also gets its training
rewards compared, from the runs' own final evaluation (64 test prompts, `recast.sweep_results.collect`): fixed W −
uniform, fixed W − ReCAST and ReCAST − uniform, paired by seed, in data/results/fixed_w_<setting>_rewards.csv;
``--rewards-only`` writes just that table.
"""

from __future__ import annotations

import argparse


def mean_W(run_dirs: list) -> list[list[float]]:
    """Mean of the W records of every iteration of every run's ``weights.jsonl`` ((K, T) nested lists).

    Raises:
        FileNotFoundError: a run without weights.jsonl; ValueError: no W records or shapes that differ.
    """
    import json
    from pathlib import Path

    import numpy as np

    Ws = []
    for d in run_dirs:
        with open(Path(d) / "weights.jsonl") as f:
            Ws += [np.asarray(json.loads(line)["W"], dtype=np.float64) for line in f if line.strip()]
    if not Ws or len({w.shape for w in Ws}) != 1:
        raise ValueError(f"no W records, or W shapes that differ, in {run_dirs}")
    return np.mean(Ws, axis=0).tolist()


def main(argv: list[str] | None = None) -> None:
    from recast.io import write_json
    from recast.sweep import is_finished, plan_sweep, run_sweep

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting")
    ap.add_argument("--budgets", required=True, help="comma-separated sweep budgets")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--from-root", default="runs/sweep", help="the sweep whose ReCAST runs give the W")
    ap.add_argument("--out-root", default="runs/fixed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--evaluate", action="store_true", help="then score them as notebook 06 does (1,024 per seed)")
    ap.add_argument("--rewards-only", action="store_true", help="only compare the finished runs' training rewards")
    args = ap.parse_args(argv)

    seeds = tuple(int(s) for s in args.seeds.split(","))
    if args.rewards_only:
        return rewards(args.setting, args.budgets.split(","), seeds, args.from_root, args.out_root)
    for budget in args.budgets.split(","):
        src = plan_sweep(settings=(args.setting,), budgets=(budget,), methods=("recast",), seeds=seeds,
                         out_root=args.from_root)
        missing = [str(r.out_dir) for r in src if not is_finished(r)]
        if missing:
            raise SystemExit(f"unfinished ReCAST runs (run notebook 05 first): {missing}")
        W = mean_W([r.out_dir for r in src])
        text = ";".join(",".join(f"{x:.10g}" for x in row) for row in W)
        runs = plan_sweep(settings=(args.setting,), budgets=(budget,), methods=("fixed",), seeds=seeds,
                          sets={"fixed_W": text, "eval_every": 5, "progress": False}, out_root=args.out_root)
        out = runs[0].out_dir.parents[1]
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "mean_W.json", {"setting": args.setting, "budget": budget, "lam": list(src[0].lam),
                                         "from": [str(r.out_dir) for r in src], "W": W})
        report = run_sweep(runs, jobs=args.jobs)
        if report.failed:
            raise SystemExit(f"failed runs: {report.failed}")
        print(f"{budget}: W = {[[round(x, 4) for x in row] for row in W]}; trained {len(report.ran)}", flush=True)
    rewards(args.setting, args.budgets.split(","), seeds, args.from_root, args.out_root)
    if args.evaluate:
        evaluate(args.setting, args.budgets.split(","), seeds, args.from_root, args.out_root)


def planned(setting: str, budgets: list[str], seeds: tuple[int, ...], from_root: str, out_root: str) -> list:
    """The fixed-W runs and the sweep's ReCAST and uniform runs of the same cells and seeds."""
    from recast.sweep import plan_sweep

    runs = []
    for budget in budgets:
        runs += plan_sweep(settings=(setting,), budgets=(budget,), methods=("fixed",), seeds=seeds, out_root=out_root)
        runs += plan_sweep(settings=(setting,), budgets=(budget,), methods=("recast", "uniform"), seeds=seeds,
                           out_root=from_root)
    return runs


def rewards(setting: str, budgets: list[str], seeds: tuple[int, ...], from_root: str, out_root: str) -> None:
    """Paired training-reward differences from the runs' own final evaluation: writes fixed_w_<setting>_rewards.csv."""
    from recast.io import write_csv
    from recast.sweep import results_dir
    from recast.sweep_results import collect, compare

    rows = collect(planned(setting, budgets, seeds, from_root, out_root))
    out = [r for a, b in (("fixed", "uniform"), ("fixed", "recast"), ("recast", "uniform"))
           for r in compare(rows, method=a, baseline=b) if r["metric"].startswith("reward/")]
    write_csv(results_dir() / f"fixed_w_{setting}_rewards.csv", out)
    for r in out:
        print(f"{r['budget']} {r['method']} - {r['baseline']} {r['metric']}: {r['diff']:+.4f} "
              f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] {r['verdict']}")


def evaluate(setting: str, budgets: list[str], seeds: tuple[int, ...], from_root: str, out_root: str) -> None:
    """Notebook 06's evaluation (1,024 samples per seed) of the fixed-W runs against the sweep's ReCAST and uniform
    runs: writes data/results/fixed_w_<setting>.csv (pairwise) and fixed_w_<setting>_compare.csv (per judge)."""
    from recast.io import write_csv
    from recast.judge_eval import evaluate_sweep, judge_runs
    from recast.sweep import results_dir
    from recast.sweep_results import compare

    ev = evaluate_sweep(planned(setting, budgets, seeds, from_root, out_root), method="fixed", num_prompts=256, draws=4, per_seed=True)
    write_csv(results_dir() / f"fixed_w_{setting}.csv", ev.win_rows)
    paired = judge_runs(ev.judge_rows, 1024)
    rows = [row for b in ("uniform", "recast") for row in compare(paired, method="fixed", baseline=b)]
    rows += compare(paired, method="recast", baseline="uniform")
    write_csv(results_dir() / f"fixed_w_{setting}_compare.csv", rows)
    for w in ev.win_rows:
        print(f"{w['budget']}: fixed vs {w['baseline']}: pairwise {w['seed_rates']} ({w['verdict']})")
    for r in rows:
        if r["metric"].startswith("judge/"):
            print(f"{r['budget']} {r['method']} - {r['baseline']} {r['metric']}: {r['diff']:+.4f} "
                  f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] {r['verdict']}")


if __name__ == "__main__":
    main()
