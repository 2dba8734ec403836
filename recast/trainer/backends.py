"""The optimisation phase of one iteration, per backend: NFT (DiffusionNFT) and GRPO (Flow-GRPO).

Both accumulate gradients over the iteration's training examples (one column per forward batch, optionally split
into `grad_accum` chunks); the caller clips and steps the optimiser. Examples are (sample i, column j) pairs: each
sample trains `train_columns` columns drawn at random from the eligible ones, and its signal at column j is S[i, j],
the signal matrix `recast.credit.Credit.normalise` made (a mixing weight for nft, an advantage for grpo). The sample
and the column it trains at are drawn together and read together, so a signal never belongs to another step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from recast.sampling import PromptEmbeds, predict_velocity, sde_transition
from recast.trainer.losses import gaussian_mean_kl, grpo_loss, nft_loss

__all__ = ["Rollouts", "OptOutput", "NonFiniteLossError", "RewardError", "draw_columns", "nft_optimise", "grpo_optimise"]


class NonFiniteLossError(FloatingPointError):
    """A NaN/inf loss or gradient: the run stops before the optimiser step, the last checkpoint stays intact."""


class RewardError(NonFiniteLossError):
    """A reward returned NaN/inf or the wrong shape: the run stops naming it, the last checkpoint stays intact."""


@dataclass(frozen=True)
class Rollouts:
    """One iteration's samples from the old policy.

    Attributes:
        prompts: B prompt texts (groups of G contiguous).
        embeds: their conditioning (batch B).
        x0: clean samples (B, C, H, W).
        xs: SDE trajectory (T+1, B, C, H, W) (grpo only).
        x0_hats: the sampler's Tweedie predictions (T, B, C, H, W) (grpo only).
        log_probs: old-policy log-probs of the transitions (T, B) (grpo only).
    """

    prompts: list[str]
    embeds: PromptEmbeds
    x0: torch.Tensor
    xs: torch.Tensor | None = None
    x0_hats: torch.Tensor | None = None
    log_probs: torch.Tensor | None = None


@dataclass(frozen=True)
class OptOutput:
    """Loss parts (means over examples) and the Tweedie proxies gathered for informativeness.

    Attributes:
        parts: {"loss", "policy", "kl", ...} floats.
        proxy_x0: x0_hat of the informativeness samples (M, C, H, W), or None.
        proxy_sample: their sample index (M,).
        proxy_row: their grid row j (sigma_j) (M,).
    """

    parts: dict
    proxy_x0: torch.Tensor | None = None
    proxy_sample: torch.Tensor | None = None
    proxy_row: torch.Tensor | None = None


def draw_columns(B: int, eligible: int, m: int, generator: torch.Generator) -> torch.Tensor:
    """A random subset of m of the first `eligible` columns per sample, as a mask (B, eligible) bool."""
    if m <= 0 or m >= eligible:
        return torch.ones(B, eligible, dtype=torch.bool)
    order = torch.rand(B, eligible, generator=generator).argsort(dim=1)[:, :m]
    return torch.zeros(B, eligible, dtype=torch.bool).scatter_(1, order, True)


def _sub(embeds: PromptEmbeds, idx: torch.Tensor) -> PromptEmbeds:
    return PromptEmbeds(embeds.encoder_hidden_states[idx], embeds.pooled_projections[idx])


def _chunks(idx: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [c for c in torch.tensor_split(idx, max(1, n)) if c.numel()]


def _check(loss: torch.Tensor, where: str) -> None:
    if not torch.isfinite(loss).all():
        raise NonFiniteLossError(f"non-finite loss ({loss.item()}) at {where}; stopping before the optimiser step "
                                 "(the last checkpoint is intact). Lower lr or nft_beta, or enable grad_clip.")


def nft_optimise(model, policy, ro: Rollouts, S: torch.Tensor, sigmas: torch.Tensor, cfg,
                 generator: torch.Generator, accelerator, info_mask: torch.Tensor | None) -> OptOutput:
    """DiffusionNFT forward-process loss over the iteration's (sample, column) examples; accumulates gradients.

    Args:
        model: the (possibly DDP-wrapped) transformer to differentiate through.
        policy: `Policy` (old and reference forwards).
        ro: rollouts (x0, embeds).
        S: (B, T) the signal matrix: S[i, j] is sample i's mixing weight p in [0, 1] when it trains at column j
            (which trains at sigma_j).
        sigmas: (T+1,) grid.
        cfg: TrainConfig.
        generator: CPU RNG for columns and forward-process noise.
        accelerator: `accelerate.Accelerator`.
        info_mask: (B,) bool, samples whose x0_hat = x_sigma - sigma v_old is kept for informativeness, or None.
    """
    B, T = ro.x0.shape[0], len(sigmas) - 1
    eligible = T - 1 if cfg.skip_last_column else T
    mask = draw_columns(B, eligible, cfg.train_columns, generator)
    N = int(mask.sum())
    scale = cfg.adv_clip_max / cfg.nft_beta if cfg.nft_loss_scale else 1.0
    work = [(j, c) for j in range(eligible) for c in _chunks(mask[:, j].nonzero()[:, 0], cfg.grad_accum)]
    sums = {"loss": 0.0, "policy": 0.0, "kl": 0.0}
    proxies = []
    for n, (j, idx) in enumerate(work):
        sigma = sigmas[j].item()
        x0 = ro.x0[idx]
        eps = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
        x_sigma = (1 - sigma) * x0 + sigma * eps
        u = eps - x0
        emb = _sub(ro.embeds, idx.to(x0.device))
        with torch.no_grad(), accelerator.autocast():
            with policy.use("old") as tr:
                v_old = predict_velocity(tr, x_sigma, sigma, emb).float()
            v_ref = None
            if cfg.kl_beta > 0:
                with policy.use("ref") as tr:
                    v_ref = predict_velocity(tr, x_sigma, sigma, emb).float()
        if info_mask is not None and 0 < j:
            keep = info_mask[idx]
            if keep.any():
                proxies.append((x_sigma[keep] - sigma * v_old[keep], idx[keep], torch.full((int(keep.sum()),), j)))
        sync = n == len(work) - 1
        with (accelerator.no_sync(model) if not sync else _null()), accelerator.autocast():
            v_theta = predict_velocity(model, x_sigma, sigma, emb).float()
            p_j = S[idx, j]
            out = nft_loss(v_theta, v_old, u, p_j.to(x0.device), nft_beta=cfg.nft_beta, norm=cfg.nft_norm,
                           sigma=torch.full((idx.numel(),), sigma, device=x0.device),
                           scale=scale, v_ref=v_ref, kl_beta=cfg.kl_beta)
            _check(out.loss, f"column {j}")
            accelerator.backward(out.loss * (idx.numel() / N))
        for k in sums:
            sums[k] += getattr(out, k).item() * idx.numel() / N
    if not proxies:
        return OptOutput(parts=sums)
    x, s, r = (torch.cat(t) for t in zip(*proxies))
    return OptOutput(parts=sums, proxy_x0=x, proxy_sample=s, proxy_row=r)


def grpo_optimise(model, policy, ro: Rollouts, S: torch.Tensor, sigmas: torch.Tensor, cfg,
                  generator: torch.Generator, accelerator, info_mask: torch.Tensor | None) -> OptOutput:
    """Flow-GRPO PPO-clip over stored SDE transitions; accumulates gradients.

    The deterministic last step (into sigma = 0) has no likelihood and is never trained, as in Flow-GRPO (so W is
    solved over the first T − 1 columns). Transitions are scored with the step that made them (`cfg.sde_type`).
    Informativeness proxies come free from the sampler's own x0_hats at every interior grid row.

    Args:
        S: (B, T) the signal matrix of advantages A_j in [−c, c]; other arguments as in `nft_optimise`.
    """
    B, T = ro.x0.shape[0], len(sigmas) - 1
    eligible = T - 1
    mask = draw_columns(B, eligible, cfg.train_columns, generator)
    N = int(mask.sum())
    work = [(j, c) for j in range(eligible) for c in _chunks(mask[:, j].nonzero()[:, 0], cfg.grad_accum)]
    sums = {"loss": 0.0, "policy": 0.0, "kl": 0.0, "ratio": 0.0, "clip_frac": 0.0}
    sigma_max = sigmas[1].item()
    for n, (j, idx) in enumerate(work):
        sigma, sigma_next = sigmas[j].item(), sigmas[j + 1].item()
        dev_idx = idx.to(ro.x0.device)
        x, x_next, old_lp = ro.xs[j][dev_idx], ro.xs[j + 1][dev_idx], ro.log_probs[j][dev_idx]
        emb = _sub(ro.embeds, dev_idx)
        kl = None
        sync = n == len(work) - 1
        with (accelerator.no_sync(model) if not sync else _null()), accelerator.autocast():
            v = predict_velocity(model, x, sigma, emb).float()
            step = sde_transition(cfg.sde_type, x, v, sigma, sigma_next, cfg.sde_noise_level, sigma_max=sigma_max,
                                  x_next=x_next)
            if cfg.kl_beta > 0:
                with torch.no_grad(), policy.use("ref") as tr:
                    v_ref = predict_velocity(tr, x, sigma, emb).float()
                    ref = sde_transition(cfg.sde_type, x, v_ref, sigma, sigma_next, cfg.sde_noise_level,
                                         sigma_max=sigma_max, x_next=x_next)
                kl = gaussian_mean_kl(step.mean, ref.mean, step.std.expand(idx.numel()))
            A_j = S[idx, j].to(ro.x0.device)
            out = grpo_loss(step.log_prob, old_lp, A_j, clip_range=cfg.clip_range, kl=kl, kl_beta=cfg.kl_beta)
            _check(out.loss, f"column {j}")
            accelerator.backward(out.loss * (idx.numel() / N))
        for k in sums:
            sums[k] += getattr(out, k).item() * idx.numel() / N
    if info_mask is None or ro.x0_hats is None:
        return OptOutput(parts=sums)
    s = info_mask.nonzero()[:, 0]
    rows = torch.arange(1, T)
    x = ro.x0_hats[1:T][:, s.to(ro.x0.device)].flatten(0, 1)
    return OptOutput(parts=sums, proxy_x0=x, proxy_sample=s.repeat(T - 1), proxy_row=rows.repeat_interleave(s.numel()))


class _null:
    """A no-op context manager (contextlib.nullcontext without the import at every call)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
