"""Probe for the informativeness issue: does a richer calibration of the one-step proxy bring tweedie closer to the
ground truth?

    python research/probes/tweedie_calibration_probe.py                # against research/tables/informativeness_base.json
    python research/probes/tweedie_calibration_probe.py research/tables/informativeness_base_256.json replicate   # 2nd batch

Redraws notebook 02's batch (64 train prompts, seed 0, the same generator order as `estimate_profiles`, so the
`univariate` line reproduces the committed tweedie ρ), then calibrates p_clean on other features of x_σ, each with an
out-of-sample R² and the same shrink rule as `loo_calibrated_values`:
- univariate: the committed estimator (p_k of x̂_0, linear, leave-one-out);
- all proxies: p_j(x̂_0) of all eight rewards, ridge with leave-one-out choice of the penalty;
- + pooled x̂_0: those plus x̂_0 average-pooled to 3 × 4 × 4;
- isotonic: a monotone fit of p_k(x̂_0), 8-fold cross-fitted;
- quadratic: p_k(x̂_0) and its square, leave-one-out;
- hidden state: the transformer's last hidden state (the input of its output norm), averaged over the image tokens,
  ridge as above: a linear value probe on the policy's own features of x_σ, which hold everything x_σ does that the
  network computed, not only the posterior mean it decodes to x̂_0;
- p_k + hidden state: the same, with p_k(x̂_0) as one more feature.
It prints each variant's Spearman ρ of the 6 gains against the committed ground truth. Analysis only: the library
uses the univariate calibration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch


def inputs(num_prompts: int = 64, seed: int = 0):
    """p_clean (K, N), proxies (K, T+1, N), pooled x̂_0 features (T-1, N, 48) and the transformer's token-averaged
    last hidden state (T-1, N, width) of notebook 02's batch, drawn as `estimate_profiles` draws it (`model_batch`,
    then `tweedie_pairs`; the hook reads the forward pass each x̂_0 is decoded from)."""
    import recast
    from recast.worlds.digits.data import prompt_set
    from recast.worlds.digits.rewards import setting_rewards
    from recast.informativeness.probe import model_batch, tweedie_pairs
    from recast.world import load_world

    root = Path(recast.__file__).resolve().parents[1]
    world = load_world(f"digits:{root / 'data/digit_base'}")
    names = list(setting_rewards("compose", "quality"))
    pool = prompt_set("train")
    prompts = pool[:: max(1, len(pool) // num_prompts)][:num_prompts]
    b = model_batch(world, names, prompts, seed=seed)
    feats, hidden, last = [], [], []
    hook = world.transformer.norm_out.register_forward_hook(lambda m, inp, out: last.append(inp[0].mean(1).double()))

    def seen(j, img):
        feats.append(torch.nn.functional.avg_pool2d(img, 6).flatten(1).double())
        hidden.append(torch.cat(last))  # the forward pass(es) since the previous x̂_0, in sample order
        last.clear()

    try:
        p_clean, p_proxy = tweedie_pairs(world, b.embeds, prompts, b.x0, b.sigmas, b.reward, b.to_p,
                                         generator=b.generator, on_prediction=seen)
    finally:
        hook.remove()
    return (names, p_clean.T.numpy(), p_proxy.permute(2, 0, 1).numpy(), torch.stack(feats).numpy(),
            torch.stack(hidden).numpy())


def _shrunk(y: np.ndarray, fitted: np.ndarray, r2_oos: float) -> np.ndarray:
    """In-sample fit shrunk so its variance is the out-of-sample R² times Var(y), clipped at 0."""
    yc_ss = ((y - y.mean()) ** 2).sum()
    r2_in = ((fitted - y.mean()) ** 2).sum() / yc_ss if yc_ss > 0 else 0.0
    k = np.sqrt(min(1.0, max(r2_oos, 0.0) / r2_in)) if r2_in > 0 else 0.0
    return np.clip(y.mean() + k * (fitted - y.mean()), 0.0, None)


def ridge_loo(y: np.ndarray, X: np.ndarray, alphas=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)) -> np.ndarray:
    """Ridge of y on standardised X with the penalty of least leave-one-out error (closed form from the hat matrix)."""
    n, yc = len(y), y - y.mean()
    Xs = X - X.mean(0)
    sd = Xs.std(0)
    Xs = Xs[:, sd > 1e-9] / sd[sd > 1e-9]
    if Xs.shape[1] == 0 or not yc.any():
        return np.full(n, y.mean())
    U, S, _ = np.linalg.svd(Xs, full_matrices=False)
    best = None
    for a in alphas:
        f = S ** 2 / (S ** 2 + a * n)
        fitted, h = U @ (f * (U.T @ yc)), 1.0 / n + (U ** 2 * f).sum(1)
        press = (((yc - fitted) / np.maximum(1 - h, 1e-12)) ** 2).sum()
        if best is None or press < best[0]:
            best = (press, fitted)
    return _shrunk(y, y.mean() + best[1], 1 - best[0] / (yc ** 2).sum())


def isotonic_cv(y: np.ndarray, f: np.ndarray, folds: int = 8) -> np.ndarray:
    """Monotone fit of y on f (direction chosen per fold), out-of-sample R² from K-fold cross-fitting."""
    import warnings

    from sklearn.isotonic import IsotonicRegression
    from sklearn.model_selection import KFold

    if np.ptp(f) == 0 or np.ptp(y) == 0:
        return np.full(len(y), y.mean())
    oos = np.empty(len(y))
    with warnings.catch_warnings():  # "auto" warns when the direction is uncertain: the cross-fit pays for that
        warnings.simplefilter("ignore", UserWarning)
        for tr, te in KFold(folds, shuffle=True, random_state=0).split(f):
            oos[te] = IsotonicRegression(increasing="auto", out_of_bounds="clip").fit(f[tr], y[tr]).predict(f[te])
        fitted = IsotonicRegression(increasing="auto", out_of_bounds="clip").fit(f, y).predict(f)
    r2 = 1 - ((y - oos) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    return _shrunk(y, fitted, r2)


def main(path: str = "research/tables/informativeness_base.json", batch: str = "first") -> dict:
    """Print and return each variant's ρ per reward; ``batch`` "replicate" scores the JSON's second batch (its
    ``replicate`` seed and ground truth) instead of the first."""
    from recast.informativeness.discriminability import loo_calibrated_values, renyi_rows, telescoping_gains
    from recast.informativeness.probe import spearman

    torch.set_num_threads(1)
    ref = json.loads(Path(path).read_text())
    if batch not in ("first", "replicate"):
        raise SystemExit(f"batch must be first or replicate, not {batch!r}")
    seed, truth = ((ref["parameters"]["seed"], ref["rollout"]) if batch == "first" else
                   (ref["replicate"]["seed"], ref["replicate"]["rollout"]))
    names, pc, pp, F, H = inputs(ref["parameters"]["num_prompts"], seed)
    g_true = torch.tensor(truth["gains"])
    variants = {
        "univariate": lambda k, j: loo_calibrated_values(pc[k], pp[k, j]),
        "all proxies": lambda k, j: ridge_loo(pc[k], pp[:, j].T),
        "all proxies + pooled x0_hat": lambda k, j: ridge_loo(pc[k], np.concatenate([pp[:, j].T, F[j - 1]], 1)),
        "isotonic, 8-fold": lambda k, j: isotonic_cv(pc[k], pp[k, j]),
        "quadratic": lambda k, j: ridge_loo(pc[k], np.stack([pp[k, j], pp[k, j] ** 2], 1), alphas=(1e-6,)),
        "hidden state": lambda k, j: ridge_loo(pc[k], H[j - 1]),
        "p_k + hidden state": lambda k, j: ridge_loo(pc[k], np.concatenate([pp[k, j][:, None], H[j - 1]], 1)),
    }
    out = {}
    print("| calibration | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for name, cal in variants.items():
        K, T1, _ = pp.shape
        D = np.zeros((K, T1))
        for k in range(K):
            D[k, -1] = renyi_rows(loo_calibrated_values(pc[k], pc[k]))
            for j in range(1, T1 - 1):
                D[k, j] = renyi_rows(cal(k, j))
        g = telescoping_gains(torch.from_numpy(D))
        out[name] = [spearman(g[k], g_true[k]) for k in range(K)]
        print(f"| {name} | " + " | ".join(f"{r:+.2f}" for r in out[name]) + " |")
    return out


if __name__ == "__main__":
    main(*sys.argv[1:])
