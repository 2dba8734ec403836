"""Train ``method=fixed`` at ReCAST's time-averaged W: does ReCAST's timing, or its re-solving, make the difference?

    python research/probes/fixed_w_runs.py quality --budgets uniform,sharpness-heavy      # 6 runs, about 7 min on 2 cores
    python research/probes/fixed_w_runs.py compose --budgets uniform --evaluate           # + notebook 06's judges, 1,024/seed
    python research/probes/fixed_w_runs.py compose --budgets uniform --rewards-only       # training rewards, no sampling
    python research/probes/pairwise_probe.py --method fixed --budgets uniform,sharpness-heavy --out-root runs/fixed \\
        --baseline-root runs/sweep --name pairwise_probe_quality_fixed
    python -m recast profile --setting compose --substeps 4 --out runs/profile_w/tweedie64   # a W before training
    python research/probes/fixed_w_runs.py compose --budgets uniform --w-from runs/profile_w/tweedie64/profile.json \\
        --out-root runs/profile_w/tweedie64 --name profile_w_tweedie64 --evaluate

For each budget of a finished λ-sweep cell (notebook 05's runs under ``--from-root``), the W that ReCAST applied is
averaged over every iteration and seed (``weights.jsonl``; the iterations before the tracker is ready hold λ/T and
count too). The mean of matrices with the same row and column sums has those sums, so it is a valid fixed W. The
fixed-W runs then train the same seeds, budgets, preset and rewards with that W from the first iteration, so they
keep ReCAST's average timing and drop its iteration-to-iteration re-solving. The W used is written to
``<out-root>/<setting>/<budget>/mean_W.json``. With ``--w-from PATH`` the W is instead that of a ``profile.json``
(`python -m recast profile`, on the base model, before any training) for the one budget given: is a W fixed before
training as good as the live one?

``--evaluate`` then scores the fixed-W runs beside the sweep's ReCAST and uniform runs with notebook 06's evaluation
at its 1,024-sample protocol (`recast.experiments.judge_eval.evaluate_sweep`, method ``fixed``, 4 per-seed draws of 256 test
prompts): pairwise win rates against each, and the paired per-judge differences. Writes
research/tables/fixed_w_<setting>{,_compare}.csv. Every run (training skipped where finished) also gets its training
rewards compared, from the runs' own final evaluation (64 test prompts, `recast.experiments.sweep_results.collect`): fixed W −
uniform, fixed W − ReCAST and ReCAST − uniform, paired by seed, in research/tables/fixed_w_<setting>_rewards.csv;
``--rewards-only`` writes just that table. ``--name`` replaces the ``fixed_w`` prefix of the three CSVs. Each CSV
keeps its rows of the budgets not given, so budgets can be added a few at a time.
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
    from recast.experiments.sweep import is_finished, plan_sweep, run_sweep

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting")
    ap.add_argument("--budgets", required=True, help="comma-separated sweep budgets")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--from-root", default="runs/sweep", help="the sweep whose ReCAST runs give the W")
    ap.add_argument("--out-root", default="runs/fixed")
    ap.add_argument("--w-from", default="mean", help="mean (ReCAST's time-averaged W, the default) or a profile.json "
                    "of `python -m recast profile` for the one budget given (a W fixed before any training)")
    ap.add_argument("--name", default="fixed_w", help="prefix of the CSVs in research/tables/")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--evaluate", action="store_true", help="then score them as notebook 06 does (1,024 per seed)")
    ap.add_argument("--rewards-only", action="store_true", help="only compare the finished runs' training rewards")
    args = ap.parse_args(argv)

    seeds = tuple(int(s) for s in args.seeds.split(","))
    if args.rewards_only:
        return rewards(args.setting, args.budgets.split(","), seeds, args.from_root, args.out_root, args.name)
    if args.w_from != "mean" and len(args.budgets.split(",")) != 1:
        raise SystemExit("--w-from PATH holds the W of one budget: give exactly one --budgets")
    for budget in args.budgets.split(","):
        src = plan_sweep(settings=(args.setting,), budgets=(budget,), methods=("recast",), seeds=seeds,
                         out_root=args.from_root)
        if args.w_from == "mean":
            missing = [str(r.out_dir) for r in src if not is_finished(r)]
            if missing:
                raise SystemExit(f"unfinished ReCAST runs (run notebook 05 first): {missing}")
            W, origin = mean_W([r.out_dir for r in src]), [str(r.out_dir) for r in src]
        else:
            W, origin = profile_W(args.w_from, src[0]), args.w_from
        text = ";".join(",".join(f"{x:.10g}" for x in row) for row in W)
        runs = plan_sweep(settings=(args.setting,), budgets=(budget,), methods=("fixed",), seeds=seeds,
                          sets={"fixed_W": text, "eval_every": 5, "progress": False}, out_root=args.out_root)
        out = runs[0].out_dir.parents[1]
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "mean_W.json", {"setting": args.setting, "budget": budget, "lam": list(src[0].lam),
                                         "from": origin, "W": W})
        report = run_sweep(runs, jobs=args.jobs)
        if report.failed:
            raise SystemExit(f"failed runs: {report.failed}")
        print(f"{budget}: W = {[[round(x, 4) for x in row] for row in W]}; trained {len(report.ran)}", flush=True)
    rewards(args.setting, args.budgets.split(","), seeds, args.from_root, args.out_root, args.name)
    if args.evaluate:
        evaluate(args.setting, args.budgets.split(","), seeds, args.from_root, args.out_root, args.name)


def profile_W(path: str, run) -> list[list[float]]:
    """The W of a ``profile.json``, checked against a sweep run's rewards (the digit world's setting) and budgets;
    the trainer checks T."""
    import numpy as np

    from recast.config import load_fixed_W, resolve_world
    from recast.world import world_info

    W, names = load_fixed_W(path)
    want = world_info(resolve_world("data/digit_base")).reward_settings[run.setting]
    if names is not None and tuple(names) != tuple(want):
        raise SystemExit(f"{path} profiles {list(names)}, the runs train {list(want)}")
    rows = np.asarray(W).sum(axis=1)
    if not np.allclose(rows / rows.sum(), np.asarray(run.lam) / sum(run.lam), atol=1e-6):
        raise SystemExit(f"{path}: W's row sums {rows.round(4).tolist()} are not the budget {run.budget}'s "
                         f"{list(run.lam)} (profile with --lam)")
    return [list(r) for r in W]


def write_merged(path, rows: list[dict], budgets: list[str], budget_first: bool = False) -> None:
    """Write ``rows`` to the CSV at ``path``, keeping its rows of every budget not in ``budgets``.

    A run over some budgets then adds to (or replaces its own budgets in) the table of an earlier run over others.
    Rows are grouped by (method, baseline) in first-seen order and by budget name within a group, or with
    ``budget_first`` by budget name and then (method, baseline) by name, as `evaluate_sweep` orders its win rows.
    """
    from pathlib import Path

    from recast.io import read_csv, write_csv

    kept = [r for r in read_csv(path) if r["budget"] not in budgets] if Path(path).exists() else []
    merged = kept + list(rows)
    groups: dict = {}
    for r in merged:
        groups.setdefault((r.get("method"), r.get("baseline")), len(groups))
    if budget_first:
        merged.sort(key=lambda r: (r["budget"], str(r.get("method")), str(r.get("baseline"))))
    else:
        merged.sort(key=lambda r: (groups[(r.get("method"), r.get("baseline"))], r["budget"]))
    write_csv(path, merged)


def planned(setting: str, budgets: list[str], seeds: tuple[int, ...], from_root: str, out_root: str) -> list:
    """The fixed-W runs and the sweep's ReCAST and uniform runs of the same cells and seeds."""
    from recast.experiments.sweep import plan_sweep

    runs = []
    for budget in budgets:
        runs += plan_sweep(settings=(setting,), budgets=(budget,), methods=("fixed",), seeds=seeds, out_root=out_root)
        runs += plan_sweep(settings=(setting,), budgets=(budget,), methods=("recast", "uniform"), seeds=seeds,
                           out_root=from_root)
    return runs


