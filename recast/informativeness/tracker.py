"""The live `tweedie` estimate in training: pooled pairs, out-of-sample calibration, noise-aware W (docs/method.md §5-§6).

Each iteration the trainer hands over the (p_clean, proxy) pairs the NFT loss produced for free: p_k(x_0) of every
sample and p_k(x̂_0(x_{σ_j})) at the columns it trained. One iteration gives a column only ~B·m/T pairs, too few for a
calibration, so the tracker pools the last `window` iterations, estimates D with `tweedie_discriminability` (leave-
one-out calibration, the same estimator at σ_T), projects it onto non-decreasing sequences and folds it into an
optional EMA. W stays the static λ/T until every trained column holds `min_pairs` pairs. After that each reward's
step profile q_k = g_k / Σ g_k is shrunk towards the rewards' common profile by its bootstrap noise share
(positive-part James-Stein): identical true profiles give W = λ/T whatever the common shape, and a profile that
stands out from the others by more than its noise keeps that part.
"""

from __future__ import annotations

import numpy as np
import torch

from recast.informativeness.discriminability import (
    pav_nondecreasing,
    telescoping_gains,
    tweedie_discriminability,
)
from recast.solver import solve_weights, static_weights

__all__ = ["InformativenessTracker", "profile_noise_share"]


