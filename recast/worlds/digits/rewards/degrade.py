"""Controlled degradations of canvases: the negatives of the realism CNN and the probes of the reward tests.

Every function is pure, vectorised over the batch and keeps images in ``[0, 1]``; randomness comes only from the
``generator`` argument.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

KINDS: tuple[str, ...] = ("blur", "noise", "speckle", "jitter", "bleed", "fade")


def gaussian_blur(images: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
    """Separable Gaussian blur with a per-sample width.

    Args:
        images: ``(B, C, H, W)``.
        sigma: blur std in pixels, a float or ``(B,)``; values <= 0 leave the sample unchanged.

    Returns:
        ``(B, C, H, W)`` blurred images (zero padding, i.e. a black border).
    """
    B, C, H, W = images.shape
    sigma = torch.as_tensor(sigma, dtype=images.dtype, device=images.device).expand(B).clamp_min(1e-3)
    r = torch.arange(-3, 4, dtype=images.dtype, device=images.device)
    k = torch.exp(-r[None] ** 2 / (2 * sigma[:, None] ** 2))
    k = (k / k.sum(1, keepdim=True)).repeat_interleave(C, 0)  # (B*C, 7)
    x = images.reshape(1, B * C, H, W)
    x = F.conv2d(x, k[:, None, None, :], padding=(0, 3), groups=B * C)
    x = F.conv2d(x, k[:, None, :, None], padding=(3, 0), groups=B * C)
    return x.reshape(B, C, H, W)


def degrade(images: torch.Tensor, kind: str, strength: torch.Tensor | float = 1.0,
            generator: torch.Generator | None = None) -> torch.Tensor:
    """Apply one degradation.

    Args:
        images: ``(B, 3, H, W)`` in ``[0, 1]``.
        kind: one of ``KINDS``: ``blur`` (Gaussian, sigma up to 1.5 px), ``noise`` (Gaussian, std up to 0.25),
            ``speckle`` (up to 12 random bright pixels of random colour), ``jitter`` (random sub-pixel displacement
            field of up to 1 px: wobbly strokes), ``bleed`` (channels mixed and shifted: colour spills into a wrong
            hue), ``fade`` (grey wash and dimmed ink).
        strength: in ``[0, 1]``, a float or ``(B,)``.
        generator: CPU generator for the random parts.

    Returns:
        ``(B, 3, H, W)`` degraded images in ``[0, 1]``.
    """
    B, C, H, W = images.shape
    a = torch.as_tensor(strength, dtype=images.dtype).expand(B).reshape(B, 1, 1, 1)
    if kind == "blur":
        out = gaussian_blur(images, 1.5 * a.flatten())
    elif kind == "noise":
        out = images + 0.25 * a * torch.randn(images.shape, generator=generator)
    elif kind == "speckle":
        n_on = (12 * a.flatten()).round().long()
        score = torch.rand(B, H * W, generator=generator)
        rank = score.argsort(1).argsort(1)
        on = (rank < n_on[:, None]).reshape(B, 1, H, W).to(images.dtype)
        color = torch.rand(B, 3, 1, 1, generator=generator)
        color = color / color.amax(1, keepdim=True)
        out = images * (1 - on) + on * color
    elif kind == "jitter":
        theta = torch.eye(2, 3).expand(B, 2, 3)
        grid = F.affine_grid(theta, (B, C, H, W), align_corners=False)
        disp = torch.randn(B, 2, H // 4, W // 4, generator=generator)
        disp = F.interpolate(disp, size=(H, W), mode="bilinear", align_corners=False).permute(0, 2, 3, 1)
        grid = grid + disp * a.reshape(B, 1, 1, 1) * (2.0 / H)
        out = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    elif kind == "bleed":
        shifted = torch.roll(images[:, [1, 2, 0]], shifts=(1, 1), dims=(2, 3))
        out = (1 - 0.6 * a) * images + 0.6 * a * gaussian_blur(shifted, 0.8)
    elif kind == "fade":
        out = images * (1 - 0.6 * a) + 0.3 * a
    else:
        raise ValueError(f"unknown degradation {kind!r}; valid: {', '.join(KINDS)}")
    return out.clamp(0.0, 1.0)


def random_degrade(images: torch.Tensor, generator: torch.Generator | None = None,
                   min_strength: float = 0.3) -> torch.Tensor:
    """Degrade each sample by a random kind of ``KINDS`` at a random strength in ``[min_strength, 1]``."""
    B = images.shape[0]
    kinds = torch.randint(len(KINDS), (B,), generator=generator)
    strength = min_strength + (1 - min_strength) * torch.rand(B, generator=generator)
    out = images.clone()
    for k, kind in enumerate(KINDS):
        idx = torch.nonzero(kinds == k).flatten()
        if len(idx):
            out[idx] = degrade(images[idx], kind, strength[idx], generator)
    return out
