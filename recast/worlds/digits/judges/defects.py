"""Held-out defect judges: is a canvas blurred, speckled or washed out?

These are the quality counterparts of the attribute judges: hard rules on the ink map ``I`` (channel maximum), each
reading a different statistic than the training reward for the same property, so that a policy cannot satisfy one
without the other by exploiting a quirk of either:

- ``blur``: the steepest edge of the glyph. ``I`` is normalised to [0, 1] between its median (background) and the
  glyph's maximum; a real glyph has a neighbour-to-neighbour step of at least ~0.8 somewhere, a blurred one (std >=
  0.9 px) at most ~0.5. Only steps within one pixel of the glyph count (`recast.worlds.digits.judges.ink.split_ink`): a
  stray speck is a steep step of its own. Until the glyph-only round it hid blur: of the speckled base samples 3 %
  were judged blurred on the whole canvas, 42 % are on the glyph, and the two verdicts were coupled
  (`research/probes/speck_probe.py`). A speck that lands within ``SPECK_GAP`` pixels of the glyph is part of the glyph, so
  until the peak-clipping round it still hid blur: of training canvases both blurred and speckled by
  `recast.worlds.digits.corruption.DEFECTS`, 39 % were judged blurred, against 100 % of those blurred alone. The verdict
  now reads the ink map with its isolated peaks clipped (`recast.worlds.digits.judges.ink.clip_isolated_peaks`): 95 %
  (`research/probes/blur_judge_probe.py`).
  (The ``sharpness`` reward measures mean gradient energy relative to ink energy instead.)
- ``speckle``: at least ``SPECKLE_MIN_COUNT`` specks, small components of the ink mask far from the glyph
  (`recast.worlds.digits.judges.ink.split_ink`). (The ``clean`` reward measures soft stray intensity outside a dilated stroke mask
  instead.)
- ``fade``: the background level, the median of ``I``. (The ``contrast`` reward multiplies ink level, saturation and
  the darker half's mean instead.)

Thresholds sit between real judge-glyph canvases and canvases degraded by `recast.worlds.digits.corruption.DEFECTS`;
`tests/test_defects.py` checks both error rates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from recast.worlds.digits import data
from recast.worlds.digits.judges.ink import clip_isolated_peaks, split_ink

__all__ = ["max_step", "DefectJudgement", "DefectReport", "judge_defects", "defect_report"]

BLUR_MAX_STEP: float = 0.65  # a canvas whose glyph's steepest normalised step is below this is blurred
SPECKLE_MIN_COUNT: int = 2  # this many isolated specks (recast.worlds.digits.judges.ink.split_ink) make a canvas speckled
FADE_BACKGROUND: float = 0.08  # a median intensity above this is a washed-out background


@dataclass(frozen=True)
class DefectJudgement:
    """Per-sample verdicts, bool tensors ``(B,)``: True = the defect is present."""

    blur: torch.Tensor
    speckle: torch.Tensor
    fade: torch.Tensor

    @property
    def any(self) -> torch.Tensor:
        """True where at least one defect is present."""
        return self.blur | self.speckle | self.fade


@dataclass(frozen=True)
class DefectReport:
    """Defect rates in [0, 1] over ``n`` samples; ``clean`` = share with no defect at all."""

    blur: float
    speckle: float
    fade: float
    clean: float
    n: int

    def as_dict(self) -> dict[str, float]:
        """The report as a plain dict."""
        return asdict(self)


def max_step(I: torch.Tensor, glyph: torch.Tensor) -> torch.Tensor:
    """Steepest neighbour step ``(B,)`` of ``I`` normalised between its median and the glyph's maximum, over the
    pairs of neighbours that both lie within one pixel of the glyph (``glyph``: bool ``(B, H, W)``); 0 without a
    glyph."""
    import torch.nn.functional as F

    near = F.max_pool2d(glyph[:, None].float(), 3, 1, 1)[:, 0] > 0  # the glyph and the pixels touching it
    bg = I.flatten(1).median(1).values
    top = torch.where(glyph, I, torch.full_like(I, -1.0)).flatten(1).amax(1).clamp_min(bg)
    In = (I - bg[:, None, None]) / (top - bg).clamp_min(1e-3)[:, None, None]
    gy = ((In[:, 1:] - In[:, :-1]).abs() * (near[:, 1:] & near[:, :-1])).flatten(1).amax(1)
    gx = ((In[:, :, 1:] - In[:, :, :-1]).abs() * (near[:, :, 1:] & near[:, :, :-1])).flatten(1).amax(1)
    return torch.maximum(gy, gx)


def judge_defects(images: torch.Tensor) -> DefectJudgement:
    """Judge every defect of every canvas.

    Args:
        images: ``(B, 3, H, W)`` in ``[0, 1]``.

    Returns:
        ``DefectJudgement`` of bool ``(B,)`` tensors (on CPU). A canvas without any ink counts as blurred.
    """
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images of shape (B, 3, H, W), got {tuple(images.shape)}")
    I = data.ink_intensity(images.detach().float().cpu())
    _, specks = split_ink(I)
    smooth = clip_isolated_peaks(I)  # the blur verdict: a one-pixel speck on or beside the glyph is not an edge
    glyph, _ = split_ink(smooth)
    return DefectJudgement(blur=max_step(smooth, glyph) < BLUR_MAX_STEP, speckle=specks >= SPECKLE_MIN_COUNT,
                           fade=I.flatten(1).median(1).values > FADE_BACKGROUND)


def defect_report(images: torch.Tensor) -> DefectReport:
    """Defect rates of a batch (see ``judge_defects``)."""
    j = judge_defects(images)
    rate = {k: getattr(j, k).float().mean().item() for k in ("blur", "speckle", "fade")}
    return DefectReport(clean=(~j.any).float().mean().item(), n=len(images), **rate)
