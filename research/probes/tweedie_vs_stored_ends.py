"""Probe: tweedie's gains against the ground truth for any reward, the ground truth read from stored ends.

    python research/probes/timing_cache.py record --seed 0; python research/probes/timing_cache.py record --seed 1   # once, ~20 min
    python research/probes/tweedie_vs_stored_ends.py sharpness sharpness_steep speck_free speck_free_abs       # ~2.5 min

On figure 02's two batches (same prompts and seeds), tweedie's gains come from `estimate_profiles` (its forward
noise is drawn first from the shared generator, as in figure 02) and the ground truth's from the stored ends
(`recast.informativeness.ends`). Prints and writes research/tables/tweedie_vs_stored_ends.csv: Spearman ρ of the two
per batch, and the ground truth's agreement with itself across the batches (the most any estimator can show).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> list[dict]:
    import torch

    import recast
    from recast.worlds.digits.data import prompt_set
    from recast.informativeness.ends import RolloutEnds, ends_profile
    from recast.informativeness.probe import estimate_profiles, spearman, stack_rewards
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir
    from recast.world import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rewards", nargs="+")
    ap.add_argument("--dir", default="runs/ends")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    root = Path(recast.__file__).resolve().parents[1]
    world = load_world(f"digits:{root / 'data/digit_base'}")
    reward = stack_rewards([world.reward(n, "cpu") for n in a.rewards])
    gains, rows = {}, []
    for seed in (0, 1):
        ends = RolloutEnds.load(root / a.dir / f"seed_{seed}.pt")
        prompts = list(ends.prompts)
        tw = estimate_profiles(world, a.rewards, prompts, estimators=("tweedie",), substeps=ends.meta["substeps"],
                               bootstrap=0, seed=seed)["tweedie"]
        gains[seed] = ends_profile(ends, reward, bootstrap=0)["gains"]
        for k, name in enumerate(a.rewards):
            rows.append({"reward": name, "seed": seed, "rho_tweedie_vs_ground_truth": spearman(tw.gains[k],
                                                                                               gains[seed][k])})
    for k, name in enumerate(a.rewards):
        rows.append({"reward": name, "seed": "both", "rho_ground_truth_batch_1_vs_2": spearman(gains[0][k],
                                                                                                gains[1][k])})
    for r in rows:
        print(r)
    write_csv(results_dir() / "tweedie_vs_stored_ends.csv", rows)
    return rows


if __name__ == "__main__":
    main()
