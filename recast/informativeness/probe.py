"""When is each reward informative? D_k(σ) of a world's rewards from `tweedie` and the `rollout` ground truth.

Both estimators see the same clean samples x_0, drawn from the model by the ancestral sampler on the fine sub-grid
(the distribution the ground truth's continuations sample, so both sides of it are one joint distribution), and
the same p_k: the trainer's normalisation with the mean and std of the clean batch, near-constant rewards silenced
to p = 0.5 (docs/method.md §3).

- `tweedie`: f_j = p_k(x̂_0(x_{σ_j})) from one forward pass per grid point, calibrated leave-one-out
  (`recast.informativeness.tweedie_discriminability`); a lower bound on D, exact as σ → 0.
- `rollout`: V = mean of p_k over M ancestral continuations of x_{σ_j} (`recast.informativeness.rollout.rollout_estimate`).

Bands are bootstrap percentiles over the samples. W comes from the gains as the trainer gets it: each profile is
shrunk towards the common one by its bootstrap noise share (`recast.informativeness.profile_noise_share`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from recast.informativeness import profile_noise_share, telescoping_gains, tweedie_discriminability
from recast.informativeness.rollout import fine_grid, reward_agreement, rollout_estimate, sample_ancestral
from recast.sampling import predict_velocity, sample_ode, sigma_schedule
from recast.solver import solve_weights
from recast.advantages import reward_to_p, silenced_rewards

__all__ = ["Profile", "ends_profile", "ModelBatch", "spearman", "stack_rewards", "p_map", "model_batch", "tweedie_pairs",
           "tweedie_estimate", "estimate_profiles"]

ESTIMATORS = ("tweedie", "rollout")


@dataclass(frozen=True)
class Profile:
    """D_k(σ) of K rewards from one estimator, with its band, gains and the W they give.

    Attributes:
        estimator: "tweedie" | "rollout".
        reward_names: the K rewards, row order.
        sigmas: (T + 1,) grid, σ_0 = 1 … σ_T = 0.
        D: (K, T + 1) float64 (not projected); D_lo, D_hi: its 5-95 % bootstrap band.
        gains: (K, T) telescoping gains of D.
        noise_share: (K,) bootstrap noise share of each reward's step profile (1 = indistinguishable from noise).
        W: (K, T) the weights these gains give (rows λ, equal columns).
        lam: (K,) budgets, normalised.
        silenced: (K,) bool, rewards whose batch std fell below the floor (p = 0.5, D = 0).
        checks: consistency checks (rollout only; see `estimate_profiles`).
        D_boot: (R, K, T + 1) bootstrap replicates of D, or None.
    """

    estimator: str
    reward_names: tuple[str, ...]
    sigmas: torch.Tensor
    D: torch.Tensor
    D_lo: torch.Tensor
    D_hi: torch.Tensor
    gains: torch.Tensor
    noise_share: torch.Tensor
    W: torch.Tensor
    lam: torch.Tensor
    silenced: torch.Tensor
    checks: dict = field(default_factory=dict)
    D_boot: torch.Tensor | None = None

    def rank_stability(self) -> torch.Tensor:
        """(K,) median Spearman of bootstrap replicates' gains with the point estimate's: the rank agreement the
        sampling noise alone allows (NaN without a bootstrap or for a reward without gain)."""
        if self.D_boot is None:
            return torch.full((len(self.reward_names),), float("nan"), dtype=torch.float64)
        R, K, T1 = self.D_boot.shape
        g_boot = telescoping_gains(self.D_boot.reshape(R * K, T1)).reshape(R, K, T1 - 1)
        rho = [[spearman(g_boot[r, k], self.gains[k]) for r in range(R)] for k in range(K)]
        return torch.tensor([float(np.nanmedian(r)) if np.isfinite(r).any() else float("nan") for r in rho],
                            dtype=torch.float64)

    def subset(self, names: Sequence[str], lam: Sequence[float] = (), temperature: float = 1.0) -> Profile:
        """The profile of some of the rewards, with W re-solved among them (budgets `lam`, default equal)."""
        rows = [self.reward_names.index(n) for n in names]
        lam_t = torch.as_tensor(lam, dtype=torch.float64) if lam else torch.ones(len(rows), dtype=torch.float64)
        boot = None if self.D_boot is None else self.D_boot[:, rows]
        checks = {k: [v[r] for r in rows] for k, v in self.checks.items()}
        return _profile(self.estimator, names, self.sigmas, self.D[rows], boot, lam_t / lam_t.sum(),
                        self.silenced[rows], temperature, checks)

    def to_json(self) -> dict:
        """The profile as plain JSON-ready data (what `python -m recast profile` writes)."""
        return {"estimator": self.estimator, "reward_names": list(self.reward_names), "sigmas": self.sigmas.tolist(),
                "D": self.D.tolist(), "D_lo": self.D_lo.tolist(), "D_hi": self.D_hi.tolist(),
                "gains": self.gains.tolist(), "noise_share": self.noise_share.tolist(), "W": self.W.tolist(),
                "lam": self.lam.tolist(), "silenced": self.silenced.tolist(), "checks": self.checks}


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two 1-D tensors (`scipy.stats.spearmanr`, average ranks for ties); NaN if either
    is constant."""
    import warnings

    from scipy.stats import spearmanr

    x, y = (t.double().cpu().numpy() for t in (a, b))
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(x, y).statistic)


