"""Held-out attribute judges: strict prompt accuracy and per-attribute accuracies.

Independent of the training rewards by construction: the digit is read by a scikit-learn ``SVC`` (RBF kernel, a
different model family from the reward CNN) fitted on canvases rendered from the ``"judge"`` glyph split only, clean
and degraded by the quality defects (so it reads identity, not sharpness);
colour, position and size are hard rules on the glyph: the thresholded ink mask ``I > 0.3`` (``I`` = channel
maximum) less isolated specks (`recast.worlds.digits.judges.ink`):

- colour: nearest palette RGB to the mean mask colour divided by its mean intensity;
- position: the quadrant whose centre is nearest to the mask centroid;
- size: the mask's bounding-box side ``max(h, w)`` vs a threshold midway (geometric mean) between the median sides of
  real small and large canvases;
- digit: crop the mask's bounding box from ``I``, resize to 8x8, classify with the SVC.

A canvas without ink fails every attribute.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from recast.worlds.digits import data
from recast.worlds.digits.corruption import Corruption, inject_defects
from recast.worlds.digits.judges.ink import split_ink
ATTRIBUTES: tuple[str, ...] = ("digit", "color", "position", "size")


@dataclass(frozen=True)
class AttributeJudgement:
    """Per-sample verdicts, bool tensors ``(B,)``; ``strict`` = all four right."""

    digit: torch.Tensor
    color: torch.Tensor
    position: torch.Tensor
    size: torch.Tensor
    strict: torch.Tensor

    def count(self) -> torch.Tensor:
        """Number of correct attributes per sample ``(B,)`` int64 in 0..4."""
        return sum(getattr(self, a).long() for a in ATTRIBUTES)


@dataclass(frozen=True)
class JudgeReport:
    """Accuracies in [0, 1] over a batch of ``n`` samples."""

    strict: float
    digit: float
    color: float
    position: float
    size: float
    n: int

    def as_dict(self) -> dict[str, float]:
        """The report as a plain dict (for ``recast.io.write_json``)."""
        return asdict(self)


def mask_stats(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Intensity ``(B, H, W)``, ink mask ``(B, H, W)`` bool, mask pixel count ``(B,)``, bounding boxes ``(B, 4)``
    as (y0, x0, y1, x1) inclusive (zeros where there is no ink)."""
    I = data.ink_intensity(images.float())
    mask, _ = split_ink(I)  # the glyph: isolated specks are a quality defect, not part of the digit
    H, W = I.shape[-2:]
    rows, cols = mask.any(2), mask.any(1)
    ar_h, ar_w = torch.arange(H), torch.arange(W)
    big = max(H, W)
    y0 = torch.where(rows, ar_h, big).amin(1)
    y1 = torch.where(rows, ar_h, -1).amax(1)
    x0 = torch.where(cols, ar_w, big).amin(1)
    x1 = torch.where(cols, ar_w, -1).amax(1)
    has = mask.flatten(1).any(1)
    box = torch.stack([y0, x0, y1, x1], 1) * has[:, None]
    return I, mask, mask.flatten(1).sum(1), box


def crop_glyphs(images: torch.Tensor) -> np.ndarray:
    """SVC features ``(B, 64)``: the ink bounding box of ``I`` resized to 8x8 (zeros where there is no ink)."""
    I, _, count, box = mask_stats(images)
    out = torch.zeros(len(I), 8, 8)
    for i in torch.nonzero(count > 0).flatten().tolist():
        y0, x0, y1, x1 = box[i].tolist()
        crop = I[i, y0:y1 + 1, x0:x1 + 1][None, None]
        out[i] = F.interpolate(crop, size=(8, 8), mode="bilinear", align_corners=False, antialias=True)[0, 0]
    return out.reshape(len(I), 64).numpy()


def mask_side(box: torch.Tensor) -> torch.Tensor:
    return torch.maximum(box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]).float() + 1


