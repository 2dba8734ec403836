"""Statistics a reviewer accepts for method comparisons: paired differences over seeds, verdicts, sample efficiency.

Every comparison is *paired*: method A and baseline B share the seed (same base model, prompts, noise and sample
budget), so the seed-to-seed variation they share cancels in the difference ``d_s = A_s - B_s``. A cell is a win or a
loss only when the t-interval of the mean difference excludes zero; otherwise it is a tie.

Pass rates are counts over a few evaluation prompts (64 at the cpu preset), so a paired difference moves in steps of
one prompt, ``1 / N``. With 3 seeds, all three can differ by the same step, and the sample s.d. is then 0 and the
interval has zero width: a "win" that rests on the judge's resolution, not on evidence. So the s.d. of a difference of
pass rates is never taken below one step (`count_resolution`); continuous metrics (rewards, the Fréchet distance)
are unaffected.

Metric direction: judges and rewards are higher-is-better except the Fréchet distance and the defect rates
(`lower_is_better`). Verdicts are always stated from A's side: "win" means A is better on that metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["lower_is_better", "PairedDiff", "paired_difference", "count_resolution", "tally", "images_to_reach",
           "efficiency_ratio", "interval_p_value", "holm"]

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


def count_resolution(values: Sequence[float], n_prompts: int | None) -> float:
    """The step ``1 / n_prompts`` when every value is a count over ``n_prompts`` prompts (a pass rate: an integer
    multiple of the step, to 1e-9), else 0 (a continuous metric, or ``n_prompts`` unknown)."""
    if not n_prompts or n_prompts <= 0:
        return 0.0
    v = np.asarray(values, dtype=float) * n_prompts
    return 1.0 / n_prompts if v.size and np.all(np.abs(v - np.round(v)) < 1e-9) else 0.0


def paired_difference(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool = True,
                      confidence: float = 0.95, resolution: float = 0.0) -> PairedDiff:
    """Paired comparison of A against B.

    Args:
        a, b: the metric per seed, aligned (a[s] and b[s] share seed s).
        higher_is_better: the metric's direction.
        confidence: interval level in (0, 1).
        resolution: the smallest step the metric can move by (`count_resolution`: ``1 / N`` for a pass rate over
            N prompts, 0 for a continuous metric); the s.d. of the differences is taken as at least this, so
            identical quantised differences do not give a zero-width interval.

    Raises:
        ValueError: different lengths, no pairs, non-finite values, a confidence outside (0, 1), or a negative
            resolution.
    """
    from scipy.stats import t as student_t

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired_difference needs two equal-length 1-D samples, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired_difference got a non-finite value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not (math.isfinite(resolution) and resolution >= 0):
        raise ValueError(f"resolution must be a finite number >= 0, got {resolution}")
    d = a - b
    n, mean = d.size, float(d.mean())
    if n < 2:
        return PairedDiff(n, mean, math.nan, math.nan, "tie", confidence)
    sd = max(float(d.std(ddof=1)), resolution)
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))
    lo, hi = mean - half, mean + half
    better, worse = (lo > 0, hi < 0) if higher_is_better else (hi < 0, lo > 0)
    return PairedDiff(n, mean, lo, hi, "win" if better else "loss" if worse else "tie", confidence)


def interval_p_value(diff: float, ci_low: float, ci_high: float, n: int, confidence: float = 0.95) -> float:
    """The two-sided p-value of a paired mean difference, recovered from its t-interval (`paired_difference`).

    The interval is ``diff ± t_{n-1}(0.5 + confidence / 2) · se``, so ``se`` and the t statistic follow from its
    width; committed tables that keep only the interval can then enter a family-wise correction (`holm`).

    Raises:
        ValueError: fewer than two pairs, a confidence outside (0, 1), or an interval that is not finite or does not
            contain ``diff``.
    """
    from scipy.stats import t as student_t

    if n < 2:
        raise ValueError(f"a p-value needs at least two pairs, got n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not all(map(math.isfinite, (diff, ci_low, ci_high))) or not ci_low <= diff <= ci_high:
        raise ValueError(f"the interval [{ci_low}, {ci_high}] must be finite and contain the difference {diff}")
    half = (ci_high - ci_low) / 2
    if half == 0:
        return 1.0 if diff == 0 else 0.0
    se = half / float(student_t.ppf(0.5 + confidence / 2, n - 1))
    return float(2 * student_t.sf(abs(diff) / se, n - 1))


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which hypotheses of one family are rejected at family-wise error ``alpha``.

    Sort the m p-values ascending; reject while ``p_(i) <= alpha / (m - i)`` (i from 0), stop at the first that is not.
    Controls the chance of any false rejection in the family at ``alpha`` under any dependence.

    Returns:
        one flag per input, in input order.

    Raises:
        ValueError: a p-value outside [0, 1] or NaN, or alpha outside (0, 1).
    """
    p = [float(x) for x in p_values]
    if any(not 0 <= x <= 1 for x in p):  # NaN fails both comparisons
        raise ValueError(f"p-values must lie in [0, 1], got {p}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    m, reject = len(p), [False] * len(p)
    for i, k in enumerate(sorted(range(m), key=lambda j: (p[j], j))):
        if p[k] > alpha / (m - i):
            break
        reject[k] = True
    return reject


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


def efficiency_row(images: Sequence[float], method_curve, baseline_curve, *, higher_is_better: bool = True,
                   bootstrap: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """One row of a sample-efficiency table: both final values, the `efficiency_ratio`, whether the baseline improved
    on its start at all, and (given per-seed curves) a paired bootstrap interval over seeds for the ratio.

    A ratio is only meaningful when the baseline ended better than it started: otherwise the start already "reaches"
    its final value and every method would score 0. So ``ratio`` is None both when the method never reaches the
    baseline's final value and when ``baseline_improved`` is False (`efficiency_label` tells the two apart).

    Args:
        images: (E,) sample counts of the evaluations, strictly increasing.
        method_curve, baseline_curve: (E,) one curve each (e.g. seed means: no interval), or (S, E) per-seed curves
            whose row i comes from the same seed in both (the point estimate then uses the seed means).
        bootstrap: replicates of the paired bootstrap over seeds (per-seed curves only; 0 = no interval).
        level: central coverage of the interval.
        seed: seeds the bootstrap.

    Returns:
        ``baseline_final``, ``method_final``, ``ratio``, ``baseline_improved``; with per-seed curves also ``seeds``,
        ``ratio_low`` and ``ratio_high`` (percentiles over the replicates whose baseline improved, a replicate that
        never reaches counting as +inf: ``ratio_high`` None means "not reached" is inside the interval, both None
        that it covers the whole interval) and ``boot_improved``, the share of replicates whose baseline improved.
        With 3 seeds there are only 10 distinct resamples: the interval is coarse and, like any percentile
        bootstrap at this n, too narrow rather than too wide.

    Raises:
        ValueError: curves of different shapes, or not 1-D / 2-D.
    """
    m, b = np.asarray(method_curve, dtype=float), np.asarray(baseline_curve, dtype=float)
    if m.shape != b.shape or m.ndim not in (1, 2):
        raise ValueError(f"method and baseline curves must have one shape, (E,) or (seeds, E); got {m.shape} and "
                         f"{b.shape}")

    def point(mc: np.ndarray, bc: np.ndarray) -> tuple[float | None, bool]:
        improved = bool(bc[-1] > bc[0]) if higher_is_better else bool(bc[-1] < bc[0])
        return (efficiency_ratio(images, mc, bc, higher_is_better=higher_is_better) if improved else None), improved

    mm, bm = (m.mean(0), b.mean(0)) if m.ndim == 2 else (m, b)
    ratio, improved = point(mm, bm)
    row = {"baseline_final": float(bm[-1]), "method_final": float(mm[-1]), "ratio": ratio, "baseline_improved": improved}
    if m.ndim == 1 or bootstrap <= 0:
        return row
    S = m.shape[0]
    idx = np.random.default_rng(seed).integers(0, S, size=(bootstrap, S))
    reps = [point(m[i].mean(0), b[i].mean(0)) for i in idx]
    ratios = np.array([np.inf if r is None else r for r, ok in reps if ok])
    q = (1 - level) / 2
    lo, hi = np.quantile(ratios, [q, 1 - q], method="inverted_cdf") if ratios.size else (np.inf, np.inf)
    row.update(seeds=S, ratio_low=None if np.isinf(lo) else float(lo), ratio_high=None if np.isinf(hi) else float(hi),
               boot_improved=ratios.size / bootstrap)
    return row


def efficiency_label(row: dict) -> str:
    """How an `efficiency_row` reads in a table: the ratio with its seed-bootstrap interval where there is one
    (``0.86 [0.40, not reached]``), "not reached", or "baseline did not improve"."""
    if not row["baseline_improved"]:
        return "baseline did not improve"
    text = "not reached" if row["ratio"] is None else f"{row['ratio']:.2f}"
    lo, hi = row.get("ratio_low"), row.get("ratio_high")
    if row.get("seeds") and not (row["ratio"] is None and lo is None):
        text += f" [{'not reached' if lo is None else f'{lo:.2f}'}, {'not reached' if hi is None else f'{hi:.2f}'}]"
    return text


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
