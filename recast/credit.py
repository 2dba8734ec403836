"""ReCAST's credit assignment as one object that any training loop feeds (docs/method.md §3, §5, §6; docs/credit.md).

A loop that already samples groups of images per prompt, scores them and trains (sample, column) pairs hands
`Credit` what it has, each iteration, in three calls:

    batch = credit.normalise(rewards, group_ids)      # K clean rewards of B samples, and each sample's prompt id
    p = credit.signal(sample, column)                 # the training signal of each trained (sample, column) pair
    credit.observe(sample, column, proxy_rewards)     # the K rewards of each pair's x̂_0; W is re-solved when due

`credit.W` is the (K, T) weight matrix in use: rows sum to λ, columns to Σλ/T. The signal of a pair is
T · Σ_k W[k, j] · s_k, with s DiffusionNFT's optimality probability p (``signal="nft"``) or Flow-GRPO's clipped
advantage A (``signal="grpo"``). The object imports torch and numpy only, and `state_dict` holds tensors and plain
data, so a loop that checkpoints it resumes bit-exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from recast.advantages import (Advantages, group_advantages, normalise_budgets, reward_sum, reward_to_p,
                               silenced_rewards, step_signal, validate_W)
from recast.informativeness.tracker import InformativenessTracker
from recast.solver import static_weights

__all__ = ["Credit", "CreditBatch", "METHODS", "SIGNALS", "group_index"]

METHODS = ("recast", "uniform", "fixed", "reward_sum")
SIGNALS = ("nft", "grpo")


def group_index(group_ids, B: int) -> tuple[torch.Tensor, int | None]:
    """Map B group (prompt) ids of any hashable kind to 0..n_groups-1, in order of first appearance.

    Returns:
        (index (B,) long, G) where G is the common group size when the groups are contiguous blocks of one size
        (the layout GRPO / DiffusionNFT trainers sample in), else None.

    Raises:
        ValueError: not B ids, or an unhashable id.
    """
    if isinstance(group_ids, torch.Tensor):
        ids = group_ids.detach().cpu().flatten().tolist()
    else:
        ids = list(group_ids)
    if len(ids) != B:
        raise ValueError(f"group_ids must give one id per sample ({B}), got {len(ids)}")
    seen: dict = {}
    try:
        index = torch.tensor([seen.setdefault(g, len(seen)) for g in ids], dtype=torch.long)
    except TypeError as err:
        raise ValueError(f"group ids must be hashable (a prompt, an int): {err}") from None
    n = len(seen)
    G = B // n if B % n == 0 else None
    if G is not None and not torch.equal(index, torch.arange(B) // G):
        G = None
    return index, G


def _by_index_stats(R: torch.Tensor, index: torch.Tensor, std_scope: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample group mean and scale for groups given by an index (any sizes, any order)."""
    K, B = R.shape
    n = int(index.max()) + 1
    idx = index.to(R.device)
    count = torch.zeros(n, dtype=R.dtype, device=R.device).index_add_(0, idx, torch.ones(B, dtype=R.dtype,
                                                                                            device=R.device))
    mean_g = torch.zeros(K, n, dtype=R.dtype, device=R.device).index_add_(1, idx, R) / count
    mean = mean_g[:, idx]
    if std_scope == "global":
        std = R.std(dim=1, unbiased=False, keepdim=True).expand(K, B)
    elif std_scope == "group":
        var_g = torch.zeros(K, n, dtype=R.dtype, device=R.device).index_add_(1, idx, (R - mean) ** 2) / count
        std = var_g.sqrt()[:, idx]
    else:
        raise ValueError(f"std_scope must be 'global' or 'group', got {std_scope!r}")
    return mean, std


