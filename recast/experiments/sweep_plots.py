"""Figures of a λ-sweep (notebooks 05 and 06): paired-difference tables, W and D per cell, sample efficiency, win rates."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from recast.plotting import plot_discriminability, plot_weights

__all__ = ["plot_paired_table", "plot_cell_weights", "plot_efficiency", "plot_efficiency_grid", "plot_win_rates"]


def plot_paired_table(cells: list[dict], metrics: list[str], *, title: str = "") -> plt.Figure:
    """Heatmap of paired differences (rows: setting / budget; columns: metrics), coloured by the difference over its
    interval half-width (|value| > 1: the 95 % interval excludes zero), signed so that blue = the method is better,
    and annotated with the difference and its verdict."""
    from recast.stats import lower_is_better

    keys = sorted({(c["setting"], c["budget"]) for c in cells}, key=str)
    by = {(c["setting"], c["budget"], c["metric"]): c for c in cells}
    score = np.full((len(keys), len(metrics)), np.nan)
    text = np.full(score.shape, "", dtype=object)
    for i, key in enumerate(keys):
        for j, m in enumerate(metrics):
            c = by.get((*key, m))
            if c is None:
                continue
            half = (c["ci_high"] - c["ci_low"]) / 2 if np.isfinite(c["ci_high"]) else np.nan
            sign = -1.0 if lower_is_better(m) else 1.0
            score[i, j] = np.clip(sign * c["diff"] / half, -3, 3) if half and np.isfinite(half) else 0.0
            text[i, j] = f"{c['diff']:+.3f}\n{c['verdict']}"
    fig, ax = plt.subplots(figsize=(1.2 + 1.25 * len(metrics), 0.8 + 0.55 * len(keys)))
    sns.heatmap(score, ax=ax, cmap="RdBu", vmin=-3, vmax=3, center=0, annot=text, fmt="", annot_kws={"size": 6},
                xticklabels=[m.split("/", 1)[-1] for m in metrics], yticklabels=[f"{s} / {b}" for s, b in keys],
                cbar_kws={"label": "better ← diff / CI half-width → (clipped ±3)"})
    ax.set_title(title or "paired difference, method − baseline (blue: method better)", fontsize=9)
    ax.set_xticklabels(ax.get_xticklabels(), rotation=45, ha="right")
    return fig


def _by_setting(keys) -> tuple[list[str], dict[str, list[str]]]:
    """Settings and each setting's budgets, in first-seen order (uniform first, as `recast.experiments.sweep.budget_grid` has it)."""
    settings = list(dict.fromkeys(s for s, _ in keys))
    return settings, {s: [b for t, b in keys if t == s] for s in settings}


def plot_cell_weights(runs: dict[tuple[str, str], "object"]) -> plt.Figure:
    """The final W and, below it, D_k(σ) of one ReCAST run per (setting, budget): the paper's signature figure.
    Two rows per setting (W, then D), one column per budget.

    Args:
        runs: (setting, budget) -> `recast.trainer.metrics.Run` of a ReCAST run (its fixed weight table, or a
            live run's last re-solve: `Run.W_at`), in display order.
    """
    settings, budgets = _by_setting(list(runs))
    ncol = max(len(b) for b in budgets.values())
    fig, axes = plt.subplots(2 * len(settings), ncol, figsize=(3.6 * ncol, 2.9 * 2 * len(settings)), squeeze=False)
    vmax = max(float(np.max(r.W_at(len(r.metrics))[1])) for r in runs.values())
    for i, setting in enumerate(settings):
        for j in range(ncol):
            top, bottom = axes[2 * i, j], axes[2 * i + 1, j]
            if j >= len(budgets[setting]):
                top.set_axis_off(), bottom.set_axis_off()
                continue
            budget = budgets[setting][j]
            r = runs[(setting, budget)]
            it, W = r.W_at(len(r.metrics))
            when = f"iteration {it}" if r.weights else "fixed"
            plot_weights(W, r.reward_names, ax=top, vmax=vmax, annotate=False, cbar=j == ncol - 1,
                         title=f"{setting} / {budget}: W, {when}")
            try:
                it_d, D = r.D_at(len(r.metrics))
                plot_discriminability(D, r.reward_names, r.sigmas, ax=bottom, title=f"D_k(σ), iteration {it_d}")
            except ValueError:
                bottom.set_axis_off()
    fig.tight_layout()
    return fig