def stack_rewards(rewards: Sequence) -> callable:
    """Combine K reward functions into one returning (N, K), so rollouts are shared across rewards."""

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return torch.stack([r(images, prompts).float() for r in rewards], dim=-1)

    return reward


def p_map(R_clean: torch.Tensor, adv_clip_max: float = 5.0, std_floor: float = 1e-2, reward_range: float = 1.0):
    """The trainer's reward → p map, frozen at the clean batch's mean and std (one group, global std).

    Returns:
        (to_p: raw rewards (..., K) -> p (..., K), silenced (K,) bool).
    """
    mean, std = R_clean.mean(0), R_clean.std(0, unbiased=False)
    silenced = silenced_rewards(R_clean.T, std_floor, reward_range)

    def to_p(R: torch.Tensor) -> torch.Tensor:
        _, p = reward_to_p(R, mean, std, adv_clip_max)
        return torch.where(silenced, torch.full_like(p, 0.5), p)

    return to_p, silenced


@torch.no_grad()
def tweedie_pairs(world, embeds, prompts, x0, sigmas, reward, to_p, *, generator=None,
                  on_prediction=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The tweedie estimator's inputs on clean samples x0: p_clean (N, K), and p_proxy (T + 1, N, K), p_k of the
    one-step prediction x̂_0 of a forward-noised x_σ at every interior grid point (rows 0 and T are NaN).

    ``on_prediction(j, images)``, if given, sees each column's decoded x̂_0 (for analyses that need more than p_k).
    """
    T = len(sigmas) - 1
    p_clean = to_p(reward(world.decode(x0), list(prompts))).double().cpu()  # (N, K)
    N, K = p_clean.shape
    p_proxy = torch.full((T + 1, N, K), float("nan"), dtype=torch.float64)
    for j in range(1, T):
        sigma = float(sigmas[j])
        eps = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
        x_sigma = (1 - sigma) * x0 + sigma * eps
        images = world.decode(x_sigma - sigma * predict_velocity(world.transformer, x_sigma, sigma, embeds))
        if on_prediction is not None:
            on_prediction(j, images)
        p_proxy[j] = to_p(reward(images, list(prompts))).double().cpu()
    return p_clean, p_proxy


@torch.no_grad()
def tweedie_estimate(world, embeds, prompts, x0, sigmas, reward, to_p, *, alpha=2.0, bootstrap=200,
                     generator=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The tweedie D (K, T + 1) on clean samples x0 with every sample's proxy at every interior grid point
    (`tweedie_pairs`), and its bootstrap replicates (R, K, T + 1) over samples."""
    p_clean, p_proxy = tweedie_pairs(world, embeds, prompts, x0, sigmas, reward, to_p, generator=generator)
    N = p_clean.shape[0]
    pc, pp = p_clean.T.numpy(), p_proxy.permute(2, 0, 1).numpy()  # (K, N), (K, T+1, N)
    D = tweedie_discriminability(pc, pp, alpha)
    if bootstrap <= 0:
        return D, None
    rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    boots = [tweedie_discriminability(pc[:, idx], pp[:, :, idx], alpha)
             for idx in rng.integers(0, N, size=(bootstrap, N))]
    return D, torch.stack(boots)


@dataclass(frozen=True)
class ModelBatch:
    """One shared batch of model samples for the estimators (`model_batch`)."""

    reward: object  # stacked reward fn: images, prompts -> (N, K)
    sigmas: torch.Tensor
    embeds: object
    noise: torch.Tensor
    x0: torch.Tensor
    R_clean: torch.Tensor  # (N, K) raw rewards of x0, float64 on CPU
    to_p: object  # the trainer's p map, frozen at R_clean (`p_map`)
    silenced: torch.Tensor
    generator: torch.Generator  # continues after x0 was drawn: the estimators draw their noise from it


def grid_sigmas(num_steps: int, shift: float, sigmas=None) -> torch.Tensor:
    """The grid the estimators run on: `sigma_schedule(num_steps, shift)`, or ``sigmas`` given explicitly.

    Raises:
        ValueError: ``sigmas`` that do not run from 1 down to 0, strictly decreasing.
    """
    if sigmas is None:
        return sigma_schedule(num_steps, shift)
    s = torch.as_tensor(sigmas, dtype=torch.float32).flatten()
    if s.numel() < 2 or float(s[0]) != 1.0 or float(s[-1]) != 0.0 or not bool((s.diff() < 0).all()):
        raise ValueError(f"sigmas must run from 1 down to 0, strictly decreasing, got {s.tolist()}")
    return s


@torch.no_grad()
def model_batch(world, reward_names: Sequence[str], prompts: Sequence[str], *, num_steps: int = 6, shift: float = 3.0,
                substeps: int = 4, adv_clip_max: float = 5.0, std_floor: float = 1e-2, seed: int = 0,
                sigmas=None) -> ModelBatch:
    """Clean samples x_0 of the world on ``prompts`` by the ancestral sampler on the fine sub-grid, their rewards and
    the p map, seeded by ``seed`` (what `estimate_profiles` gives every estimator). ``sigmas``, when given, is the
    grid instead of `sigma_schedule(num_steps, shift)`."""
    sigmas = grid_sigmas(num_steps, shift, sigmas)
    device = next(world.transformer.parameters()).device
    reward = stack_rewards([world.reward(n, device) for n in reward_names])
    gen = torch.Generator().manual_seed(seed)
    embeds = world.encode_prompts(list(prompts))
    noise = torch.randn((len(prompts), *world.sample_shape), generator=gen).to(device)
    x0 = sample_ancestral(world.transformer, embeds, noise, fine_grid(sigmas, 0, substeps), gen)
    R_clean = reward(world.decode(x0), list(prompts)).double().cpu()
    to_p, silenced = p_map(R_clean, adv_clip_max, std_floor)
    return ModelBatch(reward, sigmas, embeds, noise, x0, R_clean, to_p, silenced, gen)


def _profile(name, reward_names, sigmas, D, D_boot, lam, silenced, temperature, checks) -> Profile:
    """Gains, noise share, W and band of one estimate."""
    gains = telescoping_gains(D)
    if D_boot is not None:
        R, K, T1 = D_boot.shape
        g_boot = telescoping_gains(D_boot.reshape(R * K, T1)).reshape(R, K, T1 - 1)
        shrunk, share = profile_noise_share(gains, g_boot)
        lo, hi = torch.quantile(D_boot, torch.tensor([0.05, 0.95], dtype=torch.float64), dim=0)
    else:
        shrunk, share, lo, hi = gains, torch.zeros(len(reward_names), dtype=torch.float64), D, D
    W = solve_weights(shrunk, lam, temperature=temperature)
    return Profile(name, tuple(reward_names), sigmas, D, lo, hi, gains, share, W, lam, silenced, checks, D_boot)


@torch.no_grad()
def estimate_profiles(world, reward_names: Sequence[str], prompts: Sequence[str], *,
                      estimators: Sequence[str] = ESTIMATORS, lam: Sequence[float] = (), num_steps: int = 6,
                      shift: float = 3.0, num_rollouts: int = 8, substeps: int = 4, alpha: float = 2.0,
                      temperature: float = 1.0, adv_clip_max: float = 5.0, std_floor: float = 1e-2,
                      bootstrap: int = 200, seed: int = 0, sigmas=None,
                      x0_substeps: int | None = None, ends=None) -> dict[str, Profile]:
    """D_k(σ), bands, gains and W of each reward from each named estimator, on one shared batch of model samples.

    Args:
        world: the model whose samples and reverse process define π and V.
        reward_names: names of the world's rewards (`World.reward`) (K of them).
        prompts: N prompts, one sample each.
        estimators: any of "tweedie", "rollout".
        lam: budgets (K,), default equal (normalised to sum 1).
        num_steps, shift: the grid (`sigma_schedule`): the columns of W.
        sigmas: another grid, 1 > … > 0, instead of num_steps and shift (to measure timing on a candidate grid).
        x0_substeps: ancestral steps per grid step for drawing x_0 only (default ``substeps``): the same clean
            batch can then be continued on a finer sub-grid, which isolates the continuations' sub-grid bias.
        num_rollouts, substeps: M continuations per state; ancestral steps per grid step (also for drawing x_0).
        alpha, temperature: Rényi order; solver temperature τ.
        adv_clip_max, std_floor: the trainer's p map (docs/method.md §3).
        bootstrap: replicates for the bands and the noise share.
        seed: seeds the samples, the forward noise, the continuations and the bootstrap.
        ends: `recast.informativeness.ends.RolloutEnds` recorded with these arguments (`record_ends`): the rollout
            profile is then scored on the stored continuation ends instead of sampling them again (40 min per
            256-sample batch at 16 substeps on 2 cores). With tweedie estimated too and a bootstrap, as
            `record_ends` records, it equals the sampled profile bit for bit in D and in the `ends_z` and `ode_z`
            checks; only the bootstrap replicates differ (their seed is ``seed`` here). The arguments (prompts,
            grid, seed, num_rollouts, substeps, x0_substeps) are checked before any compute, the clean images
            against this call's clean batch once it is drawn.

    Returns:
        {estimator: Profile}. The rollout profile's `checks` hold the consistency checks: `dp_z` (K,), the largest
        (D(σ_j) − D(σ_T)) / bootstrap s.d. (the data-processing bound holds when ≤ 2), `ends_z` (K,), the z-score
        of the continuation ends' mean p against the clean samples' (continuations reproduce π), and `ode_z` (K,),
        the clean samples' raw rewards against the T-step ODE's (how far the training sampler's distribution is).

    Raises:
        ValueError: an unknown estimator, fewer than 4 prompts, bad budgets, or ``ends`` recorded with other
            arguments or on other clean samples.
    """
    bad = [e for e in estimators if e not in ESTIMATORS]
    if bad or not estimators:
        raise ValueError(f"unknown estimator(s) {bad}; choose from {ESTIMATORS}")
    prompts, K = list(prompts), len(reward_names)
    if len(prompts) < 4:
        raise ValueError(f"need at least 4 prompts (one sample each), got {len(prompts)}")
    lam_t = torch.full((K,), 1.0 / K, dtype=torch.float64) if not lam else torch.as_tensor(lam, dtype=torch.float64)
    if lam_t.shape != (K,) or (lam_t < 0).any() or lam_t.sum() <= 0:
        raise ValueError(f"lam must be {K} budgets >= 0 with a positive sum, got {list(lam)}")
    lam_t = lam_t / lam_t.sum()
    if ends is not None:
        _check_ends(ends, prompts, grid_sigmas(num_steps, shift, sigmas), seed=seed, num_rollouts=num_rollouts,
                    substeps=substeps, x0_substeps=substeps if x0_substeps is None else x0_substeps)
    b = model_batch(world, reward_names, prompts, num_steps=num_steps, shift=shift,
                    substeps=substeps if x0_substeps is None else x0_substeps, adv_clip_max=adv_clip_max,
                    std_floor=std_floor, seed=seed, sigmas=sigmas)
    num_steps = len(b.sigmas) - 1
    out = {}
    if "tweedie" in estimators:
        D, D_boot = tweedie_estimate(world, b.embeds, prompts, b.x0, b.sigmas, b.reward, b.to_p, alpha=alpha,
                                     bootstrap=bootstrap, generator=b.generator)
        out["tweedie"] = _profile("tweedie", reward_names, b.sigmas, D, D_boot, lam_t, b.silenced, temperature, {})
    if "rollout" in estimators:
        if ends is None:
            est = rollout_estimate(world.transformer, b.embeds, b.x0, b.sigmas, b.reward, prompts, world.decode,
                                   num_rollouts=num_rollouts, substeps=substeps,
                                   to_p=lambda r: b.to_p(r.double().cpu()), alpha=alpha, bootstrap=bootstrap,
                                   generator=b.generator)
            D, D_boot, p_ends, p_clean = est.D, est.D_boot, est.p_ends, est.p_clean
        else:
            if not torch.equal(ends.clean, world.decode(b.x0).detach().float().cpu()):
                raise ValueError("the stored ends continue other clean samples than this call draws (another world "
                                 "or model version?); record them again with record_ends")
            got = ends_profile(ends, b.reward, alpha=alpha, adv_clip_max=adv_clip_max, std_floor=std_floor,
                               bootstrap=bootstrap, seed=seed)
            D, D_boot, p_clean = got["D"], got["D_boot"], b.to_p(got["R_clean"])
            p_ends = p_clean[None, None] if got["R_ends"] is None else b.to_p(got["R_ends"])
        diff = D - D[:, -1:]
        if D_boot is not None:
            sd = (D_boot - D_boot[:, :, -1:]).std(0).clamp_min(1e-12)
            dp_z = (diff[:, 1:-1] / sd[:, 1:-1]).amax(1) if num_steps > 1 else torch.zeros(K)
        else:
            dp_z = torch.full((K,), float("nan"))
        ode = sample_ode(world.transformer, b.embeds, b.sigmas, noise=b.noise, return_trajectory=False).x0
        checks = {"dp_z": dp_z.tolist(),
                  "ends_z": reward_agreement(p_ends.reshape(-1, K), p_clean).tolist(),
                  "ode_z": reward_agreement(b.R_clean, b.reward(world.decode(ode), prompts).double().cpu()).tolist()}
        out["rollout"] = _profile("rollout", reward_names, b.sigmas, D, D_boot, lam_t, b.silenced, temperature,
                                  checks)
    return out


def _check_ends(ends, prompts: Sequence[str], sigmas: torch.Tensor, **expected) -> None:
    """Refuse stored ends recorded with other arguments than the call that would score them (`estimate_profiles`)."""
    meta = dict(ends.meta)
    meta.setdefault("x0_substeps", meta.get("substeps"))
    wrong = [f"{k}={meta.get(k)} (this call: {v})" for k, v in expected.items() if meta.get(k) != v]
    if tuple(ends.prompts) != tuple(prompts):
        wrong.append(f"{len(ends.prompts)} other prompts (this call: {len(prompts)})")
    if ends.sigmas.shape != sigmas.shape or not torch.allclose(ends.sigmas.float(), sigmas.float()):
        wrong.append(f"grid {[round(x, 4) for x in ends.sigmas.tolist()]} (this call: "
                     f"{[round(x, 4) for x in sigmas.tolist()]})")
    if wrong:
        raise ValueError("the stored ends were recorded with other arguments: " + "; ".join(wrong))


def plot_profiles(profiles: dict[str, Profile], axes=None, ncols: int = 4):
    """Small multiples: D_k(σ) over the grid for each reward, one line and 5-95 % band per estimator.

    Args:
        profiles: {estimator: Profile} over the same rewards and grid.
        axes: a flat sequence of at least K axes, or None for a new figure.
        ncols: columns of the new figure.

    Returns:
        The axes used.
    """
    import matplotlib.pyplot as plt

    first = next(iter(profiles.values()))
    K = len(first.reward_names)
    if axes is None:
        nrows = -(-K // ncols)
        _, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.6 * nrows), constrained_layout=True, squeeze=False)
        axes = axes.ravel()
    x = np.arange(len(first.sigmas))
    colours = {"tweedie": "tab:blue", "rollout": "tab:orange"}
    for k, name in enumerate(first.reward_names):
        ax = axes[k]
        for est, prof in profiles.items():
            c = colours.get(est, None)
            ax.fill_between(x, prof.D_lo[k].numpy(), prof.D_hi[k].numpy(), color=c, alpha=0.2, lw=0)
            ax.plot(x, prof.D[k].numpy(), "o-", color=c, ms=3, label=est)
        title = name + (" (silenced)" if bool(first.silenced[k]) else "")
        if len(profiles) == 2 and not bool(first.silenced[k]):
            a, b = (p.gains[k] for p in profiles.values())
            title += f"  ρ={spearman(a, b):+.2f}"
        ax.set_title(title, fontsize=9)
        ax.set_xticks(x, [f"{s:.2f}" for s in first.sigmas.tolist()], fontsize=6, rotation=90)
        ax.tick_params(axis="y", labelsize=7)
    axes[0].set_ylabel("D(σ)")
    axes[0].legend(fontsize=7)
    return axes


