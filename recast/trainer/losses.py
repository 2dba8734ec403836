"""Training losses of the two backends, as pure functions of velocities / log-probs (docs/method.md §4).

NFT (DiffusionNFT's forward-process loss) for N training examples at noise levels sigma:

    v+ = (1 − β) v_old + β v_θ,   v− = (1 + β) v_old − β v_θ,   L = p ‖v+ − u‖² + (1 − p) ‖v− − u‖²

with β = `nft_beta`. At v_θ = v_old the gradient w.r.t. v_θ is 2β(2p − 1)(v_old − u) / n_pixels per example
(× c / β with DiffusionNFT's scaling): positive examples pull towards u, negative ones push away.

Adaptive normalisation (`norm`, docs/method.md §4) divides each example's squared error by its own detached mean absolute
error. In velocity space ("velocity", the default) every column then has the same scale in expectation, so a row sum
of W is the reward's real share. DiffusionNFT's x0-space form ("x0") normalises σ(v − u) = x̂_0 − x_0 instead, which
weights column j by σ_j (at T = 6: 1, .92, .82, .67, .43, .009): it is kept, named, for parity with the anchor.

GRPO (Flow-GRPO): PPO-clip on the per-step likelihood ratio of stored SDE transitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from recast.config import NFT_NORMS

__all__ = ["NFT_NORMS", "NFTLoss", "GRPOLoss", "nft_loss", "grpo_loss", "gaussian_mean_kl"]

NORM_MIN = 1e-5  # floor of DiffusionNFT's adaptive-normalisation factor


@dataclass(frozen=True)
class NFTLoss:
    """Result of `nft_loss`.

    Attributes:
        loss: scalar to minimise (policy + kl_beta * kl).
        policy: scalar policy part.
        kl: scalar mean ‖v_θ − v_ref‖² (0 when no reference was given).
        per_example: (N,) policy loss of each example (before the batch mean).
    """

    loss: torch.Tensor
    policy: torch.Tensor
    kl: torch.Tensor
    per_example: torch.Tensor


@dataclass(frozen=True)
class GRPOLoss:
    """Result of `grpo_loss`.

    Attributes:
        loss: scalar to minimise (policy + kl_beta * kl).
        policy: scalar PPO-clip part.
        kl: scalar mean KL (0 when none was given).
        ratio: scalar mean likelihood ratio (detached).
        clip_frac: scalar fraction of examples whose ratio was clipped (detached).
    """

    loss: torch.Tensor
    policy: torch.Tensor
    kl: torch.Tensor
    ratio: torch.Tensor
    clip_frac: torch.Tensor


def _pixel_mean(x: torch.Tensor) -> torch.Tensor:
    """Mean over every dimension but the first: (N, ...) -> (N,)."""
    return x.reshape(x.shape[0], -1).mean(dim=1)


def _bcast(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N, 1, 1, ...) to broadcast against `like`."""
    return t.reshape(-1, *([1] * (like.ndim - 1)))


def _sq_error(v: torch.Tensor, u: torch.Tensor, norm: str, sigma: torch.Tensor | None) -> torch.Tensor:
    """Per-example mean squared error, adaptively normalised by its own detached mean absolute error.

    "velocity": ‖v − u‖² / mean|v − u|; "x0": DiffusionNFT's ‖σ(v − u)‖² / mean|σ(v − u)| = σ · (the velocity form),
    since x0_hat − x0 = σ (u − v); "none": the plain mean squared error.
    """
    if norm == "none":
        return _pixel_mean((v - u) ** 2)
    err = v - u if norm == "velocity" else _bcast(sigma, v).to(v.dtype) * (v - u)
    scale = _pixel_mean(err.abs()).detach().clamp_min(NORM_MIN)
    return _pixel_mean(err**2) / scale


