"""Compare the two informativeness estimators of RECAST.md §5 (`tweedie` vs `rollout`) on the digit world.

For a batch of clean model samples x0 (ODE, the grid below) and every grid index j, both estimators see the same
kind of state x_sigma_j = (1 - sigma_j) x0 + sigma_j eps:

- `tweedie`: the proxy f_j = r_k(x0_hat(x_sigma_j)), calibrated against r_k(x0) inside
  `recast.informativeness.tweedie_discriminability` (a lower bound on D, exact as sigma -> 0);
- `rollout`: V = mean of r_k over M SDE continuations from x_sigma_j (`recast.sampling.rollout_discriminability`),
  unbiased under the model's reverse process but expensive.

Rewards are used raw (the digit world's rewards lie in [0, 1]) in place of the optimality probabilities p_k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from recast.digits.world import DigitWorld
from recast.informativeness import telescoping_gains, tweedie_discriminability
from recast.sampling import predict_velocity, rollout_discriminability, sample_ode, sigma_schedule


@dataclass(frozen=True)
class InformativenessEstimate:
    """D_k(sigma) from both estimators on one grid.

    Attributes:
        reward_names: the K rewards, row order.
        sigmas: (T + 1,) grid, sigma_0 = 1 ... sigma_T = 0.
        D_tweedie: (K, T + 1) float64, D[:, 0] = 0, D[:, T] = clean value.
        D_rollout: (K, T + 1) float64, same conventions.
        spearman: (K,) Spearman rank correlation of the two estimators' per-step gains (telescoping_gains, i.e.
            what the weight solver consumes); NaN where either gain profile is constant.
    """

    reward_names: tuple[str, ...]
    sigmas: torch.Tensor
    D_tweedie: torch.Tensor
    D_rollout: torch.Tensor
    spearman: torch.Tensor


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two 1-D tensors (average ranks for ties); NaN if either is constant."""
    from scipy.stats import rankdata

    ra, rb = (torch.as_tensor(rankdata(x.double().cpu().numpy())) for x in (a, b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = ra.norm() * rb.norm()
    return float((ra @ rb) / denom) if denom > 0 else float("nan")


def stack_rewards(rewards: Sequence) -> callable:
    """Combine K reward functions into one returning (N, K), so rollouts are shared across rewards."""

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return torch.stack([r(images, prompts).float() for r in rewards], dim=-1)

    return reward


@torch.no_grad()
def estimate_informativeness(
    world: DigitWorld,
    reward_names: Sequence[str],
    prompts: Sequence[str],
    *,
    num_steps: int = 10,
    shift: float = 3.0,
    num_rollouts: int = 4,
    noise_level: float = 0.7,
    alpha: float = 2.0,
    seed: int = 0,
) -> InformativenessEstimate:
    """D_k(sigma) for every reward from the `tweedie` and `rollout` estimators.

    Args:
        world: the model whose samples and reverse process define pi and V.
        reward_names: names in `recast.digits.rewards` (K of them).
        prompts: N prompts, one sample each.
        num_steps, shift: the grid (`sigma_schedule`).
        num_rollouts: M SDE continuations per state for `rollout`.
        noise_level: Flow-GRPO noise scale a for the continuations.
        alpha: Rényi order.
        seed: seeds the samples, the forward noise and the continuations.

    Returns:
        InformativenessEstimate.
    """
    import recast.digits.rewards

    device = world.device
    reward = stack_rewards([recast.digits.rewards.get(name)(device) for name in reward_names])
    prompts = list(prompts)
    gen = torch.Generator().manual_seed(seed)
    sigmas = sigma_schedule(num_steps, shift)
    embeds = world.encode_prompts(prompts)
    x0 = sample_ode(world.transformer, embeds, sigmas, shape=world.sample_shape, generator=gen,
                    return_trajectory=False).x0

    p_clean = reward(world.decode(x0), prompts)  # (N, K)
    p_proxy = torch.full((num_steps + 1, *p_clean.shape), float("nan"))
    for j in range(1, num_steps):
        sigma = sigmas[j].item()
        eps = torch.randn(x0.shape, generator=gen).to(device)
        x_sigma = (1 - sigma) * x0 + sigma * eps
        x0_hat = x_sigma - sigma * predict_velocity(world.transformer, x_sigma, sigma, embeds)
        p_proxy[j] = reward(world.decode(x0_hat), prompts).cpu()
    D_tweedie = torch.stack([
        tweedie_discriminability(p_clean[:, k].cpu(), p_proxy[:, :, k], alpha=alpha).double()
        for k in range(len(reward_names))
    ])
    D_rollout = rollout_discriminability(
        world.transformer, embeds, x0, sigmas, reward, prompts, world.decode,
        num_rollouts=num_rollouts, noise_level=noise_level, alpha=alpha, generator=gen,
    )  # fmt: skip
    g_tweedie, g_rollout = telescoping_gains(D_tweedie), telescoping_gains(D_rollout)
    rho = torch.tensor([spearman(a, b) for a, b in zip(g_tweedie, g_rollout)], dtype=torch.float64)
    return InformativenessEstimate(tuple(reward_names), sigmas, D_tweedie, D_rollout, rho)
