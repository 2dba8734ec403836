"""Samplers for SD3-style rectified-flow transformers: ODE (Euler), SDE (Flow-GRPO and coefficients-preserving "cps")
(the ancestral "η = 1" sampler of the `rollout` ground truth lives in `recast.informativeness.rollout`).

Convention (docs/DESIGN.md): x_sigma = (1 - sigma) x0 + sigma eps, velocity v ~ eps - x0, the transformer is called
with timestep = sigma * 1000, Euler step x_next = x + (sigma_next - sigma) v, Tweedie x0_hat = x - sigma v. The grid
`sigmas` (T + 1,) runs from sigma_0 = 1 to sigma_T = 0; step j is sigma_j -> sigma_{j+1}.

Everything here works for any `SD3Transformer2DModel` (digit world or SD3.5 latents) and any `PromptEmbeds`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


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
    """The SD3 sampling grid, bit for bit what `FlowMatchEulerDiscreteScheduler(shift=shift).set_timesteps(num_steps)`
    gives (diffusers is not needed: `tests/test_sampling.py` checks the equality where it is installed).

    Args:
        num_steps: T >= 1 denoising steps.
        shift: SD3's time shift sigma -> shift * sigma / (1 + (shift - 1) sigma); SD3.5 uses 3.0.

    Returns:
        sigmas (T + 1,) float32, sigma_0 = 1, strictly decreasing, sigma_T = 0. Like diffusers, the last nonzero
        sigma is the scheduler's sigma_min (not 1/T), so the final step is short.
    """
    if isinstance(num_steps, bool) or int(num_steps) != num_steps or num_steps < 1 or not 0 < shift < math.inf:
        raise ValueError(f"need num_steps >= 1 and a finite shift > 0, got {num_steps=}, {shift=}")
    n = 1000  # the scheduler's num_train_timesteps
    # the scheduler's training grid (float32 torch, as in its constructor) gives the ends sigma_max and sigma_min
    train = torch.from_numpy(np.linspace(1, n, n, dtype=np.float32)[::-1].copy()) / n
    train = shift * train / (1 + (shift - 1) * train)
    sigma_max, sigma_min = train[0].item(), train[-1].item()
    # set_timesteps: a float64 linspace between them, shifted again, then float32 with a final 0 appended
    sig = np.linspace(sigma_max * n, sigma_min * n, int(num_steps)) / n
    sig = shift * sig / (1 + (shift - 1) * sig)
    return torch.cat([torch.from_numpy(sig).to(torch.float32), torch.zeros(1)])


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


def cps_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma,
    sigma_next,
    noise_level: float = 0.7,
    *,
    x_next: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> SDEStep:
    """Coefficients-preserving SDE transition sigma -> sigma_next (FlowCPS; Flow-GRPO's sde_type="cps").

    With x0_hat = x − σ v and eps_hat = x + (1 − σ) v (the model's clean and noise estimates), the next state is
    (1 − σ') x0_hat + σ' (cos(aπ/2) eps_hat + sin(aπ/2) ξ): the noise keeps unit scale, so x_{σ'} has exactly the
    forward process's coefficients at every σ', whatever the step size. Flow-GRPO's step does not, and at coarse T it
    leaves visible noise in the final sample (docs/method.md §4). Into σ' = 0 the step is deterministic (x0_hat),
    log_prob 0.

    Args:
        x, v: (B, C, H, W) state and velocity (v differentiable for GRPO).
        sigma, sigma_next: σ > σ' ≥ 0.
        noise_level: a in [0, 1]; std = σ' sin(aπ/2).
        x_next, generator: as in `sde_step`.

    Returns:
        SDEStep(x_next, log_prob (B,) averaged over non-batch dims, mean, std).
    """
    sigma, sigma_next = float(sigma), float(sigma_next)
    if not sigma > sigma_next >= 0:
        raise ValueError(f"cps_step needs sigma > sigma_next >= 0, got {sigma=} {sigma_next=}")
    x0_hat, eps_hat = x - sigma * v, x + (1 - sigma) * v
    angle = noise_level * math.pi / 2
    std = sigma_next * math.sin(angle)
    mean = (1 - sigma_next) * x0_hat + sigma_next * math.cos(angle) * eps_hat
    if std == 0.0:
        x_next = mean if x_next is None else x_next
        return SDEStep(x_next, torch.zeros(x.shape[0], dtype=x.dtype, device=x.device), mean, x.new_zeros(()))
    if x_next is None:
        xi = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        x_next = mean + std * xi
    log_prob = -((x_next.detach() - mean) ** 2) / (2 * std**2) - math.log(std) - 0.5 * math.log(2 * math.pi)
    return SDEStep(x_next, log_prob.mean(dim=tuple(range(1, x.ndim))), mean, x.new_tensor(std))


def sde_transition(sde_type: str, x, v, sigma, sigma_next, noise_level: float, *, sigma_max=None, x_next=None,
                   generator=None) -> SDEStep:
    """One stochastic step of the named kind: "flow_grpo" (`sde_step`) or "cps" (`cps_step`)."""
    if sde_type == "flow_grpo":
        return sde_step(x, v, sigma, sigma_next, noise_level, sigma_max=sigma_max, x_next=x_next, generator=generator)
    if sde_type == "cps":
        return cps_step(x, v, sigma, sigma_next, noise_level, x_next=x_next, generator=generator)
    raise ValueError(f"sde_type must be 'cps' or 'flow_grpo', got {sde_type!r}")


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
    sde_type: str = "flow_grpo",
) -> SampleOutput:
    """Stochastic sampling with a Flow-GRPO-style SDE (`sde_transition`), recording per-step log-probs.

    Args:
        transformer, embeds, sigmas, shape, generator, return_trajectory: as in `sample_ode`.
        noise_level: a; flow_grpo: std_t = a sqrt(sigma / (1 - sigma)); cps: std = sigma_next sin(a pi / 2).
        sde_type: "flow_grpo" (`sde_step`) or "cps" (`cps_step`, the right noise level at coarse T).
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
        step = sde_transition(sde_type, x, v, sigma, sigma_next, noise_level, sigma_max=sigma_max, generator=generator)
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
