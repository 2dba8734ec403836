"""Probe: what does a single-reward run change in its samples? The speck statistics of base vs final policies.

    python research/probes/alone_samples_probe.py speck_free speck_free_abs placebo    # runs/alone/<reward>/seed_0..2, ~3 min

For each run (`python -m recast.experiments.alone`'s directories) it samples the base model (adapters off) and the final EMA
policy on 128 test prompts with the same noise, and prints and writes to research/tables/alone_samples_probe.csv:
the blur and speckle verdicts, the judge's speck count (`recast.worlds.digits.judges.ink.split_ink`), speck_free's and
speck_free_abs's own soft counts, the share of speck_free's count at least 7 px from the judges' glyph, the
glyph's normalised steepest step (the blur judge's statistic) and the canvas' peak ink. Analysis only.
"""

from __future__ import annotations


def measure(images, prompts) -> dict:
    """One probe row's speck and blur statistics of a policy's samples."""
    import torch.nn.functional as F

    from recast.worlds.digits import data
    from recast.worlds.digits.judges.defects import max_step, judge_defects
    from recast.worlds.digits.judges.ink import split_ink
    from recast.worlds.digits.rewards.digit import above_background
    from recast.worlds.digits.rewards.specks import speck_windows

    I = data.ink_intensity(images)
    glyph, specks = split_ink(I)
    J = above_background(images)
    rel = speck_windows(J)[:, 0] / 9
    far = F.max_pool2d(glyph[:, None].float(), 13, 1, 6)[:, 0] == 0  # >= 7 px from the glyph
    j = judge_defects(images)
    return {"blur": j.blur.float().mean().item(), "speckle": j.speckle.float().mean().item(),
            "judge_specks": specks.float().mean().item(), "speck_free_count": rel.sum((1, 2)).mean().item(),
            "speck_free_count_far_share": ((rel * far).sum() / rel.sum().clamp_min(1e-9)).item(),
            "speck_free_abs_count": (speck_windows(J, absolute=True)[:, 0] / 9).sum((1, 2)).mean().item(),
            "max_step": max_step(I, glyph).mean().item(), "peak": J.flatten(1).amax(1).mean().item()}


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import sample_probe

    return sample_probe(__doc__.splitlines()[0], argv, measure, "alone_samples_probe.csv")


if __name__ == "__main__":
    main()