@functools.lru_cache(maxsize=1)
def _fitted() -> tuple[object, float]:
    """The SVC fitted on judge-split canvases (every judge glyph once at each size, random colour and position) and
    the size threshold in pixels. Deterministic (seed 0)."""
    from sklearn.svm import SVC

    gen = torch.Generator().manual_seed(0)
    _, labels = data.load_glyphs("judge")
    n = len(labels)
    specs, sizes = [], []  # glyph indices are drawn at random by render; n draws per size
    for size in data.SIZES:
        colors = torch.randint(len(data.COLORS), (n,), generator=gen).tolist()
        positions = torch.randint(len(data.POSITIONS), (n,), generator=gen).tolist()
        specs += [data.PromptSpec(int(d), list(data.COLORS)[c], list(data.POSITIONS)[p], size)
                  for d, c, p in zip(labels.tolist(), colors, positions)]
        sizes += [size] * n
    images = data.render(specs, glyph_split="judge", generator=gen)
    # The digit judge reads identity only: it also sees every canvas once more, degraded by each quality defect with
    # probability 1/2 at the strengths the base model is taught (`recast.worlds.digits.corruption.DEFECTS`). Fitted on
    # clean canvases alone it read 48 % of blurred real digits, so its accuracy confounded identity with sharpness.
    degraded, _ = inject_defects(images, Corruption(blur=0.5, speckle=0.5, fade=0.5), gen)
    features = np.concatenate([crop_glyphs(images), crop_glyphs(degraded)])
    svc = SVC(C=10.0, gamma="scale").fit(features, [s.digit for s in specs] * 2)
    side = mask_side(mask_stats(images)[3])  # the size threshold comes from clean canvases only
    small, large = (side[torch.tensor([s == k for s in sizes])].median() for k in data.SIZES)
    return svc, float((small * large).sqrt())


def color_index(images: torch.Tensor, I: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The colour judge's reading ``(B,)``: the index into ``data.COLORS`` (the current palette) of the colour nearest
    the mask's mean ink RGB divided by its mean ink intensity (``I`` and ``mask`` as `mask_stats` returns them)."""
    m = mask.float()
    rgb = (images * m[:, None]).sum((2, 3)) / (I * m).sum((1, 2)).clamp_min(1e-6)[:, None]
    return torch.cdist(rgb, torch.tensor(list(data.COLORS.values()))).argmin(1)


def position_index(mask: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """The position judge's reading ``(B,)``: the index into ``data.POSITIONS`` of the region centre nearest the ink
    mask's centroid (``mask`` and ``count`` as `mask_stats` returns them; meaningless where ``count`` is 0)."""
    m = mask.float()
    H, W = mask.shape[-2:]
    cy = (m.sum(2) * torch.arange(H)).sum(1) / count.clamp_min(1)
    cx = (m.sum(1) * torch.arange(W)).sum(1) / count.clamp_min(1)
    centres = torch.tensor([data.region_center(p) for p in data.POSITIONS])
    return torch.cdist(torch.stack([cy, cx], 1), centres).argmin(1)


def judge_attributes(images: torch.Tensor, prompts: list[str]) -> AttributeJudgement:
    """Judge every attribute of every sample.

    Args:
        images: ``(B, 3, H, W)`` in ``[0, 1]``.
        prompts: B prompt texts of the grammar.

    Returns:
        ``AttributeJudgement`` of bool ``(B,)`` tensors (on CPU).
    """
    images = images.detach().float().cpu()
    specs = [data.parse_prompt(p) for p in prompts]
    if len(specs) != len(images):
        raise ValueError(f"got {len(images)} images but {len(specs)} prompts")
    svc, size_threshold = _fitted()
    I, mask, count, box = mask_stats(images)
    has = count > 0
    color_idx = color_index(images, I, mask)
    pos_idx = position_index(mask, count)
    size_idx = (mask_side(box) > size_threshold).long()  # SIZES is ordered (small, large)
    digit = torch.from_numpy(np.asarray(svc.predict(crop_glyphs(images)))).long()

    want = torch.tensor([[s.digit, list(data.COLORS).index(s.color), list(data.POSITIONS).index(s.position),
                          list(data.SIZES).index(s.size)] for s in specs]).reshape(-1, 4)
    verdict = {a: (got == want[:, j]) & has
               for j, (a, got) in enumerate(zip(ATTRIBUTES, (digit, color_idx, pos_idx, size_idx)))}
    strict = verdict["digit"] & verdict["color"] & verdict["position"] & verdict["size"]
    return AttributeJudgement(strict=strict, **verdict)


def judge_report(images: torch.Tensor, prompts: list[str]) -> JudgeReport:
    """Strict and per-attribute accuracies of a batch (see ``judge_attributes``)."""
    j = judge_attributes(images, prompts)
    acc = {a: j.__getattribute__(a).float().mean().item() for a in ATTRIBUTES + ("strict",)}
    return JudgeReport(n=len(prompts), **acc)
