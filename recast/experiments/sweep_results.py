"""Aggregates of a finished λ-sweep (`recast.experiments.sweep` plans and runs it): rows, paired differences, what training did,
sample efficiency and W timing.

    rows = collect(runs)                         # one row per run: final judges and rewards, and its command
    table = summarise(rows)                      # mean ± std per (setting, budget, method, metric)
    cells = compare(rows, baseline="uniform")    # paired ReCAST - baseline differences with 95 % intervals
    change = training_change(rows)               # final - base per method, with a reward-hacking flag
    eff = efficiency(curves(runs), "judge/strict")
"""

from __future__ import annotations

import numpy as np

from recast.experiments.sweep import SweepRun, is_finished

__all__ = ["images_per_iteration", "collect", "curves", "w_timing", "pass_rate_resolution", "summarise",
           "training_change", "compare", "efficiency"]


def images_per_iteration(config: dict) -> int:
    """Images sampled (and scored by every reward) per iteration of a run, from its ``config.json`` dict."""
    return int(config.get("batch_size") or config["prompts_per_iter"] * config["group_size"])


def collect(runs: list[SweepRun]) -> list[dict]:
    """One row per finished run: its cell, seed, sample budget, evaluation prompts, command, and every final eval
    metric.

    The base model's scores (the evaluation at iteration 0, when the preset evaluates there) are kept under
    ``base:<metric>``.
    """
    from recast.trainer.metrics import load_run

    rows = []
    for run in runs:
        if not is_finished(run):
            continue
        r = load_run(run.out_dir)
        row = {"setting": run.setting, "budget": run.budget, "lam": ",".join(f"{x:g}" for x in run.lam),
               "method": run.method, "seed": run.seed, "iterations": int(r.config["iterations"]),
               "images": int(r.config["iterations"]) * images_per_iteration(r.config),
               "eval_prompts": r.config.get("eval_prompts")}
        row.update({k: v for k, v in r.evals[-1].items() if k != "iteration" and isinstance(v, (int, float))})
        if r.evals[0].get("iteration") == 0:
            row.update({f"base:{k}": v for k, v in r.evals[0].items() if k != "iteration"
                        and isinstance(v, (int, float))})
        row["command"] = run.command
        rows.append(row)
    return rows


def curves(runs: list[SweepRun]) -> list[dict]:
    """Long table of every evaluation of every finished run: cell, seed, iteration, images, metric, value."""
    from recast.trainer.metrics import load_run

    out = []
    for run in runs:
        if not is_finished(run):
            continue
        r = load_run(run.out_dir)
        per = images_per_iteration(r.config)
        for rec in r.evals:
            for k, v in rec.items():
                if k != "iteration" and isinstance(v, (int, float)):
                    out.append({"setting": run.setting, "budget": run.budget, "method": run.method,
                                "seed": run.seed, "iteration": rec["iteration"], "images": rec["iteration"] * per,
                                "metric": k, "value": float(v)})
    return out


def w_timing(runs: list[SweepRun]) -> list[dict]:
    """Per finished ReCAST run and reward: where its final W row puts its budget (`recast.stats.row_timing`): the
    share in the noisiest half of the steps (λ/T: 0.5) and the largest relative deviation from λ/T."""
    from recast.stats import row_timing
    from recast.trainer.metrics import load_run

    out = []
    for run in runs:
        if run.method != "recast" or not is_finished(run):
            continue
        r = load_run(run.out_dir)
        it, W = r.W_at(10**9)
        early, dev = row_timing(W)
        out += [{"setting": run.setting, "budget": run.budget, "seed": run.seed, "reward": name, "iteration": it,
                 "early_share": float(early[k]), "max_deviation": float(dev[k])}
                for k, name in enumerate(r.reward_names)]
    return out


def pass_rate_resolution(rows: list[dict], values) -> float:
    """`recast.stats.count_resolution` of ``values`` at the rows' shared ``eval_prompts`` (0 when the rows do not
    carry it, or disagree)."""
    from recast.stats import count_resolution

    n = {r.get("eval_prompts") for r in rows}
    try:
        return count_resolution(values, int(float(n.pop()))) if len(n) == 1 else 0.0
    except (TypeError, ValueError):  # absent (None) or empty in a CSV row
        return 0.0


def _metrics(rows: list[dict]) -> list[str]:
    keys = []
    for r in rows:
        keys += [k for k in r if (k.startswith("reward/") or k.startswith("judge/")) and k not in keys]
    return keys


