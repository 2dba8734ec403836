"""Probe for the world issue: does a stroke-mass gate stop the sharpness hack without losing agreement?

    python scripts/sharpness_probe.py runs/sweep/quality/sharpness-heavy/uniform/seed_0

Samples 128 test prompts from the run's base model and from its trained (hacked) EMA policy, with the same noise, and
scores both with the committed sharpness reward and with ``sharpness × (1 − exp(−stroke_pixels / m0))``, where
stroke_pixels is the soft count of pixels whose 3×3 mean ink is above 0.3 (isolated crisp pixels do not count). It
prints each score's mean on both sets and its ROC AUC against the not-blurred judge on the base samples (target ≥ 0.8).
This is analysis, not a reward: nothing in the library uses the gate.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F


def stroke_pixels(images: torch.Tensor) -> torch.Tensor:
    """Soft count ``(B,)`` of stroke-core pixels: 3×3 mean ink above the background over 0.3."""
    from recast.digits.rewards.digit import above_background

    core = torch.sigmoid((F.avg_pool2d(above_background(images)[:, None], 3, 1, 1, count_include_pad=False) - 0.3)
                         / 0.05)
    return core.sum((1, 2, 3))


def main(run_dir: str) -> None:
    from sklearn.metrics import roc_auc_score

    from recast.digits.judges.agreement import judge_verdicts
    from recast.digits.rewards.digit import sharpness_reward
    from recast.judge_eval import load_policy, sample_policy

    torch.set_num_threads(1)
    base, trained = load_policy(run_dir, which="base"), load_policy(run_dir)
    pool = base.world.prompts("test")
    prompts = [pool[i % len(pool)] for i in range(128)]
    xb, xh = sample_policy(base, prompts, seed=0), sample_policy(trained, prompts, seed=0)
    not_blur = judge_verdicts(xb, prompts)["not_blur"].numpy()
    print(f"strict judge: base {judge_verdicts(xb, prompts)['strict'].float().mean():.3f}, "
          f"trained {judge_verdicts(xh, prompts)['strict'].float().mean():.3f}; not-blurred pass rate on base "
          f"{not_blur.mean():.2f}")
    print("| score | base mean | trained mean | AUC vs not-blurred (base) |\n|---|---|---|---|")
    sb, sh = sharpness_reward(xb, prompts), sharpness_reward(xh, prompts)
    print(f"| sharpness (committed) | {sb.mean():.3f} | {sh.mean():.3f} | {roc_auc_score(not_blur, sb.numpy()):.3f} |")
    for m0 in (3.0, 6.0, 12.0):
        gb, gh = sb * (1 - torch.exp(-stroke_pixels(xb) / m0)), sh * (1 - torch.exp(-stroke_pixels(xh) / m0))
        print(f"| × stroke gate, m0 = {m0:g} | {gb.mean():.3f} | {gh.mean():.3f} | "
              f"{roc_auc_score(not_blur, gb.numpy()):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
