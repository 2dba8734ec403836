"""``sharpness_steep``: a sharpness reward read from the glyph's steepest edges, in no setting yet.

The blur verdict (`recast.worlds.digits.judges.defects`) is decided late: figure 02's ground truth puts 71 % of its
gains in the cleanest third of the grid (centre of mass 3.63 of 0..5). ``sharpness``, the |g|-weighted mean edge step,
is decided at 2.87 / 2.81 with 11 % there: the mean over every edge of the glyph moves with the glyph's shape and stroke
width, which are settled at high noise. Weighting each step by ``|g|^3`` instead reads the steepest edges, which only
the last steps of denoising settle (`research/probes/timing_cache.py score sharpness_steep`: 3.58 / 3.50, 61 % / 58 % in
the cleanest third, on figure 02's two batches). It agrees more with the blur verdict on the audit's samples (AUC 0.937
against 0.870), and a blur costs it more (-0.20 at 0.75 px on average, sharpness -0.10), but two far specks raise it by
+0.04 on average (sharpness +0.003): the speck mask does not remove every step a speck adds when the speck is the
canvas' peak. Trained alone it hacks (research/rounds/22-each-reward-alone.md "Each reward alone"): blur falls, but the
Fréchet distance rises by +3,261 and every attribute judge falls by 0.24-0.30: the policy erases the glyph to a faint
mark whose few steps are steep relative to its own peak. So it is in no setting; `sharpness_steep_hinged_reward` guards
it.
"""

from __future__ import annotations

import torch

from recast.worlds.digits.rewards.digit import SHARPNESS_INK_MASS, _EPS, _ink_gate, _specs, above_background
from recast.worlds.digits.rewards.specks import glyph_steps

__all__ = ["STEEP_INK_HINGE", "sharpness_steep_hinged_reward", "sharpness_steep_reward", "steep_score",
           "steep_slope"]

STEEP_INK_HINGE: float = 8.0  # ink mass below which sharpness_steep_hinged scales down linearly (7th percentile of base)
_DEN_EPS = 1e-9  # sum |g|^3 of a faint glyph is ~1e-4: a larger floor would bias its slope


def steep_slope(J: torch.Tensor, peak_floor: float = 0.0) -> torch.Tensor:
    """``sum |g|^4 / (sum |g|^3 * max J)`` ``(B,)`` on the ink above the background ``J (B, H, W)``, with ``g`` the
    neighbour-to-neighbour differences, leaving out the pixels on or next to isolated specks (`glyph_steps`) as
    `recast.worlds.digits.rewards.digit.sharpness_reward` does: the |g|^3-weighted mean step as a share of the peak. A
    step edge of any height has slope 1; a ramp over ``w`` pixels 1 / w, as in sharpness, but the steepest edges weigh
    most. 0 on an empty canvas. ``peak_floor`` reads the steps against ``max(peak, peak_floor)`` instead, so a mark
    fainter than the floor cannot be steep relative to its own peak (a guard `research/probes/steep_guard_probe.py`
    scans)."""
    gy, gx, keep = glyph_steps(J)
    num = gy.pow(4).sum((1, 2)) + gx.pow(4).sum((1, 2))
    den = gy.pow(3).sum((1, 2)) + gx.pow(3).sum((1, 2))
    return num / (den + _DEN_EPS) / ((J * keep).amax((1, 2)).clamp_min(peak_floor) + _EPS)


def sharpness_steep_reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """``steep_slope(J) * (1 - exp(-sum J / SHARPNESS_INK_MASS))``: how steep the glyph's steepest edges are relative
    to its peak, times sharpness's gate on the ink mass (erasing does not pay). Range [0, 1]; blind to a uniform wash
    (`above_background`)."""
    return steep_score(images, prompts)


def steep_score(images: torch.Tensor, prompts: list[str], *, hinge: float | None = None,
                peak_floor: float = 0.0) -> torch.Tensor:
    """``steep_slope(J, peak_floor).clamp(0, 1) * gate``, the body of the steep rewards: the gate is sharpness's soft
    ``1 - exp(-sum J / SHARPNESS_INK_MASS)`` when ``hinge`` is None, else the linear ``min(1, sum J / hinge)``.
    `sharpness_steep_reward` is the default, `sharpness_steep_hinged_reward` ``hinge=STEEP_INK_HINGE``, and
    `research/probes/steep_guard_probe.py` scans the rest."""
    _specs(prompts, images.shape[0])
    J = above_background(images)
    gate = _ink_gate(J, SHARPNESS_INK_MASS) if hinge is None else (J.sum((1, 2)) / hinge).clamp(0.0, 1.0)
    return (steep_slope(J, peak_floor).clamp(0.0, 1.0) * gate).float()


def sharpness_steep_hinged_reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """``steep_slope(J) * min(1, sum J / STEEP_INK_HINGE)``: `sharpness_steep_reward` with a hinge on the ink mass
    that erasing the glyph cannot pass, in no setting.

    Trained alone, sharpness_steep's policy erases: its samples' median ink mass falls from 26 to 4, a faint mark
    whose few steps are steep relative to its own low peak, and sharpness_steep scores them +0.15 above the base
    samples. The soft gate (1 - 1/e at 2 units of ink) barely binds there. A linear hinge at 8 units, about the 7th
    percentile of base samples, scores those samples lower than the base ones (`research/probes/steep_guard_probe.py`).
    It is the weakest hinge on the probe's grid that does: a guard that binds more often reads more of the ink mass,
    which is settled early, and moves the reward's gains earlier (3.17 / 3.22 here, 3.58 / 3.50 unguarded). Trained
    alone it still fails: the Fréchet distance rises by +741 (research/rounds/13-steep-guard.md "The steep-guard
    round")."""
    return steep_score(images, prompts, hinge=STEEP_INK_HINGE)