def profile_noise_share(gains: torch.Tensor, gains_boot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Shrink each reward's step profile towards the rewards' common profile by its estimated noise share.

    Args:
        gains: (K, m) estimated gains ≥ 0.
        gains_boot: (R, K, m) bootstrap replicates of them.

    Returns:
        (profiles (K, m), all zero for a reward without gain; noise share γ (K,) in [0, 1]). With d_k = q_k − q̄
        (q̄ the mean profile of rewards with gain), γ_k = min(1, Σ_j Var_boot(d_kj) / ‖d_k‖²), and the profile
        returned is q̄ + (1 − γ_k) d_k + s, s the mean bootstrap s.d. of the profile entries (the noise floor).
    """
    g, gb = gains.double(), gains_boot.double()
    tot, tot_b = g.sum(-1, keepdim=True), gb.sum(-1, keepdim=True)
    live = tot[:, 0] > 1e-12
    if not live.any():
        return torch.zeros_like(g), torch.ones(g.shape[0], dtype=torch.float64)
    q = torch.where(tot > 1e-12, g / tot.clamp_min(1e-300), torch.zeros_like(g))
    qb = torch.where(tot_b > 1e-12, gb / tot_b.clamp_min(1e-300), torch.full_like(gb, 1.0 / g.shape[-1]))
    q_bar, qb_bar = q[live].mean(0), qb[:, live].mean(1, keepdim=True)
    d, db = q - q_bar, qb - qb_bar
    noise = db.var(0, unbiased=True).sum(-1) if gb.shape[0] > 1 else torch.zeros(g.shape[0], dtype=torch.float64)
    signal = (d * d).sum(-1)
    gamma = torch.where(signal > 0, (noise / signal.clamp_min(1e-300)).clamp(0.0, 1.0), torch.ones_like(signal))
    gamma = torch.where(live, gamma, torch.ones_like(gamma))
    prof = torch.where(live[:, None], q_bar + (1.0 - gamma)[:, None] * d, torch.zeros_like(q))
    # The solver works on log(q): a step whose share is below the noise of the shares would otherwise swing W by
    # orders of magnitude. Lifting every live entry by the mean bootstrap s.d. makes such steps indistinguishable.
    noise_floor = qb[:, live].std(0, unbiased=True).mean() if gb.shape[0] > 1 else q.new_zeros(())
    return torch.where(live[:, None], prof + noise_floor, prof), gamma


class InformativenessTracker:
    """Pools tweedie pairs across iterations, smooths D and turns it into W (docs/method.md §5 post-processing, §6).

    Two ways in: `add(p_clean, p_proxy)` pools one iteration's pairs and re-estimates D from the window (the
    trainer's path); `update(D)` folds an externally computed D (PAV, then EMA). Before either, W is λ/T.

    Args:
        K: number of rewards.
        T: number of denoising steps (D has T+1 grid points).
        alpha: Rényi order of the estimate.
        ema: weight of the past in the moving average of D, in [0, 1); 0 keeps only the latest estimate.
        window: iterations pooled by `add`.
        min_pairs: W stays λ/T until every trained interior grid row holds this many pairs (with `add`).
        bootstrap: replicates for the noise share of the profiles; 0 = no shrinkage.
        trained_columns: the leading columns the backend trains (GRPO: T − 1); W is solved over them, and the
            untrained columns keep λ/T. None = all T.
        seed: seeds the bootstrap (drawn afresh from (seed, update count), so resume is exact without RNG state).
    """

    def __init__(self, K: int, T: int, alpha: float = 2.0, ema: float = 0.0, *, window: int = 16, min_pairs: int = 96,
                 bootstrap: int = 64, trained_columns: int | None = None, seed: int = 0):
        if K < 1 or T < 1:
            raise ValueError(f"need K >= 1 rewards and T >= 1 steps, got K={K}, T={T}")
        if not (0.0 <= ema < 1.0):
            raise ValueError(f"ema must be in [0, 1), got {ema}")
        m = T if trained_columns is None else int(trained_columns)
        if not 1 <= m <= T:
            raise ValueError(f"trained_columns must be in 1..T={T}, got {trained_columns}")
        if window < 1 or min_pairs < 0 or bootstrap < 0:
            raise ValueError(f"need window >= 1, min_pairs >= 0, bootstrap >= 0; got {window}, {min_pairs}, "
                             f"{bootstrap}")
        self.K, self.T, self.alpha, self.ema = int(K), int(T), float(alpha), float(ema)
        self.window, self.min_pairs, self.bootstrap = int(window), int(min_pairs), int(bootstrap)
        self.m, self.seed = m, seed
        self.D: torch.Tensor | None = None
        self.num_updates = 0
        self.pool: list[tuple[torch.Tensor, torch.Tensor]] = []  # (p_clean (K, N), p_proxy (K, T+1, N)) per iteration
        self.gains_boot: torch.Tensor | None = None  # (R, K, T) bootstrap gains of the last pooled estimate
        self.noise_share: torch.Tensor = torch.zeros(self.K, dtype=torch.float64)

    # ------------------------------------------------------------------ estimates
    def update(self, D) -> torch.Tensor:
        """Fold a new estimate D (K, T+1) into the average; NaN entries keep the previous value. Returns the average."""
        new = torch.as_tensor(D, dtype=torch.float64).clone()
        if new.shape != (self.K, self.T + 1):
            raise ValueError(f"D must have shape {(self.K, self.T + 1)}, got {tuple(new.shape)}")
        missing = ~torch.isfinite(new)
        if self.D is not None:
            new[missing] = self.D[missing]
        elif missing.any():
            raise ValueError("the first D given to the tracker must be finite everywhere")
        new = pav_nondecreasing(new)
        self.D = new if self.D is None else self.ema * self.D + (1.0 - self.ema) * new
        self.num_updates += 1
        return self.D.clone()

    def add(self, p_clean, p_proxy, *, estimate: bool = True) -> torch.Tensor | None:
        """Pool one iteration's pairs and, with `estimate`, re-estimate D from the window; returns the smoothed D.

        Args:
            p_clean: (K, N) p_k(x_0) of the iteration's samples.
            p_proxy: (K, T+1, N) p_k(x̂_0) at the grid rows each sample was trained at, NaN elsewhere.
            estimate: re-estimate D (and its bootstrap) now. The trainer passes False on iterations that do not
                re-solve W (`recast_every` > 1): pooling is cheap, the estimate is the tracker's whole cost, and
                an estimate no solve reads is wasted. The pool holds the same pairs either way.

        Returns:
            the smoothed D (K, T+1); with `estimate=False` the last one (None before the first estimate).
        """
        pc = torch.as_tensor(p_clean, dtype=torch.float64).detach().cpu().clone()
        pp = torch.as_tensor(p_proxy, dtype=torch.float64).detach().cpu().clone()
        if pc.ndim != 2 or pc.shape[0] != self.K or pp.shape != (self.K, self.T + 1, pc.shape[1]):
            raise ValueError(f"need p_clean (K={self.K}, N) and p_proxy (K, T+1={self.T + 1}, N), got "
                             f"{tuple(pc.shape)} and {tuple(pp.shape)}")
        self.pool = (self.pool + [(pc, pp)])[-self.window:]
        if not estimate:
            return None if self.D is None else self.D.clone()
        pc_all = torch.cat([a for a, _ in self.pool], dim=1).numpy()
        pp_all = torch.cat([b for _, b in self.pool], dim=2).numpy()
        D = tweedie_discriminability(pc_all, pp_all, self.alpha)
        self.gains_boot = self._bootstrap(pc_all, pp_all) if self.bootstrap > 1 else None
        return self.update(D)

    def _bootstrap(self, pc: np.ndarray, pp: np.ndarray) -> torch.Tensor:
        """Gains (R, K, T) from D re-estimated by `tweedie_discriminability` on R resamples (each grid row resampled
        on its own pairs)."""
        rng = np.random.default_rng([self.seed, self.num_updates])
        R, K, T = self.bootstrap, self.K, self.T
        D = tweedie_discriminability(pc, pp, self.alpha, bootstrap=R, rng=rng)  # (R, K, T+1)
        return telescoping_gains(D.reshape(R * K, T + 1)).reshape(R, K, T)

    # ------------------------------------------------------------------ W
    def pairs_per_row(self) -> torch.Tensor:
        """(T+1,) pooled pairs at each grid row (the same for every reward)."""
        if not self.pool:
            return torch.zeros(self.T + 1, dtype=torch.long)
        return sum(torch.isfinite(pp[0]).sum(-1) for _, pp in self.pool)

    def ready(self) -> bool:
        """Whether W may leave λ/T: an estimate exists and (with pooling) every trained interior row has min_pairs."""
        if self.D is None:
            return False
        if not self.pool:
            return True
        rows = self.pairs_per_row()[1:self.m]
        return bool(rows.numel() == 0 or rows.min() >= self.min_pairs)

    def gains(self) -> torch.Tensor:
        """Telescoping gains (K, T) of the smoothed D (zeros before the first estimate)."""
        if self.D is None:
            return torch.zeros(self.K, self.T, dtype=torch.float64)
        return telescoping_gains(self.D)

    def weights(self, lam, temperature: float = 1.0, floor: float = 1e-6, uniform_mix: float = 0.0,
                kernel: str = "power") -> torch.Tensor:
        """W (K, T): rows λ, equal columns; λ/T until `ready`, noise-shrunk profiles over the trained columns after.

        ``kernel`` "power" is this repo's first reading, (q + floor)^(1/τ) on the profiles q (`solve_weights`);
        "exp" is the paper's, exp(g / mean g / τ) on the gains (`recast.offline.paper_weights`), then mixed towards
        λ/T by ``uniform_mix``.
        """
        lam_t = torch.as_tensor(lam, dtype=torch.float64)
        static = static_weights(lam_t, self.T)
        if not self.ready():
            self.noise_share = torch.ones(self.K, dtype=torch.float64)
            return static
        g = self.gains()[:, :self.m]
        if self.gains_boot is not None:
            g, self.noise_share = profile_noise_share(g, self.gains_boot[:, :, :self.m])
        else:
            self.noise_share = torch.zeros(self.K, dtype=torch.float64)
        if kernel == "power":
            W_m = solve_weights(g, lam_t, temperature=temperature, floor=floor, uniform_mix=uniform_mix)
        elif kernel == "exp":
            from recast.offline import paper_weights

            W_m = torch.from_numpy(paper_weights(g.numpy(), lam_t.numpy(), temperature)) * lam_t.sum()
            W_m = (1 - uniform_mix) * W_m + uniform_mix * static_weights(lam_t, self.m)
        else:
            raise ValueError(f"kernel must be 'power' or 'exp', got {kernel!r}")
        if self.m == self.T:
            return W_m
        # trained columns carry (m/T) of every budget, spread by W_m; the untrained ones keep λ/T
        return torch.cat([W_m * (self.m / self.T), static[:, self.m:]], dim=1)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Everything needed to continue exactly, as tensors and plain Python data (loads with weights_only=True)."""
        return {"K": self.K, "T": self.T, "alpha": self.alpha, "ema": self.ema, "window": self.window,
                "min_pairs": self.min_pairs, "bootstrap": self.bootstrap, "trained_columns": self.m, "seed": self.seed,
                "D": None if self.D is None else self.D.clone(), "num_updates": self.num_updates,
                "pool": [[a.clone(), b.clone()] for a, b in self.pool],
                "gains_boot": None if self.gains_boot is None else self.gains_boot.clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict`; raises ValueError if the shapes differ from this tracker's."""
        if (state["K"], state["T"]) != (self.K, self.T):
            raise ValueError(f"tracker state is for K={state['K']}, T={state['T']}, this tracker is "
                             f"K={self.K}, T={self.T}")
        self.alpha, self.ema = float(state["alpha"]), float(state["ema"])
        self.window, self.min_pairs = int(state.get("window", self.window)), int(state.get("min_pairs", self.min_pairs))
        self.bootstrap, self.seed = int(state.get("bootstrap", self.bootstrap)), state.get("seed", self.seed)
        self.m = int(state.get("trained_columns", self.m))
        self.D = None if state["D"] is None else torch.as_tensor(state["D"], dtype=torch.float64).clone()
        self.num_updates = int(state["num_updates"])
        self.pool = [(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64))
                     for a, b in state.get("pool", [])]
        gb = state.get("gains_boot")
        self.gains_boot = None if gb is None else torch.as_tensor(gb, dtype=torch.float64)
