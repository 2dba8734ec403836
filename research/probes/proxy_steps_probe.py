"""Probe for the informativeness issue: does a proxy that denoises in more than one step remove tweedie's lag?

    python research/probes/proxy_steps_probe.py            # against research/tables/informativeness_base_256.json

The committed tweedie estimator reads p_k of the one-step prediction x̂_0 = x_σ − σ v(x_σ). At high σ that image is
a blurry mean, which hides what is already decided, so tweedie's gains lag the ground truth's
(research/rounds/24-figure-02.md "Why tweedie misses: it lags"); richer calibrations of the same proxy did not help
(`research/probes/tweedie_calibration_probe.py`). Here the calibration stays the committed one (univariate,
leave-one-out) and the proxy changes:
- 1 step: the committed x̂_0 (reproduces the committed tweedie ρ exactly: same batch, same noise order);
- 2 steps: one Euler step of the probability-flow ODE to the next grid point σ_{j+1}, then its one-step x̂_0;
- ODE to 0: Euler on the remaining grid points σ_{j+1}, …, σ_T = 0 (T − j passes).
Every variant sees the same x_σ. Redraws notebook 02's two batches (num_prompts train prompts, seeds 0 and the
replicate seed) and prints each variant's Spearman ρ of the T gains against that batch's committed ground truth, the
centre of mass of the gains (0 = noisiest column) beside the ground truth's, and the forward passes each needs per
sample, relative to the one-step proxy. Analysis only: the library and the trainer use the one-step proxy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

VARIANTS = ("1 step", "2 steps", "ODE to 0")


@torch.no_grad()
def proxies(world, b, prompts) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, int]]:
    """p_clean (K, N) and, per variant, p_k of its proxy (K, T+1, N) at every interior grid point of batch ``b``
    (`model_batch`); the noise is drawn from ``b.generator`` in `tweedie_pairs`' order. Also forward passes per
    sample, summed over the interior grid points."""
    from recast.sampling import predict_velocity, sample_ode

    T, sig = len(b.sigmas) - 1, [float(s) for s in b.sigmas]
    p_clean = b.to_p(b.reward(world.decode(b.x0), list(prompts))).double().cpu()
    N, K = p_clean.shape
    out = {v: np.full((K, T + 1, N), np.nan) for v in VARIANTS}
    passes = dict.fromkeys(VARIANTS, 0)

    def v_at(x, s):
        return predict_velocity(world.transformer, x, s, b.embeds)

    def score(x0_hat):
        return b.to_p(b.reward(world.decode(x0_hat), list(prompts))).double().cpu().T.numpy()

    for j in range(1, T):
        eps = torch.randn(b.x0.shape, generator=b.generator, dtype=b.x0.dtype).to(b.x0.device)
        x = (1 - sig[j]) * b.x0 + sig[j] * eps
        v = v_at(x, sig[j])
        out["1 step"][:, j] = score(x - sig[j] * v)
        x_next = x + (sig[j + 1] - sig[j]) * v
        out["2 steps"][:, j] = score(x_next - sig[j + 1] * v_at(x_next, sig[j + 1])) if sig[j + 1] > 0 else \
            out["1 step"][:, j]
        out["ODE to 0"][:, j] = score(sample_ode(world.transformer, b.embeds, b.sigmas[j + 1:], noise=x_next,
                                                 return_trajectory=False).x0)
        passes["1 step"] += 1
        passes["2 steps"] += 1 + (sig[j + 1] > 0)
        passes["ODE to 0"] += T - j
    return p_clean.T.numpy(), out, passes


def gains_of(pc: np.ndarray, pp: np.ndarray) -> torch.Tensor:
    """Telescoping gains (K, T) of the tweedie D with the committed calibration, from p_clean and one proxy."""
    from recast.informativeness.discriminability import telescoping_gains, tweedie_discriminability

    return telescoping_gains(tweedie_discriminability(pc, pp))


def main(path: str = "research/tables/informativeness_base_256.json") -> dict:
    import recast
    from recast.worlds.digits.data import prompt_set
    from recast.worlds.digits.rewards import setting_rewards
    from recast.informativeness import gains_centre_of_mass
    from recast.informativeness.probe import model_batch, spearman
    from recast.world import load_world

    torch.set_num_threads(1)
    ref = json.loads(Path(path).read_text())
    par = ref["parameters"]
    root = Path(recast.__file__).resolve().parents[1]
    world = load_world(f"digits:{root / 'data/digit_base'}")
    names = list(setting_rewards("compose", "quality"))
    if names != ref["rollout"]["reward_names"]:
        raise ValueError(f"reward order {names} differs from the reference's {ref['rollout']['reward_names']}")
    pool = prompt_set("train")
    prompts = pool[:: max(1, len(pool) // par["num_prompts"])][:par["num_prompts"]]
    batches = [(par["seed"], ref["rollout"]["gains"], ref["tweedie"]["gains"])]
    if ref.get("replicate"):
        batches.append((ref["replicate"]["seed"], ref["replicate"]["rollout"]["gains"],
                        ref["replicate"]["tweedie"]["gains"]))
    out = {"names": names, "batches": []}
    for seed, g_true, g_committed in batches:
        b = model_batch(world, names, prompts, num_steps=par["num_steps"], shift=par["shift"],
                        substeps=par["substeps"], seed=seed)
        pc, pps, passes = proxies(world, b, prompts)
        g_true = torch.tensor(g_true, dtype=torch.float64)
        res = {"seed": seed, "ground_truth_com": gains_centre_of_mass(g_true).tolist(), "variants": {}}
        for v in VARIANTS:
            g = gains_of(pc, pps[v])
            res["variants"][v] = {"rho": [spearman(g[k], g_true[k]) for k in range(len(names))],
                                  "com": gains_centre_of_mass(g).tolist(), "passes_per_sample": passes[v]}
        off = (gains_of(pc, pps["1 step"]) - torch.tensor(g_committed, dtype=torch.float64)).abs().amax(1) > 1e-6
        if off.any():
            raise RuntimeError(f"seed {seed}: the 1-step variant does not reproduce the committed tweedie gains of "
                               f"{[n for n, o in zip(names, off) if o]}; is {path} from this code?")
        out["batches"].append(res)
        print(f"\nbatch seed {seed} ({par['num_prompts']} samples); ρ of the gains vs the ground truth, and centre of "
              "mass (ground truth: " + ", ".join(f"{c:.2f}" for c in res["ground_truth_com"]) + ")\n")
        print("| proxy | passes / sample | " + " | ".join(names) + " | mean lag of the centre of mass |")
        print("|---|---|" + "---|" * len(names) + "---|")
        for v, r in res["variants"].items():
            lag = np.nanmean(np.array(r["com"]) - np.array(res["ground_truth_com"]))
            print(f"| {v} | {r['passes_per_sample'] / passes['1 step']:.2f}x | "
                  + " | ".join(f"{x:+.2f}" for x in r["rho"]) + f" | {lag:+.2f} |")
    return out


if __name__ == "__main__":
    main(*sys.argv[1:])
