"""Raw rewards → the training signal of every (sample, step), per aggregation (docs/method.md §0 and §3).

Pure functions in float64: K rewards, B samples, T steps. Groups are given by an index (B,) long into 0..n−1, in
any order and of any sizes ≥ 2. ``kind`` is "nft" (DiffusionNFT's mixing weight in [0, 1]) or "grpo" (the clipped
advantage in [−c, c]). Every function returns the signal matrix S (B, T): S[b, t] is the signal of sample b when it
trains at scheduler step t (column 0 the noisiest).
"""

from __future__ import annotations

import torch

from recast.advantages import Advantages, advantages_from_moments

__all__ = ["PRE_STD_FLOOR", "group_index", "group_moments", "standardise_in_groups", "to_signal", "weighted_sum",
           "pre_signal", "loss_signal", "mix_steps", "per_reward_advantages", "reward_sum_advantages"]

PRE_STD_FLOOR = 1e-6  # the paper's aggregations divide by max(group std, this)


def group_index(group_ids, B: int) -> tuple[torch.Tensor, int | None]:
    """Map B group (prompt) ids of any hashable kind to 0..n_groups−1, in order of first appearance.

    Returns:
        (index (B,) long, G) where G is the common group size when the groups are contiguous blocks of one size
        (the layout GRPO / DiffusionNFT trainers sample in), else None.

    Raises:
        ValueError: not B ids, an unhashable id, or a group of one sample (it has nothing to be compared with).
    """
    if isinstance(group_ids, torch.Tensor):
        if group_ids.is_floating_point() or group_ids.is_complex():
            raise ValueError(f"group_ids must be integer ids or hashable labels, got a {group_ids.dtype} tensor")
        ids = group_ids.detach().cpu().flatten().tolist()
    else:
        ids = list(group_ids)
    if len(ids) != B:
        raise ValueError(f"group_ids must give one id per sample ({B}), got {len(ids)}")
    seen: dict = {}
    try:
        index = torch.tensor([seen.setdefault(g, len(seen)) for g in ids], dtype=torch.long)
    except TypeError as err:
        raise ValueError(f"group ids must be hashable (a prompt, an int): {err}") from None
    counts = torch.bincount(index, minlength=len(seen)) if B else torch.zeros(0, dtype=torch.long)
    if B and int(counts.min()) < 2:
        raise ValueError(f"every prompt group needs at least 2 samples (a group of one has no one to be compared "
                         f"with, so its signal would be empty); {int((counts < 2).sum())} of {len(seen)} groups have one")
    n = len(seen)
    G = B // n if n and B % n == 0 else None
    if G is not None and not torch.equal(index, torch.arange(B) // G):
        G = None
    return index, G


def group_moments(x: torch.Tensor, index: torch.Tensor, G: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's group mean and population std, (n, B) each, for rows x (n, B) and groups ``index`` (B,).

    With ``G`` (groups are contiguous blocks of G, `group_index`'s second output) the moments are the plain
    ``mean`` of each block and the square root of the mean squared deviation, the arithmetic a loop that reshapes its
    batch into (groups, G) writes (so its numbers and these agree to the bit)."""
    if G is not None:
        g = x.reshape(x.shape[0], -1, G)
        mean = g.mean(-1, keepdim=True)
        std = ((g - mean) ** 2).mean(-1, keepdim=True).sqrt()
        return mean.expand_as(g).reshape(x.shape), std.expand_as(g).reshape(x.shape)
    n_groups = int(index.max()) + 1
    idx = index.to(x.device)
    count = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, idx, torch.ones_like(x[0]))
    mean = (torch.zeros(x.shape[0], n_groups, dtype=x.dtype, device=x.device).index_add_(1, idx, x) / count)[:, idx]
    var = torch.zeros(x.shape[0], n_groups, dtype=x.dtype, device=x.device).index_add_(1, idx, (x - mean) ** 2) / count
    return mean, var.sqrt()[:, idx]


def standardise_in_groups(x: torch.Tensor, index: torch.Tensor, floor: float = PRE_STD_FLOOR,
                          G: int | None = None) -> torch.Tensor:
    """(x − group mean) / max(group population std, floor), row by row: the paper's per-group normalisation."""
    mean, std = group_moments(x, index, G)
    return (x - mean) / std.clamp_min(floor)


def to_signal(A: torch.Tensor, adv_clip_max: float, kind: str) -> torch.Tensor:
    """Clip A to [−c, c]; "nft" maps it to the mixing weight clip(A / (2c) + 0.5, 0, 1), "grpo" keeps it."""
    c = float(adv_clip_max)
    A = A.clamp(-c, c)
    return A if kind == "grpo" else (A / c / 2.0 + 0.5).clamp(0.0, 1.0)


def weighted_sum(weights: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """Σ_k weights[k] · R[k] accumulated in order k = 0, 1, … (so equal inputs give equal bits in any caller).

    Args:
        weights: (K, ...) broadcastable against R[k] after its leading axis; R: (K, B).
    """
    out = weights[0] * R[0]
    for k in range(1, R.shape[0]):
        out = out + weights[k] * R[k]
    return out


def pre_signal(R: torch.Tensor, TW: torch.Tensor, index: torch.Tensor, adv_clip_max: float,
               kind: str, G: int | None = None) -> torch.Tensor:
    """The paper's "pre" aggregation: r_t = Σ_k TW[k, t] R_k, normalised per step within each group (B, T).

    Args:
        R: raw rewards (K, B). TW: T·W (K, T), columns summing to 1. index: groups (B,); G: contiguous group size.
    """
    mixed = weighted_sum(TW.to(R.dtype)[:, :, None], R[:, None, :])  # (T, B)
    return to_signal(standardise_in_groups(mixed, index, G=G), adv_clip_max, kind).T.contiguous()


def mix_steps(TW: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Per-reward signals s (K, B) mixed through T·W (K, T): S[b, t] = Σ_k TW[k, t] s[k, b], (B, T)."""
    return weighted_sum(TW.to(s.dtype)[:, None, :], s[:, :, None])


def loss_signal(R: torch.Tensor, TW: torch.Tensor, index: torch.Tensor, adv_clip_max: float,
                kind: str, G: int | None = None) -> torch.Tensor:
    """The paper's "loss" aggregation: each reward normalised in its group, its mixing weight (or advantage) mixed
    through T·W (B, T). Because T·W's columns sum to 1, Σ_k TW[k, t] (m_k L⁺ + (1 − m_k) L⁻) = p L⁺ + (1 − p) L⁻
    with p = Σ_k TW[k, t] m_k, so the NFT loss of this signal is the per-reward losses weighted by T·W."""
    return mix_steps(TW, to_signal(standardise_in_groups(R, index, G=G), adv_clip_max, kind))


def per_reward_advantages(R: torch.Tensor, index: torch.Tensor, *, adv_clip_max: float,
                          std_scope: str, std_floor: float, reward_range) -> Advantages:
    """This repo's first reading: each reward normalised within its group, A = (R − mean) / (std + 1e-4) with the
    batch's ("global") or the group's std, clipped; rewards whose batch std is below ``std_floor × range`` silenced."""
    if std_scope == "global":
        mean, _ = group_moments(R, index)
        std = R.std(dim=1, unbiased=False, keepdim=True).expand_as(R)
    elif std_scope == "group":
        mean, std = group_moments(R, index)
    else:
        raise ValueError(f"std_scope must be 'global' or 'group', got {std_scope!r}")
    return advantages_from_moments(R, mean, std, adv_clip_max=adv_clip_max, std_floor=std_floor,
                                   reward_range=reward_range)


def reward_sum_advantages(R: torch.Tensor, lam: torch.Tensor, index: torch.Tensor, *,
                          adv_clip_max: float, std_scope: str, std_floor: float, reward_range) -> Advantages:
    """DiffusionNFT's aggregation: the raw weighted sum Σ_k λ_k R_k normalised as one reward (1, B)."""
    S = weighted_sum(lam.to(R.dtype)[:, None], R)[None]
    rng = float((lam.to(R.dtype) * torch.as_tensor(reward_range, dtype=R.dtype)).sum())
    return per_reward_advantages(S, index, adv_clip_max=adv_clip_max, std_scope=std_scope, std_floor=std_floor,
                                 reward_range=rng)
