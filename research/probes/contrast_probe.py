"""Probe: what do the contrast variants and the fade oracle change in their samples? Glyph statistics, base vs final.

    python research/probes/contrast_probe.py contrast_flat wash_free oracle_not_fade placebo   # runs/alone/<reward>/seed_0..2

For each run of `python -m recast.experiments.alone` it samples the base model (adapters off) and the final EMA policy
on 128 test prompts with the same noise (as `research/probes/alone_samples_probe.py`), and prints and writes to
research/tables/contrast_probe.csv: contrast's three factors (`recast.worlds.digits.rewards.digit.contrast_terms`: the
I^2-weighted ink level and saturation, the darker half's mean), the canvas' peak ink, the judges' inked pixel count and
glyph side (`recast.worlds.digits.judges.attributes.mask_stats`), and the colour, size, blur and fade verdicts.
Analysis only (research/rounds/21-oracle-control.md).
"""

from __future__ import annotations


def measure(images, prompts) -> dict:
    """One probe row's statistics of a policy's samples."""
    from recast.worlds.digits import data
    from recast.worlds.digits.judges.attributes import mask_stats, mask_side, judge_attributes
    from recast.worlds.digits.judges.defects import judge_defects
    from recast.worlds.digits.rewards.digit import contrast_terms

    images = images.clamp(0, 1)
    level, sat, background = contrast_terms(images)
    _, _, count, box = mask_stats(images)
    j, d = judge_attributes(images, prompts), judge_defects(images)
    return {"level": level.mean().item(), "saturation": sat.mean().item(), "background": background.mean().item(),
            "peak": data.ink_intensity(images).flatten(1).amax(1).mean().item(),
            "inked_pixels": count.float().mean().item(), "side": mask_side(box).mean().item(),
            "color": j.color.float().mean().item(), "size": j.size.float().mean().item(),
            "blur": d.blur.float().mean().item(), "fade": d.fade.float().mean().item()}


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import sample_probe

    return sample_probe(__doc__.splitlines()[0], argv, measure, "contrast_probe.csv")


if __name__ == "__main__":
    main()
