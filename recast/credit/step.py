"""Per-sample step credit of the baselines ReCAST is compared with (research/study/preregistration.md, "Arms").

`recast.credit.Credit` (methods "per_step" and "otca") builds it from a batch's `Trajectory`.

Neither baseline keeps ReCAST's marginals: their weights vary per sample, and no budget is enforced by construction.

* ``per_step`` (CoCA-style): one weight per (sample, step), the same for every reward. Step j's weight is the gain in
  cosine similarity between the sampler's one-step prediction x̂_0 and the sample's final x_0, from step j to j + 1,
  clipped at 0 plus ε and normalised over the trained steps; the rewards are combined with the budgets λ.
* ``otca`` (OTCA, arXiv 2604.19234, as read from its summaries; every assumption is listed in the pre-registration):
  a trajectory credit decomposition (TCD) times a multi-objective credit allocation (MOCA). TCD is the per-step gain
  in cosine similarity between the latent x_{σ_j} and the final latent, clipped at 0 plus ε, normalised over the
  trained steps. MOCA gives each sample one coefficient per reward, without a step index: the minimum-norm point of
  the convex hull of the rewards' gradients, which for one sample (every reward's gradient is A_k times the same
  score function) is the c on the simplex minimising |Σ_k c_k A_k|, mixed with the budgets for exploration.

The signal of example (i, j) is A_ij = m · w_ij · Σ_k c_ik A_ik (m trained steps, so the weights average 1), mapped to
DiffusionNFT's p = clip(0.5 + A / (2c), 0, 1) for the NFT backend and used as is by GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["StepCredit", "similarity_gain_weights", "min_norm_coefficients", "step_credit"]


def similarity_gain_weights(states: torch.Tensor, final: torch.Tensor, m: int, eps: float) -> torch.Tensor:
    """Per-sample step weights from the gain in cosine similarity to the final sample (B, m), each row summing to 1.

    Args:
        states: (m + 1, B, ...) the states (latents, or one-step predictions) at the grid rows 0..m.
        final: (B, ...) the final sample.
        m: the number of trained steps (the leading columns).
        eps: added to every clipped gain, so a step without gain keeps a small weight.
    """
    if states.shape[0] < m + 1:
        raise ValueError(f"need {m + 1} states for {m} steps, got {states.shape[0]}")
    B = final.shape[0]
    f = final.reshape(1, B, -1).float()
    s = states[: m + 1].reshape(m + 1, B, -1).float()
    sim = torch.nn.functional.cosine_similarity(s, f.expand_as(s), dim=-1)  # (m + 1, B)
    gain = (sim[1:] - sim[:-1]).clamp_min(0.0) + eps
    return (gain / gain.sum(0, keepdim=True)).T.contiguous()


def _project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of each row of v onto the probability simplex (sort-based)."""
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = u.cumsum(-1) - 1.0
    idx = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype)
    cond = u - css / idx > 0
    rho = cond.to(v.dtype).cumsum(-1).argmax(-1, keepdim=True)
    theta = css.gather(-1, rho) / (rho + 1).to(v.dtype)
    return (v - theta).clamp_min(0.0)