def rewards(setting: str, budgets: list[str], seeds: tuple[int, ...], from_root: str, out_root: str,
            name: str = "fixed_w") -> None:
    """Paired training-reward differences from the runs' own final evaluation: writes fixed_w_<setting>_rewards.csv."""
    from recast.experiments.sweep import results_dir
    from recast.experiments.sweep_results import collect, compare

    rows = collect(planned(setting, budgets, seeds, from_root, out_root))
    out = [r for a, b in (("fixed", "uniform"), ("fixed", "recast"), ("recast", "uniform"))
           for r in compare(rows, method=a, baseline=b) if r["metric"].startswith("reward/")]
    write_merged(results_dir() / f"{name}_{setting}_rewards.csv", out, budgets)
    for r in out:
        print(f"{r['budget']} {r['method']} - {r['baseline']} {r['metric']}: {r['diff']:+.4f} "
              f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] {r['verdict']}")


def evaluate(setting: str, budgets: list[str], seeds: tuple[int, ...], from_root: str, out_root: str,
             name: str = "fixed_w") -> None:
    """Notebook 06's evaluation (1,024 samples per seed) of the fixed-W runs against the sweep's ReCAST and uniform
    runs: writes research/tables/fixed_w_<setting>.csv (pairwise) and fixed_w_<setting>_compare.csv (per judge)."""
    from recast.experiments.judge_eval import evaluate_sweep, judge_runs
    from recast.experiments.sweep import results_dir
    from recast.experiments.sweep_results import compare

    ev = evaluate_sweep(planned(setting, budgets, seeds, from_root, out_root), method="fixed", num_prompts=256, draws=4, per_seed=True)
    write_merged(results_dir() / f"{name}_{setting}.csv", ev.win_rows, budgets, budget_first=True)
    paired = judge_runs(ev.judge_rows, 1024)
    rows = [row for b in ("uniform", "recast") for row in compare(paired, method="fixed", baseline=b)]
    rows += compare(paired, method="recast", baseline="uniform")
    write_merged(results_dir() / f"{name}_{setting}_compare.csv", rows, budgets)
    for w in ev.win_rows:
        print(f"{w['budget']}: fixed vs {w['baseline']}: pairwise {w['seed_rates']} ({w['verdict']})")
    for r in rows:
        if r["metric"].startswith("judge/"):
            print(f"{r['budget']} {r['method']} - {r['baseline']} {r['metric']}: {r['diff']:+.4f} "
                  f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] {r['verdict']}")


if __name__ == "__main__":
    main()
