"""What the experiment trackers receive: every iteration's scalars, and at each evaluation the held-out judges, the W
heatmap and a grid of samples.

``log_with=("tensorboard",)`` and ``("wandb",)`` go through accelerate's trackers; a tracker that is not installed is
refused before anything is built (`check_trackers`), never silently dropped. Images use the tracker's own image type:
tensorboard's ``add_image`` and ``wandb.Image``.
"""

from __future__ import annotations

import collections
import importlib.util

import numpy as np
import torch

from recast.bounded import short_repr
from recast.extras import pip_hint

__all__ = ["TRACKERS", "check_trackers", "log_evaluation"]

# tracker -> (the module it needs, the extra that installs it)
TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


def check_trackers(log_with) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, naming the extra that installs it.

    Raises:
        ValueError: naming the tracker (also one named twice: each tracker logs once).
    """
    dup = sorted(n for n, count in collections.Counter(log_with).items() if count > 1)
    if dup:
        raise ValueError(f"config field log_with: {short_repr(dup)} named more than once ({len(log_with)} entries); "
                         "name each tracker once")
    for name in log_with:
        if name not in TRACKERS:
            raise ValueError(f"config field log_with: unknown tracker {short_repr(name)}; choose from "
                             f"{sorted(TRACKERS)}")
        module, extra = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"config field log_with: {short_repr(name)} is not installed here; {pip_hint(extra)} "
                             f"(or drop it from log_with)")
    if log_with and importlib.util.find_spec("matplotlib") is None:
        raise ValueError(f"config field log_with: the W heatmaps the trackers receive need matplotlib; "
                         f"{pip_hint('plot')}")


def _heatmap(W, reward_names, sigmas) -> np.ndarray:
    """W drawn as an (H, W, 3) uint8 image (recast.plotting.plot_weights)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from recast.plotting import plot_weights

    ax = plot_weights(W, reward_names, sigmas=sigmas, title="W")
    fig = ax.figure
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return image


def log_evaluation(accelerator, log_with, rec: dict, images: torch.Tensor, W, reward_names, sigmas, step: int) -> None:
    """Send one evaluation to every tracker: its judges and rewards as ``eval/...`` scalars, the W in force as a
    heatmap, and the first samples as a grid."""
    from recast.trainer.metrics import image_grid

    accelerator.log({f"eval/{k}": v for k, v in rec.items() if isinstance(v, float)}, step=step)
    pictures = {"samples": image_grid(images[:16])}
    if W is not None:
        pictures["W"] = _heatmap(W, reward_names, sigmas)
    for name in log_with:
        tracker = accelerator.get_tracker(name, unwrap=True)
        for tag, img in pictures.items():
            if name == "tensorboard":
                tracker.add_image(f"eval/{tag}", img, step, dataformats="HWC")
            elif name == "wandb":
                import wandb

                tracker.log({f"eval/{tag}": wandb.Image(img)}, step=step)
