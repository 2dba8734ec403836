"""Trajectory replay: past samples trained on again, so that each reward query is used more than once.

The buffer keeps one record per fresh sample: its prompt, its clean sample x_0, its raw rewards (K,), the iteration
that drew it, and its prompt offset (its group's mean reward minus its batch's mean reward, per reward). Rewards are
stored raw because a replayed sample's advantage must be recomputed every time it is replayed: the policy has moved
since it was drawn, so a sample that was good then may be ordinary now. Its advantage is taken against the *current*
iteration's statistics, through the same affine-then-clip map as fresh samples (`advantages.reward_to_p`):

    mean_k = mean_now,k + offset_k          (the current batch mean, shifted by the sample's prompt difficulty)
    std_k  = std_now,k                      (the current batch std, or the current mean group std for std_scope=group)
    A_k    = clip((R_k − mean_k) / (std_k + STD_EPS), −c, c),   p_k = 0.5 + A_k / (2c)

and a reward silenced in the current batch stays silenced (A = 0, p = 0.5). The offset matters: with hundreds of
prompts a replayed sample's prompt is rarely in the current batch, and without it a hard prompt's samples would read
as bad ones. Records age out `max_age` iterations after they were drawn; a full buffer drops its oldest first.

Only the NFT backend replays: its loss needs x_0, the signal p and a forward-noised x_σ, all of which a stored sample
still has. GRPO's ratio needs the log-probs of the policy that drew the transitions, which a replayed sample no
longer has (validation refuses it).

All functions are pure (tensors in, tensors out); `ReplayBuffer` holds tensors and plain data only, so its state goes
into a `weights_only` checkpoint as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from recast.sampling import PromptEmbeds
from recast.advantages import Advantages, group_stats, reward_to_p
from recast.trainer.backends import Rollouts

__all__ = ["ReplayBuffer", "replay_count", "group_offsets", "restandardise", "informativeness_weights", "priorities",
           "draw", "merge_replay"]


def replay_count(share: float, B: int) -> int:
    """Replayed samples per iteration: round(share · B) (0 when replay is off)."""
    return int(math.floor(share * B + 0.5)) if share > 0 else 0


def group_offsets(R: torch.Tensor, G: int) -> torch.Tensor:
    """Each sample's prompt offset: its group's mean reward minus the batch's mean reward.

    Args:
        R: raw rewards (K, B), groups of G contiguous samples share a prompt.
        G: group size.

    Returns:
        (K, B) float tensor; the G samples of a group share their offset, and the offsets of a batch average to 0.
    """
    mean, _ = group_stats(R, G, "global")
    return mean - R.mean(dim=1, keepdim=True)


def restandardise(R: torch.Tensor, offset: torch.Tensor, R_now: torch.Tensor, G: int, *, adv_clip_max: float,
                  std_scope: str = "global", silenced: torch.Tensor | None = None) -> Advantages:
    """Advantages of stored samples against the current iteration's statistics (see the module docstring).

    Args:
        R: raw rewards of the stored samples (K, N).
        offset: their prompt offsets (K, N) (`group_offsets` when they were drawn).
        R_now: raw rewards of the current fresh batch (K, B), groups of G.
        G: group size of the current batch.
        adv_clip_max: c > 0.
        std_scope: "global" (the current batch std) | "group" (the current mean within-group std).
        silenced: (K,) bool, rewards silenced in the current batch (their A is 0 and p is 0.5); None = none.

    Returns:
        `Advantages` of the stored samples: A, p (K, N), and the mean and std (K, N) each was normalised with.
    """
    if R.shape != offset.shape or R.ndim != 2 or R_now.ndim != 2 or R.shape[0] != R_now.shape[0]:
        raise ValueError(f"need R and offset (K, N) and R_now (K, B) with the same K, got {tuple(R.shape)}, "
                         f"{tuple(offset.shape)} and {tuple(R_now.shape)}")
    _, std = group_stats(R_now, G, std_scope)
    sigma = std[:, 0] if std_scope == "global" else std.mean(dim=1)  # group: every group weighs the same
    mean = R_now.mean(dim=1, keepdim=True).to(R.dtype) + offset.to(R.dtype)
    std = sigma[:, None].to(R.dtype).expand_as(R)
    A, p = reward_to_p(R, mean, std, adv_clip_max)
    if silenced is None:
        silenced = torch.zeros(R.shape[0], dtype=torch.bool)
    silenced = silenced.to(R.device)
    A = torch.where(silenced[:, None], torch.zeros_like(A), A)
    p = torch.where(silenced[:, None], torch.full_like(p, 0.5), p)
    return Advantages(A=A, p=p, mean=mean, std=std, silenced=silenced)


def informativeness_weights(lam: torch.Tensor, gains: torch.Tensor | None, trained_columns: int) -> torch.Tensor:
    """Per-reward weights of the informativeness priority: λ_k · Σ_{j < m} g[k, j], normalised to sum 1.

    The gains are ReCAST's own (the tracker's telescoping gains of D): a reward counts by its budget times how much
    its signal discriminates over the columns the backend trains. Before the tracker is ready (gains None), or when
    every weighted gain is zero, the weights fall back to λ, i.e. the |advantage| priority.

    Args:
        lam: normalised budgets (K,).
        gains: (K, T) gains, or None.
        trained_columns: m, the leading columns that are trained.
    """
    lam = lam.to(torch.float64)
    if gains is None:
        return lam / lam.sum()
    w = lam * gains.to(torch.float64)[:, :trained_columns].clamp_min(0).sum(dim=1)
    return w / w.sum() if w.sum() > 0 else lam / lam.sum()


def priorities(kind: str, A: torch.Tensor, ages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Sampling priority of each stored sample (higher is drawn more often).

    Args:
        kind: "recency" (1 / age), "advantage" or "informativeness" (both Σ_k weights_k · |A_k|; the caller passes
            λ for "advantage" and `informativeness_weights` for "informativeness").
        A: recomputed advantages (K, N).
        ages: iterations since each sample was drawn (N,), ≥ 1.
        weights: (K,) per-reward weights (ignored for recency).

    Returns:
        (N,) float64, ≥ 0.
    """
    if kind == "recency":
        return 1.0 / ages.to(torch.float64).clamp_min(1.0)
    if kind in ("advantage", "informativeness"):
        w = weights.to(torch.float64).to(A.device)
        if w.shape != (A.shape[0],):
            raise ValueError(f"need one weight per reward row of A ({A.shape[0]}), got shape {tuple(w.shape)}")
        return (w[:, None] * A.to(torch.float64).abs()).sum(dim=0).cpu()
    raise ValueError(f"unknown replay priority {kind!r}; choose recency, advantage or informativeness")


