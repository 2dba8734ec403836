"""Probe for the glyph-only round: how stray specks coupled the blur judge, the sharpness reward and the speckle reward.

    python research/probes/speck_probe.py      # the audit's 256 base-model samples (test prompts, ODE 10 steps, seed 0); ~1 min

On the audit's samples it prints, and writes to research/tables/speck_probe.csv:
- the blur verdict read on the whole canvas (the judge until this round: ``glyph`` = every pixel) and on the glyph
  (the judge now), overall and among speckled samples, and P(speckle | blurred) under each;
- what two stray specks (white pixels at the centres of two quadrants the glyph is not in) do to sharpness before
  this round (no speck mask) and now, and to the blur verdict;
- what a Gaussian blur of 0.5, 0.75 and 1 px does to speck_free and to a count of bright pixels (the first version of
  speck_free) on the same samples: the share of samples whose score rises and the mean change;
- since the stored-ends round, the same for the variants speck_free_abs and sharpness_steep, and for sharpness.
Analysis only: it calls the library's judges and rewards, and spells out the two old formulas it compares with.
"""

from __future__ import annotations

import torch


def _two_specks(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    from recast.worlds.digits import data

    out = images.clone()
    for b, p in enumerate(prompts):
        others = [v for k, v in data.POSITIONS.items() if k != data.parse_prompt(p).position]
        for y0, x0, y1, x1 in others[:2]:
            out[b, :, (y0 + y1) // 2, (x0 + x1) // 2] = 1.0
    return out


def _sharpness_before(images: torch.Tensor) -> torch.Tensor:
    """The sharpness reward until this round: the same relative slope and gate, every pixel counted."""
    from recast.worlds.digits.rewards import digit as D

    J = D.above_background(images)
    gy, gx = (J[:, 1:, :] - J[:, :-1, :]).abs(), (J[:, :, 1:] - J[:, :, :-1]).abs()
    slope = (gy.pow(2).sum((1, 2)) + gx.pow(2).sum((1, 2))) / ((gy.sum((1, 2)) + gx.sum((1, 2))) * J.amax((1, 2))
                                                             + 1e-6)
    return (1.0 - torch.exp(-slope / D.SHARPNESS_SLOPE)) * D._ink_gate(J, D.SHARPNESS_INK_MASS)


def _bright_pixel_count_reward(images: torch.Tensor) -> torch.Tensor:
    """speck_free's first version: bright pixels (not windows) with a dark ring at distance 2."""
    from recast.worlds.digits.rewards import specks as S

    J = S.above_background(images)
    J = (J / J.flatten(1).amax(1).clamp_min(S.SPECK_PEAK_MIN)[:, None, None])[:, None]
    count = (S._soft_above(J, 0.4) * (1 - S._soft_above(S._ring_max(J, 2), S.SPECK_RING_INK))).sum((1, 2, 3))
    hinge = (S.above_background(images).sum((1, 2)) / S.SPECK_FREE_INK_MASS).clamp(0, 1)
    return torch.exp(-count / S.SPECK_COUNT) * hinge


def main() -> list[dict]:
    from recast.worlds.digits import data
    from recast.worlds.digits.audit import sample_world
    from recast.worlds.digits.judges.defects import BLUR_MAX_STEP, max_step, judge_defects
    from recast.worlds.digits.judges.ink import split_ink
    from recast.worlds.digits.rewards import get
    from recast.worlds.digits.rewards.degrade import gaussian_blur
    from recast.worlds.digits.model import load_world
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir

    torch.set_num_threads(2)
    images, prompts = sample_world(load_world("data/digit_base"), n=256, split="test", num_steps=10, seed=0)
    rows = []

    def row(what, value):
        rows.append({"what": what, "value": float(value)})
        print(f"{what}: {float(value):.3f}")

    I = data.ink_intensity(images)
    glyph, _ = split_ink(I)
    j = judge_defects(images)
    whole = max_step(I, torch.ones_like(glyph)) < BLUR_MAX_STEP
    sp = j.speckle
    row("blur rate, whole canvas (judge until this round)", whole.float().mean())
    row("blur rate, glyph only (judge now)", j.blur.float().mean())
    row("blur rate among speckled samples, whole canvas", whole[sp].float().mean())
    row("blur rate among speckled samples, glyph only", j.blur[sp].float().mean())
    row("P(speckle | blurred), whole canvas", sp[whole].float().mean())
    row("P(speckle | not blurred), whole canvas", sp[~whole].float().mean())
    row("P(speckle | blurred), glyph only", sp[j.blur].float().mean())
    row("P(speckle | not blurred), glyph only", sp[~j.blur].float().mean())

    specked = _two_specks(images, prompts)
    sharp = get("sharpness")("cpu")
    steep = get("sharpness_steep")("cpu")
    for name, fn in (("sharpness before this round", _sharpness_before),
                     ("sharpness now", lambda x: sharp(x, prompts)),
                     ("sharpness_steep (stored-ends round)", lambda x: steep(x, prompts))):
        a, b = fn(images), fn(specked)
        row(f"{name}: mean change from two far specks", (b - a).mean())
        row(f"{name}: share of samples raised by two far specks", (b > a + 1e-3).float().mean())
    row("blur rate with two far specks added, glyph only", judge_defects(specked).blur.float().mean())

    speck_free, speck_free_abs = get("speck_free")("cpu"), get("speck_free_abs")("cpu")
    for name, fn in (("speck_free", lambda x: speck_free(x, prompts)),
                     ("bright-pixel count", _bright_pixel_count_reward),
                     ("speck_free_abs (stored-ends round)", lambda x: speck_free_abs(x, prompts)),
                     ("sharpness now", lambda x: sharp(x, prompts)),
                     ("sharpness_steep (stored-ends round)", lambda x: steep(x, prompts))):
        a = fn(images)
        for s in (0.5, 0.75, 1.0):
            b = fn(gaussian_blur(images, s))
            row(f"{name}: share raised by a blur of {s} px", (b > a + 1e-3).float().mean())
            row(f"{name}: mean change from a blur of {s} px", (b - a).mean())
    write_csv(results_dir() / "speck_probe.csv", rows)
    return rows


if __name__ == "__main__":
    main()
