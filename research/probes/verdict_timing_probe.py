"""Probe for the world issue: when are the held-out judges' own verdicts decided during denoising?

    python research/probes/verdict_timing_probe.py                 # 256 samples, 8 continuations, seed 0 (~10 min, 2 cores)
    python research/probes/verdict_timing_probe.py --table         # re-print research/tables/verdict_timing.csv, no sampling

The designed timing asks the quality rewards to gain late, but a reward that agrees with its judge cannot be decided
much later than the judge's own verdict. Here every held-out per-sample verdict (`judge_verdicts`: the four attributes
and not_blur / not_speckle / not_fade) is scored as a 0/1 pseudo-reward beside the training rewards, and the
`rollout` ground truth of figure 02 (same prompts, grid, sampler, seed and p map) gives each its D(σ) and the centre of
mass of its gains (0 = noisiest of the 6 columns), with a 5-95 % bootstrap band over the samples. The training
rewards' rows reproduce figure 02's ground truth: the batch, the forward noise and the continuations are drawn in
the same order, and the reward order is figure 02's (the verdicts come after it). Analysis only: no reward or judge
changes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

VERDICTS = ("digit", "color", "position", "size", "not_blur", "not_speckle", "not_fade")


def _with_verdicts(world):
    """The world with ``verdict:<name>`` rewards: the judge's verdict on each sample as 0.0 / 1.0."""
    from recast.worlds.digits.judges.agreement import verdict_reward

    reward = world.reward

    def verdict_or_reward(name, device):
        if name.startswith("verdict:"):
            fn = verdict_reward(name.split(":", 1)[1])
            return lambda images, prompts: fn(images, prompts).to(device)
        return reward(name, device)

    world.reward = verdict_or_reward
    return world


def main(argv: list[str] | None = None) -> list[dict]:
    import torch

    import recast
    from recast.worlds.digits.data import prompt_set
    from recast.worlds.digits.rewards import setting_rewards
    from recast.informativeness import centre_of_mass_band, gains_centre_of_mass
    from recast.informativeness.probe import estimate_profiles
    from recast.io import read_csv, write_csv
    from recast.experiments.sweep import results_dir
    from recast.world import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--num-rollouts", type=int, default=8)
    ap.add_argument("--substeps", type=int, default=4)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table", action="store_true", help="re-print the committed table instead of sampling")
    a = ap.parse_args(argv)
    path = results_dir() / "verdict_timing.csv"
    if a.table:
        rows = read_csv(path)
    else:
        torch.set_num_threads(a.threads)
        root = Path(recast.__file__).resolve().parents[1]
        world = _with_verdicts(load_world(f"digits:{root / 'data/digit_base'}"))
        names = [*setting_rewards("compose", "quality"), *(f"verdict:{v}" for v in VERDICTS)]
        pool = prompt_set("train")
        prompts = pool[:: max(1, len(pool) // a.num_prompts)][:a.num_prompts]
        # both estimators, as figure 02 runs them: tweedie's forward noise comes first from the shared generator
        gt = estimate_profiles(world, names, prompts, num_rollouts=a.num_rollouts, substeps=a.substeps,
                               bootstrap=a.bootstrap, seed=a.seed)["rollout"]
        com = gains_centre_of_mass(gt.gains).tolist()
        lo, hi = (b.tolist() for b in centre_of_mass_band(gt.D_boot))  # 5-95 % over the bootstrap replicates
        shares = (gt.gains / gt.gains.sum(1, keepdim=True)).tolist()
        rows = [{"name": n, "kind": "verdict" if n.startswith("verdict:") else "reward", "com": com[k],
                 "com_lo": lo[k], "com_hi": hi[k], "cleanest_third_share": shares[k][-2] + shares[k][-1],
                 "noise_share": float(gt.noise_share[k]), **{f"share_col{j}": s for j, s in enumerate(shares[k])},
                 "num_prompts": a.num_prompts, "num_rollouts": a.num_rollouts, "seed": a.seed}
                for k, n in enumerate(names)]
        write_csv(path, rows)
    print("| reward or verdict | centre of mass [5-95 %] | share of gains in columns 4-5 | noise share |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {float(r['com']):.2f} [{float(r['com_lo']):.2f}, {float(r['com_hi']):.2f}] | "
              f"{float(r['cleanest_third_share']):.2f} | {float(r['noise_share']):.2f} |")
    return rows


if __name__ == "__main__":
    main()
