"""The study's seed count, from the committed seed spreads (research/study/preregistration.md, "Power").

    python research/study/power.py          # prints and writes research/study/power.json (seconds)

The unit of replication is the seed. The effect to detect is half of the committed compose colour effect of ReCAST
over uniform (the 5-seed demo re-scored on 512 samples per policy, research/tables/demo5_compose_rescore.csv), with
its seed-to-seed spread of paired differences, in a two-sided paired t-test at the strictest level Holm's procedure
applies in the primary family (α / m for m comparisons). The seed count is the smallest n with power ≥ 80 %.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from scipy.stats import nct, t

ROOT = Path(__file__).resolve().parents[2]
ALPHA, POWER, FAMILY = 0.05, 0.80, 6  # family: ReCAST against each of the six other arms, on the primary endpoint


def paired_diffs(table: Path, metric: str, a: str = "recast", b: str = "uniform") -> np.ndarray:
    """Per-seed paired differences a − b of ``metric``, each seed's draws pooled."""
    by: dict = {}
    for r in csv.DictReader(table.open()):
        by.setdefault((r["method"], int(r["seed"])), []).append(float(r[metric]))
    seeds = sorted({s for m, s in by if m == a} & {s for m, s in by if m == b})
    return np.array([np.mean(by[(a, s)]) - np.mean(by[(b, s)]) for s in seeds])


def power(n: int, effect: float, sd: float, alpha: float) -> float:
    """Power of a two-sided paired t-test with n pairs."""
    df, ncp = n - 1, effect / sd * np.sqrt(n)
    crit = t.ppf(1 - alpha / 2, df)
    return float(nct.sf(crit, df, ncp) + nct.cdf(-crit, df, ncp))


def seeds_needed(effect: float, sd: float, alpha: float, target: float = POWER) -> int:
    n = 3
    while power(n, effect, sd, alpha) < target:
        n += 1
    return n


def main() -> dict:
    d = paired_diffs(ROOT / "research/tables/demo5_compose_rescore.csv", "judge/color")
    effect, sd = float(d.mean()) / 2, float(d.std(ddof=1))
    alpha = ALPHA / FAMILY
    n = seeds_needed(effect, sd, alpha)
    q = paired_diffs(ROOT / "research/tables/demo5_quality_rescore.csv", "judge/fid")
    out = {"source": "research/tables/demo5_compose_rescore.csv (judge/color, recast - uniform, 5 seeds x 2 draws)",
           "committed_effect": float(d.mean()), "effect_to_detect": effect, "sd_of_paired_differences": sd,
           "alpha": ALPHA, "family_size": FAMILY, "alpha_at_strictest_holm_step": alpha, "target_power": POWER,
           "seeds": n, "power_at_seeds": power(n, effect, sd, alpha),
           "power_at_seeds_uncorrected": power(n, effect, sd, ALPHA),
           "quality_fid_sd_of_paired_differences": float(q.std(ddof=1)),
           "quality_fid_committed_difference": float(q.mean())}
    (Path(__file__).parent / "power.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
