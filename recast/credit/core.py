"""`Credit`: every credit method behind one object a training loop feeds (docs/credit.md, docs/method.md).

    credit = Credit.from_table("recast_weights.npz")          # the paper's ReCAST: no x̂_0 scoring, no extra cost
    batch = credit.normalise(rewards, group_ids)              # raw rewards (K, B) and each sample's prompt id
    p = credit.signal(sample, column)                          # the signal of each trained (sample, step) pair
    S = credit.signal_matrix()                                 # or all of them, (B, T)

Methods (`recast.credit.METHODS`): ``recast`` (the paper's), ``static`` (its baseline), ``recast_live`` (this repo's
first reading: W re-estimated live; it is the only one that needs `observe`), ``uniform``, ``reward_sum``,
``fixed``, ``per_step`` and ``otca``. The object imports torch and numpy only; `state_dict` holds tensors and plain
data, so a loop that checkpoints it resumes bit-exactly.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from recast.advantages import Advantages, normalise_budgets, reward_to_p, validate_W
from recast.credit.methods import resolve_method
from recast.credit.signals import (group_index, loss_signal, mix_steps, per_reward_advantages, pre_signal,
                                   reward_sum_advantages)
from recast.credit.step import StepCredit, step_credit

__all__ = ["Credit", "CreditBatch", "Trajectory", "SIGNALS", "MAX_STEPS"]

SIGNALS = ("nft", "grpo")
MAX_STEPS = 4096  # T beyond this is a typo, and W alone would not fit in memory long before it


@dataclass(frozen=True)
class Trajectory:
    """What the per-sample baselines (per_step, otca) read of a batch's rollouts.

    Attributes:
        latents: (T + 1, n, ...) the sampler's states. x0_hats: (T, n, ...) its one-step predictions.
        final: (n, ...) the clean samples. samples: (n,) long, which samples of the normalised batch these are
            (default: all of them, in order).
    """

    latents: torch.Tensor
    x0_hats: torch.Tensor
    final: torch.Tensor
    samples: torch.Tensor | None = None


@dataclass(frozen=True)
class CreditBatch:
    """One iteration's normalised rewards, as `Credit.normalise` returns them.

    Attributes:
        adv: per-reward `Advantages` (this repo's per-reward normalisation, float64): what the logs, the live
            estimate and replay read, whatever the aggregation.
        train: the advantages the per_reward / reward_sum aggregations train on (``adv``, or those of the one
            combined reward for reward_sum); None for the paper's aggregations, which normalise after mixing.
        group: (B,) long, each sample's group in order of first appearance.
        S: (B, T) float64, the training signal of every (sample, step): a mixing weight in [0, 1] for "nft", an
            advantage in [−c, c] for "grpo". Rows of samples a per-sample method has no trajectory for are NaN.
    """

    adv: Advantages
    train: Advantages | None
    group: torch.Tensor
    S: torch.Tensor

    @property
    def B(self) -> int:
        return int(self.S.shape[0])

    @property
    def signal(self) -> torch.Tensor:
        """The per-reward signal (K', B) of the per_reward / reward_sum aggregations (p for nft, A for grpo)."""
        return self.train.p if self.train is not None else self.adv.p


def _int(value, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}"[:300])
    v = int(value)
    if v < low or (high is not None and v > high):
        raise ValueError(f"{name} must be in {low}..{high if high is not None else 'inf'}, got {v}")
    return v


def _positive(value, name: str, *, finite: bool = True, low_ok: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}") from None
    if math.isnan(v) or (finite and math.isinf(v)) or v < 0 or (v == 0 and not low_ok):
        raise ValueError(f"{name} must be {'>= 0' if low_ok else '> 0'}{' and finite' if finite else ''}, got {v}")
    return v


class Credit:
    """Per-reward, per-timestep credit for any online RL loop over a T-step sampler (docs/credit.md).

    Args:
        reward_names: the K rewards, in the order their rows are given (distinct names).
        num_steps: T, the sampler's steps; column j is the step σ_j → σ_{j+1}, column 0 the noisiest.
        lam: budgets λ (K,), ≥ 0 with a positive sum; None for equal budgets (or, for a weight table, its own).
        method: one of `recast.credit.METHODS`; "recast" (the default) is the paper's.
        weights: what W comes from. "recast": a `WeightTable`, a table file, a `DensityProfile` or a profile file
            (a profile is solved for λ here, in milliseconds); "fixed": a (K, T) matrix with rows λ, equal columns.
        aggregation: "auto" (the method's own), "pre", "loss" or "per_reward" (`recast.credit.methods`).
        kernel: the live W's kernel, "auto", "exp" (the paper's) or "power" (recast_live only).
        sigmas: (T + 1,) the sampler's grid, so that `signal` takes σ or scheduler timesteps (a table brings its own).
        signal: "nft" (a mixing weight in [0, 1]) or "grpo" (an advantage in [−c, c]).
        adv_clip_max: c, the clip of the advantages (finite, > 0).
        std_scope, std_floor, reward_range: the per_reward / reward_sum normalisation (global or group std; a reward
            whose batch std is below ``std_floor × range`` is silenced).
        alpha, temperature: the Rényi order and the kernel temperature τ (a profile's table, the live W).
        floor, uniform_mix, window, min_pairs, bootstrap, ema, recast_every: the live estimate (recast_live).
        trained_columns: m, the leading columns the loop trains (Flow-GRPO: T − 1); None = all T.
        step_eps, otca_explore: the per-sample baselines' ε and exploration weight.
        seed: seeds the live estimate's bootstrap.

    Raises:
        ValueError: naming the argument, before anything is computed.
    """

    def __init__(self, reward_names: Sequence[str], num_steps: int, lam=None, *, method: str = "recast",
                 weights=None, aggregation: str = "auto", kernel: str = "auto", sigmas=None, signal: str = "nft",
                 adv_clip_max: float = 5.0, std_scope: str = "global", std_floor: float = 0.0, reward_range=1.0,
                 alpha: float = 2.0, temperature: float = 1.0, floor: float = 1e-6, uniform_mix: float = 0.0,
                 window: int = 16, min_pairs: int = 96, bootstrap: int = 64, ema: float = 0.0,
                 trained_columns: int | None = None, recast_every: int = 1, step_eps: float = 1e-3,
                 otca_explore: float = 0.5, seed: int = 0, fixed_W=None):
        if isinstance(reward_names, (str, bytes)) or not all(isinstance(n, str) and n for n in reward_names):
            raise ValueError(f"reward_names must be a sequence of non-empty names, got {reward_names!r}"[:300])
        names = tuple(reward_names)
        dup = sorted({n for n in names if names.count(n) > 1})
        if not names or dup:
            raise ValueError(f"reward_names must be distinct and non-empty; repeated: {dup}" if dup else
                             "reward_names is empty: give at least one reward")
        self.reward_names, self.K = names, len(names)
        self.T = _int(num_steps, "num_steps", 1, MAX_STEPS)
        self.spec = resolve_method(method, aggregation, kernel)
        self.method = method
        if signal not in SIGNALS:
            raise ValueError(f"signal must be one of {SIGNALS}, got {signal!r}")
        self.signal_kind = signal
        c = _positive(adv_clip_max, "adv_clip_max")
        if std_scope not in ("global", "group"):
            raise ValueError(f"std_scope must be 'global' or 'group', got {std_scope!r}")
        self.norm = dict(adv_clip_max=c, std_scope=std_scope, std_floor=_positive(std_floor, "std_floor", low_ok=True))
        self.reward_range = reward_range
        self.alpha = _positive(alpha, "alpha")
        self.solve = dict(temperature=_positive(temperature, "temperature", finite=False),
                          floor=_positive(floor, "floor"), uniform_mix=float(uniform_mix), kernel=self.spec.kernel)
        if not 0 <= uniform_mix <= 1:
            raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix}")
        self.recast_every = _int(recast_every, "recast_every", 1)
        self.m = self.T if trained_columns is None else _int(trained_columns, "trained_columns", 1, self.T)
        self.step_kw = dict(eps=_positive(step_eps, "step_eps"), explore=float(otca_explore))
        if not 0 <= otca_explore <= 1:
            raise ValueError(f"otca_explore must be in [0, 1], got {otca_explore}")
        if fixed_W is not None:
            if weights is not None:
                raise ValueError("give the fixed W once, as weights= (fixed_W is its older name)")
            weights = fixed_W
        self.table = None
        self.ignored: list[str] = []  # keys of a reward mapping that are not rewards of this object (e.g. "avg")
        self.lam = self._budgets(lam, weights)
        self.sigmas = None if sigmas is None else self._grid(sigmas)
        self._W = self._initial_W(weights)
        self.tracker = None
        if self.spec.weights == "live":
            from recast.informativeness.tracker import InformativenessTracker

            if self.spec.kernel == "power":
                from recast.solver import min_temperature

                if self.solve["temperature"] < min_temperature(self.solve["floor"]):
                    raise ValueError(f"temperature {self.solve['temperature']:g} is below the smallest the weight "
                                     f"solver resolves at floor={self.solve['floor']:g}: "
                                     f"{min_temperature(self.solve['floor']):.3g}")
            self.tracker = InformativenessTracker(self.K, self.T, self.alpha, ema, window=window, min_pairs=min_pairs,
                                                  bootstrap=bootstrap, trained_columns=self.m, seed=seed)
        self.D: torch.Tensor | None = None
        self.iteration = 0
        self.batch: CreditBatch | None = None
        self._observed = False
        self._step: StepCredit | None = None
        self.resolved = False  # whether the last `observe` re-solved W
        self.times = {"informativeness": 0.0, "solver": 0.0}  # seconds the last `observe` spent in each phase

    @classmethod
    def from_table(cls, table, **kwargs) -> "Credit":
        """The paper's ReCAST from a weight table (a `WeightTable` or a table file): rewards, T, λ and the grid come
        from the table. Keyword arguments as `Credit` (signal, adv_clip_max, reward_names to reorder its rows, ...)."""
        from recast.archives import WeightTable, load_table

        t = table if isinstance(table, WeightTable) else load_table(table)
        names = kwargs.pop("reward_names", t.reward_names)
        return cls(names, t.num_steps, kwargs.pop("lam", None), method=kwargs.pop("method", "recast"), weights=t,
                   **kwargs)

    # ------------------------------------------------------------------ construction helpers
    def _budgets(self, lam, weights) -> torch.Tensor:
        """λ normalised to Σλ = 1, validated once; a weight table's own budgets when none are given."""
        self._profile = None
        if self.spec.weights == "table":
            from recast.archives import DensityProfile, WeightTable, is_table, load_profile, load_table

            if weights is None:
                raise ValueError("method 'recast' needs weights=: a weight table (file or WeightTable) or a density "
                                 "profile (file or DensityProfile); make one with `python -m recast profile "
                                 "--proposal ...` then `python -m recast weights`")
            if isinstance(weights, (str, bytes)) or hasattr(weights, "__fspath__"):
                weights = load_table(weights) if is_table(weights) else load_profile(weights, self.reward_names)
            if isinstance(weights, DensityProfile):
                self._profile = weights
            elif isinstance(weights, WeightTable):
                weights.validate("weights=")
                self.table = weights.subset(self.reward_names)
                own = torch.as_tensor(self.table.budgets, dtype=torch.float64)
                own = own / own.sum()
                if lam is not None and len(lam):
                    given = normalise_budgets(_vector(lam, "lam"), self.K)
                    if (given - own).abs().max() > 1e-6:
                        raise ValueError(f"the weight table was built for budgets {own.tolist()} (normalised), not "
                                         f"{given.tolist()}: make a table for these budgets with `python -m recast "
                                         "weights PROFILE --lam ...` (or pass its profile)")
                return own
            else:
                raise ValueError(f"weights= for method 'recast' must be a WeightTable, a DensityProfile or a path to "
                                 f"one, got {type(weights).__name__}")
        return normalise_budgets(None if lam is None else _vector(lam, "lam"), self.K)

    def _grid(self, sigmas) -> torch.Tensor:
        s = torch.as_tensor(sigmas, dtype=torch.float64).flatten()
        if s.numel() != self.T + 1 or not torch.isfinite(s).all() or not (s[1:] < s[:-1]).all():
            raise ValueError(f"sigmas must be T + 1 = {self.T + 1} finite values falling from 1 to 0")
        if self.table is not None and (s - torch.from_numpy(self.table.sigmas)).abs().max() > 1e-5:
            raise ValueError("sigmas differ from the weight table's grid: the table was made for another sampler grid")
        return s

    def _initial_W(self, weights) -> torch.Tensor | None:
        kind = self.spec.weights
        if kind != "fixed" and kind != "table" and weights is not None:
            raise ValueError(f"weights= is for methods 'recast' and 'fixed', not {self.method!r}")
        if kind == "table":
            if self.table is None:
                from recast.archives import table_from_profile

                self.table = table_from_profile(self._profile, self.lam.tolist(), self.solve["temperature"],
                                                reward_names=self.reward_names, alpha=self.alpha)
            if self.table.num_steps != self.T:
                raise ValueError(f"the weight table has T={self.table.num_steps} steps, the sampler {self.T}")
            if self.sigmas is None:
                self.sigmas = torch.from_numpy(self.table.sigmas)
            self._TW = torch.from_numpy(self.table.TW)
            return torch.from_numpy(self.table.W)
        if kind == "fixed":
            if weights is None:
                raise ValueError("method 'fixed' needs weights=, a (K, T) W with rows lam and equal columns")
            W = validate_W(weights, self.lam, self.T)
            self._TW = self.T * W
            return W
        if kind == "sample":
            self._TW = None
            return None
        self._TW = self.lam[:, None].expand(self.K, self.T).clone()  # exactly λ at every step: T · (λ / T)
        return self.lam[:, None].expand(self.K, self.T) / self.T

    # ------------------------------------------------------------------ W
    @property
    def W(self) -> torch.Tensor | None:
        """The (K, T) W in force (rows λ, columns 1/T); None for the per-sample baselines (see `mean_W`)."""
        return None if self._W is None else self._W.clone()

    @property
    def TW(self) -> torch.Tensor | None:
        """T·W (K, T), what the aggregations multiply rewards by (columns sum to 1)."""
        return None if self._TW is None else self._TW.clone()

    def mean_W(self) -> torch.Tensor | None:
        """W, or for a per-sample baseline the batch mean of its step credit (a W-shaped summary for logs)."""
        if self._W is not None:
            return self.W
        return None if self._step is None else self._step.mean_W()

    # ------------------------------------------------------------------ inputs
    def _rows(self, rewards, what: str, n: int | None = None) -> torch.Tensor:
        """Rewards as a (K, n) float64 CPU tensor in reward_names' order, from a (K, n) array or {name: (n,)}."""
        if isinstance(rewards, Mapping):
            keys = list(rewards)
            missing = [k for k in self.reward_names if k not in rewards]
            if missing:
                raise ValueError(f"{what}: rewards are named {list(self.reward_names)}; missing {missing}")
            self.ignored = sorted(str(k) for k in keys if k not in self.reward_names)  # e.g. "avg", accuracy entries
            rows = [torch.as_tensor(rewards[n]).flatten() for n in self.reward_names]
            sizes = {r.numel() for r in rows}
            if len(sizes) != 1:
                raise ValueError(f"{what}: every reward needs the same number of values, got "
                                 f"{dict(zip(self.reward_names, (r.numel() for r in rows)))}")
            R = torch.stack(rows)
        else:
            if rewards is None:
                raise ValueError(f"{what} is None: give a (K={self.K}, N) array or a {{name: values}} mapping")
            try:
                R = torch.as_tensor(rewards)
            except (TypeError, ValueError, RuntimeError) as err:
                raise ValueError(f"{what} must be a (K={self.K}, N) array: {str(err)[:200]}") from None
            if R.ndim == 1 and self.K == 1:
                R = R[None]
            if R.ndim != 2 or R.shape[0] != self.K:
                raise ValueError(f"{what} must be (K={self.K}, N) for rewards {list(self.reward_names)}, got shape "
                                 f"{tuple(R.shape)}")
        if R.device.type == "meta":
            raise ValueError(f"{what} are on the meta device (no values): pass real tensors")
        if R.dtype == torch.bool or R.is_complex():
            raise ValueError(f"{what} must be real numbers, got {R.dtype}")
        R = R.detach().to("cpu", torch.float64)
        if n is not None and R.shape[1] != n:
            raise ValueError(f"{what} must hold {n} values per reward, got {R.shape[1]}")
        bad = [self.reward_names[k] for k in range(self.K) if not torch.isfinite(R[k]).all()]
        if bad:
            raise ValueError(f"{what}: rewards {bad} contain NaN or inf")
        return R

    def _columns(self, column, sigma, timestep) -> torch.Tensor:
        given = [x is not None for x in (column, sigma, timestep)]
        if sum(given) != 1:
            raise ValueError("give exactly one of column (indices), sigma or timestep")
        if column is not None:
            return _index(column, "column")
        if self.sigmas is None:
            raise ValueError("sigma / timestep need the sampler's grid: pass sigmas= to Credit (a table brings it)")
        s = torch.as_tensor(sigma if sigma is not None else timestep, dtype=torch.float64).flatten().cpu()
        if timestep is not None:
            s = s / 1000.0  # SD3 / diffusers: timestep = σ · 1000
        grid = self.sigmas[:-1]
        what = "timestep" if timestep is not None else "sigma"
        if not torch.isfinite(s).all():
            raise ValueError(f"{what} holds a non-finite value ({float(s[~torch.isfinite(s)][0]):g}): not a training "
                             "step of this grid")
        dist, col = (s[:, None] - grid[None, :]).abs().min(dim=1)
        off = ~(dist <= 1e-5 * (1 + s.abs()))
        if off.any():
            raise ValueError(f"{what} {float(s[off][0] * (1000 if timestep is not None else 1)):.6g} is not a "
                             f"training step of this grid (the steps start at sigmas[:-1] = "
                             f"{[round(x, 5) for x in grid.tolist()]})")
        return col

    def _pairs(self, sample, column, sigma=None, timestep=None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.batch is None:
            raise RuntimeError("call normalise(rewards, group_ids) for this iteration first")
        s = _index(sample, "sample")
        c = self._columns(column, sigma, timestep)
        if s.shape != c.shape:
            raise ValueError(f"sample and column must have the same length, got {s.numel()} and {c.numel()}")
        if s.numel() and (int(s.min()) < 0 or int(s.max()) >= self.batch.B):
            raise ValueError(f"sample indices must lie in 0..{self.batch.B - 1} (the normalised batch)")
        if c.numel() and (int(c.min()) < 0 or int(c.max()) >= self.T):
            raise ValueError(f"columns must lie in 0..{self.T - 1} (T={self.T} steps)")
        return s, c

    # ------------------------------------------------------------------ the calls
    def normalise(self, rewards, group_ids, *, trajectory: Trajectory | None = None) -> CreditBatch:
        """This iteration's training signals from its raw rewards (docs/method.md §0, §3).

        Args:
            rewards: (K, B) raw rewards, or {name: (B,)} (other keys, e.g. "avg", are ignored; `ignored` names them).
            group_ids: (B,) each sample's group (prompt) id: ints, strings, any hashable; every group needs >= 2.
            trajectory: the rollouts' states (`Trajectory`), needed by per_step and otca only.

        Returns:
            the `CreditBatch`, also kept for `signal`, `signal_matrix` and `observe` until the next call.
        """
        self.ignored = []
        R = self._rows(rewards, "rewards")
        if R.shape[1] == 0:
            raise ValueError("rewards hold no samples: normalise needs a batch of at least one group of 2")
        group, G = group_index(group_ids, R.shape[1])
        c, kind, agg = self.norm["adv_clip_max"], self.signal_kind, self.spec.aggregation
        per = dict(adv_clip_max=c, std_scope=self.norm["std_scope"], std_floor=self.norm["std_floor"],
                   reward_range=self.reward_range)
        adv = per_reward_advantages(R, group, **per)
        train = None
        if agg == "pre":
            S = pre_signal(R, self._TW, group, c, kind, G)
        elif agg == "loss":
            S = loss_signal(R, self._TW, group, c, kind, G)
        elif agg == "reward_sum":
            train = reward_sum_advantages(R, self.lam, group, **per)
            S = (train.p if kind == "nft" else train.A)[0][:, None].expand(-1, self.T).contiguous()
        elif self.spec.weights == "sample":
            train = adv
            S = self._sample_signal(adv, trajectory)
        else:
            train = adv
            S = mix_steps(self._TW, adv.p if kind == "nft" else adv.A)
        self.batch = CreditBatch(adv=adv, train=train, group=group, S=S)
        self._observed = False
        return self.batch

    def _sample_signal(self, adv: Advantages, trajectory: Trajectory | None) -> torch.Tensor:
        if not isinstance(trajectory, Trajectory):
            raise ValueError(f"method {self.method!r} weights each sample's own trajectory: pass "
                             "trajectory=Trajectory(latents, x0_hats, final) to normalise")
        B = adv.A.shape[1]
        rows = torch.arange(B) if trajectory.samples is None else _index(trajectory.samples, "trajectory.samples")
        if rows.numel() != trajectory.final.shape[0] or (rows.numel() and (rows.min() < 0 or rows.max() >= B)):
            raise ValueError(f"trajectory.samples must name {trajectory.final.shape[0]} samples in 0..{B - 1}")
        A = adv.A[:, rows]
        self._step = step_credit(self.method, A=A, lam=self.lam, latents=trajectory.latents.cpu(),
                                 x0_hats=trajectory.x0_hats.cpu(), final=trajectory.final.cpu(), m=self.m,
                                 kind=self.signal_kind, adv_clip_max=self.norm["adv_clip_max"], **self.step_kw)
        S = torch.full((B, self.T), float("nan"), dtype=torch.float64)
        S[rows] = self._step.matrix(A, self.T)
        return S

    def signal(self, sample, column=None, *, sigma=None, timestep=None) -> torch.Tensor:
        """The training signal of each trained (sample, step) pair (N,) float64.

        The step is given as a column index (0 = the noisiest step), as the σ the loss noises to (σ_j, the step's
        source), or as the scheduler's timestep σ_j · 1000. With ``signal="nft"`` it is DiffusionNFT's mixing weight in
        [0, 1]; with "grpo" the advantage in [−c, c]. It uses the W in force now.
        """
        s, c = self._pairs(sample, column, sigma, timestep)
        return self.batch.S[s, c]

    def columns(self, *, sigma=None, timestep=None, binning: str = "exact") -> torch.Tensor:
        """The column of W (the scheduler step, 0 = the noisiest) of each σ or timestep (N,) int64.

        Args:
            sigma: the σ's the loss noises to; or timestep: the scheduler's timesteps, σ · 1000 (diffusers' SD3).
            binning: "exact": each value must be a training step's start σ_j of the grid (within 1e-5 relative),
                else ValueError; "interval", for continuous-time training σ's (e.g. drawn uniformly, as in
                Flow-Factory's NFT trainer): σ belongs to the step whose span it lies in, σ_{j+1} < σ ≤ σ_j, so a
                grid value σ_j is column j as under "exact", σ = 1 is column 0 and any σ in (0, σ_{T−1}] is the
                last column. σ = 0 (a clean sample), below 0, above 1 or NaN is refused.

        Raises:
            ValueError: not exactly one of sigma / timestep, no grid (pass sigmas= or a table), a value off the
                grid ("exact") or outside (0, 1] ("interval"), NaN, or an unknown binning.
        """
        if binning == "exact":
            return self._columns(None, sigma, timestep)
        if binning != "interval":
            raise ValueError(f"binning must be 'exact' or 'interval', got {binning!r}")
        if (sigma is None) == (timestep is None):
            raise ValueError("give exactly one of sigma or timestep")
        if self.sigmas is None:
            raise ValueError("sigma / timestep need the sampler's grid: pass sigmas= to Credit (a table brings it)")
        s = torch.as_tensor(sigma if sigma is not None else timestep, dtype=torch.float64).flatten().cpu()
        if timestep is not None:
            s = s / 1000.0
        bad = ~((s > 0) & (s <= 1 + 1e-9))  # NaN fails both comparisons
        if bad.any():
            what = "timestep" if timestep is not None else "sigma"
            raise ValueError(f"{what} {float(s[bad][0] * (1000 if timestep is not None else 1)):.6g} is not a "
                             f"noise level a step trains (binning 'interval' takes sigma in (0, 1])")
        # step j spans (σ_{j+1}, σ_j]: its column is the number of step ends σ_1..σ_T at or above σ. The tolerance is
        # "exact"'s, so a grid value read back in float32 lands on its own column under both rules.
        ends = self.sigmas[1:]
        return (ends[None, :] >= s[:, None] * (1 - 1e-5)).sum(1).clamp(max=self.T - 1).to(torch.int64)

    def signal_matrix(self) -> torch.Tensor:
        """Every (sample, step)'s signal (B, T) float64 (a copy): index it with each sample's own trained steps."""
        if self.batch is None:
            raise RuntimeError("call normalise(rewards, group_ids) for this iteration first")
        return self.batch.S.clone()

    def mix(self, s: torch.Tensor) -> torch.Tensor:
        """Per-reward signals (K', n) mixed to (n, T) the way this method's aggregation does (per_reward and
        reward_sum only: the paper's aggregations normalise after mixing); replayed samples use it."""
        if self.spec.aggregation == "reward_sum":
            return s[0][:, None].expand(-1, self.T).to(torch.float64)
        if self.spec.aggregation != "per_reward" or self._TW is None:
            raise ValueError(f"aggregation {self.spec.aggregation!r} mixes raw rewards, not per-reward signals")
        return mix_steps(self._TW, s.to(torch.float64))

    def observe(self, sample=(), column=(), proxy_rewards=None, *, clean_samples=None) -> torch.Tensor | None:
        """Pool this iteration's x̂_0 rewards and, every ``recast_every`` calls, re-solve W (recast_live only; a no-op
        returning None for every other method, which needs no x̂_0 scoring). Call it once per normalised batch.

        Args:
            sample, column: (N,) the trained pairs whose x̂_0 = x_σ − σ·v_old (σ = σ_column) was scored. Pairs at
                column 0 (σ = 1, pure noise) carry no information and are ignored; each pair at most once.
            proxy_rewards: (K, N) raw rewards of those x̂_0, or {name: (N,)}.
            clean_samples: the samples whose clean p enters the estimate (default: all B); every ``sample`` among them.

        Returns:
            the smoothed discriminability D (K, T+1) when one exists, else None.
        """
        if self.tracker is None:
            self.iteration += 1
            return None
        if self.batch is None:
            raise RuntimeError("call normalise(rewards, group_ids) for this iteration first")
        if self._observed:
            raise RuntimeError("observe was already called for this batch: call it once per normalise")
        s, c = self._pairs(sample, column)
        if s.numel() and proxy_rewards is None:
            raise ValueError("proxy_rewards is None: give the (K, N) rewards of the observed pairs' x̂_0")
        subset = torch.arange(self.batch.B) if clean_samples is None else _index(clean_samples, "clean_samples")
        if subset.numel() and (int(subset.min()) < 0 or int(subset.max()) >= self.batch.B):
            raise ValueError(f"clean_samples must lie in 0..{self.batch.B - 1} (the normalised batch)")
        start = time.perf_counter()
        keep = c > 0
        R_hat = None
        if s.numel():
            R_hat = self._rows(proxy_rewards, "proxy_rewards", n=s.numel())[:, keep]
            s, c = s[keep], c[keep]
            if torch.unique(s * self.T + c).numel() != s.numel():
                raise ValueError("each (sample, column) pair may be observed once per iteration")
            member = torch.zeros(self.batch.B, dtype=torch.bool)
            member[subset] = True
            if not member[s].all():
                raise ValueError("every observed sample must be one of clean_samples")
        # every input is checked: from here on the state changes
        self._observed = True
        self.iteration += 1
        resolve = self.iteration % self.recast_every == 0
        if s.numel():
            self.D = self._pool(R_hat, s, c, subset, estimate=resolve)
        middle = time.perf_counter()
        if resolve:
            self._W = self.tracker.weights(self.lam, **self.solve)
            self._TW = self.T * self._W
        self.times = {"informativeness": middle - start, "solver": time.perf_counter() - middle}
        self.resolved = resolve
        return self.D

    def _pool(self, R_hat, s, c, subset, estimate: bool):
        adv = self.batch.adv
        pos = torch.full((self.batch.B,), -1, dtype=torch.long)
        pos[subset] = torch.arange(subset.numel())
        _, p_hat = reward_to_p(R_hat, adv.mean[:, s], adv.std[:, s], self.norm["adv_clip_max"])
        p_hat[adv.silenced] = 0.5  # a silenced reward has no signal on either side
        p_proxy = torch.full((self.K, self.T + 1, subset.numel()), float("nan"), dtype=torch.float64)
        p_proxy[:, c, pos[s]] = p_hat
        return self.tracker.add(adv.p[:, subset], p_proxy, estimate=estimate)

    def gains(self) -> torch.Tensor | None:
        """The gains (K, T): the live estimate's telescoping gains (recast_live), a table's clipped gains (recast)."""
        if self.tracker is not None:
            return self.tracker.gains()
        return None if self.table is None else torch.from_numpy(self.table.raw_gains)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Everything needed to continue exactly: tensors and plain data only (loads with weights_only=True)."""
        return {"format": "recast-credit/2", "reward_names": list(self.reward_names), "T": self.T,
                "method": self.method, "aggregation": self.spec.aggregation, "lam": self.lam.clone(),
                "iteration": self.iteration, "W": self.W, "D": None if self.D is None else self.D.clone(),
                "tracker": None if self.tracker is None else self.tracker.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict`.

        Raises:
            ValueError: the state belongs to other rewards, steps, method or budgets, or holds a W that is not a
                finite (K, T) matrix with this object's marginals, naming the entry.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"credit state must be a mapping, got {type(state).__name__}")
        need = ("reward_names", "T", "method", "lam", "iteration", "W", "D", "tracker")
        missing = [k for k in need if k not in state]
        if missing:
            raise ValueError(f"credit state lacks {missing}: it was not written by Credit.state_dict")
        mine = (list(self.reward_names), self.T, self.method)
        theirs = (list(state["reward_names"]), state["T"], state["method"])
        if mine != theirs:
            raise ValueError(f"credit state is for (rewards, T, method) = {theirs}, this object is {mine}"[:400])
        if state.get("aggregation", self.spec.aggregation) != self.spec.aggregation:
            raise ValueError(f"credit state uses aggregation {state['aggregation']!r}, this object "
                             f"{self.spec.aggregation!r}")
        try:
            lam = torch.as_tensor(state["lam"], dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError("credit state entry 'lam' is not a numeric vector") from None
        if lam.shape != self.lam.shape or not torch.allclose(lam, self.lam, rtol=0, atol=1e-12):
            raise ValueError(f"credit state has budgets {lam.tolist()}, this object {self.lam.tolist()}"[:300])
        iteration = state["iteration"]
        if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral) or iteration < 0:
            raise ValueError(f"credit state entry 'iteration' must be an int >= 0, got {iteration!r}"[:200])
        W = state["W"]
        if (W is None) != (self._W is None):
            raise ValueError("credit state entry 'W' does not fit this method (a W where none is kept, or none)")
        if W is not None:
            raw = torch.as_tensor(W, dtype=torch.float64) if not isinstance(W, torch.Tensor) else W.double()
            try:
                W = validate_W(W, self.lam, self.T)
            except ValueError as err:
                raise ValueError(f"credit state entry 'W': {err}") from None
            if not abs(float(raw.sum()) - 1.0) <= 1e-6:  # validate_W checks a copy scaled to total 1; the state's own
                raise ValueError(f"credit state entry 'W' sums to {float(raw.sum()):.6g}, not 1: its rows must sum to "
                                 "the budgets lam and its columns to 1/T as saved (a scaled W is not a credit state)")
            if self.spec.weights == "table" and (raw.shape != self._W.shape or (raw - self._W).abs().max() > 1e-12):
                raise ValueError("credit state entry 'W' differs from the weight table's W: the weight file changed "
                                 "since this state was saved (resume with the same file)")
        D = state["D"]
        if D is not None:
            D = torch.as_tensor(D, dtype=torch.float64)
            if D.shape != (self.K, self.T + 1) or not torch.isfinite(D).all():
                raise ValueError(f"credit state entry 'D' must be a finite (K, T+1) = ({self.K}, {self.T + 1}) matrix")
        if self.tracker is not None:
            tr = state["tracker"]
            if not isinstance(tr, Mapping) or not {"K", "T", "D", "num_updates"} <= set(tr):
                raise ValueError("credit state entry 'tracker' is not a tracker state")
            self.tracker.load_state_dict(tr)
        self.iteration = int(iteration)
        if W is not None and self.spec.weights != "table":  # a table's W is the table's
            self._W = raw.clone()  # as saved, to the bit (validate_W's normalised copy can move the last bits)
            self._TW = self.lam[:, None].expand(self.K, self.T).clone() if self.spec.weights == "flat" \
                else self.T * self._W
        self.D = None if D is None else D.clone()


def _vector(lam, name: str):
    if isinstance(lam, (str, bytes)):
        raise ValueError(f"{name} must be numbers (a list or tensor), got the string {lam[:50]!r}")
    return lam


def _index(x, name: str) -> torch.Tensor:
    """A 1-D long CPU tensor of indices; bool masks and floats are refused (torch would read them otherwise)."""
    t = torch.as_tensor(x) if not isinstance(x, torch.Tensor) else x
    if t.dtype == torch.bool:
        raise ValueError(f"{name} must be integer indices, got a bool mask (use mask.nonzero() for the indices)")
    if t.is_floating_point() or t.is_complex():
        raise ValueError(f"{name} must be integer indices, got {t.dtype} (fractions would be truncated)")
    return t.detach().flatten().long().cpu()
