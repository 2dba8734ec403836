"""Probe: what does a single-reward run do to the glyph's size, per prompted size? Base vs final samples.

    python research/probes/realism_size_probe.py realism realism_canonical realism_conditional realism_centred placebo \
        --seeds 0,1,2,3,4

For each run of `python -m recast.experiments.alone` it samples the base model (adapters off) and the final EMA policy
on 128 test prompts with the same noise (`recast.experiments.alone.base_and_final_samples`) and writes one row per
(reward, seed, policy) to research/tables/realism_size_probe.csv: for small and for large prompts the judges' glyph side
and inked pixel count (`recast.worlds.digits.judges.attributes.mask_stats`), the size judge's pass rate, and the four
realism rewards' means; and the blur verdict over all samples. Real glyphs are 8 px (small) and 12 px (large). Analysis
only (research/rounds/05-realism-size.md, research/rounds/04-centred-realism.md).
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _realism_rewards() -> dict:
    from recast.worlds.digits.rewards import get

    return {name: get(name)("cpu") for name in ("realism", "realism_canonical", "realism_conditional",
                                                       "realism_centred")}


def measure(images, prompts) -> dict:
    """One probe row's statistics of a policy's samples, split by the prompted size."""
    import torch

    from recast.worlds.digits import data
    from recast.worlds.digits.judges.attributes import mask_stats, mask_side, judge_attributes
    from recast.worlds.digits.judges.defects import judge_defects

    images = images.clamp(0, 1)
    _, _, count, box = mask_stats(images)
    side, j = mask_side(box), judge_attributes(images, prompts)
    scores = {name: fn(images, prompts) for name, fn in _realism_rewards().items()}
    sizes = [data.parse_prompt(p).size for p in prompts]
    row = {}
    for size in data.SIZES:
        m = torch.tensor([s == size for s in sizes])
        row.update({f"side_{size}": side[m].mean().item(), f"inked_pixels_{size}": count[m].float().mean().item(),
                    f"size_judge_{size}": j.size[m].float().mean().item(),
                    **{f"{name}_{size}": s[m].mean().item() for name, s in scores.items()}})
    row["blur"] = judge_defects(images).blur.float().mean().item()
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    from recast.experiments.alone import sample_probe

    return sample_probe(__doc__.splitlines()[0], argv, measure, "realism_size_probe.csv")


if __name__ == "__main__":
    main()
