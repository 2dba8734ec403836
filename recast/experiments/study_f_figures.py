"""Stage F's figures: the weight tables per budget (W over rewards × steps) and the primary family as paired
differences with their intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["figures", "plot_tables", "plot_primary"]


def plot_tables(proposal: str = "renderings"):
    """W of every budget of both settings (one heatmap each), from the committed weight tables."""
    import matplotlib.pyplot as plt

    from recast.archives import load_table
    from recast.experiments.study_f import SETTINGS, budgets, table_path
    from recast.plotting import plot_weights

    cols = max(len(budgets(s)) for s in SETTINGS)
    fig, axes = plt.subplots(len(SETTINGS), cols, figsize=(3.3 * cols, 2.9 * len(SETTINGS)), constrained_layout=True,
                             squeeze=False)
    for i, setting in enumerate(SETTINGS):
        names = list(budgets(setting))
        for j in range(cols):
            ax = axes[i, j]
            if j >= len(names):
                ax.axis("off")
                continue
            t = load_table(table_path(proposal, setting, names[j]))
            plot_weights(t.W, list(t.reward_names), sigmas=t.sigmas, ax=ax, annotate=False,
                         title=f"{setting}: {names[j]}")
    fig.suptitle(f"Stage F: the paper's W per budget ({proposal} proposal), rows λ, columns 1/T", fontsize=10)
    return fig


def plot_primary(tables: dict):
    """Each comparison's P1 and P2 (paired, 95 % CI) per setting; up is better for the arm."""
    import matplotlib.pyplot as plt

    rows = tables["primary"]
    settings = sorted({r["setting"] for r in rows})
    fig, axes = plt.subplots(1, max(1, len(settings)) * 2, figsize=(12, 3.6), constrained_layout=True, squeeze=False)
    for i, setting in enumerate(settings):
        for j, endpoint in enumerate(("P1 judge composite", "P2 reward/weighted")):
            ax = axes[0, 2 * i + j]
            sel = [r for r in rows if r["setting"] == setting and r["metric"] == endpoint]
            ys = np.arange(len(sel))
            ax.errorbar([r["diff"] for r in sel], ys, xerr=[[r["diff"] - r["ci_low"] for r in sel],
                                                         [r["ci_high"] - r["diff"] for r in sel]], fmt="o", capsize=3,
                        color="tab:blue")
            ax.axvline(0, color="0.4", lw=0.8)
            ax.set_yticks(ys, [f"{r['arm']} − {r['baseline']} ({r['verdict_holm']})" for r in sel], fontsize=8)
            ax.set_title(f"{setting}: {endpoint}", fontsize=9)
            ax.set_xlabel("paired difference, 95 % CI (right: first arm better)", fontsize=8)
    return fig


def figures(tables: dict, out_dir: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    from recast.plotting import savefig

    paths = []
    for name, fig in (("study_f_tables", plot_tables()), ("study_f_primary", plot_primary(tables))):
        paths += savefig(fig, name, outdir=out_dir)
        plt.close(fig)
    return paths
