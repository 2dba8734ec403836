"""Does the position reward pay for moves that blur? Base-model samples shifted towards their target, by whole and by
fractions of a pixel.

    python research/probes/position_subpixel_probe.py      # about 15 s on 2 cores (with the base samples of blur_pays_probe)

The position reward scores the distance from the ink centroid to the prompted region's centre with a Gaussian of
3 px, so it still pays for sub-pixel moves of a glyph already in its region. A policy can only move a glyph by a
fraction of a pixel by spreading its ink over neighbouring pixels, which the blur judge (the steepest normalised
step) reads as blur. On the 256 test samples of `recast.experiments.alone.reevaluate` from the base model, each image is
shifted along the direction from its centroid to its target by d px (bilinear: a fractional shift mixes two integer
shifts), and by the nearest whole-pixel vector to that shift (no mixing). The table gives the position reward's
mean change and share up, and the blur judge's rate. Also printed: how far the base samples' centroids sit from
their targets (position judge pass or not). Prints markdown.
"""

from __future__ import annotations

import argparse

import torch


def shift(images: torch.Tensor, dyx: torch.Tensor) -> torch.Tensor:
    """Shift each image ``(B, 3, H, W)`` by ``dyx (B, 2)`` pixels (down, right), bilinearly, repeating the border
    pixels, so the background statistics the blur judge normalises by stay put."""
    import torch.nn.functional as F

    B, _, H, W = images.shape
    theta = torch.zeros(B, 2, 3, dtype=images.dtype)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    theta[:, 0, 2] = -2.0 * dyx[:, 1] / W  # align_corners=False: a pixel is 2 / W in normalised x
    theta[:, 1, 2] = -2.0 * dyx[:, 0] / H
    grid = F.affine_grid(theta, images.shape, align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import REEVAL_SEED_OFFSET
    from recast.worlds.digits import data
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.judges import defect_report
    from recast.worlds.digits.judges.attributes import judge_attributes
    from recast.worlds.digits.rewards.digit import ink_moments
    from recast.experiments.judge_eval import load_policy, sample_test_prompts

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", default="runs/alone/placebo/seed_0", help="any run of the base model; its base is used")
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--shifts", default="0.25,0.5,1.0,1.5")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    images, prompts = sample_test_prompts(load_policy(a.run, "base"), a.n, seed=REEVAL_SEED_OFFSET)
    reward = R.get("position")("cpu")
    r0 = reward(images, prompts)
    target = torch.tensor([data.region_center(data.parse_prompt(t).position) for t in prompts])
    centroid = ink_moments(images)[0]
    gap = target - centroid
    dist = gap.norm(dim=1)
    unit = gap / dist.clamp_min(1e-6)[:, None]
    passed = judge_attributes(images, prompts).position
    print(f"base samples: {a.n}; position judge passes {passed.float().mean():.3f}; blur judge "
          f"{defect_report(images).as_dict()['blur']:.3f}; centroid-to-target distance, median px: "
          f"{dist[passed].median():.2f} where the judge passes, {dist[~passed].median():.2f} where it fails; "
          f"share within 1.5 px: {(dist <= 1.5).float().mean():.3f}\n")
    rows = []
    for d in (float(x) for x in a.shifts.split(",")):
        step = unit * d
        for kind, dyx in (("fractional", step), ("whole pixels", step.round())):
            moved = shift(images, dyx)
            dr = reward(moved, prompts) - r0
            rows.append({"shift": d, "kind": kind, "reward_change": float(dr.mean()),
                         "share_up": float((dr > 1e-6).float().mean()),
                         "blur": defect_report(moved).as_dict()["blur"],
                         "moved_px": float(dyx.norm(dim=1).mean())})
    print("| shift towards the target (px) | kind | mean move (px) | position reward Δ | share up | blur judge |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['shift']:.2f} | {r['kind']} | {r['moved_px']:.2f} | {r['reward_change']:+.4f} | "
              f"{100 * r['share_up']:.0f} % | {r['blur']:.3f} |")
    return rows


if __name__ == "__main__":
    main()
