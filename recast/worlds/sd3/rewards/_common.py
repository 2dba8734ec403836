"""Shared pieces of the SD3 reward adapters: where weights live, failing fast, image preprocessing, groups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

RewardFn = Callable[[torch.Tensor, list[str]], torch.Tensor]


def weights_dir(name: str, root: str | Path | None, weights_dir: str | Path | None) -> Path:
    """`weights_dir` if given, else `root/name` (root defaults to "reward_ckpts")."""
    return Path(weights_dir) if weights_dir is not None else Path(root or "reward_ckpts") / name


def require_files(reward: str, folder: Path, files: tuple, hint: str) -> None:
    """Raise FileNotFoundError, before any model is built, unless `folder` holds every entry of `files`.

    An entry that is a tuple means "any one of these".
    """
    missing = []
    for entry in files:
        options = entry if isinstance(entry, tuple) else (entry,)
        if not any((folder / f).is_file() for f in options):
            missing.append(" or ".join(options))
    if missing:
        raise FileNotFoundError(f"reward {reward!r}: missing {', '.join(missing)} in {folder} "
                                f"(pass weights_dir=... or root=...). {hint}")


def processor_pixels(processor, images: torch.Tensor) -> torch.Tensor:
    """Images (B, 3, H, W) in [0, 1] -> the pixel_values a transformers image processor makes (resize, crop, norm)."""
    return processor(images=[im.float().cpu() for im in images], return_tensors="pt", do_rescale=False,
                     input_data_format="channels_first")["pixel_values"]


def check_batch(images: torch.Tensor, prompts: list[str]) -> None:
    """Images (B, 3, H, W) with B prompts, else ValueError."""
    if images.ndim != 4 or images.shape[1] != 3 or len(prompts) != images.shape[0]:
        raise ValueError(f"reward needs images (B, 3, H, W) and B prompts, got {tuple(images.shape)} and "
                         f"{len(prompts)} prompts")


def group_indices(prompts: list[str]) -> list[list[int]]:
    """Indices of each prompt's group (samples sharing the prompt text), in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(p, []).append(i)
    return list(groups.values())


def groupwise(score_group: Callable[[torch.Tensor, str], torch.Tensor]) -> RewardFn:
    """Turn a group scorer `(images (G, 3, H, W), prompt) -> (G,)` into a RewardFn over a batch of whole groups.

    Samples are grouped by prompt text, so a batch may hold any number of groups in any order; each group is
    scored at once (a ranking, a pairwise tournament, a VLM that sees all G images) and scores go back in place.
    """

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        check_batch(images, prompts)
        out = torch.empty(len(prompts), dtype=torch.float32)
        for idx in group_indices(list(prompts)):
            out[idx] = score_group(images[idx], prompts[idx[0]]).float().cpu()
        return out

    reward.groupwise = True
    return reward


def group_rank(scores: torch.Tensor) -> torch.Tensor:
    """Normalised ranks of G scores in [0, 1]: 0 for the lowest, 1 for the highest, ties share their mean rank.

    A group of one gets 0.5.
    """
    from scipy.stats import rankdata

    G = scores.numel()
    if G == 1:
        return torch.full((1,), 0.5)
    return torch.as_tensor((rankdata(scores.detach().cpu().double().numpy()) - 1) / (G - 1), dtype=torch.float32)


def group_diversity(images: torch.Tensor, prompts: list[str]) -> float:
    """Mean pairwise RMS pixel distance within prompt groups (groups of one are skipped); 0 when there are none."""
    dists = []
    for idx in group_indices(list(prompts)):
        if len(idx) > 1:
            flat = images[idx].float().flatten(1)
            d = torch.cdist(flat, flat) / flat.shape[1] ** 0.5
            dists.append(d[~torch.eye(len(idx), dtype=torch.bool)].mean())
    return float(torch.stack(dists).mean()) if dists else 0.0
