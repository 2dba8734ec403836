"""The judges' view of ink: the thresholded ink mask, split into the glyph and isolated specks.

Both the attribute judges and the speckle judge read the mask ``I > INK_THRESHOLD`` (``I`` = channel maximum) as
connected components (scipy.ndimage.label, 8-connectivity). The glyph is the largest component together with every
component that lies within ``SPECK_GAP`` pixels of it (strokes broken by the threshold stay part of the glyph); a
speck is a component of at most ``SPECK_MAX_PIXELS`` pixels outside that neighbourhood. The attribute judges judge
the glyph only, so a stray speck is a quality defect (`recast.worlds.digits.judges.defects`), not a wrong position or size.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["INK_THRESHOLD", "SPECK_GAP", "SPECK_MAX_PIXELS", "clip_isolated_peaks", "split_ink"]

INK_THRESHOLD: float = 0.3  # intensity above which a pixel is ink
SPECK_GAP: int = 2  # components farther than this many pixels from the largest one are not part of the glyph
SPECK_MAX_PIXELS: int = 3  # ... and count as specks when they have at most this many pixels

_EIGHT = np.ones((3, 3), dtype=bool)
_RING = np.ones((1, 3, 3), dtype=bool)  # a pixel's 8 neighbours, not itself (one map of a batch at a time)
_RING[0, 1, 1] = False


def clip_isolated_peaks(I: torch.Tensor) -> torch.Tensor:
    """Each pixel clipped to the brightest of its 8 neighbours (the canvas border reads as 0).

    A pixel brighter than every neighbour, a one-pixel speck, drops to the level of its brightest neighbour. A
    pixel with a neighbour at least as bright, such as most of a stroke's, keeps its value; a stroke's local maxima
    (a bright tip, say) drop to the level beside them. On real canvases this changes no blur verdict
    (`tests/test_defects.py`). Two specks that touch survive.

    Args:
        I: ``(B, H, W)`` ink intensity.

    Returns:
        ``(B, H, W)``, ``<= I`` everywhere.
    """
    from scipy import ndimage

    x = I.detach().cpu().float()
    ring = ndimage.maximum_filter(x.numpy(), footprint=_RING, mode="constant", cval=0.0)
    return torch.minimum(x, torch.from_numpy(ring))


def _split_one(mask: np.ndarray) -> tuple[np.ndarray, int]:
    from scipy import ndimage

    labels, n = ndimage.label(mask, structure=_EIGHT)
    if n < 2:
        return mask, 0
    sizes = np.bincount(labels.ravel())[1:]
    main = labels == (int(np.argmax(sizes)) + 1)
    near = ndimage.binary_dilation(main, structure=_EIGHT, iterations=SPECK_GAP)
    far = np.unique(labels[~near & mask])
    far = far[far > 0]
    glyph = mask & ~np.isin(labels, far)
    return glyph, int((sizes[far - 1] <= SPECK_MAX_PIXELS).sum())


def split_ink(I: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Glyph masks and speck counts of ink maps.

    Args:
        I: ``(B, H, W)`` ink intensity in ``[0, 1]``.

    Returns:
        ``(glyph, specks)``: bool ``(B, H, W)`` (the mask less everything far from the largest component) and int64
        ``(B,)`` (how many small far components were removed).
    """
    masks = (I.detach().cpu() > INK_THRESHOLD).numpy()
    out = [_split_one(m) for m in masks]
    glyph = torch.from_numpy(np.stack([g for g, _ in out])) if out else torch.zeros(I.shape, dtype=torch.bool)
    return glyph.to(torch.bool), torch.tensor([s for _, s in out], dtype=torch.long)
