"""Stage G of the pre-registered study: the paper's recipe with W from the model's own informativeness
(research/study/preregistration.md, "Amendment: stage G").

    python -m recast.experiments.study_g tables     # every arm's weight table of every (setting, budget)
    python -m recast.experiments.study_g check      # recast weights --check's findings for each table's profile

Only the tables exist so far: the driver that trains (as `study_f run`) is committed before the first run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from recast.experiments.study_f import ROOT, budgets, rewards

__all__ = ["SETTINGS", "SEEDS", "ARMS", "STAGE_DIR", "GT_FILE", "R16_PROFILE", "gt_divergences", "table_path",
           "make_tables", "profile_findings"]

STAGE_DIR = ROOT / "research" / "study" / "G"
SETTINGS = ("compose", "timing")
SEEDS = (0, 1, 2, 3, 4)
ARMS = ("static", "recast_gt", "recast", "recast_r16", "recast_live")  # the pre-registered order of priority
GT_FILE = ROOT / "research" / "tables" / "informativeness_base_256_s16.json"
RENDERINGS = ROOT / "data" / "profiles" / "digit_base_renderings_T6.npz"
R16_PROFILE = ROOT / "data" / "profiles" / "digit_base_renderings_M16_T6.npz"


def gt_divergences() -> tuple[list[str], np.ndarray, np.ndarray]:
    """(reward names, sigmas (T + 1,), D (K, T + 1)): the rollout ground truth's two batches' D averaged."""
    d = json.loads(GT_FILE.read_text())
    D = (np.asarray(d["rollout"]["D"], dtype=np.float64) + np.asarray(d["replicate"]["rollout"]["D"])) / 2
    return list(d["rollout"]["reward_names"]), np.asarray(d["rollout"]["sigmas"], dtype=np.float64), D


def table_path(arm: str, setting: str, budget: str) -> Path:
    """Where an arm's table lives: stage F's for `recast` in compose (as committed), stage G's otherwise."""
    if arm == "recast" and setting == "compose":
        return ROOT / "research" / "study" / "F" / "tables" / "renderings" / f"{setting}_{budget}.npz"
    folder = {"recast_gt": "gt", "recast": "renderings", "recast_r16": "r16"}[arm]
    return STAGE_DIR / "tables" / folder / f"{setting}_{budget}.npz"


def _gt_table(setting: str, lam):
    """The paper's exp-kernel table (τ = 1) of the ground truth's gains (D's differences clipped at 0)."""
    from recast.archives import WeightTable
    from recast.offline import paper_weights

    names, sigmas, D = gt_divergences()
    rows = [names.index(n) for n in rewards(setting)]
    D = D[rows]
    gains = np.maximum(np.diff(D, axis=1), 0.0)
    W32 = paper_weights(gains, lam).astype(np.float32).astype(np.float64)
    T = W32.shape[1]

    def f32(x):  # what a table file stores, so the table round-trips exactly
        return np.asarray(x, dtype=np.float32).astype(np.float64)

    table = WeightTable(rewards(setting), f32(sigmas), W32, f32(D[:, 1:]), f32(gains), f32(lam), np.ones(len(rows)),
                        2.0, f32(T * W32))
    table.validate("ground-truth table")
    return table


def make_tables(*, arms=("recast_gt", "recast", "recast_r16")) -> list[Path]:
    """Write every (arm, setting, budget) table stage G reads that is not stage F's; `recast_r16` only once its
    profile exists. Returns the paths written."""
    from recast.archives import load_profile, save_table, table_from_profile

    out = []
    for arm in arms:
        for setting in SETTINGS:
            for budget, lam in budgets(setting).items():
                target = table_path(arm, setting, budget)
                if arm == "recast_gt":
                    table = _gt_table(setting, list(lam))
                elif arm == "recast" and setting == "compose":
                    continue  # stage F's, as committed
                else:
                    source = RENDERINGS if arm == "recast" else R16_PROFILE
                    if not source.is_file():
                        continue
                    prof = load_profile(source, rewards(setting))
                    table = table_from_profile(prof, list(lam), reward_names=rewards(setting))
                save_table(table, target)
                out.append(target)
    return out


def profile_findings() -> dict:
    """Each profile's degenerate columns over both settings' rewards (`recast.checks.degenerate_columns`)."""
    from recast.archives import load_profile
    from recast.checks import degenerate_columns

    names = list(dict.fromkeys(n for s in SETTINGS for n in rewards(s)))
    out = {}
    for path in (RENDERINGS, R16_PROFILE):
        if path.is_file():
            out[str(path.relative_to(ROOT))] = [d.message for d in degenerate_columns(load_profile(path, names))]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m recast.experiments.study_g", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("tables", "check"))
    args = p.parse_args(argv)
    if args.command == "tables":
        for path in make_tables():
            print(path.relative_to(ROOT))
        return 0
    findings = profile_findings()
    print(json.dumps(findings, indent=1))
    return 1 if any(findings.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
