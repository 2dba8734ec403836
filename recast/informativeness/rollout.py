"""The `rollout` ground truth of D_k(σ) (docs/method.md §5, estimator 2): one joint distribution on both sides.

x_σ is the forward process applied to the model's own x_0, and V(x_σ) = E[p_k(x_0') | x_σ] is averaged over M
continuations whose ends are draws from the model's posterior given x_σ: the ancestral ("η = 1", DDPM-posterior)
step of rectified flow, on a sub-grid fine enough that this holds (`fine_grid`). D(σ_T) comes from the same ends,
so every D(σ_j) ≤ D(σ_T) up to Monte-Carlo error (data processing), and continuations from σ = 1 reproduce the
model's own reward distribution; `reward_agreement` measures the latter. A deterministic continuation (ODE) would
make D(σ) ≈ D(0) everywhere, and a low-noise SDE on a coarse grid ends on non-images: both break the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from recast.sampling import PromptEmbeds, predict_velocity

__all__ = [
    "ancestral_step",
    "fine_grid",
    "sample_ancestral",
    "rollout_values",
    "debiased_values",
    "RolloutEstimate",
    "rollout_estimate",
    "discriminability_from_ends",
    "rollout_discriminability",
    "reward_agreement",
]

RewardFn = Callable[[torch.Tensor, list[str]], torch.Tensor]


def ancestral_step(x: torch.Tensor, v: torch.Tensor, sigma, sigma_next,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The ancestral ("η = 1") step: a draw from the DDPM posterior q(x_{σ'} | x_σ, x_0 = x0_hat) of rectified flow.

    With α = 1 − σ, the forward process gives x_σ = (α/α') x_{σ'} + noise of variance s² = σ² − (α/α')² σ'², so
    q(x_{σ'} | x_σ, x_0) = N((α/α') σ'²/σ² · x_σ + α' s²/σ² · x_0, s² σ'²/σ²). On a grid fine enough the chain of these
    steps with x_0 = x0_hat samples the model's own posterior of x_0 given x_σ (the reverse SDE); on a coarse grid it
    returns over-smoothed ends.

    Args:
        x, v: (B, C, H, W) state at σ and the model's velocity there.
        sigma, sigma_next: 1 ≥ σ > σ' ≥ 0.
        generator: RNG of the fresh noise (drawn on CPU).

    Returns:
        x_{σ'} (B, C, H, W); x0_hat itself when σ' = 0.
    """
    sigma, sigma_next = float(sigma), float(sigma_next)
    if not 1.0 >= sigma > sigma_next >= 0:
        raise ValueError(f"ancestral_step needs 1 >= sigma > sigma_next >= 0, got {sigma=} {sigma_next=}")
    x0_hat = x - sigma * v
    if sigma_next == 0.0:
        return x0_hat
    a, a_next = 1.0 - sigma, 1.0 - sigma_next
    ratio = a / a_next
    var_step = sigma**2 - ratio**2 * sigma_next**2
    mean = (ratio * sigma_next**2 / sigma**2) * x + (a_next * var_step / sigma**2) * x0_hat
    std = math.sqrt(max(var_step, 0.0)) * sigma_next / sigma
    return mean + std * torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)


def fine_grid(sigmas: torch.Tensor, start: int, substeps: int) -> torch.Tensor:
    """The grid from sigmas[start] to 0 with every coarse step split into `substeps` equal steps in σ.

    Returns:
        (substeps · (T − start) + 1,) float64, strictly decreasing, containing every coarse σ_j for j ≥ start.
    """
    T = len(sigmas) - 1
    if not 0 <= start <= T or substeps < 1:
        raise ValueError(f"need 0 <= start <= T={T} and substeps >= 1, got {start=}, {substeps=}")
    s = sigmas.double()
    pieces = [torch.linspace(float(s[i]), float(s[i + 1]), substeps + 1, dtype=torch.float64)[:-1]
              for i in range(start, T)]
    return torch.cat(pieces + [s[-1:]])