@torch.no_grad()
def ends_profile(ends: RolloutEnds, reward_fn: Callable[[torch.Tensor, list[str]], torch.Tensor], *,
                 alpha: float = 2.0, adv_clip_max: float = 5.0, std_floor: float = 1e-2, bootstrap: int = 200,
                 seed: int = 0) -> dict:
    """The ground truth of ``reward_fn`` on stored ends: what `estimate_profiles`' rollout profile gives.

    Args:
        ends: from `record_ends`.
        reward_fn: (images, prompts) -> (N,) or (N, K) raw rewards.
        alpha, adv_clip_max, std_floor: Rényi order and the trainer's p map (`p_map`), frozen at the clean batch.
        bootstrap, seed: replicates over the N states for the bands, and their seed.

    Returns:
        dict of float64 tensors, one row per reward (K): ``D`` (K, T + 1), ``D_boot`` (R, K, T + 1) or None,
        ``gains`` (K, T), ``com`` (K,) the centre of mass of the gains (0 = noisiest column), ``com_lo`` /
        ``com_hi`` its 5-95 % band (NaN without a bootstrap), ``cleanest_third_share`` (K,) the share of the gains
        in the last ⌈T/3⌉ columns, ``silenced`` (K,) bool, the raw rewards they come from: ``R_clean`` (N, K)
        of the clean batch and ``R_ends`` (T − 1, M, N, K) of the ends (None for T = 1), and ``ends_z_first`` (K,),
        the Welch z of the raw rewards of the ends continued from the noisiest interior state against the clean
        batch's (`reward_agreement`; NaN for T = 1): whether the continuations reproduce the batch they continue.
    """
    from recast.informativeness import centre_of_mass_band, gains_centre_of_mass, telescoping_gains
    from recast.informativeness.rollout import discriminability_from_ends, reward_agreement

    def raw(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        r = reward_fn(images, prompts).float().double().cpu()  # float32 first, as the estimators see it
        return r[:, None] if r.ndim == 1 else r

    prompts = list(ends.prompts)
    R_clean = raw(ends.clean, prompts)
    to_p, silenced = p_map(R_clean, adv_clip_max, std_floor)
    T = len(ends.sigmas) - 1
    if T == 1:
        R_ends, p_ends = None, to_p(R_clean)[None, None]
        ends_z = torch.full((R_clean.shape[1],), float("nan"), dtype=torch.float64)
    else:
        _, M, N = ends.ends.shape[:3]
        R_ends = torch.stack([raw(e.reshape(M * N, *e.shape[2:]), prompts * M).reshape(M, N, -1) for e in ends.ends])
        p_ends = to_p(R_ends.reshape(-1, R_ends.shape[-1])).reshape(R_ends.shape)
        ends_z = reward_agreement(R_ends[0].flatten(0, 1), R_clean)
    D, D_boot = discriminability_from_ends(p_ends.double(), T, alpha=alpha, bootstrap=bootstrap,
                                           generator=torch.Generator().manual_seed(seed))
    gains = telescoping_gains(D)
    com = gains_centre_of_mass(gains)
    last = -(-T // 3)
    total = gains.sum(1)
    share = gains[:, -last:].sum(1) / total.where(total > 0, torch.ones(()))
    lo = hi = torch.full_like(com, float("nan"))
    if D_boot is not None:
        lo, hi = centre_of_mass_band(D_boot)
    return {"D": D, "D_boot": D_boot, "gains": gains, "com": com, "com_lo": lo, "com_hi": hi,
            "cleanest_third_share": share, "silenced": silenced, "R_clean": R_clean, "R_ends": R_ends,
            "ends_z_first": ends_z}
