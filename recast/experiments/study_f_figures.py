"""Stage F's figures: W over rewards × steps per budget (the weight tables of each proposal, and the mean final W of
each live arm whose runs are all in), and the primary family as paired differences with their intervals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["LIVE_ARMS", "mean_W", "plot_W", "plot_primary", "figure_names", "figures"]

LIVE_ARMS = ("recast_live", "reading")  # the arms whose W moves during training: their final W is drawn


def mean_W(records: Path, setting: str, budget: str, arm: str) -> tuple[np.ndarray, int] | None:
    """The mean over seeds of an arm's final W (K, T) in one (setting, budget), and how many seeds it averages;
    None where no record holds a W."""
    Ws = [np.asarray(rec["W"], dtype=float) for rec in (json.loads(p.read_text()) for p in
          sorted(Path(records).glob(f"{setting}/{budget}/{arm}/seed_*.json"))) if rec.get("W") is not None]
    return (np.mean(Ws, axis=0), len(Ws)) if Ws else None


def plot_W(source: str = "renderings", records: Path | None = None):
    """W of every budget of both settings, one heatmap each, on one colour scale: ``source`` a proposal
    (`renderings`, `self`: the committed weight tables) or a live arm (`recast_live`, `reading`: its runs' final W,
    averaged over seeds, from the records)."""
    import matplotlib.pyplot as plt

    from recast.archives import load_table
    from recast.experiments import study_f
    from recast.plotting import plot_weights

    if source not in study_f.PROFILES and source not in LIVE_ARMS:
        raise ValueError(f"unknown source {source!r}: a proposal ({', '.join(study_f.PROFILES)}) or a live arm "
                         f"({', '.join(LIVE_ARMS)})")
    records = study_f.RECORDS if records is None else Path(records)
    panels, seeds = [], set()
    for setting in study_f.SETTINGS:
        row = []
        for name in study_f.budgets(setting):
            if source in study_f.PROFILES:
                t = load_table(study_f.table_path(source, setting, name))
                row.append((t.W / t.W.sum(), list(t.reward_names), t.sigmas, f"{setting}: {name}"))
            else:
                got = mean_W(records, setting, name, source)
                if got is None:
                    raise ValueError(f"no {source} record holds a W for {setting}/{name}")
                W, n = got
                seeds.add(n)
                row.append((W, list(study_f.rewards(setting)), None, f"{setting}: {name}"))
        panels.append(row)
    vmax = max(float(np.max(W)) for row in panels for W, *_ in row)
    cols = max(len(row) for row in panels)
    fig, axes = plt.subplots(len(panels), cols, figsize=(2.4 * cols + 2.2, 2.6 * len(panels)),
                             constrained_layout=True, squeeze=False,
                             gridspec_kw={"width_ratios": [2.0] + [1.0] * (cols - 2) + [1.25]})
    for i, row in enumerate(panels):
        for j in range(cols):
            ax = axes[i, j]
            if j >= len(row):
                ax.axis("off")
                continue
            W, names, _, title = row[j]  # columns by step index (0 = noisiest): σ labels crowd a small panel
            plot_weights(W, names, ax=ax, annotate=False, vmax=vmax, title=title, cbar=j == len(row) - 1)
            if j:  # the reward names once per row; each panel keeps its row sums (λ)
                ax.set_yticklabels([f"{x:.3f}" for x in W.sum(1)], rotation=0, fontsize=7)
            ax.xaxis.label.set_fontsize(7)  # the step axis and, below it, the column sums
    what = (f"the weight tables ({source} proposal)" if source in study_f.PROFILES else
            f"{source}'s final live W, mean over {'/'.join(map(str, sorted(seeds)))} seeds")
    fig.suptitle(f"Stage F: W per budget, {what}; rows sum to λ, columns to 1/T", fontsize=10)
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


def figure_names(done: tuple[str, ...]) -> dict[str, str]:
    """Figure name -> its W source (or "primary"), for the arms in ``done``: the tables of both proposals always,
    each live arm's W once its runs are all in."""
    out = {"study_f_primary": "primary", "study_f_tables": "renderings", "study_f_tables_self": "self"}
    out.update({f"study_f_W_{arm}": arm for arm in LIVE_ARMS if arm in done})
    return out


def figures(tables: dict, out_dir: Path, records: Path | None = None) -> list[Path]:
    """Write every stage-F figure (`figure_names` of the complete arms) as png and pdf under ``out_dir``."""
    import matplotlib.pyplot as plt

    from recast.experiments import study_f
    from recast.plotting import savefig

    records = study_f.RECORDS if records is None else Path(records)
    paths = []
    for name, source in figure_names(study_f.complete_arms(records)).items():
        fig = plot_primary(tables) if source == "primary" else plot_W(source, records)
        paths += savefig(fig, name, outdir=out_dir)
        plt.close(fig)
    return paths
