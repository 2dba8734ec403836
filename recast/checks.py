"""Checks of the paper's W before it trains anything (docs/credit.md "Check a table before you train with it").

A weight table is only as good as the density-ratio profile it is built from (docs/method.md §0). Four questions,
each a pure function of arrays or archives:

* **Is a column degenerate?** `degenerate_columns`: a ratio column constant within tolerance (its variance removed,
  e.g. by the Monte-Carlo debiasing when M continuations cannot tell the proposals apart), or a moment floored before
  the log (D non-finite in exact arithmetic). Each finding carries the fix in its message.
* **How sure is each cell?** `bootstrap_table`: per-cell percentile intervals of W, resampling the profile's
  observations (proposals) with replacement, and `proposals_needed`: the number of proposals at which W's bootstrap
  spread would fall to its departure from λ/T (the spread scales as 1/√N).
* **How do two tables differ?** `compare_tables`: the cosine of their departures from λ/T, each reward's centre of
  mass over the columns, the largest cell differences.
* **Can W act at all?** `variance_shares`: under ``aggregation="pre"`` the raw rewards are mixed by T·W before the
  per-group normalisation, so a reward with a small raw within-group spread barely moves the signal whatever its
  row of W says ("variance hijacking"). Per step: each reward's share of the mixed signal's within-group variance, and
  the correlation of the signal with static's (λ/T) on the same samples.

`check_table` runs them together and returns a `TableCheck` whose ``problems`` say what is wrong in words;
`recast weights PROFILE --lam ... --check` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from recast.archives import DensityProfile, WeightTable, table_from_profile
from recast.offline import MOMENT_FLOOR, paper_weights, ratio_divergence

__all__ = ["Degenerate", "degenerate_columns", "TableIntervals", "bootstrap_table", "proposals_needed",
           "TableComparison", "compare_tables", "VarianceShares", "variance_shares", "TableCheck", "check_table"]

CONSTANT_RTOL = 1e-6  # a column whose range is below this × its mean magnitude is constant


@dataclass(frozen=True)
class Degenerate:
    """One degenerate profile column.

    Attributes:
        reward: the reward's name; column: the scheduler step j (0 the noisiest); sigma: its destination σ_{j+1}.
        kind: "constant" (every ratio one value within tolerance) or "floored" (mean ρ^α below the floor before the
            log, so D would be −inf without it).
        message: what it does to W and how to fix it.
    """

    reward: str
    column: int
    sigma: float
    kind: str
    message: str


def degenerate_columns(profile: DensityProfile, *, rtol: float = CONSTANT_RTOL, alpha: float = 2.0,
                       reward_names=None) -> list[Degenerate]:
    """Every degenerate (reward, column) of a profile, in reward then column order; [] when there is none.

    A constant column has no variance between proposals, so D there is log(mean ρ)^α/(α−1) alone: the clipped
    difference rule then hands the next column the whole jump, and W moves for a reason that is not the reward's
    informativeness. The last column (σ = 0) is the proposals' own scores: constant there means the reward does not
    vary over the proposals at all.
    """
    M = profile.meta.get("num_continuations")
    out = []
    for name in reward_names or profile.reward_names:
        rho = profile.ratios[name]
        moment = np.mean(rho ** float(alpha), axis=0)
        for j in range(rho.shape[1]):
            col, sigma = rho[:, j], float(profile.sigmas[j + 1])
            where = f"reward {name!r}, column {j} (the step sigma {float(profile.sigmas[j]):.3g} -> {sigma:.3g})"
            if moment[j] <= MOMENT_FLOOR:
                out.append(Degenerate(name, j, sigma, "floored", f"{where}: mean ratio^alpha {moment[j]:.3g} is at "
                                      "the floor (every ratio ~0): D is the floor's log, not a measurement; check the "
                                      "reward's offset (a reward near 0 everywhere needs --reward-offset)"))
            elif rho.shape[0] > 1 and np.ptp(col) <= rtol * max(abs(float(col.mean())), 1e-300):
                if sigma == 0.0:
                    fix = ("the reward does not vary over the proposals: choose proposals that differ on it, or "
                           "leave the reward out of the table")
                else:
                    fix = ("the Monte-Carlo noise of the continuations swamps the spread between proposals, so the "
                           "debiasing removed the column's whole variance and the next column gets the whole jump in D"
                           f": raise --num-continuations{f' (M = {M} here)' if M else ''} or the number of proposals "
                           "and rebuild the profile")
                out.append(Degenerate(name, j, sigma, "constant", f"{where}: all {col.size} ratios are "
                                      f"{float(col.mean()):.5g}; {fix}"))
    return out


@dataclass(frozen=True)
class TableIntervals:
    """Bootstrap intervals of the paper's W over a profile's observations.

    Attributes:
        reward_names: rows. W: (K, T) the point estimate (the table of the whole profile).
        lo, hi: (K, T) the percentile interval at ``level``; sd: (K, T) the replicates' standard deviation.
        replicates: (R, K, T) every bootstrap W. level: the interval's coverage. num_observations: N per reward.
        departure: RMS over cells of |W − λ/T| / (λ/T); spread: RMS over cells of sd / (λ/T).
    """

    reward_names: tuple[str, ...]
    W: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sd: np.ndarray
    replicates: np.ndarray
    level: float
    num_observations: tuple[int, ...]
    departure: float
    spread: float


def _static(W: np.ndarray) -> np.ndarray:
    return np.repeat(W.sum(1, keepdims=True) / W.shape[1], W.shape[1], axis=1)


def _rms_rel(x: np.ndarray, W: np.ndarray) -> float:
    ref = _static(W)
    return float(np.sqrt(np.mean(np.divide(x, ref, out=np.zeros_like(x), where=ref > 0) ** 2)))


def bootstrap_table(profile: DensityProfile, lam, *, reward_names=None, temperature=1.0, alpha: float = 2.0,
                    num_boot: int = 200, level: float = 0.95, seed: int = 0) -> TableIntervals:
    """Per-cell bootstrap intervals of W, resampling the proposals (the profile's rows) with replacement.

    Rewards with the same number of observations are resampled with the same indices (one proposal, all its rewards);
    a reward with observations left out (``meta["left_out"]``) is resampled on its own. Each observation's ratio
    already holds its continuations' Monte-Carlo noise, so the spread covers both the proposals and the noise of M.

    Raises:
        ValueError: num_boot < 2, level outside (0, 1), or what `table_from_profile` refuses.
    """
    if int(num_boot) < 2 or not 0 < float(level) < 1:
        raise ValueError(f"num_boot must be >= 2 and level in (0, 1), got {num_boot} and {level}")
    names = tuple(reward_names or profile.reward_names)
    table = table_from_profile(profile, lam, temperature, reward_names=names, alpha=alpha)
    lam = np.asarray(table.budgets, dtype=np.float64)
    rng = np.random.default_rng(int(seed))
    sizes = [profile.ratios[n].shape[0] for n in names]
    reps = np.empty((int(num_boot), len(names), table.num_steps))
    for b in range(int(num_boot)):
        drawn = {N: rng.integers(0, N, N) for N in sorted(set(sizes))}
        gains = np.stack([ratio_divergence(profile.ratios[n][drawn[N]], alpha)[1] for n, N in zip(names, sizes)])
        reps[b] = paper_weights(gains, lam, table.temperatures)
    tail = (1 - float(level)) / 2
    lo, hi = np.quantile(reps, [tail, 1 - tail], axis=0)
    sd = reps.std(0, ddof=1)
    W = table.W
    return TableIntervals(names, W, lo, hi, sd, reps, float(level), tuple(sizes), _rms_rel(W - _static(W), W),
                          _rms_rel(sd, W))


def proposals_needed(intervals: TableIntervals) -> float:
    """The number of proposals at which W's bootstrap spread would equal its departure from λ/T.

    The spread of a mean over N proposals falls as 1/√N, so N* = N · (spread / departure)². Below N* a table's shape
    is mostly the profile's noise. inf where W is λ/T (no departure to resolve).
    """
    N = float(np.mean(intervals.num_observations))
    if intervals.departure <= 0:
        return float("inf")
    return N * (intervals.spread / intervals.departure) ** 2


@dataclass(frozen=True)
class TableComparison:
    """Two tables over the same rewards and steps.

    Attributes:
        reward_names: rows (the first table's order).
        cosine: cosine of the two departures W − λ/T, flattened (nan when either is λ/T exactly).
        centre_of_mass: reward → (a's, b's) Σ_j j·W[k, j] / Σ_j W[k, j], in scheduler columns (0 the noisiest).
        largest: the ``top`` cells with the largest |a − b| in units of λ_k/T: (reward, column, a·T/λ̂, b·T/λ̂).
    """

    reward_names: tuple[str, ...]
    cosine: float
    centre_of_mass: dict
    largest: list = field(default_factory=list)


def _W_of(t) -> tuple[tuple[str, ...] | None, np.ndarray]:
    if isinstance(t, WeightTable):
        return t.reward_names, np.asarray(t.W, dtype=np.float64)
    return None, np.asarray(t, dtype=np.float64)


def compare_tables(a, b, *, top: int = 5) -> TableComparison:
    """Compare two W's (WeightTables, or (K, T) arrays with rows in the same order).

    Tables are matched by reward name (b's rows reordered to a's). Both must have the same rows' normalised budgets
    within 1e-5: two tables for different λ differ by construction, which this comparison is not for.

    Raises:
        ValueError: different rewards, shapes or budgets.
    """
    names_a, Wa = _W_of(a)
    names_b, Wb = _W_of(b)
    if names_a is not None and names_b is not None:
        if sorted(names_a) != sorted(names_b):
            raise ValueError(f"the tables are for different rewards: {list(names_a)} and {list(names_b)}")
        Wb = Wb[[names_b.index(n) for n in names_a]]
    names = names_a or names_b or tuple(f"reward_{k}" for k in range(Wa.shape[0]))
    if Wa.shape != Wb.shape or Wa.ndim != 2:
        raise ValueError(f"the tables must have one shape (K, T), got {Wa.shape} and {Wb.shape}")
    ra, rb = Wa.sum(1) / Wa.sum(), Wb.sum(1) / Wb.sum()
    if np.abs(ra - rb).max() > 1e-5:
        raise ValueError(f"the tables are for different budgets (normalised rows {ra.round(4).tolist()} and "
                         f"{rb.round(4).tolist()}): compare tables of one λ")
    da, db = (Wa - _static(Wa)).ravel(), (Wb - _static(Wb)).ravel()
    norm = np.linalg.norm(da) * np.linalg.norm(db)
    cosine = float(da @ db / norm) if norm > 0 else float("nan")
    cols = np.arange(Wa.shape[1])
    com = {n: (float(cols @ Wa[k] / Wa[k].sum()) if Wa[k].sum() > 0 else float("nan"),
               float(cols @ Wb[k] / Wb[k].sum()) if Wb[k].sum() > 0 else float("nan")) for k, n in enumerate(names)}
    ref = _static(Wa)
    rel_a = np.divide(Wa, ref, out=np.ones_like(Wa), where=ref > 0)
    rel_b = np.divide(Wb, ref, out=np.ones_like(Wb), where=ref > 0)
    order = np.argsort(-np.abs(rel_a - rel_b), axis=None, kind="stable")[:int(top)]
    largest = [(names[i // Wa.shape[1]], int(i % Wa.shape[1]), float(rel_a.flat[i]), float(rel_b.flat[i]))
               for i in order]
    return TableComparison(tuple(names), cosine, com, largest)


@dataclass(frozen=True)
class VarianceShares:
    """What each reward contributes to the `pre` signal, per step, on a batch of samples.

    Attributes:
        reward_names: rows. share: (K, T) (T·W)[k,t]² Var_k / Σ_l (T·W)[l,t]² Var_l, with Var_k the pooled
            within-group variance of reward k (covariances left out, so each column sums to 1).
        raw_sd: (K,) each reward's pooled within-group standard deviation.
        static_correlation: (T,) within-group correlation of step t's mixed reward with static's Σ_k λ̂_k R_k:
            near 1, the table cannot change the signal, whatever W's shape.
    """

    reward_names: tuple[str, ...]
    share: np.ndarray
    raw_sd: np.ndarray
    static_correlation: np.ndarray


def variance_shares(rewards, group_ids, TW, *, reward_names=None) -> VarianceShares:
    """Each reward's share of the `pre` mix's within-group variance per step (docs/method.md §0, "pre").

    Args:
        rewards: (B, K) raw rewards of the user's samples (as the training loop scores them).
        group_ids: (B,) prompt group of each sample; every group needs at least 2 samples.
        TW: (K, T) T·W as training multiplies rewards by (a WeightTable's ``TW``).

    Raises:
        ValueError: mismatched shapes, NaN/inf, a group of one, or no within-group variance at all.
    """
    R = np.asarray(rewards, dtype=np.float64)
    TW = np.asarray(TW, dtype=np.float64)
    g = np.asarray(group_ids).reshape(-1)
    if R.ndim != 2 or TW.ndim != 2 or R.shape[1] != TW.shape[0] or g.size != R.shape[0]:
        raise ValueError(f"rewards must be (B, K), group_ids (B,) and TW (K, T) with one K; got {R.shape}, "
                         f"{g.shape} and {TW.shape}")
    if not (np.isfinite(R).all() and np.isfinite(TW).all()):
        raise ValueError("rewards and TW must be finite")
    labels, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    if (counts < 2).any():
        raise ValueError(f"every group needs at least 2 samples; {int((counts < 2).sum())} of {labels.size} have one")
    means = np.stack([np.bincount(inverse, R[:, k]) / counts for k in range(R.shape[1])], axis=1)
    centred = R - means[inverse]
    cov = centred.T @ centred / (R.shape[0] - labels.size)
    var = np.diag(cov)
    if not (var > 0).any():
        raise ValueError("no reward varies within any group: nothing to share")
    part = TW ** 2 * var[:, None]
    share = part / part.sum(0, keepdims=True)
    lam = TW.sum(1) / TW.sum()
    var_static = lam @ cov @ lam
    var_t = np.einsum("kt,kl,lt->t", TW, cov, TW)
    cross = lam @ cov @ TW
    denom = np.sqrt(var_static * var_t)
    corr = np.divide(cross, denom, out=np.full_like(cross, np.nan), where=denom > 0)
    names = tuple(reward_names or (f"reward_{k}" for k in range(R.shape[1])))
    return VarianceShares(names, share, np.sqrt(var), corr)


@dataclass(frozen=True)
class TableCheck:
    """`check_table`'s findings. ``ok`` is False when any problem was found; ``problems`` say each in words."""

    table: WeightTable
    degenerate: list
    intervals: TableIntervals
    proposals_needed: float
    shares: VarianceShares | None
    problems: list

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """A few lines for a terminal: the verdict, the numbers, every problem."""
        iv = self.intervals
        lines = [f"{'ok' if self.ok else 'PROBLEMS'}: W for {list(self.table.reward_names)}, T = "
                 f"{self.table.num_steps}, N = {list(iv.num_observations)} proposals",
                 f"departure from lambda/T (RMS relative) {iv.departure:.3f}; bootstrap spread {iv.spread:.3f} "
                 f"({iv.replicates.shape[0]} resamples); proposals needed for spread = departure: "
                 f"{self.proposals_needed:.0f}"]
        for k, name in enumerate(self.table.reward_names):
            cells = " ".join(f"{w * self.table.num_steps / max(iv.W[k].sum(), 1e-300):.2f}"
                             f"[{a * self.table.num_steps / max(iv.W[k].sum(), 1e-300):.2f},"
                             f"{b * self.table.num_steps / max(iv.W[k].sum(), 1e-300):.2f}]"
                             for w, a, b in zip(iv.W[k], iv.lo[k], iv.hi[k]))
            lines.append(f"  {name}: W / (lambda/T) per column [{iv.level:.0%} interval]: {cells}")
        if self.shares is not None:
            for k, name in enumerate(self.shares.reward_names):
                lines.append(f"  {name}: share of the pre signal's within-group variance per column "
                             f"{np.round(self.shares.share[k], 3).tolist()} (raw sd {self.shares.raw_sd[k]:.3g})")
            lines.append(f"  correlation with static's signal per column "
                         f"{np.round(self.shares.static_correlation, 3).tolist()}")
        lines += [f"- {p}" for p in self.problems]
        return "\n".join(lines)


def check_table(profile: DensityProfile, lam, *, reward_names=None, temperature=1.0, alpha: float = 2.0,
                num_boot: int = 200, seed: int = 0, samples=None, min_share: float = 0.05) -> TableCheck:
    """Every check of this module for the table of ``profile`` at budgets ``lam``.

    Args:
        profile, lam, reward_names, temperature, alpha: as `recast.archives.table_from_profile`.
        num_boot, seed: the bootstrap's resamples and seed.
        samples: optional (rewards (B, K), group_ids (B,)) of the user's own samples, raw rewards in the table's row
            order, for `variance_shares`.
        min_share: a reward whose row departs from λ/T by more than its bootstrap spread but whose largest share of
            the signal's variance is below this is reported: its re-timing cannot act under `pre`.

    Returns:
        a `TableCheck`; problems: degenerate columns, a spread larger than the departure, re-timing that cannot act.
    """
    names = tuple(reward_names or profile.reward_names)
    intervals = bootstrap_table(profile, lam, reward_names=names, temperature=temperature, alpha=alpha,
                                num_boot=num_boot, seed=seed)
    table = table_from_profile(profile, lam, temperature, reward_names=names, alpha=alpha)
    degenerate = degenerate_columns(profile, alpha=alpha, reward_names=names)
    problems = [d.message for d in degenerate]
    needed = proposals_needed(intervals)
    if intervals.spread > intervals.departure and intervals.departure > 1e-9:  # a static W has no shape to resolve
        problems.append(f"W's bootstrap spread ({intervals.spread:.3f}) exceeds its departure from lambda/T "
                        f"({intervals.departure:.3f}): its shape is mostly the profile's noise; about {needed:.0f} "
                        f"proposals (now {int(np.mean(intervals.num_observations))}) would resolve it")
    shares = None
    if samples is not None:
        shares = variance_shares(samples[0], samples[1], table.TW, reward_names=names)
        ref = _static(table.W)
        moved = np.abs(table.W - ref).max(1) > np.maximum(intervals.sd.max(1), 0)
        for k, name in enumerate(names):
            if moved[k] and shares.share[k].max() < min_share:
                problems.append(f"reward {name!r}: its row of W is re-timed, but it carries at most "
                                f"{shares.share[k].max():.1%} of the pre signal's within-group variance (raw sd "
                                f"{shares.raw_sd[k]:.3g}): under aggregation 'pre' its timing cannot act; rescale "
                                "its raw reward or train with aggregation 'loss'")
    return TableCheck(table, degenerate, intervals, needed, shares, problems)
