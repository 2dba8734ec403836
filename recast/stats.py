"""Statistics a reviewer accepts for method comparisons: paired differences over seeds, verdicts, sample efficiency.

Every comparison is *paired*: method A and baseline B share the seed (same base model, prompts, noise and sample
budget), so the seed-to-seed variation they share cancels in the difference ``d_s = A_s - B_s``. A cell is a win or a
loss only when the t-interval of the mean difference excludes zero; otherwise it is a tie.

Metric direction: judges and rewards are higher-is-better except the Fréchet distance and the defect rates
(`lower_is_better`). Verdicts are always stated from A's side: "win" means A is better on that metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["lower_is_better", "PairedDiff", "paired_difference", "tally", "images_to_reach", "efficiency_ratio"]

_LOWER_IS_BETTER = ("judge/fid", "judge/defect_", "fid", "defect_")


def lower_is_better(metric: str) -> bool:
    """True for metrics where smaller is better (Fréchet distance, defect rates)."""
    return metric.startswith(_LOWER_IS_BETTER)


@dataclass(frozen=True)
class PairedDiff:
    """Mean paired difference A - B over n seeds with a t confidence interval.

    Attributes:
        n: number of pairs (seeds).
        mean: mean of A_s - B_s (in the metric's own units and sign).
        ci_low, ci_high: the t interval at `confidence` (NaN when n < 2).
        verdict: "win" (interval excludes 0 on A's better side), "loss" (on B's better side) or "tie".
        confidence: the interval's level.
    """

    n: int
    mean: float
    ci_low: float
    ci_high: float
    verdict: str
    confidence: float


def paired_difference(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool = True,
                      confidence: float = 0.95) -> PairedDiff:
    """Paired comparison of A against B.

    Args:
        a, b: the metric per seed, aligned (a[s] and b[s] share seed s).
        higher_is_better: the metric's direction.
        confidence: interval level in (0, 1).

    Raises:
        ValueError: different lengths, no pairs, non-finite values, or a confidence outside (0, 1).
    """
    from scipy.stats import t as student_t

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired_difference needs two equal-length 1-D samples, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired_difference got a non-finite value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = a - b
    n, mean = d.size, float(d.mean())
    if n < 2:
        return PairedDiff(n, mean, math.nan, math.nan, "tie", confidence)
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    lo, hi = mean - half, mean + half
    better, worse = (lo > 0, hi < 0) if higher_is_better else (hi < 0, lo > 0)
    return PairedDiff(n, mean, lo, hi, "win" if better else "loss" if worse else "tie", confidence)


def tally(verdicts: Sequence[str]) -> dict[str, int]:
    """Counts of "win", "tie" and "loss"."""
    unknown = set(verdicts) - {"win", "tie", "loss"}
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}")
    return {v: sum(x == v for x in verdicts) for v in ("win", "tie", "loss")}


def images_to_reach(images: Sequence[float], values: Sequence[float], target: float, *,
                    higher_is_better: bool = True) -> float | None:
    """Images sampled when a curve first reaches ``target``, linearly interpolated between evaluations.

    Args:
        images: increasing sample counts at which the curve was evaluated.
        values: the metric at those counts.
        target: the value to reach (>= for higher-is-better metrics, <= otherwise).

    Returns:
        The interpolated sample count, or None when the curve never reaches the target.
    """
    x, y = np.asarray(images, dtype=float), np.asarray(values, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"images and values must be equal-length 1-D sequences, got {x.shape} and {y.shape}")
    if np.any(np.diff(x) <= 0):
        raise ValueError("images must be strictly increasing")
    s = 1.0 if higher_is_better else -1.0
    reached = s * (y - target) >= 0
    if not reached.any():
        return None
    k = int(np.argmax(reached))
    if k == 0:
        return float(x[0])
    y0, y1 = s * (y[k - 1] - target), s * (y[k] - target)  # y0 < 0 <= y1
    return float(x[k - 1] + (x[k] - x[k - 1]) * (-y0) / (y1 - y0))


def efficiency_ratio(images: Sequence[float], method_curve: Sequence[float], baseline_curve: Sequence[float], *,
                     higher_is_better: bool = True) -> float | None:
    """Images the method needs to reach the baseline's final value, divided by the baseline's total images.

    Both curves are evaluated at the same sample counts ``images`` (e.g. seed means). A ratio below 1 means the
    method gets there with fewer samples; None means it never reaches the baseline's final value.
    """
    need = images_to_reach(images, method_curve, float(np.asarray(baseline_curve, dtype=float)[-1]),
                           higher_is_better=higher_is_better)
    return None if need is None else need / float(np.asarray(images, dtype=float)[-1])


def efficiency_row(images: Sequence[float], method_curve: Sequence[float], baseline_curve: Sequence[float], *,
                   higher_is_better: bool = True) -> dict:
    """One row of a sample-efficiency table: both final values, the `efficiency_ratio`, and whether the baseline
    improved on its start at all.

    A ratio is only meaningful when the baseline ended better than it started: otherwise the start already "reaches"
    its final value and every method would score 0. So ``ratio`` is None both when the method never reaches the
    baseline's final value and when ``baseline_improved`` is False (`efficiency_label` tells the two apart).
    """
    b = np.asarray(baseline_curve, dtype=float)
    improved = bool(b[-1] > b[0]) if higher_is_better else bool(b[-1] < b[0])
    ratio = efficiency_ratio(images, method_curve, b, higher_is_better=higher_is_better) if improved else None
    return {"baseline_final": float(b[-1]), "method_final": float(np.asarray(method_curve, dtype=float)[-1]),
            "ratio": ratio, "baseline_improved": improved}


def efficiency_label(row: dict) -> str:
    """How an `efficiency_row` reads in a table: the ratio, "not reached", or "baseline did not improve"."""
    if not row["baseline_improved"]:
        return "baseline did not improve"
    return "not reached" if row["ratio"] is None else f"{row['ratio']:.2f}"


def row_timing(W) -> tuple[np.ndarray, np.ndarray]:
    """How far each row of a W (K, T) leaves the static λ/T, and in which direction.

    Returns:
        early_share: (K,) share of each row in the noisiest half of the columns (the first T // 2); λ/T gives
            exactly (T // 2) / T, i.e. 0.5 for even T.
        max_deviation: (K,) largest |W[k, j] / (λ_k / T) − 1| of each row; 0 for λ/T.

    Raises:
        ValueError: W not 2-D, or a row that does not sum to a positive budget.
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 2:
        raise ValueError(f"W must be (K, T), got shape {W.shape}")
    lam = W.sum(1)
    if not (lam > 0).all():
        raise ValueError(f"every row of W must sum to a positive budget, got row sums {lam.tolist()}")
    T = W.shape[1]
    return W[:, : T // 2].sum(1) / lam, np.abs(W / (lam[:, None] / T) - 1).max(1)
