"""The timing positive control: does ReCAST's live W move away from λ/T, the same way in every seed?

Reads the final W of every ReCAST run under a demo folder and reports, per reward and seed, the share of its row in
the noisiest half of the steps (λ/T gives exactly 0.5) and the row's largest |W / (λ/T) − 1|. A reward's timing is
"consistent" when its early share is on the same side of 0.5 in every seed.

    python -m recast demo --setting timing --methods recast,uniform --seeds 0,1,2 --out runs/demo_timing
    python research/probes/timing_control.py runs/demo_timing runs/demo5_compose runs/demo5_quality
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def early_shares(demo_dir: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Reward names, early-half shares (seeds, K) and max relative deviations (seeds, K) of the final ReCAST W."""
    from recast.stats import row_timing
    from recast.trainer.metrics import load_run

    shares, devs, names = [], [], None
    for run_dir in sorted((demo_dir / "recast").glob("seed_*")):
        run = load_run(run_dir)
        early, dev = row_timing(run.W_at(10**9)[1])
        shares.append(early)
        devs.append(dev)
        names = list(run.reward_names)
    return names, np.array(shares), np.array(devs)


def main(argv: list[str]) -> None:
    print("| demo | reward | early-half share per seed (λ/T: 0.5) | max |W/(λ/T) − 1| per seed | consistent |")
    print("|---|---|---|---|---|")
    for arg in argv:
        names, shares, devs = early_shares(Path(arg))
        for k, name in enumerate(names):
            s = shares[:, k]
            consistent = bool((s > 0.5).all() or (s < 0.5).all())
            print(f"| {Path(arg).name} | {name} | {', '.join(f'{x:.3f}' for x in s)} | "
                  f"{', '.join(f'{x:.2f}' for x in devs[:, k])} | {'yes' if consistent else 'no'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