def draw(priority: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n distinct buffer positions, drawn without replacement with probability ∝ priority; sorted.

    Zero-priority samples are drawn only once every positive one is (they get a 1e-12 share). With n at least the
    buffer size every position is returned and no random number is used.
    """
    N = priority.numel()
    if n >= N:
        return torch.arange(N)
    w = priority.to(torch.float64).cpu()
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("replay priorities must be finite and >= 0")
    top = w.max()
    w = (w / top if top > 0 else torch.ones_like(w)).clamp_min(1e-12)
    return torch.multinomial(w, n, replacement=False, generator=generator).sort().values


def merge_replay(ro: Rollouts, signal: torch.Tensor, info_mask: torch.Tensor | None, x0: torch.Tensor,
                 prompts: list[str], embeds: PromptEmbeds, replay_signal: torch.Tensor):
    """The fresh rollouts with the replayed samples appended, for the NFT loss.

    Replayed samples never feed the informativeness estimate: scoring their x̂_0 would cost new reward queries.

    Args:
        signal: (B, T) the fresh samples' signal matrix; replay_signal: (n, T) the replayed samples'.

    Returns:
        (rollouts, signal (B + n, T), info_mask (B + n,) or None).
    """
    n = x0.shape[0]
    emb = PromptEmbeds(torch.cat([ro.embeds.encoder_hidden_states, embeds.encoder_hidden_states]),
                       torch.cat([ro.embeds.pooled_projections, embeds.pooled_projections]))
    merged = Rollouts(list(ro.prompts) + list(prompts), emb, torch.cat([ro.x0, x0.to(ro.x0)]))
    sig = torch.cat([signal, replay_signal.to(signal)], dim=0)
    mask = None if info_mask is None else torch.cat([info_mask, torch.zeros(n, dtype=torch.bool)])
    return merged, sig, mask


@dataclass
class ReplayBuffer:
    """Past samples: prompt, x_0, raw rewards, prompt offset and the iteration that drew them.

    Attributes:
        capacity: the most records kept; adding past it drops the oldest.
        max_age: a record drawn at iteration r is replayable up to iteration r + max_age, then dropped.
        prompts: N prompt texts.
        x0: (N, C, H, W) clean samples (CPU), or None while empty.
        R: (K, N) raw rewards.
        offset: (K, N) prompt offsets (`group_offsets`).
        iteration: (N,) long, the (1-based) iteration each record was drawn at, oldest first.
    """

    capacity: int
    max_age: int
    prompts: list = None
    x0: torch.Tensor | None = None
    R: torch.Tensor | None = None
    offset: torch.Tensor | None = None
    iteration: torch.Tensor | None = None

    def __post_init__(self):
        if self.capacity < 1 or self.max_age < 1:
            raise ValueError(f"need replay_capacity >= 1 and replay_max_age >= 1, got {self.capacity}, {self.max_age}")
        self.prompts = list(self.prompts or [])

    def __len__(self) -> int:
        return len(self.prompts)

    def ages(self, now: int) -> torch.Tensor:
        """(N,) iterations since each record was drawn, at iteration `now`."""
        return now - self.iteration if len(self) else torch.zeros(0, dtype=torch.long)

    def _keep(self, keep: torch.Tensor) -> None:
        idx = keep.nonzero()[:, 0]
        self.prompts = [self.prompts[i] for i in idx.tolist()]
        self.x0, self.R, self.offset = self.x0[idx], self.R[:, idx], self.offset[:, idx]
        self.iteration = self.iteration[idx]

    def expire(self, now: int) -> int:
        """Drop records older than max_age at iteration `now`; returns how many went."""
        if not len(self):
            return 0
        keep = self.ages(now) <= self.max_age
        gone = int((~keep).sum())
        if gone:
            self._keep(keep)
        return gone

    def add(self, prompts: list[str], x0: torch.Tensor, R: torch.Tensor, offset: torch.Tensor, iteration: int) -> None:
        """Append one iteration's fresh samples (x0 (B, C, H, W), R and offset (K, B)), then enforce the capacity."""
        B = x0.shape[0]
        if len(prompts) != B or R.shape != offset.shape or R.shape[1] != B:
            raise ValueError(f"need B={B} prompts and R, offset of shape (K, {B}), got {len(prompts)} prompts, "
                             f"{tuple(R.shape)} and {tuple(offset.shape)}")
        x0, R, offset = x0.detach().float().cpu(), R.detach().float().cpu(), offset.detach().float().cpu()
        its = torch.full((B,), int(iteration), dtype=torch.long)
        if len(self):
            x0, R = torch.cat([self.x0, x0]), torch.cat([self.R, R], dim=1)
            offset, its = torch.cat([self.offset, offset], dim=1), torch.cat([self.iteration, its])
        self.prompts, self.x0, self.R, self.offset, self.iteration = self.prompts + list(prompts), x0, R, offset, its
        if len(self) > self.capacity:
            keep = torch.zeros(len(self), dtype=torch.bool)
            keep[-self.capacity:] = True
            self._keep(keep)

    def state_dict(self) -> dict:
        """Tensors and plain data only (loads with `torch.load(weights_only=True)`)."""
        clone = (lambda t: None if t is None else t.clone())
        return {"capacity": self.capacity, "max_age": self.max_age, "prompts": list(self.prompts),
                "x0": clone(self.x0), "R": clone(self.R), "offset": clone(self.offset),
                "iteration": clone(self.iteration)}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict` (capacity and max_age come from the config, which resume has already checked)."""
        self.prompts = list(state["prompts"])
        for name in ("x0", "R", "offset", "iteration"):
            setattr(self, name, None if state[name] is None else state[name].clone())
