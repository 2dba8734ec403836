"""The single-reward table on more samples: further per-seed draws of 256, pooled with the committed first draw.

    python research/probes/alone_draws.py --first alone_clipped_reeval256,alone_contrast_round_clipped_reeval256 \
        --rewards digit,color,position_flat,size_half_max,sharpness,speck_free,wash_free,realism,placebo \
        --draws 1 --name alone_clipped_pooled512          # about 10 min on 2 cores, no training

The committed tables score each run's base model and final policy once, on 256 test samples (`recast.experiments.alone.
reevaluate`, draw 0). Their pass rates carry a binomial s.e. of about 0.03 per run, as large as the effects the rule
reads. This samples ``--draws`` further per-seed draws of every run under ``runs/alone`` (`recast.experiments.alone.
reevaluate_draw`; draw d of seed s has noise seed 20,011 + s + 1,000 d, shared by every reward of that seed), takes
draw 0's rows from the committed ``<first>_runs.csv`` tables, averages each run over its draws (`recast.experiments.alone.
pool_draws`) and writes the single-reward table and its placebo comparison on the pooled samples:
research/tables/<name>.csv, <name>_runs.csv (every draw's rows) and <name>_vs_placebo.csv.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    from recast.experiments.alone import (alone_markdown, alone_table, plan_alone, pool_draws, reevaluate_draw, rule_false_alarm,
                              versus_control)
    from recast.io import read_csv, write_csv
    from recast.experiments.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", required=True, help="committed <name>_runs.csv tables holding draw 0, comma-separated")
    ap.add_argument("--rewards", required=True)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--draws", type=int, default=1, help="further draws to sample (draws 1..N)")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--out", default="runs/alone")
    ap.add_argument("--name", required=True)
    a = ap.parse_args(argv)
    rewards = [x for x in a.rewards.split(",") if x]
    seeds = [int(x) for x in a.seeds.split(",") if x]
    first = {}
    for name in a.first.split(","):  # a run in two tables (the placebo) is taken from the first that has it
        for r in read_csv(results_dir() / f"{name}_runs.csv"):
            if r["budget"] in rewards and int(r["seed"]) in seeds:
                first.setdefault((r["budget"], int(r["seed"])), r)
    first = list(first.values())
    missing = sorted({(w, s) for w in rewards for s in seeds} - {(r["budget"], int(r["seed"])) for r in first})
    if missing:
        raise SystemExit(f"draw 0 of these runs is in none of --first: {missing}")
    if {int(r["eval_prompts"]) for r in first} != {a.num_prompts}:
        raise SystemExit(f"--first tables were not scored on {a.num_prompts} samples per run")
    first = [{**r, "draw": 0} for r in first]
    runs = plan_alone(rewards=tuple(rewards), seeds=tuple(seeds), out_root=a.out)
    rows = list(first)
    for d in range(1, a.draws + 1):
        rows += reevaluate_draw(runs, d, num_prompts=a.num_prompts)
        write_csv(results_dir() / f"{a.name}_runs.csv", rows)  # every draw's rows, before anything can fail
        print(f"draw {d} done", flush=True)
    pooled = pool_draws(rows)
    table = alone_table(pooled)
    write_csv(results_dir() / f"{a.name}.csv", table)
    write_csv(results_dir() / f"{a.name}_vs_placebo.csv", versus_control(pooled, "placebo"))
    print(f"{pooled[0]['eval_prompts']} samples per policy and seed, {len(seeds)} seeds")
    print(alone_markdown(table))
    print(f"false-alarm rate of the rule per null judge at {len(seeds)} seeds: {rule_false_alarm(len(seeds)):.3f}")


if __name__ == "__main__":
    main()
