"""Density-ratio profiles, the input of the paper's offline W (docs/method.md §0; the release does not ship this).

For each observation n (a proposal sample x_0 of a prompt c) and each scheduler step j, noise x_0 to the step's
destination σ = σ_{j+1}, continue from there with the model M times (ancestral steps on a sub-grid, which sample the
model's posterior of x_0 given x_σ: `recast.informativeness.rollout`) and score every reward on the ends:

    ρ_k[n, j] = Ê[r_k | x_σ] / Ê[r_k | c],      Ê[r_k | c] the mean over the model's own samples of c (same sampler)

At σ = 0 (the last column) the continuation is the proposal itself: Ê[r_k | x_0] = r_k(x_0), no Monte-Carlo noise.
The mean of M continuations has a variance inflated by the Monte-Carlo noise E[s²]/M, which would inflate D at every
noisy column and not at the clean one; ``debias`` shrinks each column's ratios toward their mean by exactly that
excess (`recast.informativeness.rollout.debiased_values`, as the `rollout` ground truth does).

Ratios need a reward that is never negative: a negative score is refused, naming the reward, unless an ``offset``
(added to every score of that reward, recorded in the profile) makes it non-negative. A prompt whose own samples all
score 0 on a reward: where its continuations score 0 too the ratio is 1 (0 / 0: nothing told apart), where they
score above 0 the ratio is undefined and that observation is left out of the reward's array (counted in the meta).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from recast.archives import DensityProfile
from recast.informativeness.rollout import debiased_values, fine_grid, sample_ancestral

__all__ = ["density_ratios", "ProfileCost"]


class ProfileCost(dict):
    """What a profile cost: reward queries (images scored), model evaluations and seconds."""


def _score(world, rewards: dict, x0: torch.Tensor, prompts: list[str], offsets: dict, batch: int) -> torch.Tensor:
    """Raw scores (N, K) of model-space samples, offsets added; a negative score is refused naming the reward."""
    out = []
    for i in range(0, x0.shape[0], batch):
        images = world.decode(x0[i:i + batch])
        cols = [fn(images, prompts[i:i + batch]).detach().double().cpu() + offsets.get(name, 0.0)
                for name, fn in rewards.items()]
        out.append(torch.stack(cols, dim=-1))
    scores = torch.cat(out)
    for k, name in enumerate(rewards):
        low = float(scores[:, k].min())
        if not torch.isfinite(scores[:, k]).all():
            raise ValueError(f"reward {name!r} returned NaN or inf while profiling")
        if low < 0:
            raise ValueError(f"reward {name!r} scored {low:.4g} < 0: a density ratio needs a non-negative reward; "
                             f"pass --reward-offset {name}=C with C >= {-low:.4g} (recorded in the profile)")
    return scores


def _ratio(r: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """r (..., N, K) / mu (N, K); where mu is 0 (every base sample of the prompt scored 0), 0 / 0 is 1 (a reward that
    never fires for that prompt tells nothing apart) and anything above 0 is undefined (NaN: the observation is left
    out for that reward)."""
    zero = mu == 0
    out = r / torch.where(zero, torch.ones_like(mu), mu)
    return torch.where(zero, torch.where(r == 0, torch.ones_like(r), torch.full_like(r, float("nan"))), out)


@torch.no_grad()
def _continue(transformer, embeds, x: torch.Tensor, grid: torch.Tensor, M: int, batch: int,
              generator: torch.Generator) -> torch.Tensor:
    """M ancestral continuations of each state x (N, ...) down ``grid``; returns the ends (M, N, ...)."""
    xs = x.repeat(M, *([1] * (x.ndim - 1)))
    emb = embeds.repeat(M)
    ends = []
    for i in range(0, xs.shape[0], batch):
        sub = type(emb)(emb.encoder_hidden_states[i:i + batch], emb.pooled_projections[i:i + batch])
        ends.append(sample_ancestral(transformer, sub, xs[i:i + batch], grid, generator))
    return torch.cat(ends).reshape(M, *x.shape)


@torch.no_grad()
def density_ratios(world, reward_names: Sequence[str], prompts: Sequence[str], proposals: torch.Tensor, *,
                   sigmas: torch.Tensor, num_continuations: int = 4, num_base: int = 8, substeps: int = 4,
                   seed: int = 0, offsets: dict | None = None, debias: bool = True, batch_size: int = 256,
                   meta: dict | None = None, progress: Callable[[str], None] | None = None) -> DensityProfile:
    """The density-ratio profile of a model's rewards, measured on proposal samples.

    Args:
        world: a `recast.world.World` (its transformer, encode_prompts, decode and reward are used).
        reward_names: the rewards to profile.
        prompts: N prompts, one per proposal (repeats allowed: several proposals of one prompt).
        proposals: (N, C, H, W) proposal samples in model space (on the world's device).
        sigmas: (T + 1,) the training grid; column j is its step j, measured at σ_{j+1}.
        num_continuations: M continuations per noised proposal. num_base: the model's own samples per prompt for
            E[r | prompt]. substeps: ancestral steps per grid step of every continuation and base sample.
        seed: seeds the forward noise and the continuations.
        offsets: reward name → constant added to its scores (for rewards that can be negative).
        debias: remove the continuations' Monte-Carlo excess from each noisy column (above).
        batch_size: states per forward pass.
        meta: extra entries for the profile's meta (the proposal's name, the model, ...).
        progress: called with a short line after each column.

    Returns:
        a `DensityProfile` whose meta records M, num_base, substeps, seed, offsets, what was left out and the cost
        (``meta["cost"]``: reward queries, model evaluations, seconds).
    """
    start = time.perf_counter()
    names, offsets = list(reward_names), dict(offsets or {})
    N, M = len(prompts), int(num_continuations)
    if proposals.shape[0] != N or N < 1:
        raise ValueError(f"need one proposal per prompt, got {proposals.shape[0]} proposals for {N} prompts")
    if M < 1 or num_base < 1 or substeps < 1:
        raise ValueError("num_continuations, num_base and substeps must be >= 1")
    device = proposals.device
    rewards = {n: world.reward(n, device) for n in names}
    tr = world.transformer
    gen = torch.Generator().manual_seed(int(seed))
    T = len(sigmas) - 1
    prompts = list(prompts)
    embeds = world.encode_prompts(prompts)
    queries = evals = 0

    # E[r | prompt]: the model's own samples, drawn with the continuations' sampler from pure noise
    distinct = list(dict.fromkeys(prompts))
    base_emb = world.encode_prompts(distinct)
    noise = torch.randn((num_base * len(distinct), *proposals.shape[1:]), generator=gen).to(device, proposals.dtype)
    grid0 = fine_grid(sigmas, 0, substeps)
    tiled = base_emb.repeat(num_base)  # row i is prompt i % P
    base_x = torch.cat([sample_ancestral(tr, type(tiled)(tiled.encoder_hidden_states[i:i + batch_size],
                                                          tiled.pooled_projections[i:i + batch_size]),
                                         noise[i:i + batch_size], grid0, gen)
                        for i in range(0, noise.shape[0], batch_size)])
    base = _score(world, rewards, base_x, distinct * num_base, offsets, batch_size).reshape(num_base, len(distinct), -1)
    mu = base.mean(0)  # (P, K)
    queries += base_x.shape[0]
    evals += base_x.shape[0] * (len(grid0) - 1)
    which = torch.tensor([distinct.index(p) for p in prompts])
    mu_n = mu[which]  # (N, K)
    if progress:
        progress(f"E[r | prompt] from {num_base} samples of {len(distinct)} prompts")

    ratios = torch.zeros(N, T, len(names), dtype=torch.float64)
    for j in range(T):
        sigma = float(sigmas[j + 1])
        if sigma == 0.0:
            V = _score(world, rewards, proposals, prompts, offsets, batch_size)
            queries += N
            rho = _ratio(V[None], mu_n)[0]
        else:
            eps = torch.randn(proposals.shape, generator=gen).to(device, proposals.dtype)
            x_sigma = (1 - sigma) * proposals + sigma * eps
            grid = fine_grid(sigmas, j + 1, substeps)
            ends = _continue(tr, embeds, x_sigma, grid, M, batch_size, gen)
            r = _score(world, rewards, ends.flatten(0, 1), prompts * M, offsets, batch_size).reshape(M, N, -1)
            queries += M * N
            evals += M * N * (len(grid) - 1)
            rho_m = _ratio(r, mu_n)
            rho = debiased_values(rho_m.nan_to_num(1.0)) if debias else rho_m.mean(0)
            rho[torch.isnan(rho_m).any(0)] = float("nan")
        ratios[:, j] = rho
        if progress:
            progress(f"column {j + 1}/{T} (sigma {sigma:.4f})")
    kept = torch.isfinite(ratios).all(1)  # (N, K): an observation with an undefined ratio at some step is left out
    out = {n: ratios[kept[:, k], :, k].numpy() for k, n in enumerate(names)}
    empty = [n for n in names if out[n].shape[0] == 0]
    if empty:
        raise ValueError(f"rewards {empty}: every observation scored above 0 where the model's own samples of its "
                         "prompt all score 0, so no density ratio is defined; raise --num-base or pass an offset")
    record = dict(meta or {})
    record.update({"num_observations": N, "num_continuations": M, "num_base": int(num_base), "substeps": int(substeps),
                   "seed": int(seed), "debias": bool(debias), "offsets": offsets, "sampler": "ancestral",
                   "left_out": {n: int((~kept[:, k]).sum()) for k, n in enumerate(names)},
                   "base_mean": {n: float(mu[:, k].mean()) for k, n in enumerate(names)},
                   "cost": {"reward_queries": int(queries), "model_evaluations": int(evals),
                            "seconds": round(time.perf_counter() - start, 2)}})
    return DensityProfile(np.asarray(sigmas, dtype=np.float64), out, record)
