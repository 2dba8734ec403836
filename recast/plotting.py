"""Figure helpers: one place that writes figures, and the W heatmap every notebook shares."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch

from recast.io import writable_folder

__all__ = ["figures_dir", "check_figures_dir", "savefig", "plot_weights", "plot_discriminability"]


def figures_dir() -> Path:
    """Where figures go: $RECAST_FIGURES_DIR if set, else ``runs/figures`` under the working directory
    (``runs/figures/<run name>`` for a notebook run with parameters, `recast.nbparams.typed_parameters`).

    The committed ``figures/`` are written only on request: ``make figures`` sets ``RECAST_FIGURES_DIR=figures``.

    Raises:
        FileExistsError: $RECAST_FIGURES_DIR names something that is not a folder (checked before any compute
            by `check_figures_dir`).
    """
    env = os.environ.get("RECAST_FIGURES_DIR")
    if env and os.path.exists(env) and not os.path.isdir(env):
        raise FileExistsError(f"RECAST_FIGURES_DIR={env} is not a folder; point it at a folder (it is created if "
                                 "missing) or unset it")
    run = os.environ.get("RECAST_RUN_NAME", "").strip()  # a notebook run's own folder (`recast.nbparams`)
    return Path(env) if env else Path.cwd() / "runs" / "figures" / (run if run and run != "default" else "")


def check_figures_dir(outdir: str | os.PathLike | None = None) -> Path:
    """The folder `savefig` will write to, checked before the compute that makes the figures: a folder (created if
    missing) that this process can write.

    Raises:
        FileExistsError / PermissionError: naming the folder (and $RECAST_FIGURES_DIR where it came from there).
    """
    out = Path(outdir) if outdir is not None else figures_dir()
    where = f"RECAST_FIGURES_DIR={out}" if outdir is None and os.environ.get("RECAST_FIGURES_DIR") else str(out)
    return writable_folder(out, f"the figures folder {where}")


def savefig(fig: plt.Figure, name: str, outdir: str | os.PathLike | None = None, dpi: int = 200) -> list[Path]:
    """Save `fig` as `<outdir>/<name>.png` and `.pdf` (default: `figures_dir`); names match the notebook that made the
    figure. Each file is written by `recast.io.atomic_write`: never half a figure, never through a link.

    Returns:
        The two paths written.

    Raises:
        NotRegularFileError: a target is a symbolic link or another non-regular file (it is left as it is).
    """
    from recast.io import atomic_write, check_target

    out = check_figures_dir(outdir)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        check_target(p)  # both refused before either is written
    for p in paths:
        atomic_write(p, lambda fh, p=p: fig.savefig(fh, format=p.suffix[1:], dpi=dpi, bbox_inches="tight"))
    return paths


def _to_numpy(x) -> np.ndarray:
    return x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)


def plot_weights(
    W,
    reward_names: Sequence[str],
    *,
    sigmas=None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    cmap: str = "mako_r",
    vmax: float | None = None,
    annotate: bool | None = None,
    cbar: bool = True,
) -> plt.Axes:
    """Heatmap of W over rewards (rows) × denoising steps (columns), with both marginals written on the margins: each
    row's sum in its label, the column sums below.

    Args:
        W: (K, T) weights, column 0 = the noisiest step.
        reward_names: K row labels.
        sigmas: optional grid (T+1,); columns are then labelled by σ_j of the step's start.
        ax: axes to draw on (a new figure if None).
        title: axes title.
        cmap: colour map; `vmax` fixes the colour scale so several panels compare.
        annotate: write each cell's value (default: when T ≤ 12).
        cbar: draw a colour bar.

    Returns:
        The axes.
    """
    Wn = _to_numpy(W)
    K, T = Wn.shape
    if len(reward_names) != K:
        raise ValueError(f"{len(reward_names)} reward names for W with K={K} rows")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * T, 0.9 + 0.5 * K))
    annotate = T <= 12 if annotate is None else annotate
    xlabels = [f"{float(s):.2f}" for s in _to_numpy(sigmas)[:-1]] if sigmas is not None else [str(j) for j in range(T)]
    # each row's sum (its budget λ_k) sits in its label: text beside the last column ran under the colour bar
    ylabels = [f"{name}  Σ={row_sum:.3f}" for name, row_sum in zip(reward_names, Wn.sum(axis=1))]
    sns.heatmap(Wn, ax=ax, cmap=cmap, vmin=0.0, vmax=vmax, annot=annotate, fmt=".3f", annot_kws={"size": 7},
                xticklabels=xlabels, yticklabels=ylabels, cbar=cbar, linewidths=0.3, linecolor="white",
                cbar_kws={"label": "W[k, j]"})
    col = Wn.sum(axis=0)
    # the column sums as the label's second line, so the layout makes room for them (as text at a fixed data offset
    # below the axes they ran into the label on short panels)
    ax.set_xlabel(("denoising step j (σ_j)" if sigmas is not None else "denoising step j  (0 = noisiest)")
                  + f"\ncolumn sums {col.mean():.4f} (spread {col.max() - col.min():.1e})")
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_discriminability(D, reward_names: Sequence[str], sigmas, *, ax: plt.Axes | None = None,
                          title: str | None = None, style: str = "-") -> plt.Axes:
    """D_k(σ) curves over the grid, σ decreasing left to right (sampling order).

    Args:
        D: (K, T+1) discriminability at σ_0 = 1 … σ_T = 0.
        reward_names: K labels.
        sigmas: (T+1,) grid.
    """
    Dn, s = _to_numpy(D), _to_numpy(sigmas)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 3.2))
    palette = sns.color_palette("tab10", Dn.shape[0])
    for k, name in enumerate(reward_names):
        ax.plot(s, Dn[k], style, marker="o", ms=3, color=palette[k], label=name)
    ax.set_xlim(1.0, 0.0)
    ax.set_xlabel("σ  (1 = noise → 0 = clean)")
    ax.set_ylabel("Rényi discriminability D_k(σ)")
    ax.legend(fontsize=7, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_weight_intervals(intervals, *, sigmas=None, ax: plt.Axes | None = None, title: str | None = None,
                          flagged: Sequence[tuple[str, int]] = ()) -> plt.Axes:
    """Each reward's W / (λ_k / T) per step with its bootstrap interval (`recast.checks.bootstrap_table`); 1 is static.

    Args:
        intervals: a `recast.checks.TableIntervals`.
        sigmas: optional grid (T+1,); steps are then labelled by σ_j of the step's start.
        flagged: (reward, column) cells to mark (e.g. `recast.checks.degenerate_columns`' findings), drawn as a ring.
    """
    W, lo, hi = (_to_numpy(x) for x in (intervals.W, intervals.lo, intervals.hi))
    K, T = W.shape
    ref = W.sum(1, keepdims=True) / T
    scale = np.divide(1.0, ref, out=np.zeros_like(ref), where=ref > 0)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 0.9 * T, 3.4))
    palette = sns.color_palette("tab10", K)
    width = 0.8 / max(K, 1)
    x = np.arange(T)
    for k, name in enumerate(intervals.reward_names):
        xs = x - 0.4 + width * (k + 0.5)
        y = W[k] * scale[k]
        ax.errorbar(xs, y, yerr=np.stack([y - lo[k] * scale[k], hi[k] * scale[k] - y]).clip(min=0), fmt="o", ms=3,
                    capsize=2, color=palette[k], label=name)
        for reward, j in flagged:
            if reward == name:
                ax.plot(xs[j], y[j], "o", ms=10, mfc="none", mec="crimson", mew=1.2)
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set_xticks(x, [f"{float(s):.2f}" for s in _to_numpy(sigmas)[:-1]] if sigmas is not None else [str(j) for j in x])
    ax.set_xlabel("denoising step j (σ_j)" if sigmas is not None else "denoising step j  (0 = noisiest)")
    ax.set_ylabel(f"W / (λ/T), {intervals.level:.0%} bootstrap interval")
    ax.legend(fontsize=7, frameon=False, ncols=min(K, 3))
    if title:
        ax.set_title(title, fontsize=11)
    return ax