def min_norm_coefficients(A: torch.Tensor, prior: torch.Tensor, iters: int = 200) -> torch.Tensor:
    """Per sample, the c on the simplex minimising |Σ_k c_k A_k|, the one nearest ``prior`` where several do.

    If every A_k of a sample has one sign, the minimum puts all weight on the reward of smallest |A_k|; with mixed
    signs the minimum is 0, reached on a face of the simplex, and the point of that face nearest the prior is taken:
    the projection of the prior onto {c on the simplex, c·a = 0}. By its optimality conditions that projection is
    c(ν) = Π(prior − ν a) (Π the projection onto the simplex) for the ν where h(ν) = c(ν)·a = 0; h is continuous,
    non-increasing and piecewise linear (Π is the gradient of a convex function), so ν is bracketed and bisected
    `iters` times, and the answer is the point of the last bracket's chord where c·a is exactly 0 (on the bracket's
    linear piece this is c(ν) itself). So c·a = 0 to rounding whatever the draw, rather than to the tolerance an
    iterative projection happens to reach.

    Args:
        A: (K, B) per-reward advantages.
        prior: (K,) a point of the simplex (the budgets).
        iters: bisection steps on ν (each halves the bracket).

    Returns:
        (B, K) float64, rows on the simplex.
    """
    a = A.T.double()
    B, K = a.shape
    c = prior.double().expand(B, K).clone()
    same = (a >= 0).all(-1) | (a <= 0).all(-1)
    if same.any():
        best = torch.zeros(int(same.sum()), K, dtype=torch.float64)
        best[torch.arange(best.shape[0]), a[same].abs().argmin(-1)] = 1.0
        c[same] = best
    mixed = ~same
    if mixed.any():
        p, am = c[mixed], a[mixed]

        def at(nu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = _project_simplex(p - nu[:, None] * am)
            return x, (x * am).sum(-1)

        # h(ν) → max a > 0 as ν → −∞ and → min a < 0 as ν → +∞: widen a bracket [lo, hi] with h(lo) ≥ 0 ≥ h(hi)
        lo, hi = -torch.ones(len(p), dtype=torch.float64), torch.ones(len(p), dtype=torch.float64)
        for _ in range(2100):  # float64 overflows long before: the loop always ends on a bracket
            low_bad, high_bad = at(lo)[1] < 0, at(hi)[1] > 0
            if not (low_bad.any() or high_bad.any()):
                break
            lo, hi = torch.where(low_bad, 2 * lo, lo), torch.where(high_bad, 2 * hi, hi)
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            up = at(mid)[1] >= 0
            lo, hi = torch.where(up, mid, lo), torch.where(up, hi, mid)
        (x_lo, h_lo), (x_hi, h_hi) = at(lo), at(hi)
        drop = h_lo - h_hi
        t = torch.where(drop > 0, h_lo / torch.where(drop > 0, drop, 1.0), 0.0).clamp(0.0, 1.0)
        c[mixed] = x_lo + t[:, None] * (x_hi - x_lo)
    return c


@dataclass(frozen=True)
class StepCredit:
    """Per-sample step credit: the backends read `signal` where ReCAST's methods read W.

    Attributes:
        w: (B, m) step weights per sample, rows summing to 1.
        c: (B, K) reward coefficients per sample, rows summing to 1.
        kind: "nft" (the signal is a probability p) or "grpo" (an advantage).
        adv_clip_max: c of p = 0.5 + A / (2c).
    """

    w: torch.Tensor
    c: torch.Tensor
    kind: str
    adv_clip_max: float

    def signal(self, A: torch.Tensor, idx: torch.Tensor, j: int) -> torch.Tensor:
        """The signal of samples ``idx`` at column j, from their per-reward advantages A (K, B)."""
        m = self.w.shape[1]
        i = idx.cpu()
        comb = (self.c[i].to(A.dtype).to(A.device) * A[:, idx].T).sum(-1)
        a = m * self.w[i, j].to(A.dtype).to(A.device) * comb
        if self.kind == "grpo":
            return a
        return (0.5 + a / (2 * self.adv_clip_max)).clamp(0.0, 1.0)

    def matrix(self, A: torch.Tensor, T: int) -> torch.Tensor:
        """The signal of every sample at every column (B, T) float64; columns past the m trained ones carry none
        (p = 0.5 for "nft", A = 0 for "grpo")."""
        B, m = self.w.shape
        idx = torch.arange(B)
        S = torch.full((B, T), 0.0 if self.kind == "grpo" else 0.5, dtype=torch.float64)
        for j in range(min(m, T)):
            S[:, j] = self.signal(A.double(), idx, j)
        return S

    def mean_W(self) -> torch.Tensor:
        """The batch mean of c_i ⊗ w_i (K, m), a W-shaped summary for the logs (total 1)."""
        return torch.einsum("bk,bj->kj", self.c.double(), self.w.double()) / self.w.shape[0]


def step_credit(method: str, *, A: torch.Tensor, lam: torch.Tensor, latents: torch.Tensor, x0_hats: torch.Tensor,
                final: torch.Tensor, m: int, kind: str, adv_clip_max: float, eps: float,
                explore: float) -> StepCredit:
    """The `StepCredit` of method "per_step" (CoCA-style) or "otca" for one batch.

    Args:
        A: (K, B) per-reward advantages (group-normalised, clipped).
        lam: (K,) normalised budgets.
        latents: (T + 1, B, ...) the sampler's states; x0_hats: (T, B, ...) its one-step predictions.
        final: (B, ...) the clean samples.
        m: trained steps. kind, adv_clip_max: as in `StepCredit`.
        eps: ε of the similarity gains. explore: weight of the budgets in OTCA's coefficients, in [0, 1].
    """
    if method == "per_step":
        preds = torch.cat([x0_hats, final[None]], 0)[: m + 1]  # x̂_0 at rows 0..T-1, then the sample itself
        w = similarity_gain_weights(preds, final, m, eps)
        c = lam.double().expand(A.shape[1], -1).clone()
    elif method == "otca":
        w = similarity_gain_weights(latents, final, m, eps)
        c = (1 - explore) * min_norm_coefficients(A, lam) + explore * lam.double()[None]
    else:
        raise ValueError(f"no per-sample step credit for method {method!r}")
    return StepCredit(w=w, c=c, kind=kind, adv_clip_max=adv_clip_max)