def plot_efficiency(curve_rows: list[dict], metric: str, *, setting: str, budget: str,
                    ax: plt.Axes | None = None) -> plt.Axes:
    """Seed mean ± std of `metric` against images sampled, one line per method, for one (setting, budget)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 3.0))
    sel = [r for r in curve_rows if r["setting"] == setting and r["budget"] == budget and r["metric"] == metric]
    for method in sorted({r["method"] for r in sel}):
        xs = sorted({r["images"] for r in sel if r["method"] == method})
        vals = [[r["value"] for r in sel if r["method"] == method and r["images"] == x] for x in xs]
        mean, std = np.array([np.mean(v) for v in vals]), np.array([np.std(v) for v in vals])
        ax.plot(xs, mean, marker="o", ms=3, label=method)
        ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
    ax.set(xlabel="images sampled", ylabel=metric.split("/", 1)[-1], title=f"{setting} / {budget}")
    ax.legend(fontsize=7, frameon=False)
    return ax


def plot_efficiency_grid(curve_rows: list[dict], metrics: list[str]) -> plt.Figure:
    """`plot_efficiency` for every (setting, budget) and metric: one row per (metric, setting), one column per
    budget."""
    settings, budgets = _by_setting(list(dict.fromkeys((r["setting"], r["budget"]) for r in curve_rows)))
    ncol = max(len(b) for b in budgets.values())
    rows = [(m, s) for m in metrics for s in settings]
    fig, axes = plt.subplots(len(rows), ncol, figsize=(3.6 * ncol, 2.8 * len(rows)), squeeze=False)
    for i, (metric, setting) in enumerate(rows):
        for j in range(ncol):
            if j < len(budgets[setting]):
                plot_efficiency(curve_rows, metric, setting=setting, budget=budgets[setting][j], ax=axes[i, j])
            else:
                axes[i, j].set_axis_off()
    fig.tight_layout()
    return fig


def plot_win_rates(rows: list[dict]) -> plt.Figure:
    """Horizontal bars of win / tie / loss shares with the win rate's interval, one bar per (setting, budget,
    baseline) row of `recast.evaluation` output (keys: setting, budget, baseline, wins, ties, losses, win_rate,
    ci_low, ci_high)."""
    fig, ax = plt.subplots(figsize=(6.0, 1.3 + 0.4 * len(rows)))
    labels = []
    for i, r in enumerate(rows):
        n = max(r["wins"] + r["ties"] + r["losses"], 1)
        w, t = r["wins"] / n, r["ties"] / n
        ax.barh(i, w, color="tab:blue")
        ax.barh(i, t, left=w, color="lightgrey")
        ax.barh(i, 1 - w - t, left=w + t, color="tab:red")
        ax.errorbar(r["win_rate"], i, xerr=[[r["win_rate"] - r["ci_low"]], [r["ci_high"] - r["win_rate"]]],
                    fmt="k|", capsize=3)
        if "seed_rates" in r and np.isfinite(r["seed_ci_low"]):
            m = float(np.mean([float(x) for x in str(r["seed_rates"]).split()]))
            ax.errorbar(m, i - 0.3, xerr=[[m - r["seed_ci_low"]], [r["seed_ci_high"] - m]], fmt="o", ms=2,
                        color="dimgrey", capsize=2, lw=0.8)
        labels.append(f"{r['setting']} / {r['budget']} vs {r['baseline']}")
    ax.axvline(0.5, color="k", lw=0.5, ls=":")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set(xlim=(0, 1), xlabel="share of pairs: method wins (blue) / ties / loses (red)\n"
                               "| win rate, Wilson 95 % over pairs; grey o: seed mean, t 95 % over seeds")
    fig.tight_layout()
    return fig
