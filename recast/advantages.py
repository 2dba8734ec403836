"""Rewards -> per-reward advantages -> per-step training signals through W (docs/method.md §3).

All functions are pure: tensors in, tensors out, no device globals. Shapes: K rewards, B samples (B = groups * G,
samples of one prompt contiguous), T denoising steps (columns of W), N training examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from recast.solver import check_budgets

__all__ = [
    "Advantages",
    "normalise_budgets",
    "group_stats",
    "reward_to_p",
    "advantages_from_moments",
    "silenced_rewards",
    "group_advantages",
    "reward_sum",
    "step_signal",
    "validate_W",
]

STD_EPS = 1e-4  # added to the std before dividing (GRPO / DiffusionNFT)


@dataclass(frozen=True)
class Advantages:
    """Normalised rewards of one batch.

    Attributes:
        A: clipped advantages, (K, B), in [-c, c].
        p: optimality probabilities 0.5 + A / (2c), (K, B), in [0, 1].
        mean: the group mean each sample was centred with, (K, B).
        std: the std each sample was scaled with (before adding STD_EPS), (K, B).
        silenced: (K,) bool, rewards whose batch std fell below the floor: their A is 0 and p is 0.5 (no signal).
    """

    A: torch.Tensor
    p: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    silenced: torch.Tensor | None = None


def normalise_budgets(lam, K: int) -> torch.Tensor:
    """Validate λ and scale it to Σλ = 1.

    Args:
        lam: budgets, length K (sequence or tensor); empty means equal budgets.
        K: number of rewards.

    Returns:
        float64 tensor (K,), ≥ 0, summing to 1.

    Raises:
        ValueError: wrong length, NaN/inf, a negative entry, or all zero.
    """
    if lam is None or len(lam) == 0:
        return torch.full((K,), 1.0 / K, dtype=torch.float64)
    t = check_budgets(torch.as_tensor(lam, dtype=torch.float64).flatten(), K, name="lam")
    if not torch.isfinite(t.sum()):
        raise ValueError(f"lam sum to inf (each is finite, their sum overflows): give budgets of a smaller scale, "
                         f"e.g. {[1.0] * K}")
    return t / t.sum()


def group_stats(R: torch.Tensor, G: int, std_scope: str = "global") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample group mean and the std used for scaling.

    Args:
        R: raw rewards (K, B), samples of one prompt contiguous in groups of G.
        G: group size; must divide B.
        std_scope: "global" (std over the whole batch, per reward) or "group" (std within each group).

    Returns:
        (mean, std), each (K, B) broadcast back to samples. Stds are population stds (unbiased=False).
    """
    K, B = R.shape
    if G < 1 or B % G:
        raise ValueError(f"group size G={G} must divide the batch size B={B}")
    g = R.reshape(K, B // G, G)
    mean = g.mean(dim=2, keepdim=True).expand_as(g).reshape(K, B)
    if std_scope == "global":
        std = R.std(dim=1, unbiased=False, keepdim=True).expand(K, B)
    elif std_scope == "group":
        std = g.std(dim=2, unbiased=False, keepdim=True).expand_as(g).reshape(K, B)
    else:
        raise ValueError(f"std_scope must be 'global' or 'group', got {std_scope!r}")
    return mean, std


def reward_to_p(R: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, adv_clip_max: float):
    """The affine-then-clip map from a raw reward to (A, p), with the batch's own mean and std.

    Used for clean samples and for x0_hat proxies alike, so both live on the same scale.

    Args:
        R: raw rewards, any shape broadcastable with mean and std.
        mean, std: centring and scale (std before adding STD_EPS).
        adv_clip_max: c > 0.

    Returns:
        (A, p): A = clip((R − mean) / (std + STD_EPS), −c, c), p = 0.5 + A / (2c) in [0, 1].
    """
    c = float(adv_clip_max)
    A = ((R - mean) / (std + STD_EPS)).clamp(-c, c)
    return A, 0.5 + A / (2 * c)


def silenced_rewards(R: torch.Tensor, std_floor: float, reward_range=1.0) -> torch.Tensor:
    """Rewards with no signal in this batch: batch std < std_floor × range (docs/method.md §3).

    Dividing such a reward by its tiny std would hand measurement-level noise a full share of p_j.

    Args:
        R: raw rewards (K, B).
        std_floor: the floor as a fraction of the range, ≥ 0 (0 silences nothing).
        reward_range: the rewards' range (max − min of their documented scale), a float or (K,); digit-world
            rewards lie in [0, 1], so 1.

    Returns:
        (K,) bool.
    """
    if not std_floor >= 0:
        raise ValueError(f"reward_std_floor must be >= 0, got {std_floor}")
    rng = torch.as_tensor(reward_range, dtype=R.dtype, device=R.device).expand(R.shape[0])
    return R.std(dim=1, unbiased=False) < std_floor * rng


def advantages_from_moments(R: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, *, adv_clip_max: float,
                            std_floor: float, reward_range) -> Advantages:
    """`Advantages` of rewards R (K, B) from their per-sample mean and std (K, B): `reward_to_p`, then every reward
    whose batch std is below ``std_floor × reward_range`` silenced (A = 0, p = 0.5); std_floor 0 silences none."""
    A, p = reward_to_p(R, mean, std, adv_clip_max)
    silenced = silenced_rewards(R, std_floor, reward_range) if std_floor > 0 else torch.zeros(
        R.shape[0], dtype=torch.bool, device=R.device)
    A = torch.where(silenced[:, None], torch.zeros_like(A), A)
    p = torch.where(silenced[:, None], torch.full_like(p, 0.5), p)
    return Advantages(A=A, p=p, mean=mean, std=std, silenced=silenced)


def group_advantages(R: torch.Tensor, G: int, *, adv_clip_max: float = 5.0, std_scope: str = "global",
                     std_floor: float = 0.0, reward_range=1.0) -> Advantages:
    """Normalise each reward within its prompt group (docs/method.md §3).

    Args:
        R: raw rewards (K, B); groups of G contiguous samples share a prompt.
        G: group size.
        adv_clip_max: c > 0, the clip of A and the scale of p.
        std_scope: "global" | "group".
        std_floor: a reward whose batch std is below std_floor × reward_range gets A = 0, p = 0.5 (no signal);
            0 (the default here) keeps every reward. The trainer passes `cfg.reward_std_floor` for every method.
        reward_range: float or (K,), the rewards' range.

    Returns:
        `Advantages` with A (K, B) in [−c, c] and p (K, B) in [0, 1]; each group's A sums to 0 unless clipped.
    """
    if not adv_clip_max > 0:
        raise ValueError(f"adv_clip_max must be > 0, got {adv_clip_max}")
    R = torch.as_tensor(R)
    if R.ndim != 2:
        raise ValueError(f"R must be (K, B), got shape {tuple(R.shape)}")
    mean, std = group_stats(R, G, std_scope)
    return advantages_from_moments(R, mean, std, adv_clip_max=adv_clip_max, std_floor=std_floor,
                                   reward_range=reward_range)


def reward_sum(R: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """DiffusionNFT's raw weighted sum Σ_k λ_k R_k, as a single reward (1, B)."""
    return (lam.to(device=R.device, dtype=R.dtype)[:, None] * R).sum(dim=0, keepdim=True)


def step_signal(W: torch.Tensor | None, s: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Per-example signal at its column: T · Σ_k W[k, j_n] · s[k, n].

    With Σλ = 1, T · W[:, j] is a convex combination, so p in [0, 1] stays in [0, 1] and A in [−c, c] stays there.
    T·W is rounded to the signal's dtype first, so a W equal to λ/T up to float64 round-off gives bit-identical
    signals to the static baseline.

    Args:
        W: (K, T) weights with columns summing to 1/T; None for the reward_sum aggregation, whose signal is one
            combined reward, the same at every column.
        s: (K, N) per-reward signal of each example's sample (p or A); (1, N) when W is None.
        columns: (N,) long, the column j_n of each example.

    Returns:
        (N,) tensor in s's dtype.

    Raises:
        ValueError: W is None but s holds more than one reward.
    """
    if W is None:
        if s.shape[0] != 1:
            raise ValueError(f"without W the signal must be one combined reward (1, N), got {tuple(s.shape)}")
        return s[0]
    T = W.shape[1]
    TW = (T * W.to(torch.float64)).to(s.dtype).to(s.device)
    return (TW[:, columns] * s).sum(dim=0)


def validate_W(W, lam: torch.Tensor, T: int, tol: float = 1e-6) -> torch.Tensor:
    """Check a user-supplied W (method="fixed"): shape (K, T), ≥ 0, rows = λ and columns = Σλ/T (λ normalised).

    Args:
        W: array-like (K, T). Rows are rescaled together with λ: pass W for the budgets as given.
        lam: normalised budgets (K,) summing to 1.
        T: number of steps.
        tol: allowed absolute error on the marginals after normalising W to total 1.

    Returns:
        float64 tensor (K, T) scaled to total 1.

    Raises:
        ValueError: naming the shape or the marginal that is off.
    """
    W = torch.as_tensor(W, dtype=torch.float64)
    K = lam.numel()
    if W.shape != (K, T):
        raise ValueError(f"fixed_W must have shape (K={K}, T={T}), got {tuple(W.shape)}")
    if not torch.isfinite(W).all() or (W < 0).any():
        raise ValueError("fixed_W must be finite and >= 0")
    if W.sum() <= 0:
        raise ValueError("fixed_W is all zero")
    W = W / W.sum()
    rows, cols = W.sum(1), W.sum(0)
    if (rows - lam).abs().max() > tol:
        raise ValueError(f"fixed_W row sums {rows.tolist()} do not match the budgets lam {lam.tolist()} (normalised)")
    if (cols - 1.0 / T).abs().max() > tol:
        raise ValueError(f"fixed_W column sums {cols.tolist()} are not all equal (each should be sum(lam)/T)")
    return W
