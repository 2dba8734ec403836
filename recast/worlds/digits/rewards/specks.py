"""``speck_free``: the quality setting's speckle reward since the glyph-only round.

The speckle defect (`recast.worlds.digits.corruption.DEFECTS`) puts a few stray bright pixels on the canvas. ``clean``
(`recast.worlds.digits.rewards.digit.clean_reward`) scored them together with two other things: the mean stray intensity
off the strokes, and an ink-mass gate. On the committed base model both of those are settled at high noise
(whether a glyph is faint or spread out is a global property), so the ground truth put clean's gains at column 2.40
of 0..5, earlier than the speckle judge's own verdict (`research/probes/verdict_timing_probe.py`).
``speck_free`` scores only the specks.

A speck is a bright spot with a dark ring: a 3x3 window whose ink, read relative to the canvas' own peak, is at
least a bright pixel's worth, centred where the ring of pixels at Chebyshev distance ``SPECK_RING`` holds no ink.
Any part of a stroke has ink at distance 2 (strokes are longer than 3 px), a stroke's end too, so a real glyph
scores ~1 whatever its shape, size or brightness. The window reads a speck's mass, not its peak, so a blur does not
hide it: a count of bright pixels (a first version of this reward) lost blurred specks and paid for blur, by +0.19
on average and on 88 % of base samples at 0.75 px (`research/probes/speck_probe.py`). A blur still pays a little (+0.036
at 0.75 px): it spreads the glyph's ink onto the ring of specks near it, and they stop counting. Trained alone,
speck_free removes speckle and blurs (research/rounds/22-each-reward-alone.md "Each reward alone"); clean's mean stray
ink pays against that spread.

The speckle judge reads the same property by another route: connected components of the thresholded ink mask, far
from the largest one (`recast.worlds.digits.judges.ink`); this reward has neither components nor a notion of "the
glyph", only each window's own neighbourhood, and it is soft.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recast.worlds.digits.rewards.canvas import _specs, above_background

__all__ = ["speck_windows", "SPECK_ABS_RING_INK", "SPECK_COUNT", "SPECK_FREE_INK_MASS", "SPECK_LEVEL", "SPECK_PEAK_MIN",
           "SPECK_RING",
           "SPECK_RING_INK", "glyph_steps", "isolated_specks", "speck_free_abs_reward", "speck_free_reward",
           "speck_mask"]

SPECK_LEVEL: float = 0.5  # a 3x3 window holding this much ink (in units of the canvas' peak pixel) counts half
SPECK_RING: int = 3  # a window is isolated when the pixels at this Chebyshev distance from its centre hold no ink
SPECK_RING_INK: float = 0.3  # ... where ink is this share of the peak above the background, softly
SPECK_ABS_RING_INK: float = 0.2  # speck_free_abs: ... where ink is this much intensity above the background
SPECK_PEAK_MIN: float = 0.25  # the peak the levels are shares of is at least this (a near-empty canvas is not blown up)
SPECK_TEMP: float = 0.05  # softness of both levels (a sigmoid's temperature in intensity units)
SPECK_COUNT: float = 1.5  # isolated specks that cost speck_free a factor 1/e (the speckle judge fails at 2)
SPECK_FREE_INK_MASS: float = 2.0  # hinge: a canvas with less ink above the background than this is scaled down


def _soft_above(x: torch.Tensor, level: float) -> torch.Tensor:
    """``sigmoid((x - level) / SPECK_TEMP)`` rescaled to be exactly 0 at ``x = 0`` (clipped there) and ~1 at 1."""
    floor = torch.sigmoid(torch.tensor(-level / SPECK_TEMP)).item()
    return ((torch.sigmoid((x - level) / SPECK_TEMP) - floor) / (1 - floor)).clamp_min(0.0)


def _ring_max(J: torch.Tensor, r: int) -> torch.Tensor:
    """Max of ``J (B, 1, H, W)`` over the pixels at Chebyshev distance exactly ``r`` from each pixel (zero padding)."""
    k = 2 * r + 1
    ring = torch.ones(k, k, dtype=torch.bool)
    ring[1:-1, 1:-1] = False
    patches = F.unfold(J, k, padding=r)  # (B, k*k, H*W)
    return patches[:, ring.flatten().to(J.device)].amax(1).reshape(J.shape)


def speck_windows(J: torch.Tensor, *, absolute: bool = False) -> torch.Tensor:
    """``(B, 1, H, W)`` from the ink above the background ``J (B, H, W)`` (`above_background`): how much each 3x3
    window is an isolated speck, ``bright(m_p) * (1 - inked(ring_p))`` with ``m`` the window's ink and ``ring`` the
    max of ``J`` at distance SPECK_RING, both relative to the peak (see `isolated_specks`). ``absolute``: both in
    absolute intensity instead, the ring at SPECK_ABS_RING_INK (`speck_free_abs_reward`)."""
    if absolute:
        J, ring_ink = J[:, None], SPECK_ABS_RING_INK
    else:
        J, ring_ink = (J / J.flatten(1).amax(1).clamp_min(SPECK_PEAK_MIN)[:, None, None])[:, None], SPECK_RING_INK
    window = F.avg_pool2d(J, 3, 1, 1) * 9  # zero padding: the ink of each 3x3 window
    return _soft_above(window, SPECK_LEVEL) * (1 - _soft_above(_ring_max(J, SPECK_RING), ring_ink))


def isolated_specks(images: torch.Tensor) -> torch.Tensor:
    """Soft count ``(B,)`` of isolated specks. On the ink above the background as a share of its peak,
    ``J = above_background / max(peak, SPECK_PEAK_MIN)``, with ``m`` the ink of each 3x3 window,
    ``sum_p bright(m_p) * (1 - inked(max of J on the ring at distance SPECK_RING around p)) / 9``
    (an isolated speck lies in nine windows, each with a dark ring).

    A lone pixel as bright as the peak counts 1, and still ~1 after a blur of 0.75 px (its window keeps most of its
    mass); two touching pixels count ~1 to 2; a stroke, its ends included, counts ~0 at any brightness; a uniform
    wash counts 0 (it is not above the background)."""
    return speck_windows(above_background(images)).sum((1, 2, 3)) / 9


def speck_mask(J: torch.Tensor) -> torch.Tensor:
    """Soft mask ``(B, H, W)`` in [0, 1] of the isolated specks and the pixels around them (the speck windows of
    `isolated_specks`, dilated by one pixel), from the ink above the background ``J (B, H, W)``
    (`above_background`): 0 on a real glyph, ~1 on and next to a stray speck. The sharpness reward leaves these
    pixels out, so a speck is not read as a steep edge of the glyph."""
    return F.max_pool2d(speck_windows(J), 3, 1, 1)[:, 0].clamp(0.0, 1.0)


def glyph_steps(J: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(gy (B, H-1, W), gx (B, H, W-1), keep (B, H, W))``: the neighbour-to-neighbour differences of the ink above
    the background ``J``, each scaled by the smaller ``keep = 1 - speck_mask(J)`` of its two pixels, so the glyph's
    edge steps without the steps a stray speck adds, and ``keep`` itself, for the peak the steps are read against
    (`recast.worlds.digits.rewards.digit.sharpness_reward`, `recast.worlds.digits.rewards.steep.steep_slope`)."""
    keep = 1.0 - speck_mask(J)  # a difference counts when neither of its two pixels is on or next to a speck
    gy = (J[:, 1:, :] - J[:, :-1, :]).abs() * torch.minimum(keep[:, 1:, :], keep[:, :-1, :])
    gx = (J[:, :, 1:] - J[:, :, :-1]).abs() * torch.minimum(keep[:, :, 1:], keep[:, :, :-1])
    return gy, gx, keep


