"""Aggregation of pairwise verdicts into a win rate with a confidence interval (any world, any judge).

A verdict is +1 (A better), -1 (B better), 0 (tie) or None (the judge abstained, e.g. an unparseable answer).
Ties count half, as in the digit world's preference judge (`recast.worlds.digits.judges.preference.WinRate`); abstentions are
left out of the rate and reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["WinRateCI", "SeedWinRates", "aggregate_verdicts", "win_rates_over_seeds"]


@dataclass(frozen=True)
class WinRateCI:
    """Win rate of A over B: ``win_rate = (wins + ties / 2) / n`` over the n non-abstained pairs.

    Attributes:
        wins, losses, ties: counts over non-abstained pairs.
        abstained: pairs without a usable verdict.
        win_rate: (wins + ties / 2) / n; NaN when n = 0.
        ci_low, ci_high: Wilson score interval of win_rate at `confidence`, with wins + ties / 2 successes.
            A tie's score (1/2) has less variance than a coin flip, so this interval is conservative.
        confidence: the interval's level.
    """

    wins: int
    losses: int
    ties: int
    abstained: int
    win_rate: float
    ci_low: float
    ci_high: float
    confidence: float

    @property
    def n(self) -> int:
        return self.wins + self.losses + self.ties


def aggregate_verdicts(verdicts: Iterable[int | None], confidence: float = 0.95) -> WinRateCI:
    """Count verdicts (+1, -1, 0, None) into a `WinRateCI`.

    Raises:
        ValueError: a verdict outside {+1, -1, 0, None}, or confidence outside (0, 1).
    """
    from scipy.stats import norm

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    counts = {1: 0, -1: 0, 0: 0, None: 0}
    for v in verdicts:
        if v not in counts:
            raise ValueError(f"verdicts must be +1, -1, 0 or None, got {v!r}")
        counts[v] += 1
    wins, losses, ties = counts[1], counts[-1], counts[0]
    n = wins + losses + ties
    if n == 0:
        return WinRateCI(0, 0, 0, counts[None], math.nan, math.nan, math.nan, confidence)
    p = (wins + 0.5 * ties) / n
    z = float(norm.ppf(0.5 + confidence / 2))
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return WinRateCI(wins, losses, ties, counts[None], p, max(0.0, centre - half), min(1.0, centre + half), confidence)


@dataclass(frozen=True)
class SeedWinRates:
    """Win rate of A over B with the seed as the unit: one rate per seed (each an `aggregate_verdicts` rate over that
    seed's prompts), their mean, and a Student-t interval of the mean.

    Pairs within a seed share one trained policy, so they are not independent draws of "A against B": the Wilson
    interval over pooled pairs measures prompt noise only. This interval also carries the seed-to-seed spread of
    training, the same unit as the paired differences over seeds.

    Attributes:
        rates: win rate per seed (seeds without usable verdicts are left out).
        mean: mean of ``rates``.
        ci_low, ci_high: t interval of the mean at `confidence` (NaN with fewer than two seeds), with the seed
            rates' s.d. taken as at least half a pair of the largest seed (`recast.stats.paired_difference`), and
            clipped to [0, 1], where a rate lives (clipping cannot move an end across 0.5, so the verdict is the
            unclipped interval's).
        verdict: "win" when the interval lies above 0.5, "loss" when below, else "tie".
    """

    rates: tuple[float, ...]
    mean: float
    ci_low: float
    ci_high: float
    verdict: str


def win_rates_over_seeds(verdicts_per_seed: Iterable[Iterable[int | None]], confidence: float = 0.95) -> SeedWinRates:
    """`SeedWinRates` from each seed's verdicts (+1, -1, 0, None).

    Raises:
        ValueError: no seed with a usable verdict, or a verdict outside {+1, -1, 0, None}.
    """
    from recast.stats import paired_difference

    per_seed = [aggregate_verdicts(v, confidence) for v in verdicts_per_seed]
    usable = [a for a in per_seed if not math.isnan(a.win_rate)]
    if not usable:
        raise ValueError("no seed has a usable verdict")
    rates = tuple(a.win_rate for a in usable)
    # a seed's rate moves in steps of half a pair (ties count half): its s.d. is not taken below that step
    # (`recast.stats.count_resolution`), so seeds with identical rates do not give a zero-width interval
    step = 1.0 / (2 * max(a.n for a in usable))
    d = paired_difference(rates, [0.5] * len(rates), confidence=confidence, resolution=step)
    low, high = 0.5 + d.ci_low, 0.5 + d.ci_high
    return SeedWinRates(rates, 0.5 + d.mean, low if math.isnan(low) else max(0.0, low),
                        high if math.isnan(high) else min(1.0, high), d.verdict)