@torch.no_grad()
def sample_ancestral(transformer, embeds: PromptEmbeds, x: torch.Tensor, grid: torch.Tensor,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Run `ancestral_step` from x at grid[0] down the (fine) grid to grid[-1] = 0; returns the ends (B, C, H, W)."""
    for i in range(len(grid) - 1):
        sigma, sigma_next = float(grid[i]), float(grid[i + 1])
        x = ancestral_step(x, predict_velocity(transformer, x, sigma, embeds), sigma, sigma_next, generator)
    return x


def _continuation_rewards(transformer, embeds, x_sigma, j, sigmas, reward_fn, prompts, decode, num_rollouts,
                          substeps, generator) -> torch.Tensor:
    """Rewards (M, B) or (M, B, K) of M ancestral continuations from grid index j (j = T: the states as they are)."""
    T = len(sigmas) - 1
    if not 0 <= j <= T:
        raise ValueError(f"grid index j={j} outside 0..{T}")
    if j == T:
        return reward_fn(decode(x_sigma), list(prompts)).float()[None]
    B = x_sigma.shape[0]
    ends = sample_ancestral(transformer, embeds.repeat(num_rollouts), x_sigma.repeat(num_rollouts, 1, 1, 1),
                            fine_grid(sigmas, j, substeps), generator)
    r = reward_fn(decode(ends), list(prompts) * num_rollouts).float()
    return r.reshape(num_rollouts, B, *r.shape[1:])


@torch.no_grad()
def rollout_values(transformer, embeds: PromptEmbeds, x_sigma: torch.Tensor, j: int, sigmas: torch.Tensor,
                   reward_fn: RewardFn, prompts: Sequence[str], decode: Callable[[torch.Tensor], torch.Tensor], *,
                   num_rollouts: int = 8, substeps: int = 8, generator: torch.Generator | None = None) -> torch.Tensor:
    """Monte-Carlo value V(x_{σ_j}) = E[r(x_0) | x_{σ_j}] from M ancestral continuations on the fine sub-grid.

    Args:
        transformer, embeds: the model and the conditioning of the B states.
        x_sigma: (B, C, H, W) states at grid index j (0 <= j <= T; at j = T they are scored directly).
        j: grid index of x_sigma; sigmas: (T + 1,) grid.
        reward_fn: (images (N, 3, H, W) in [0, 1], prompts) -> (N,) or (N, K).
        prompts: B prompts matching `embeds`; decode: model space -> images in [0, 1].
        num_rollouts: M continuations per state, run as one batch of M · B.
        substeps: ancestral steps per coarse step (`fine_grid`).
        generator: RNG of the continuations.

    Returns:
        V (B,) (or (B, K)): the mean reward over the M continuations (unbiased for V).
    """
    return _continuation_rewards(transformer, embeds, x_sigma, j, sigmas, reward_fn, prompts, decode, num_rollouts,
                                 substeps, generator).mean(0)


def debiased_values(rewards: torch.Tensor) -> torch.Tensor:
    """Rollout means shrunk toward their batch mean so that their variance is unbiased for Var V.

    The mean of M rollouts has variance Var V + E[s²] / M: Monte-Carlo noise inflates D. Scaling the deviations
    from the batch mean by sqrt(max(0, 1 − (E[s²] / M) / Var(mean))) removes that excess (exactly, for the variance;
    so D_2 = log(1 + Var V / (E V)²) is debiased up to the ratio), keeps the mean, and keeps values ≥ 0.

    Args:
        rewards: (M, B) or (M, B, K) rewards of M continuations of B states, M ≥ 2 (M = 1 returns the means).

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


@dataclass(frozen=True)
class RolloutEstimate:
    """The ground truth of `rollout_estimate`.

    Attributes:
        sigmas: (T + 1,) grid.
        D: (K, T + 1) float64; D[:, 0] = 0, D[:, T] from the continuations' ends (or the clean samples if T = 1).
        D_boot: (R, K, T + 1) bootstrap replicates over the N states (None when bootstrap = 0).
        p_clean: (N, K) p of the clean samples x_0.
        p_ends: (T − 1, M, N, K) p of every continuation's end (draws of π when the posterior is right).
        scalar_reward: the reward_fn returned (N,) (K = 1).
    """

    sigmas: torch.Tensor
    D: torch.Tensor
    D_boot: torch.Tensor | None
    p_clean: torch.Tensor
    p_ends: torch.Tensor
    scalar_reward: bool = False

    def band(self, level: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
        """Bootstrap percentile band (lo, hi) of D, each (K, T + 1) (D itself when there is no bootstrap)."""
        if self.D_boot is None:
            return self.D, self.D
        q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
        lo, hi = torch.quantile(self.D_boot, q, dim=0)
        return lo, hi


def discriminability_from_ends(p_ends: torch.Tensor, T: int, *, alpha: float = 2.0, debias: bool = True,
                               bootstrap: int = 0, generator: torch.Generator | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ground truth's D (K, T + 1) from the p of every continuation's end, and its bootstrap over the N states.

    V at grid index j (1 <= j < T) is the mean of p over the M ends continued from that state (`debiased_values`
    when ``debias``); D[j] = renyi(V), D[0] = 0, D[T] = renyi(p) over all the ends together. This is the part of
    `rollout_estimate` after sampling: given the same ends it gives the same D, so any reward can be re-scored on
    stored ends without sampling again (`research/probes/timing_cache.py`).

    Args:
        p_ends: (T − 1, M, N, K) float64 p of the ends (for T = 1: (1, 1, N, K), the clean samples' p).
        T: grid steps.
        alpha: Rényi order; debias: remove the Monte-Carlo variance of the M-sample means.
        bootstrap: R replicates over the N states (0 = none); generator: draws the bootstrap's seed.

    Returns:
        (D (K, T + 1) float64, D_boot (R, K, T + 1) or None).
    """
    from recast.informativeness import renyi_rows

    if p_ends.ndim != 4 or p_ends.shape[0] != max(T - 1, 1):
        raise ValueError(f"p_ends must be (T - 1, M, N, K) = ({max(T - 1, 1)}, M, N, K), got {tuple(p_ends.shape)}")
    p_ends = p_ends.double().cpu()
    _, _, N, K = p_ends.shape
    V = torch.zeros(T + 1, N, K, dtype=torch.float64)
    for j in range(1, T):
        V[j] = debiased_values(p_ends[j - 1]) if debias else p_ends[j - 1].mean(0)
    pe = p_ends.numpy()

    def estimate(idx: np.ndarray) -> np.ndarray:
        """D (R, K, T+1) on resampled states idx (R, N)."""
        D = np.zeros((idx.shape[0], K, T + 1))
        for k in range(K):
            for j in range(1, T):
                D[:, k, j] = renyi_rows(V[j, :, k].numpy()[idx], alpha)
            D[:, k, T] = renyi_rows(pe[:, :, :, k][:, :, idx].transpose(2, 0, 1, 3).reshape(idx.shape[0], -1), alpha)
        return D

    D = torch.from_numpy(estimate(np.arange(N)[None])[0])
    D_boot = None
    if bootstrap > 0:
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        idx = np.random.default_rng(seed).integers(0, N, size=(bootstrap, N))
        D_boot = torch.from_numpy(estimate(idx))
    return D, D_boot


@torch.no_grad()
def rollout_estimate(transformer, embeds: PromptEmbeds, x0: torch.Tensor, sigmas: torch.Tensor, reward_fn: RewardFn,
                     prompts: Sequence[str], decode: Callable[[torch.Tensor], torch.Tensor], *, num_rollouts: int = 8,
                     substeps: int = 8, to_p: Callable[[torch.Tensor], torch.Tensor] | None = None,
                     alpha: float = 2.0, debias: bool = True, bootstrap: int = 0,
                     generator: torch.Generator | None = None) -> RolloutEstimate:
    """D(σ_j) on the whole grid from ancestral continuations of forward-noised model samples (docs/method.md §5, 2).

    Each clean sample x_0 is forward-noised to every interior σ_j (fresh ε per j), continued M times down the fine
    sub-grid, and V = the mean of p over its M ends (`debiased_values` removes the Monte-Carlo variance).
    D[j] = renyi(V); D[T] = renyi(p) over all the ends together.

    Args:
        x0: (N, C, H, W) the model's own clean samples; `embeds` / `prompts` match them.
        reward_fn: (images, prompts) -> (N,) or (N, K); every reward shares the continuations.
        to_p: maps raw rewards (..., K) to p_k (the trainer's normalisation, fixed from the clean batch); None uses
            the raw rewards (they must be ≥ 0).
        num_rollouts, substeps: M continuations per state; ancestral steps per coarse step.
        alpha: Rényi order. debias: remove the Monte-Carlo variance of the M-sample means.
        bootstrap: R replicates over the N states for confidence bands (0 = none).
        generator: RNG of the forward noise, the continuations and the bootstrap.

    Returns:
        RolloutEstimate (not PAV-projected; the caller post-processes).
    """
    T = len(sigmas) - 1
    raw = reward_fn(decode(x0), list(prompts)).float()
    scalar = raw.ndim == 1

    def as_p(r: torch.Tensor) -> torch.Tensor:
        r = r[..., None] if scalar else r
        return (to_p(r) if to_p is not None else r).double().cpu()

    p_clean = as_p(raw)
    ends = []
    for j in range(1, T):
        sigma = float(sigmas[j])
        eps = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
        x_sigma = (1 - sigma) * x0 + sigma * eps
        ends.append(as_p(_continuation_rewards(transformer, embeds, x_sigma, j, sigmas, reward_fn, prompts, decode,
                                               num_rollouts, substeps, generator)))
    p_ends = torch.stack(ends) if ends else p_clean[None, None]
    D, D_boot = discriminability_from_ends(p_ends, T, alpha=alpha, debias=debias, bootstrap=bootstrap,
                                           generator=generator)
    return RolloutEstimate(sigmas=sigmas, D=D, D_boot=D_boot, p_clean=p_clean, p_ends=p_ends, scalar_reward=scalar)


def rollout_discriminability(transformer, embeds: PromptEmbeds, x0: torch.Tensor, sigmas: torch.Tensor,
                             reward_fn: RewardFn, prompts: Sequence[str], decode, **kw) -> torch.Tensor:
    """D of `rollout_estimate`: (T + 1,) for a scalar reward_fn, (K, T + 1) for a K-output one."""
    est = rollout_estimate(transformer, embeds, x0, sigmas, reward_fn, prompts, decode, **kw)
    return est.D[0] if est.scalar_reward else est.D


def reward_agreement(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Welch z-score of the difference of mean rewards of two samplers, per reward.

    Args:
        a, b: (Na, K) and (Nb, K) rewards (or p) of independent samples.

    Returns:
        (K,) float64 z = (mean a − mean b) / sqrt(var a / Na + var b / Nb); 0 where both are constant and equal.
    """
    a, b = a.double(), b.double()
    diff = a.mean(0) - b.mean(0)
    se = (a.var(0) / a.shape[0] + b.var(0) / b.shape[0]).sqrt()
    return torch.where(se > 0, diff / se.clamp_min(1e-300), torch.where(diff == 0, 0.0, math.inf * diff.sign()))