def speck_free_reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """``exp(-isolated_specks / SPECK_COUNT) * min(1, sum J / SPECK_FREE_INK_MASS)``: no stray specks, on a canvas
    that holds some ink. Range [0, 1]; a real canvas scores >= 0.9 (99 % of them >= 0.98), one bright speck costs a
    factor about 0.5, three about 0.14.

    Erasing does not pay: a glyph without specks already scores ~1, and the hinge takes a canvas without ink to 0
    (it binds below 2 units of ink, under the faintest 1 % of base-model samples, so unlike clean's soft gate it does
    not score how much ink a sample has). A blur keeps a speck's window mass, so blurring moves it little (the
    audit's base samples at 0.5 / 0.75 / 1 px: +0.024 / +0.036 / +0.043 on average; a count of bright pixels: +0.063
    / +0.188 / +0.274; `research/probes/speck_probe.py`). When it is informative: research/rounds/24-figure-02.md "When
    is each reward informative?"."""
    return _speck_free_score(images, prompts, absolute=False)


def _speck_free_score(images: torch.Tensor, prompts: list[str], *, absolute: bool) -> torch.Tensor:
    """``exp(-count / SPECK_COUNT) * hinge`` with the count of `speck_windows` (relative or absolute levels)."""
    _specs(prompts, images.shape[0])
    J = above_background(images)
    count = speck_windows(J, absolute=absolute).sum((1, 2, 3)) / 9  # `isolated_specks`, on the J computed once
    hinge = (J.sum((1, 2)) / SPECK_FREE_INK_MASS).clamp(0.0, 1.0)
    return (torch.exp(-count / SPECK_COUNT) * hinge).float()


def speck_free_abs_reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """A variant of `speck_free_reward` whose speck levels are absolute intensities, in no setting.

    Trained alone, speck_free raises the glyph's peak ink (0.563 -> 0.693, seeds 0-2,
    `research/probes/alone_samples_probe.py`) while its speck count halves and the judge's falls by a fifth: with levels
    relative to the peak, a brighter glyph makes every dim blob count less. Here a speck of brightness ``a`` counts
    ``bright(a)`` whatever the glyph, so that route is closed, and a blur does not pay on base samples (-0.005 at
    0.75 px, speck_free +0.036; `research/probes/speck_probe.py`). Yet trained alone it brightens the peak as much
    (0.725) and still blurs (research/rounds/22-each-reward-alone.md "Each reward alone"): thin parts of a faint glyph
    read as specks (dimming real glyphs to 0.6 costs a fifth of them up to 0.17), another route by which brightness
    pays. It is decided earlier than the relative version (figure 02's draws: 3.06 / 3.02 against 3.21 / 3.21) and
    agrees less with the speckle verdict (AUC 0.878 against 0.909), so speck_free stays the setting's reward."""
    return _speck_free_score(images, prompts, absolute=True)