def summarise(rows: list[dict]) -> list[dict]:
    """Mean ± std (ddof 1; 0 for one seed) over seeds per (setting, budget, method, metric)."""
    out = []
    cells = sorted({(r["setting"], r["budget"], r["method"]) for r in rows}, key=str)
    for setting, budget, method in cells:
        sel = [r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, method)]
        for m in _metrics(sel):
            v = np.array([r[m] for r in sel if m in r], dtype=float)
            out.append({"setting": setting, "budget": budget, "method": method, "metric": m, "n": len(v),
                        "mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0})
    return out


def training_change(rows: list[dict], confidence: float = 0.95) -> list[dict]:
    """What training did in each (setting, budget, method): final − base model over the same seeds, per metric, with
    a t interval, and a reward-hacking flag per cell.

    ``verdict`` is "better" / "worse" / "unchanged" in the metric's own direction (the interval excludes zero or
    not). A cell whose weighted training reward got better while a held-out judge got worse is flagged
    ``reward_up_judge_down`` on every one of its rows: rewards are proxies, the judges decide.
    """
    from recast.stats import lower_is_better, paired_difference

    out = []
    for setting, budget, method in dict.fromkeys((r["setting"], r["budget"], r["method"]) for r in rows):
        sel = [r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, method)]
        cell = []
        for m in _metrics(sel):
            if not all(m in r and f"base:{m}" in r for r in sel):
                continue
            a, b = [r[m] for r in sel], [r[f"base:{m}"] for r in sel]
            d = paired_difference(a, b, higher_is_better=not lower_is_better(m), confidence=confidence,
                                  resolution=pass_rate_resolution(sel, a + b))
            cell.append({"setting": setting, "budget": budget, "method": method, "metric": m, "n": d.n,
                         "base": float(np.mean([r[f"base:{m}"] for r in sel])), "change": d.mean,
                         "ci_low": d.ci_low, "ci_high": d.ci_high,
                         "verdict": {"win": "better", "loss": "worse", "tie": "unchanged"}[d.verdict]})
        up = any(c["metric"] == "reward/weighted" and c["verdict"] == "better" for c in cell)
        down = [c["metric"] for c in cell if c["metric"].startswith("judge/") and c["verdict"] == "worse"]
        out += [{**c, "reward_up_judge_down": bool(up and down), "judges_down": ";".join(down)} for c in cell]
    return out


def compare(rows: list[dict], *, method: str = "recast", baseline: str = "uniform",
            confidence: float = 0.95) -> list[dict]:
    """Paired method - baseline differences per (setting, budget, metric), over the seeds both ran.

    Each cell has the mean difference, its t interval and a verdict from the method's side ("win" only when the
    interval excludes zero on the better side; `recast.stats`).
    """
    from recast.stats import lower_is_better, paired_difference

    out = []
    for setting, budget in sorted({(r["setting"], r["budget"]) for r in rows}, key=str):
        a = {r["seed"]: r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, method)}
        b = {r["seed"]: r for r in rows if (r["setting"], r["budget"], r["method"]) == (setting, budget, baseline)}
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue
        for m in _metrics([a[s] for s in seeds] + [b[s] for s in seeds]):
            if not all(m in a[s] and m in b[s] for s in seeds):
                continue
            va, vb = [a[s][m] for s in seeds], [b[s][m] for s in seeds]
            d = paired_difference(va, vb, higher_is_better=not lower_is_better(m), confidence=confidence,
                                  resolution=pass_rate_resolution([a[s] for s in seeds] + [b[s] for s in seeds],
                                                                  va + vb))
            out.append({"setting": setting, "budget": budget, "method": method, "baseline": baseline, "metric": m,
                        "n": d.n, "diff": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high, "verdict": d.verdict})
    return out


def efficiency(curve_rows: list[dict], metric: str, *, method: str = "recast", baseline: str = "uniform",
               bootstrap: int = 2000) -> list[dict]:
    """Per (setting, budget): images the method needs to reach the baseline's final seed-mean value of `metric`,
    as a ratio of the baseline's images, from seed-mean curves at shared evaluations, with a paired bootstrap
    interval over the seeds both methods ran (`recast.stats.efficiency_row`: ``ratio`` is None when it is never
    reached, or when ``baseline_improved`` is False). Cells whose methods were evaluated at different sample
    counts, or with a seed missing an evaluation, are left out."""
    from recast.stats import efficiency_row, lower_is_better

    out = []
    for setting, budget in sorted({(r["setting"], r["budget"]) for r in curve_rows}, key=str):
        def per_seed(m):
            sel = [r for r in curve_rows if (r["setting"], r["budget"], r["method"], r["metric"]) ==
                   (setting, budget, m, metric)]
            by_seed: dict = {}
            for r in sel:
                by_seed.setdefault(r["seed"], {})[r["images"]] = r["value"]
            return by_seed
        a, b = per_seed(method), per_seed(baseline)
        seeds = sorted(set(a) & set(b))
        xs = sorted({x for sd in seeds for x in (*a[sd], *b[sd])})
        if not seeds or any(set(a[sd]) != set(xs) or set(b[sd]) != set(xs) for sd in seeds):
            continue
        ya = np.array([[a[sd][x] for x in xs] for sd in seeds])
        yb = np.array([[b[sd][x] for x in xs] for sd in seeds])
        out.append({"setting": setting, "budget": budget, "method": method, "baseline": baseline, "metric": metric,
                    **efficiency_row(np.array(xs, dtype=float), ya, yb, higher_is_better=not lower_is_better(metric),
                                     bootstrap=bootstrap)})
    return out