@dataclass(frozen=True)
class CreditBatch:
    """One iteration's normalised rewards, as `Credit.normalise` returns them.

    Attributes:
        adv: per-reward `Advantages` (A and p (K, B), the group mean and scale, silenced (K,)).
        train: the advantages the loss reads: ``adv`` itself, or for ``reward_sum`` those of the one combined
            reward Σ_k λ_k R_k (1, B).
        group: (B,) long, each sample's group in order of first appearance.
        signal: the per-reward training signal (K', B): ``train.p`` for ``signal="nft"``, ``train.A`` for "grpo".
    """

    adv: Advantages
    train: Advantages
    group: torch.Tensor
    signal: torch.Tensor

    @property
    def B(self) -> int:
        return int(self.adv.p.shape[1])


class Credit:
    """Per-reward, per-timestep credit for any online RL loop over a T-step sampler (docs/credit.md).

    Args:
        reward_names: the K rewards, in the order their rows are given (names must be distinct).
        num_steps: T, the sampler's steps; column j is the step σ_j → σ_{j+1}, column 0 the noisiest.
        lam: budgets λ (K,), ≥ 0 with a positive sum; None for equal budgets. Normalised to Σλ = 1 internally.
        method: "recast" (live W from the x̂_0 rewards), "uniform" (W = λ/T: per-reward group normalisation then a
            weighted sum, GDPO-style), "fixed" (``fixed_W``), "reward_sum" (DiffusionNFT's raw weighted sum,
            normalised as one reward).
        signal: "nft" (p = 0.5 + A / (2c) in [0, 1]) or "grpo" (the clipped advantage A in [−c, c]).
        adv_clip_max: c, the clip of the advantages.
        std_scope: "global" (each reward's std over the batch, as DiffusionNFT) or "group".
        std_floor: a reward whose batch std is below ``std_floor × reward_range`` carries no signal (p = 0.5).
        reward_range: float or (K,), the rewards' range, for ``std_floor``.
        alpha: Rényi order of the discriminability.
        temperature, floor, uniform_mix: the solver's τ, kernel floor and mix towards λ/T (`recast.solve_weights`).
        window: iterations of (p(x_0), p(x̂_0)) pairs pooled for the estimate.
        min_pairs: W stays λ/T until every trained interior column has this many pooled pairs.
        bootstrap: replicates for the noise-share shrinkage of the profiles (0 = none).
        ema: weight of the past in the moving average of D, in [0, 1).
        trained_columns: m, the leading columns the loop trains (Flow-GRPO: T − 1); W is solved over them and the
            others keep λ/T. None = all T.
        recast_every: re-solve W every this many `observe` calls.
        fixed_W: (K, T) for ``method="fixed"``, with rows λ and equal columns.
        seed: seeds the bootstrap.

    Raises:
        ValueError: naming the argument, before anything is computed.
    """

    def __init__(self, reward_names: Sequence[str], num_steps: int, lam=None, *, method: str = "recast",
                 signal: str = "nft", adv_clip_max: float = 5.0, std_scope: str = "global", std_floor: float = 0.0,
                 reward_range=1.0, alpha: float = 2.0, temperature: float = 1.0, floor: float = 1e-6,
                 uniform_mix: float = 0.0, window: int = 16, min_pairs: int = 96, bootstrap: int = 64,
                 ema: float = 0.0, trained_columns: int | None = None, recast_every: int = 1, fixed_W=None,
                 seed: int = 0):
        if isinstance(reward_names, str) or not all(isinstance(n, str) and n for n in reward_names):
            raise ValueError(f"reward_names must be a sequence of non-empty names, got {reward_names!r}")
        names = tuple(reward_names)
        dup = sorted({n for n in names if names.count(n) > 1})
        if not names or dup:
            raise ValueError(f"reward_names must be distinct and non-empty; repeated: {dup}" if dup else
                             "reward_names is empty: give at least one reward")
        if not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be an int >= 1, got {num_steps!r}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if signal not in SIGNALS:
            raise ValueError(f"signal must be one of {SIGNALS}, got {signal!r}")
        if not adv_clip_max > 0:
            raise ValueError(f"adv_clip_max must be > 0, got {adv_clip_max}")
        if std_scope not in ("global", "group"):
            raise ValueError(f"std_scope must be 'global' or 'group', got {std_scope!r}")
        if not std_floor >= 0:
            raise ValueError(f"std_floor must be >= 0, got {std_floor}")
        if not isinstance(recast_every, int) or recast_every < 1:
            raise ValueError(f"recast_every must be an int >= 1, got {recast_every!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not 0 <= uniform_mix <= 1:
            raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix}")
        if (fixed_W is None) == (method == "fixed"):
            raise ValueError("fixed_W is required by method='fixed' and only by it")
        self.reward_names, self.K, self.T = names, len(names), num_steps
        self.lam = normalise_budgets(lam, self.K)
        if lam is not None and len(lam) and abs(float(torch.as_tensor(lam, dtype=torch.float64).sum()) - 1) <= 1e-12:
            self.lam = torch.as_tensor(lam, dtype=torch.float64).flatten().clone()  # already normalised: as given
        self.method, self.signal_kind = method, signal
        self.norm = dict(adv_clip_max=float(adv_clip_max), std_scope=std_scope, std_floor=float(std_floor))
        self.reward_range = reward_range
        self.solve = dict(temperature=float(temperature), floor=float(floor), uniform_mix=float(uniform_mix))
        self.recast_every = recast_every
        self.tracker = InformativenessTracker(self.K, self.T, alpha, ema, window=window, min_pairs=min_pairs,
                                              bootstrap=bootstrap, trained_columns=trained_columns, seed=seed) \
            if method == "recast" else None
        if method == "fixed":
            self.W = validate_W(fixed_W, self.lam, self.T)
        elif method == "reward_sum":
            self.W = None  # an aggregation, not a W: one combined reward, the same signal at every column
        else:
            self.W = static_weights(self.lam, self.T)
        self.D: torch.Tensor | None = None
        self.iteration = 0
        self.batch: CreditBatch | None = None
        self.resolved = False  # whether the last `observe` re-solved W
        self.times = {"informativeness": 0.0, "solver": 0.0}  # seconds the last `observe` spent in each phase

    # ------------------------------------------------------------------ inputs
    def _rows(self, rewards, what: str, n: int | None = None) -> torch.Tensor:
        """Rewards as a (K, n) float tensor in reward_names' order, from a (K, n) array or a {name: (n,)} mapping."""
        if isinstance(rewards, Mapping):
            keys = list(rewards)
            if sorted(keys) != sorted(self.reward_names):
                missing = sorted(set(self.reward_names) - set(keys))
                extra = sorted(set(keys) - set(self.reward_names))
                raise ValueError(f"{what}: rewards are named {list(self.reward_names)}; missing {missing}, "
                                 f"unknown {extra}")
            rows = [torch.as_tensor(rewards[n]).flatten() for n in self.reward_names]
            sizes = {r.numel() for r in rows}
            if len(sizes) != 1:
                raise ValueError(f"{what}: every reward needs the same number of values, got "
                                 f"{dict(zip(self.reward_names, (r.numel() for r in rows)))}")
            R = torch.stack(rows)
        else:
            R = torch.as_tensor(rewards)
            if R.ndim == 1 and self.K == 1:
                R = R[None]
            if R.ndim != 2 or R.shape[0] != self.K:
                raise ValueError(f"{what} must be (K={self.K}, N) for rewards {list(self.reward_names)}, got shape "
                                 f"{tuple(R.shape)}")
        if not R.is_floating_point():
            R = R.float()
        if n is not None and R.shape[1] != n:
            raise ValueError(f"{what} must hold {n} values per reward, got {R.shape[1]}")
        bad = [self.reward_names[k] for k in range(self.K) if not torch.isfinite(R[k]).all()]
        if bad:
            raise ValueError(f"{what}: rewards {bad} contain NaN or inf")
        return R

    def _pairs(self, sample, column) -> tuple[torch.Tensor, torch.Tensor]:
        if self.batch is None:
            raise RuntimeError("call normalise(rewards, group_ids) for this iteration first")
        s = torch.as_tensor(sample).flatten().long().cpu()
        c = torch.as_tensor(column).flatten().long().cpu()
        if s.shape != c.shape:
            raise ValueError(f"sample and column must have the same length, got {s.numel()} and {c.numel()}")
        if s.numel() and (int(s.min()) < 0 or int(s.max()) >= self.batch.B):
            raise ValueError(f"sample indices must lie in 0..{self.batch.B - 1} (the normalised batch)")
        if c.numel() and (int(c.min()) < 0 or int(c.max()) >= self.T):
            raise ValueError(f"columns must lie in 0..{self.T - 1} (T={self.T} steps)")
        return s, c

    # ------------------------------------------------------------------ the three calls
    def normalise(self, rewards, group_ids) -> CreditBatch:
        """Normalise this iteration's clean rewards per reward within each prompt group (docs/method.md §3).

        Args:
            rewards: (K, B) raw rewards, or {name: (B,)}.
            group_ids: (B,) each sample's group (prompt) id: ints, strings, any hashable.

        Returns:
            the `CreditBatch`, also kept for `signal` and `observe` until the next call.
        """
        R = self._rows(rewards, "rewards")
        group, G = group_index(group_ids, R.shape[1])
        if G is not None:  # contiguous groups: the trainer's own path, bit for bit
            adv = group_advantages(R, G, **self.norm, reward_range=self.reward_range)
        else:
            adv = self._advantages_by_index(R, group)
        train = adv
        if self.method == "reward_sum":
            S = reward_sum(R, self.lam)
            train = group_advantages(S, G, **self.norm) if G is not None else self._advantages_by_index(
                S, group, reward_range=float((self.lam.to(R.dtype) * torch.as_tensor(self.reward_range)).sum()))
        sig = train.p if self.signal_kind == "nft" else train.A
        self.batch = CreditBatch(adv=adv, train=train, group=group, signal=sig)
        return self.batch

    def _advantages_by_index(self, R: torch.Tensor, group: torch.Tensor, reward_range=None) -> Advantages:
        mean, std = _by_index_stats(R, group, self.norm["std_scope"])
        A, p = reward_to_p(R, mean, std, self.norm["adv_clip_max"])
        floor = self.norm["std_floor"]
        rng = self.reward_range if reward_range is None else reward_range
        silenced = silenced_rewards(R, floor, rng) if floor > 0 else torch.zeros(R.shape[0], dtype=torch.bool,
                                                                                   device=R.device)
        A = torch.where(silenced[:, None], torch.zeros_like(A), A)
        p = torch.where(silenced[:, None], torch.full_like(p, 0.5), p)
        return Advantages(A=A, p=p, mean=mean, std=std, silenced=silenced)

    def signal(self, sample, column) -> torch.Tensor:
        """The training signal of each trained (sample, column) pair: T · Σ_k W[k, j] · s_k[sample] (N,).

        With ``signal="nft"`` it is DiffusionNFT's optimality probability p_j in [0, 1]; with "grpo" the advantage
        A_j in [−c, c]. It uses the W in force now (solved from earlier iterations' pairs).
        """
        s, c = self._pairs(sample, column)
        sig = self.batch.signal
        return step_signal(self.W, sig[:, s.to(sig.device)], c)

    def observe(self, sample=(), column=(), proxy_rewards=None, *, clean_samples=None) -> torch.Tensor | None:
        """Pool this iteration's x̂_0 rewards and, every ``recast_every`` calls, re-solve W. Call once per iteration.

        Args:
            sample, column: (N,) the trained pairs whose x̂_0 = x_σ − σ·v_old (σ = σ_column) was scored. Pairs at
                column 0 (σ = 1, pure noise) carry no information and are ignored; each pair at most once.
            proxy_rewards: (K, N) raw rewards of those x̂_0, or {name: (N,)}; the clean batch's group mean and scale
                map them to p, so both sides live on one scale.
            clean_samples: the samples whose clean p enters the estimate (default: all B of the batch); every
                ``sample`` must be among them.

        Returns:
            the smoothed discriminability D (K, T+1) when one exists (method "recast"), else None.
        """
        s, c = self._pairs(sample, column)
        self.iteration += 1
        resolve = self.iteration % self.recast_every == 0
        self.times = {"informativeness": 0.0, "solver": 0.0}
        if self.tracker is None:
            return None
        start = time.perf_counter()
        keep = c > 0
        if s.numel():
            R_hat = self._rows(proxy_rewards, "proxy_rewards", n=s.numel())[:, keep]
            s, c = s[keep], c[keep]
            if torch.unique(s * self.T + c).numel() != s.numel():
                raise ValueError("each (sample, column) pair may be observed once per iteration")
        if s.numel():
            self.D = self._pool(R_hat, s, c, clean_samples, estimate=resolve)
        middle = time.perf_counter()
        if resolve:
            self.W = self.tracker.weights(self.lam, **self.solve)
        self.times = {"informativeness": middle - start, "solver": time.perf_counter() - middle}
        self.resolved = resolve
        return self.D

    def _pool(self, R_hat: torch.Tensor, s: torch.Tensor, c: torch.Tensor, clean_samples, estimate: bool):
        adv = self.batch.adv
        subset = torch.arange(self.batch.B) if clean_samples is None else torch.as_tensor(clean_samples).long().cpu()
        pos = torch.full((self.batch.B,), -1, dtype=torch.long)
        pos[subset] = torch.arange(subset.numel())
        if (pos[s] < 0).any():
            raise ValueError("every observed sample must be one of clean_samples")
        mean, std = adv.mean.cpu(), adv.std.cpu()
        _, p_hat = reward_to_p(R_hat.cpu().to(mean.dtype), mean[:, s], std[:, s], self.norm["adv_clip_max"])
        p_hat[adv.silenced.cpu()] = 0.5  # a silenced reward has no signal on either side
        p_proxy = torch.full((self.K, self.T + 1, subset.numel()), float("nan"), dtype=torch.float64)
        p_proxy[:, c, pos[s]] = p_hat.double()
        p_clean = adv.p.cpu()[:, subset].double()
        return self.tracker.add(p_clean, p_proxy, estimate=estimate)

    # ------------------------------------------------------------------ state
    def gains(self) -> torch.Tensor | None:
        """The telescoping gains (K, T) of the current D (method "recast"), else None."""
        return None if self.tracker is None else self.tracker.gains()

    def state_dict(self) -> dict:
        """Everything needed to continue exactly: tensors and plain data only (loads with weights_only=True)."""
        return {"format": "recast-credit/1", "reward_names": list(self.reward_names), "T": self.T,
                "method": self.method, "lam": self.lam.clone(), "iteration": self.iteration,
                "W": None if self.W is None else self.W.clone(), "D": None if self.D is None else self.D.clone(),
                "tracker": None if self.tracker is None else self.tracker.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict`.

        Raises:
            ValueError: the state belongs to other rewards, steps, method or budgets.
        """
        mine = (list(self.reward_names), self.T, self.method)
        theirs = (list(state.get("reward_names", [])), state.get("T"), state.get("method"))
        if mine != theirs:
            raise ValueError(f"credit state is for (rewards, T, method) = {theirs}, this object is {mine}")
        if not torch.allclose(torch.as_tensor(state["lam"], dtype=torch.float64), self.lam, rtol=0, atol=1e-12):
            raise ValueError(f"credit state has budgets {torch.as_tensor(state['lam']).tolist()}, this object "
                             f"{self.lam.tolist()}")
        self.iteration = int(state["iteration"])
        self.W = None if state["W"] is None else torch.as_tensor(state["W"], dtype=torch.float64).clone()
        self.D = None if state["D"] is None else torch.as_tensor(state["D"], dtype=torch.float64).clone()
        if self.tracker is not None:
            self.tracker.load_state_dict(state["tracker"])
