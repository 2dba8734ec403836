"""Samplers for SD3-style rectified-flow transformers: ODE (Euler), SDE (Flow-GRPO) and rollout values.

Convention (docs/DESIGN.md): x_sigma = (1 - sigma) x0 + sigma eps, velocity v ~ eps - x0, the transformer is called
with timestep = sigma * 1000, Euler step x_next = x + (sigma_next - sigma) v, Tweedie x0_hat = x - sigma v. The grid
`sigmas` (T + 1,) runs from sigma_0 = 1 to sigma_T = 0; step j is sigma_j -> sigma_{j+1}.

Everything here works for any `SD3Transformer2DModel` (digit world or SD3.5 latents) and any `PromptEmbeds`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from diffusers import FlowMatchEulerDiscreteScheduler


@dataclass(frozen=True)
class PromptEmbeds:
    """SD3 conditioning for a batch of prompts.

    Attributes:
        encoder_hidden_states: (B, L, D) per-token text states.
        pooled_projections: (B, P) pooled text vector.
    """

    encoder_hidden_states: torch.Tensor
    pooled_projections: torch.Tensor

    def __len__(self) -> int:
        return self.encoder_hidden_states.shape[0]

    def repeat(self, m: int) -> PromptEmbeds:
        """Tile the batch m times: row i of the result is row i % B of self (shape (m * B, ...))."""
        return PromptEmbeds(self.encoder_hidden_states.repeat(m, 1, 1), self.pooled_projections.repeat(m, 1))

    def detach(self) -> PromptEmbeds:
        """The same embeddings with no autograd history."""
        return PromptEmbeds(self.encoder_hidden_states.detach(), self.pooled_projections.detach())


@dataclass(frozen=True)
class SampleOutput:
    """Result of `sample_ode` / `sample_sde`.

    Attributes:
        x0: (B, C, H, W) final samples (model space).
        xs: (T + 1, B, C, H, W) the trajectory x_{sigma_0} ... x_{sigma_T}, or None if not recorded.
        x0_hats: (T, B, C, H, W) Tweedie predictions x_j - sigma_j v_j at each step, or None if not recorded.
        log_probs: (T, B) per-step log-probabilities of the SDE transitions (`sample_sde` only; the deterministic
            final step has log-prob 0).
        sigmas: (T + 1,) the grid used.
    """

    x0: torch.Tensor
    xs: torch.Tensor | None
    x0_hats: torch.Tensor | None
    log_probs: torch.Tensor | None
    sigmas: torch.Tensor


@dataclass(frozen=True)
class SDEStep:
    """One Flow-GRPO SDE transition (all tensors (B, C, H, W) except `log_prob` (B,) and `std` (scalar tensor))."""

    x_next: torch.Tensor
    log_prob: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


def sigma_schedule(num_steps: int, shift: float = 1.0) -> torch.Tensor:
    """The SD3 sampling grid, exactly as `FlowMatchEulerDiscreteScheduler(shift=shift).set_timesteps(num_steps)`.

    Args:
        num_steps: T >= 1 denoising steps.
        shift: SD3's time shift sigma -> shift * sigma / (1 + (shift - 1) sigma); SD3.5 uses 3.0.

    Returns:
        sigmas (T + 1,) float32, sigma_0 = 1, strictly decreasing, sigma_T = 0. Like diffusers, the last nonzero
        sigma is the scheduler's sigma_min (not 1/T), so the final step is short.
    """
    if num_steps < 1 or shift <= 0:
        raise ValueError(f"need num_steps >= 1 and shift > 0, got {num_steps=}, {shift=}")
    scheduler = FlowMatchEulerDiscreteScheduler(shift=shift)
    scheduler.set_timesteps(num_steps, device="cpu")
    return scheduler.sigmas.to(torch.float32).clone()


def predict_velocity(transformer, x: torch.Tensor, sigma, embeds: PromptEmbeds) -> torch.Tensor:
    """v_theta(x, sigma, c) from an SD3 transformer.

    Args:
        transformer: a diffusers `SD3Transformer2DModel` (or anything with its call signature).
        x: (B, C, H, W) noisy samples x_sigma.
        sigma: float, 0-d tensor, or (B,) tensor of noise levels in [0, 1].
        embeds: conditioning with batch B.

    Returns:
        v (B, C, H, W), the predicted velocity eps - x0 (gradients flow if enabled).
    """
    sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
    timestep = (sigma * 1000).expand(x.shape[0]) if sigma.ndim == 0 else sigma * 1000
    return transformer(
        hidden_states=x,
        timestep=timestep,
        encoder_hidden_states=embeds.encoder_hidden_states,
        pooled_projections=embeds.pooled_projections,
        return_dict=False,
    )[0]


def _initial_noise(embeds, shape, noise, generator, device, dtype) -> torch.Tensor:
    if noise is not None:
        return noise.to(device=device, dtype=dtype)
    return torch.randn((len(embeds), *shape), generator=generator, dtype=dtype).to(device)


@torch.no_grad()
def sample_ode(
    transformer,
    embeds: PromptEmbeds,
    sigmas: torch.Tensor,
    *,
    shape: Sequence[int] | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    return_trajectory: bool = True,
) -> SampleOutput:
    """Deterministic Euler sampling of the probability-flow ODE, x_{j+1} = x_j + (sigma_{j+1} - sigma_j) v_j.

    Args:
        transformer: SD3 transformer.
        embeds: conditioning, batch B.
        sigmas: (T + 1,) grid from 1 to 0 (`sigma_schedule`).
        shape: (C, H, W) of one sample; needed only when `noise` is None.
        noise: (B, C, H, W) starting noise x_{sigma_0}; drawn from `generator` (on CPU, so seeds agree across
            devices) when None.
        generator: RNG for the starting noise.
        return_trajectory: record `xs` and `x0_hats`; set False to save memory.

    Returns:
        SampleOutput with `log_probs` None.
    """
    device, dtype = embeds.encoder_hidden_states.device, embeds.encoder_hidden_states.dtype
    x = _initial_noise(embeds, shape, noise, generator, device, dtype)
    xs, x0_hats = [x], []
    for j in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[j].item(), sigmas[j + 1].item()
        v = predict_velocity(transformer, x, sigma, embeds)
        if return_trajectory:
            x0_hats.append(x - sigma * v)
        x = x + (sigma_next - sigma) * v
        if return_trajectory:
            xs.append(x)
    return SampleOutput(
        x0=x,
        xs=torch.stack(xs) if return_trajectory else None,
        x0_hats=torch.stack(x0_hats) if return_trajectory else None,
        log_probs=None,
        sigmas=sigmas,
    )


def sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma,
    sigma_next,
    noise_level: float = 0.7,
    *,
    sigma_max: float | None = None,
    x_next: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> SDEStep:
    """Flow-GRPO's SDE transition sigma -> sigma_next and its Gaussian log-probability.

    std_t = a sqrt(sigma / (1 - sigma)), mean = x (1 + std_t^2 dt / (2 sigma)) + v (1 + std_t^2 (1 - sigma) /
    (2 sigma)) dt with dt = sigma_next - sigma < 0, x_next = mean + std_t sqrt(-dt) xi. At sigma = 1 the denominator
    uses `sigma_max` (Flow-GRPO's guard, the grid's sigma_1) instead. The step into sigma_next = 0 is deterministic:
    std = 0, mean = x - sigma v (the Euler step, i.e. the Tweedie estimate), log_prob = 0, so it contributes a
    likelihood ratio of exactly 1 to GRPO.

    Args:
        x: (B, C, H, W) current sample at sigma.
        v: (B, C, H, W) velocity at (x, sigma); differentiable, so GRPO can recompute log-probs under theta.
        sigma, sigma_next: floats (or 0-d tensors), sigma > sigma_next >= 0.
        noise_level: a, Flow-GRPO's noise scale.
        sigma_max: value replacing sigma in 1 - sigma when sigma == 1; defaults to sigma_next.
        x_next: a stored transition to score; when None one is drawn with `generator`.
        generator: RNG for xi (drawn on CPU, then moved to x's device).

    Returns:
        SDEStep(x_next, log_prob (B,) averaged over non-batch dims as in Flow-GRPO, mean, std = std_t sqrt(-dt)).
    """
    sigma, sigma_next = float(sigma), float(sigma_next)
    dt = sigma_next - sigma
    if dt >= 0:
        raise ValueError(f"sde_step needs sigma > sigma_next, got {sigma=} {sigma_next=}")
    if sigma_next == 0.0:
        mean = x + dt * v
        x_next = mean if x_next is None else x_next
        return SDEStep(x_next, torch.zeros(x.shape[0], dtype=x.dtype, device=x.device), mean, x.new_zeros(()))
    denom = 1.0 - ((sigma_max if sigma_max is not None else sigma_next) if sigma >= 1.0 else sigma)
    std_t = noise_level * math.sqrt(sigma / denom)
    mean = x * (1 + std_t**2 * dt / (2 * sigma)) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
    std = std_t * math.sqrt(-dt)
    if x_next is None:
        xi = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        x_next = mean + std * xi
    log_prob = -((x_next.detach() - mean) ** 2) / (2 * std**2) - math.log(std) - 0.5 * math.log(2 * math.pi)
    return SDEStep(x_next, log_prob.mean(dim=tuple(range(1, x.ndim))), mean, x.new_tensor(std))


@torch.no_grad()
def sample_sde(
    transformer,
    embeds: PromptEmbeds,
    sigmas: torch.Tensor,
    *,
    noise_level: float = 0.7,
    shape: Sequence[int] | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    start: int = 0,
    return_trajectory: bool = True,
) -> SampleOutput:
    """Stochastic sampling with Flow-GRPO's SDE (`sde_step`), recording per-step log-probs.

    Args:
        transformer, embeds, sigmas, shape, generator, return_trajectory: as in `sample_ode`.
        noise_level: a in std_t = a sqrt(sigma / (1 - sigma)).
        noise: (B, C, H, W) the state at `sigmas[start]` (pure noise when start = 0); drawn when None.
        start: grid index to start from; the outputs then cover steps start ... T - 1 only.

    Returns:
        SampleOutput; `log_probs` (T - start, B) (always recorded, it is small), `xs` (T - start + 1, B, ...),
        `x0_hats` (T - start, B, ...).
    """
    device, dtype = embeds.encoder_hidden_states.device, embeds.encoder_hidden_states.dtype
    x = _initial_noise(embeds, shape, noise, generator, device, dtype)
    sigma_max = sigmas[1].item() if len(sigmas) > 1 else None
    xs, x0_hats, log_probs = [x], [], []
    for j in range(start, len(sigmas) - 1):
        sigma, sigma_next = sigmas[j].item(), sigmas[j + 1].item()
        v = predict_velocity(transformer, x, sigma, embeds)
        if return_trajectory:
            x0_hats.append(x - sigma * v)
        step = sde_step(x, v, sigma, sigma_next, noise_level, sigma_max=sigma_max, generator=generator)
        x = step.x_next
        log_probs.append(step.log_prob)
        if return_trajectory:
            xs.append(x)
    return SampleOutput(
        x0=x,
        xs=torch.stack(xs) if return_trajectory else None,
        x0_hats=torch.stack(x0_hats) if return_trajectory else None,
        log_probs=torch.stack(log_probs),
        sigmas=sigmas,
    )


RewardFn = Callable[[torch.Tensor, list[str]], torch.Tensor]


def _rollout_rewards(transformer, embeds, x_sigma, j, sigmas, reward_fn, prompts, decode, num_rollouts, noise_level,
                     generator) -> torch.Tensor:
    """Rewards of M SDE continuations from grid index j: (M, B) or (M, B, K)."""
    num_steps = len(sigmas) - 1
    if not 0 <= j <= num_steps:
        raise ValueError(f"grid index j={j} outside 0..{num_steps}")
    batch = x_sigma.shape[0]
    if j == num_steps:
        return reward_fn(decode(x_sigma), list(prompts)).float()[None]
    out = sample_sde(transformer, embeds.repeat(num_rollouts), sigmas, noise_level=noise_level,
                     noise=x_sigma.repeat(num_rollouts, 1, 1, 1), generator=generator, start=j,
                     return_trajectory=False)
    rewards = reward_fn(decode(out.x0), list(prompts) * num_rollouts).float()
    return rewards.reshape(num_rollouts, batch, *rewards.shape[1:])


@torch.no_grad()
def rollout_values(
    transformer,
    embeds: PromptEmbeds,
    x_sigma: torch.Tensor,
    j: int,
    sigmas: torch.Tensor,
    reward_fn: RewardFn,
    prompts: Sequence[str],
    decode: Callable[[torch.Tensor], torch.Tensor],
    *,
    num_rollouts: int = 8,
    noise_level: float = 0.7,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Monte-Carlo value V(x_sigma_j) = E[r(x0) | x_sigma_j] under the model's SDE reverse process (RECAST.md §5, 2).

    Args:
        transformer, embeds: the model and the conditioning of the B states.
        x_sigma: (B, C, H, W) states at grid index j (0 <= j <= T; at j = T they are scored directly).
        j: grid index of x_sigma.
        sigmas: (T + 1,) grid.
        reward_fn: (images (N, 3, H, W) in [0, 1], prompts) -> (N,), or (N, K) to score K rewards on the same
            continuations.
        prompts: B prompts matching `embeds`.
        decode: model space -> images in [0, 1] (`world.decode`).
        num_rollouts: M continuations per state, run as one batch of M * B.
        noise_level: Flow-GRPO noise scale a of the continuations.
        generator: RNG of the continuations.

    Returns:
        V (B,) (or (B, K)) float32 on x_sigma's device: the mean reward over the M continuations (unbiased for V).
    """
    return _rollout_rewards(transformer, embeds, x_sigma, j, sigmas, reward_fn, prompts, decode, num_rollouts,
                            noise_level, generator).mean(0)


def debiased_values(rewards: torch.Tensor) -> torch.Tensor:
    """Rollout means shrunk toward their batch mean so that their variance is unbiased for Var V.

    The mean of M rollouts has variance Var V + E[s^2] / M: Monte-Carlo noise inflates D. Scaling the deviations
    from the batch mean by sqrt(max(0, 1 - (E[s^2] / M) / Var(mean))) removes that excess (exactly, for the variance;
    so D_2 = log(1 + Var V / (E V)^2) is debiased up to the ratio), keeps the mean, and keeps values >= 0.

    Args:
        rewards: (M, B) or (M, B, K) rewards of M continuations of B states, M >= 2 (M = 1 returns the means).

    Returns:
        (B,) or (B, K) debiased values.
    """
    V = rewards.mean(0)
    if rewards.shape[0] < 2:
        return V
    noise = rewards.var(0, unbiased=True).mean(0) / rewards.shape[0]
    total = V.var(0, unbiased=True)
    factor = torch.where(total > 0, (1 - noise / total.clamp_min(1e-30)).clamp_min(0), torch.zeros_like(total))
    return V.mean(0) + factor.sqrt() * (V - V.mean(0))


@torch.no_grad()
def rollout_discriminability(
    transformer,
    embeds: PromptEmbeds,
    x0: torch.Tensor,
    sigmas: torch.Tensor,
    reward_fn: RewardFn,
    prompts: Sequence[str],
    decode: Callable[[torch.Tensor], torch.Tensor],
    *,
    num_rollouts: int = 8,
    noise_level: float = 0.7,
    alpha: float = 2.0,
    debias: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """D(sigma_j) on the whole grid from rollout values (the `rollout` estimator of RECAST.md §5).

    Each clean sample x0 is forward-noised to every interior sigma_j (x = (1 - sigma) x0 + sigma eps, fresh eps per
    j), V is estimated from M continuations, and D[j] = renyi_discriminability(V, alpha). D[0] = 0 (sigma = 1 says
    nothing) and D[T] comes from the clean rewards r(x0). Rewards are used raw (they must be >= 0); where all values
    are 0 the ratio V / E[V] is undefined and D is set to 0 (no signal).

    Args:
        x0: (N, C, H, W) clean samples, typically from the model itself; `embeds`/`prompts` match them.
        reward_fn: as in `rollout_values`; with K outputs per sample every reward shares the same continuations.
        debias: remove the Monte-Carlo variance of the M-sample means (`debiased_values`); without it D is biased
            upwards by about Var(r | x_sigma) / (M (E V)^2), which dominates at high sigma for small M.

    Returns:
        D (T + 1,) float64 on CPU, or (K, T + 1) for a K-output reward_fn (not PAV-projected; the caller
        post-processes).
    """
    num_steps = len(sigmas) - 1
    clean = reward_fn(decode(x0), list(prompts)).float()
    D = torch.zeros(*clean.shape[1:], num_steps + 1, dtype=torch.float64)
    D[..., num_steps] = _renyi_or_zero(clean, alpha)
    for j in range(1, num_steps):
        sigma = sigmas[j].item()
        eps = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
        x_sigma = (1 - sigma) * x0 + sigma * eps
        rewards = _rollout_rewards(transformer, embeds, x_sigma, j, sigmas, reward_fn, prompts, decode, num_rollouts,
                                   noise_level, generator)
        D[..., j] = _renyi_or_zero(debiased_values(rewards) if debias else rewards.mean(0), alpha)
    return D


def _renyi_or_zero(values: torch.Tensor, alpha: float) -> torch.Tensor:
    """renyi_discriminability of V (N,) -> 0-d, or per column of V (N, K) -> (K,); 0 where V is identically 0."""
    from recast.informativeness import renyi_discriminability

    values = values.detach().double().cpu()
    columns = values.T if values.ndim == 2 else values[None]
    D = [renyi_discriminability(v, alpha=alpha) if v.sum() > 0 else 0.0 for v in columns]
    return torch.tensor(D if values.ndim == 2 else D[0], dtype=torch.float64)
