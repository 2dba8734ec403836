"""Markdown tables of a finished λ-sweep, read from the CSVs notebooks 05 and 06 write to `research/tables/`.

    python -m recast.experiments.sweep_report                       # the committed sweep: lambda_sweep*.csv, judge_eval.csv
    python -m recast.experiments.sweep_report --name lambda_sweep_ci --judge judge_eval_ci
    python -m recast.experiments.sweep_report --rescore judge_eval_256   # notebook 06's re-scored tables (judge_eval_256*.csv)
    python -m recast.experiments.sweep_report --fixed fixed_w_glyph      # the fixed-W control (research/probes/fixed_w_runs.py --name)

Nothing in the tables of the λ-sweep page, research/rounds/19-lambda-sweep.md, is typed by hand: they are this module's
output. Cells are the paired ReCAST − baseline difference over seeds; a trailing **W** (win) or *L* (loss) marks a cell
whose 95 % interval excludes zero, a bare number is a tie. The Fréchet distance and the defect rates are
lower-is-better, so a negative difference there is a win.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from recast.io import read_csv

__all__ = ["tally_table", "paired_table", "efficiency_table", "win_rate_table", "summarise_w_timing",
           "w_timing_table", "hacking_table", "fell_table", "report", "rescore_report", "fixed_w_report"]

_MARK = {"win": " **W**", "loss": " *L*", "tie": ""}


def _cells(rows: list[dict]) -> list[tuple[str, str]]:
    """(setting, budget) pairs: settings in first-seen order, the uniform budget first within each."""
    cells = list(dict.fromkeys((r["setting"], r["budget"]) for r in rows))
    settings = list(dict.fromkeys(s for s, _ in cells))
    return sorted(cells, key=lambda c: (settings.index(c[0]), c[1] != "uniform", cells.index(c)))


def _fmt(metric: str, value: float) -> str:
    return f"{value:+.1f}" if metric.endswith("fid") else f"{value:+.3f}"


def tally_table(paired: list[dict], confidence: float = 0.95, rewards: bool = True, label: str = "baseline") -> str:
    """Win / tie / loss counts per baseline and setting, judges and training rewards apart, beside the number of
    cells that would be called a win or a loss by chance alone if nothing differed ((1 − confidence) × cells).
    ``rewards=False``: the judges alone (a re-score has no training rewards); ``label`` heads the first column."""
    prefixes = ("judge/", "reward/") if rewards else ("judge/",)
    head = " | ".join(f"{'judges' if p == 'judge/' else 'training rewards'}: win / tie / loss" for p in prefixes)
    what = "judges, rewards" if rewards else "judges"
    lines = [f"| {label} | setting | {head} | calls expected by chance ({what}; {1 - confidence:.0%} of cells) |",
             "|---|---|" + "---|" * (len(prefixes) + 1)]
    for b in dict.fromkeys(r["baseline"] for r in paired):
        for s in dict.fromkeys(r["setting"] for r in paired):
            sel = [r for r in paired if r["baseline"] == b and r["setting"] == s]
            counts, chance = [], []
            for prefix in prefixes:
                v = [r["verdict"] for r in sel if r["metric"].startswith(prefix)]
                counts.append(" / ".join(str(v.count(k)) for k in ("win", "tie", "loss")))
                chance.append(f"{(1 - confidence) * len(v):.1f} of {len(v)}")
            lines.append(f"| {b} | {s} | {' | '.join(counts)} | {', '.join(chance)} |")
    return "\n".join(lines)


def paired_table(paired: list[dict], baseline: str, prefix: str = "judge/") -> str:
    """Rows: setting / budget; columns: the metrics under `prefix`; cells: the paired difference and its verdict."""
    sel = [r for r in paired if r["baseline"] == baseline and r["metric"].startswith(prefix)]
    metrics = list(dict.fromkeys(r["metric"] for r in sel))
    by = {(r["setting"], r["budget"], r["metric"]): r for r in sel}
    lines = ["| setting / budget | " + " | ".join(m.split("/", 1)[1] for m in metrics) + " |",
             "|---|" + "---|" * len(metrics)]
    for s, b in _cells(sel):
        cells = [(_fmt(m, by[(s, b, m)]["diff"]) + _MARK[by[(s, b, m)]["verdict"]]) if (s, b, m) in by else "–"
                 for m in metrics]
        lines.append(f"| {s} / {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def efficiency_table(eff: list[dict], metrics: tuple[str, ...] = ("judge/strict", "reward/weighted")) -> str:
    """Images ReCAST needs to reach each baseline's final seed-mean value, as a share of the baseline's images."""
    from recast.stats import efficiency_label

    by = {(r["setting"], r["budget"], r["baseline"], r["metric"]): r for r in eff}
    baselines = list(dict.fromkeys(r["baseline"] for r in eff))
    head = [f"{m.split('/', 1)[1]} vs {b}" for b in baselines for m in metrics]
    lines = ["| setting / budget | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for s, bud in _cells(eff):
        cells = [efficiency_label(by[(s, bud, b, m)]) if (s, bud, b, m) in by else "–" for b in baselines
                 for m in metrics]
        lines.append(f"| {s} / {bud} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def win_rate_table(win_rows: list[dict]) -> str:
    """Pairwise-judge win rate of ReCAST against each baseline (ties count half): pooled over (seed, prompt) pairs
    with its Wilson interval, and over seeds with its t interval, which decides the verdict
    (`recast.winrate.SeedWinRates`)."""
    baselines = list(dict.fromkeys(r["baseline"] for r in win_rows))
    by = {(r["setting"], r["budget"], r["baseline"]): r for r in win_rows}
    head = [f"vs {b}: {what}" for b in baselines
            for what in ("pairs W / T / L", "win rate [Wilson 95 %]", "seed mean [t 95 %]")]
    lines = ["| setting / budget | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for s, bud in _cells(win_rows):
        cells = []
        for b in baselines:
            r = by.get((s, bud, b))
            if r is None:
                cells += ["–"] * 3
                continue
            rates = [float(x) for x in str(r["seed_rates"]).split()]
            cells += [f"{r['wins']} / {r['ties']} / {r['losses']}",
                      f"{r['win_rate']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]",
                      f"{sum(rates) / len(rates):.2f} [{r['seed_ci_low']:.2f}, {r['seed_ci_high']:.2f}]"
                      f"{_MARK[r['verdict']]}"]
        lines.append(f"| {s} / {bud} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summarise_w_timing(rows: list[dict], null: float = 0.0) -> list[dict]:
    """Per (setting, budget, reward) of `recast.experiments.sweep_results.w_timing` rows: the early-half share per seed, its mean, the
    mean largest deviation from λ/T, and whether every seed's share sits beyond 0.5 ± `null` on the same side
    (`null`: how far noise alone moves a share, `recast.informativeness.simulate.early_share_null`)."""
    out = []
    for key in dict.fromkeys((r["setting"], r["budget"], r["reward"]) for r in rows):
        sel = [r for r in rows if (r["setting"], r["budget"], r["reward"]) == key]
        shares = [r["early_share"] for r in sel]
        out.append({"setting": key[0], "budget": key[1], "reward": key[2], "seeds": len(sel),
                    "early_shares": " ".join(f"{x:.3f}" for x in shares),
                    "early_share_mean": sum(shares) / len(shares),
                    "max_deviation_mean": sum(r["max_deviation"] for r in sel) / len(sel), "null": null,
                    "same_side": all(x > 0.5 + null for x in shares) or all(x < 0.5 - null for x in shares)})
    return out


def w_timing_table(summary: list[dict]) -> str:
    """Rows: setting / budget; columns: rewards in first-seen order; cells: early-half shares per seed, marked
    **early** or **late** when `summarise_w_timing` found every seed beyond the noise band on that side."""
    rewards = {s: list(dict.fromkeys(r["reward"] for r in summary if r["setting"] == s))
               for s in dict.fromkeys(r["setting"] for r in summary)}
    by = {(r["setting"], r["budget"], r["reward"]): r for r in summary}
    lines = []
    for setting, names in rewards.items():
        lines += ["" if lines else None, "| " + setting + " / budget | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        for bud in dict.fromkeys(r["budget"] for r in summary if r["setting"] == setting):
            cells = []
            for n in names:
                r = by[(setting, bud, n)]
                mark = "" if not r["same_side"] else " **early**" if r["early_share_mean"] > 0.5 else " **late**"
                cells.append(r["early_shares"].replace(" ", ", ") + mark)
            lines.append(f"| {bud} | " + " | ".join(cells) + " |")
    return "\n".join(x for x in lines if x is not None)


def hacking_table(change: list[dict]) -> str:
    """One row per (setting, budget, method) of `recast.experiments.sweep_results.training_change`: the weighted training reward's change
    and every held-out judge that got worse (final − base, interval excluding zero) while it rose."""
    by = {(r["setting"], r["budget"], r["method"], r["metric"]): r for r in change}
    lines = ["| setting / budget | method | weighted reward, final − base | judges that fell (change) |",
             "|---|---|---|---|"]
    for s, bud in _cells(change):
        for m in dict.fromkeys(r["method"] for r in change if (r["setting"], r["budget"]) == (s, bud)):
            w = by.get((s, bud, m, "reward/weighted"))
            if w is None:
                continue
            down = [x for x in str(w["judges_down"] or "").split(";") if x] if w["reward_up_judge_down"] else []
            fell = ", ".join(f"{x.split('/', 1)[1]} {_fmt(x, by[(s, bud, m, x)]['change'])}" for x in down) or "none"
            lines.append(f"| {s} / {bud} | {m} | {w['change']:+.3f} ({w['verdict']}) | {fell} |")
    return "\n".join(lines)


def fell_table(change: list[dict]) -> str:
    """One row per (setting, budget, method) of notebook 06's ``<judge>_change.csv``: every held-out judge that got
    worse, final − base over the same seeds with its interval excluding zero (a re-score has no training reward
    beside it, so these are falls, not necessarily hacking)."""
    by = {}
    for r in change:
        by.setdefault((r["setting"], r["budget"], r["method"]), []).append(r)
    lines = ["| setting / budget | method | judges that got worse (change) |", "|---|---|---|"]
    for s, bud in _cells(change):
        for m in dict.fromkeys(r["method"] for r in change if (r["setting"], r["budget"]) == (s, bud)):
            fell = ", ".join(f"{r['metric'].split('/', 1)[1]} {_fmt(r['metric'], r['change'])}"
                             for r in by[(s, bud, m)] if r["verdict"] == "worse") or "none"
            lines.append(f"| {s} / {bud} | {m} | {fell} |")
    return "\n".join(lines)


def report(results: str | Path, name: str = "lambda_sweep", judge: str | None = "judge_eval") -> str:
    """Every table of one sweep on the λ-sweep page (research/rounds/19-lambda-sweep.md): the tally, the paired judge
    and reward tables per baseline, the sample efficiency, and (when notebook 06 has run) the pairwise-judge win
    rates."""
    results = Path(results)
    paired = read_csv(results / f"{name}_paired.csv")
    out = ["Win / tie / loss of ReCAST per baseline (a cell is a win or a loss only when its 95 % interval over "
           "seeds excludes zero):", "", tally_table(paired)]
    for b in dict.fromkeys(r["baseline"] for r in paired):
        out += ["", f"Held-out judges, ReCAST − {b} (paired over seeds):", "", paired_table(paired, b, "judge/"),
                "", f"Training rewards, ReCAST − {b}:", "", paired_table(paired, b, "reward/")]
    change_path = results / f"{name}_training.csv"
    if change_path.exists():
        out += ["", "What training did, final − base model over the same seeds (a judge is listed when it fell while "
                "the weighted training reward rose, both intervals excluding zero: reward hacking):", "",
                hacking_table(read_csv(change_path))]
    eff_path = results / f"{name}_efficiency.csv"
    if eff_path.exists():
        out += ["", "Images ReCAST needs to reach the baseline's final value, as a share of the baseline's images:",
                "", efficiency_table(read_csv(eff_path))]
    timing_path = results / f"{name}_w_timing_summary.csv"
    if timing_path.exists():
        summary = read_csv(timing_path)
        out += ["", "Share of each ReCAST W row in the noisiest half of the steps, per seed (λ/T: 0.5; **early** / "
                f"**late**: beyond 0.5 ± {summary[0]['null']:.3f}, the 95 % noise band, on the same side in every "
                "seed):", "", w_timing_table(summary)]
    if judge and (results / f"{judge}.csv").exists():
        out += ["", "Pairwise judge, ReCAST against each baseline (the verdict uses the interval over seeds):", "",
                win_rate_table(read_csv(results / f"{judge}.csv"))]
    return "\n".join(out)


def rescore_report(results: str | Path, judge: str = "judge_eval_256") -> str:
    """Every table of notebook 06's re-score ``judge`` (``<judge>_compare.csv``, ``_change.csv`` and ``<judge>.csv``)
    on the λ-sweep page: the judges' win / tie / loss tally per baseline, the paired judge tables, the judges that
    training made worse (`fell_table`), and the pairwise-judge win rates."""
    results = Path(results)
    compare = [r for r in read_csv(results / f"{judge}_compare.csv") if r["metric"].startswith("judge/")]
    out = [f"Notebook 06's re-score ({judge}): win / tie / loss of ReCAST per baseline on the held-out judges (a cell "
           "is a win or a loss only when its 95 % interval over seeds excludes zero):", "",
           tally_table(compare, rewards=False)]
    for b in dict.fromkeys(r["baseline"] for r in compare):
        out += ["", f"Held-out judges, ReCAST − {b} (paired over seeds, {judge}):", "",
                paired_table(compare, b, "judge/")]
    out += ["", f"What training did ({judge}), final − base model over the same seeds: the judges that got worse, "
            "their 95 % interval over seeds excluding zero:", "", fell_table(read_csv(results / f"{judge}_change.csv"))]
    out += ["", f"Pairwise judge ({judge}), ReCAST against each baseline (the verdict uses the interval over seeds):",
            "", win_rate_table(read_csv(results / f"{judge}.csv"))]
    return "\n".join(out)


def fixed_w_report(results: str | Path, name: str = "fixed_w_glyph") -> str:
    """Every table of the fixed-W control (`research/probes/fixed_w_runs.py --name name --evaluate`) on the λ-sweep
    page, per setting that has its three CSVs: the win / tie / loss tally of each comparison (fixed W − uniform, fixed W
    − ReCAST, ReCAST − uniform) on the held-out judges at 1,024 samples per seed and on the training rewards, the paired
    judge table of each comparison, and the pairwise-judge win rates of the fixed W against each.

    Raises:
        FileNotFoundError: no setting has all three of ``<name>_<setting>{,_compare,_rewards}.csv``.
    """
    results = Path(results)
    settings = [s for s in ("compose", "quality")
                if all((results / f"{name}_{s}{x}.csv").exists() for x in ("", "_compare", "_rewards"))]
    if not settings:
        raise FileNotFoundError(f"no {name}_<setting>{{,_compare,_rewards}}.csv in {results}")

    shown = {"fixed": "fixed W", "recast": "ReCAST"}

    def labelled(rows):  # one "baseline" per comparison, so the sweep's tables group by it
        return [{**r, "baseline": " − ".join(shown.get(r[k], r[k]) for k in ("method", "baseline"))} for r in rows]

    out = []
    for s in settings:
        judges = labelled([r for r in read_csv(results / f"{name}_{s}_compare.csv")
                           if r["metric"].startswith("judge/")])
        rewards = labelled(read_csv(results / f"{name}_{s}_rewards.csv"))
        out += ([""] if out else []) + [
            f"The fixed-W control, {s} ({name}): win / tie / loss per comparison on the held-out judges (1,024 "
            "samples per seed) and on the training rewards (the runs' own 64-sample evaluation); a cell is a win or a "
            "loss only when its 95 % interval over seeds excludes zero:", "",
            tally_table(judges + rewards, label="comparison")]
        for b in dict.fromkeys(r["baseline"] for r in judges):
            out += ["", f"Held-out judges, {b} ({s}, paired over seeds):", "", paired_table(judges, b, "judge/")]
        out += ["", f"Pairwise judge, the fixed W against each ({s}; the verdict uses the interval over seeds):", "",
                win_rate_table(read_csv(results / f"{name}_{s}.csv"))]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    from recast.experiments.sweep import results_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=str(results_dir()), help="folder holding the sweep's CSVs")
    p.add_argument("--name", default="lambda_sweep", help="notebook 05's results_name")
    p.add_argument("--judge", default="judge_eval", help="notebook 06's results_name ('' to leave it out)")
    p.add_argument("--rescore", help="print the tables of this notebook 06 re-score instead (e.g. judge_eval_256)")
    p.add_argument("--fixed", help="print the tables of this fixed-W control instead (e.g. fixed_w_glyph)")
    args = p.parse_args(argv)
    if args.fixed:
        print(fixed_w_report(args.results, args.fixed))
    elif args.rescore:
        print(rescore_report(args.results, args.rescore))
    else:
        print(report(args.results, args.name, args.judge or None))


if __name__ == "__main__":
    main()