def nft_loss(
    v_theta: torch.Tensor,
    v_old: torch.Tensor,
    u: torch.Tensor,
    p: torch.Tensor,
    *,
    nft_beta: float = 1.0,
    norm: str = "none",
    sigma: torch.Tensor | None = None,
    scale: float = 1.0,
    v_ref: torch.Tensor | None = None,
    kl_beta: float = 0.0,
) -> NFTLoss:
    """DiffusionNFT's negative-aware loss with a per-example optimality probability.

    Args:
        v_theta: trained velocity (N, ...), with grad.
        v_old: old-policy velocity at the same x_sigma (N, ...), no grad needed (it is detached here).
        u: target velocity eps − x0, (N, ...).
        p: per-example signal p_j in [0, 1], (N,).
        nft_beta: β > 0, the NFT strength.
        norm: adaptive normalisation, one of NFT_NORMS: "velocity" (every column weighs the same), "x0"
            (DiffusionNFT's form, column j weighted by σ_j) or "none".
        sigma: (N,) noise levels of the examples; needed by norm="x0".
        scale: multiplies the policy loss (DiffusionNFT uses adv_clip_max / nft_beta).
        v_ref: frozen-reference velocity (N, ...) for the KL term, or None.
        kl_beta: weight of the KL term.

    Returns:
        `NFTLoss`; `loss` is the batch mean.
    """
    if not nft_beta > 0:
        raise ValueError(f"nft_beta must be > 0, got {nft_beta}")
    if norm not in NFT_NORMS:
        raise ValueError(f"nft_norm must be one of {NFT_NORMS}, got {norm!r}")
    if norm == "x0" and sigma is None:
        raise ValueError("nft_norm='x0' needs the examples' sigma (N,)")
    v_old = v_old.detach()
    v_pos = (1.0 - nft_beta) * v_old + nft_beta * v_theta
    v_neg = (1.0 + nft_beta) * v_old - nft_beta * v_theta
    p = p.to(v_theta.dtype)
    per = p * _sq_error(v_pos, u, norm, sigma) + (1.0 - p) * _sq_error(v_neg, u, norm, sigma)
    per = scale * per
    policy = per.mean()
    kl = _pixel_mean((v_theta - v_ref.detach()) ** 2).mean() if v_ref is not None else policy.new_zeros(())
    return NFTLoss(loss=policy + kl_beta * kl, policy=policy, kl=kl, per_example=per)


def grpo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    A: torch.Tensor,
    *,
    clip_range: float = 1e-4,
    kl: torch.Tensor | None = None,
    kl_beta: float = 0.0,
) -> GRPOLoss:
    """Flow-GRPO's PPO-clip objective at one step per example.

    loss = mean_n max(−A_n r_n, −A_n clip(r_n, 1 − ε, 1 + ε)) + kl_beta · mean(kl), r_n = exp(log_prob − old_log_prob).
    At r = 1 the gradient is −mean(A ∇ log_prob).

    Args:
        log_prob: per-example log-prob of the stored transition under θ, (N,), with grad.
        old_log_prob: the same under the sampling (old) policy, (N,).
        A: per-step advantage A_j of each example, (N,).
        clip_range: ε ≥ 0.
        kl: per-example KL to the reference (N,) or None.
        kl_beta: weight of the KL term.

    Returns:
        `GRPOLoss`.
    """
    ratio = torch.exp(log_prob - old_log_prob.detach())
    A = A.to(ratio.dtype).detach()
    unclipped = -A * ratio
    clipped = -A * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    policy = torch.maximum(unclipped, clipped).mean()
    kl_mean = kl.mean() if kl is not None else policy.new_zeros(())
    clip_frac = ((ratio - 1.0).abs() > clip_range).float().mean().detach()
    return GRPOLoss(loss=policy + kl_beta * kl_mean, policy=policy, kl=kl_mean, ratio=ratio.mean().detach(),
                    clip_frac=clip_frac)


def gaussian_mean_kl(mean: torch.Tensor, mean_ref: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """KL between two Gaussians with equal std, per example: mean over pixels of (μ − μ_ref)² / (2 std²).

    Args:
        mean, mean_ref: (N, ...) transition means under θ and the reference.
        std: per-example or broadcastable std (N,) or (N, 1, ...).

    Returns:
        (N,) tensor.
    """
    std = std if std.ndim == mean.ndim else _bcast(std, mean)
    return _pixel_mean((mean - mean_ref.detach()) ** 2 / (2 * std**2))
