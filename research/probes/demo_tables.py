"""Markdown tables for the demo pages from finished demo folders (`python -m recast demo ... --out DIR`).

    python research/probes/demo_tables.py runs/demo5_compose runs/demo5_quality

For each folder: base model and per-method change (mean ± std over seeds), and ReCAST − baseline paired over the same
seeds with its 95 % t-interval (`recast.experiments.demo.paired`); then the sample-efficiency ratios
(`recast.experiments.demo.efficiency`). Nothing is typed by hand: the results tables of
research/rounds/16-demo-compose.md and research/rounds/17-demo-quality.md are this script's output.
"""

from __future__ import annotations

import sys
from pathlib import Path


def tables(demo_dir: Path) -> str:
    from recast.experiments.demo import efficiency, paired, summarise
    from recast.stats import efficiency_label

    methods = [m for m in ("recast", "uniform", "reward_sum") if (demo_dir / m).is_dir()]
    runs = {m: sorted((demo_dir / m).glob("seed_*"), key=lambda p: int(p.name.split("_")[1])) for m in methods}
    rows = summarise(runs)
    pairs = paired(runs)
    eff = efficiency(runs)
    baselines = [m for m in methods if m != "recast"]
    n = len(runs["recast"])
    head = ["metric", "base model"] + [f"{m} Δ" for m in methods] + [f"ReCAST − {b} [95 % CI]" for b in baselines]
    out = [f"**{demo_dir.name}** ({n} seeds; Δ = final − base, mean ± std over seeds)", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    metrics = [r["metric"] for r in rows if r["method"] == "recast"]
    for metric in metrics:
        by = {r["method"]: r for r in rows if r["metric"] == metric}
        scale = "{:+.1f} ± {:.1f}" if metric == "judge/fid" else "{:+.3f} ± {:.3f}"
        base = ("{:.1f} ± {:.1f}" if metric == "judge/fid" else "{:.3f} ± {:.3f}").format(
            by["recast"]["base_mean"], by["recast"]["base_std"])
        cells = [metric + (" (lower is better)" if metric.startswith(("judge/fid", "judge/defect_")) else ""), base]
        cells += [scale.format(by[m]["delta_mean"], by[m]["delta_std"]) for m in methods]
        for b in baselines:
            p = next(r for r in pairs if r["baseline"] == b and r["metric"] == metric)
            fmt = "{:+.1f} [{:+.1f}, {:+.1f}] {}" if metric == "judge/fid" else "{:+.3f} [{:+.3f}, {:+.3f}] {}"
            cells.append(fmt.format(p["diff"], p["ci_low"], p["ci_high"], p["verdict"]))
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "| baseline | judge | baseline final | ReCAST final | images ReCAST needs / baseline's |",
            "|---|---|---|---|---|"]
    for r in eff:
        out.append(f"| {r['baseline']} | {r['metric']} | {r['baseline_final']:.3f} | {r['method_final']:.3f} | "
                   f"{efficiency_label(r)} |")
    return "\n".join(out)


if __name__ == "__main__":
    print("\n\n".join(tables(Path(a)) for a in sys.argv[1:]))
