"""Reward informativeness across denoising steps: Rényi discriminability, its telescoping gains, and the live tracker.

`discriminability` holds the pure estimators (docs/method.md §5), `tracker` the pooled, noise-aware live estimate that
turns into W (§5-§6), `simulate` a synthetic stand-in for training that measures the tracker's noise floor, and
`timing` where a reward's gains land on any other grid, from its curve measured on one.
"""

from recast.informativeness.discriminability import (
    centre_of_mass_band,
    gains_centre_of_mass,
    loo_calibrated_values,
    pav_nondecreasing,
    posterior_discriminability,
    renyi_discriminability,
    renyi_rows,
    telescoping_gains,
    tweedie_discriminability,
)
from recast.informativeness.tracker import InformativenessTracker, profile_noise_share

__all__ = [
    "renyi_discriminability",
    "renyi_rows",
    "pav_nondecreasing",
    "telescoping_gains",
    "gains_centre_of_mass",
    "centre_of_mass_band",
    "loo_calibrated_values",
    "tweedie_discriminability",
    "posterior_discriminability",
    "InformativenessTracker",
    "profile_noise_share",
]
