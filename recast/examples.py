"""Synthetic informativeness curves for demos and tests: rewards informative early, late, in between, or never."""

from __future__ import annotations

import torch

__all__ = ["PROFILE_KINDS", "synthetic_discriminability"]

PROFILE_KINDS = ("early", "mid", "late", "flat")


def synthetic_discriminability(T: int, kinds=("early", "late", "flat"), total=None, sharpness: float = 8.0):
    """D_k over the grid σ_0 = 1 … σ_T = 0 for rewards whose information arrives at different denoising times.

    Each row is a logistic ramp from D = 0 at σ = 1 to D = total[k] at σ = 0, centred early (σ ≈ 0.75), mid (0.5)
    or late (0.2) in σ; "flat" rises linearly (equal gains at every step).

    Args:
        T: number of denoising steps.
        kinds: one of PROFILE_KINDS per reward.
        total: D_α(π_k⁺ ‖ π) per reward (default 1 for all).
        sharpness: slope of the logistic ramps.

    Returns:
        D, float64 tensor (K, T+1), non-decreasing along each row, D[:, 0] = 0.
    """
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    centre = {"early": 0.75, "mid": 0.5, "late": 0.2}
    progress = torch.linspace(0.0, 1.0, T + 1, dtype=torch.float64)  # 1 − σ on a uniform grid
    sigma = 1.0 - progress
    rows = []
    for kind in kinds:
        if kind == "flat":
            rows.append(progress.clone())
        elif kind in centre:
            ramp = torch.sigmoid(sharpness * (centre[kind] - sigma))
            rows.append((ramp - ramp[0]) / (ramp[-1] - ramp[0]))
        else:
            raise ValueError(f"unknown profile kind {kind!r}; choose from {PROFILE_KINDS}")
    D = torch.stack(rows)
    scale = torch.ones(len(kinds), dtype=torch.float64) if total is None else torch.as_tensor(total, dtype=torch.float64)
    if scale.shape != (len(kinds),):
        raise ValueError(f"total needs one value per kind ({len(kinds)}), got shape {tuple(scale.shape)}")
    return D * scale[:, None]
