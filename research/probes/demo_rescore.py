"""A finished demo's runs re-scored on more samples: is its table's verdict the draw's or the methods'?

    python research/probes/demo_rescore.py runs/demo5_quality --num-prompts 256 --draws 2   # about 8 min on 2 cores
    python research/probes/demo_rescore.py runs/demo5_quality --table demo5_quality_rescore  # re-print, no sampling
    python research/probes/demo_rescore.py runs/demo5_quality --table demo5_quality_rescore \
        --compare demo5_quality_contrast_rescore      # two demos' policies against each other, no sampling

The demo's own table reads 64 test prompts once per run. This re-samples every run's base model and final policy on
``--num-prompts`` test samples per draw (`recast.experiments.demo.rescore`; each seed its own noise, shared by the methods), then
prints ReCAST − baseline paired over seeds (`recast.experiments.demo.rescore_paired`) and what training did under each method
(`recast.experiments.demo.rescore_changes`). Writes research/tables/<name>.csv (one row per run and draw), <name>_paired.csv and
<name>_changes.csv, where <name> is the demo folder's name + ``_rescore``. ``--compare OTHER`` pairs the rows with
another demo's committed re-score, method by method and seed by seed on their common draws (`recast.experiments.demo.
rescore_compare`), and writes <name>_vs_<OTHER>.csv.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def report(rows: list[dict]) -> str:
    from recast.experiments.demo import rescore_changes, rescore_paired

    paired, changes = rescore_paired(rows), rescore_changes(rows)
    samples = paired[0]["samples"] if paired else changes[0]["samples"]
    out = [f"ReCAST − baseline, {samples} samples per policy and seed (95 % t-interval over seeds):", "",
           "| metric | " + " | ".join(f"ReCAST − {b}" for b in dict.fromkeys(r["baseline"] for r in paired)) + " |",
           "|---|" + "---|" * len({r["baseline"] for r in paired})]
    for metric in dict.fromkeys(r["metric"] for r in paired):
        cells = [r for r in paired if r["metric"] == metric]
        out.append(f"| {metric} | " + " | ".join(f"{r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] "
                                                   f"{r['verdict']}" for r in cells) + " |")
    methods = list(dict.fromkeys(r["method"] for r in changes))
    out += ["", "Final − base, mean ± seed-std (* : worse by more than one seed-std):", "",
            "| metric | base | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for metric in dict.fromkeys(r["metric"] for r in changes):
        cells = {r["method"]: r for r in changes if r["metric"] == metric}
        base = next(iter(cells.values()))["base_mean"]
        out.append(f"| {metric} | {base:.3f} | " + " | ".join(
            f"{c['delta_mean']:+.3f} ± {c['delta_std']:.3f}{' *' if c['worse'] else ''}" for c in cells.values()) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    from recast.experiments.demo import rescore, rescore_changes, rescore_compare, rescore_paired
    from recast.io import read_csv, write_csv
    from recast.experiments.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo_dir")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--draws", type=int, default=1)
    ap.add_argument("--table", help="print the table of a rows CSV under research/tables this script wrote; no sampling")
    ap.add_argument("--compare", help="another rows CSV under research/tables: this demo's judges minus that one's")
    a = ap.parse_args(argv)
    name = a.table or f"{Path(a.demo_dir).name}_rescore"
    if a.table:
        rows = read_csv(results_dir() / f"{a.table}.csv")
    else:
        rows = rescore(a.demo_dir, num_prompts=a.num_prompts, draws=a.draws)
        write_csv(results_dir() / f"{name}.csv", rows)
        write_csv(results_dir() / f"{name}_paired.csv", rescore_paired(rows))
        write_csv(results_dir() / f"{name}_changes.csv", rescore_changes(rows))
    print(report(rows))
    if a.compare:
        vs = rescore_compare(rows, read_csv(results_dir() / f"{a.compare}.csv"))
        write_csv(results_dir() / f"{name}_vs_{a.compare}.csv", vs)
        print(f"\n{name} − {a.compare}, per method, {vs[0]['samples']} samples per policy and seed:\n")
        print("| method | judge | difference [95 % CI] |\n|---|---|---|")
        for r in vs:
            print(f"| {r['method']} | {r['metric']} | {r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] "
                  f"{r['verdict']} |")


if __name__ == "__main__":
    main()
