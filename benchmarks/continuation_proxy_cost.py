"""What would a stochastic-continuation proxy cost the trainer? Timed against its own sampling, in one process.

Run: `python benchmarks/continuation_proxy_cost.py [--threads 2] [--repeats 3]` (7 min on 2 cores; prints a JSON object,
`--out FILE` also writes it).

Tweedie lags the ground truth because p_k(x̂_0) of one posterior mean is not the mean of p_k over the posterior
(research/rounds/24-figure-02.md "What figure 02 says"). The remedy named there is to average p_k over a few stochastic
continuations of each trained state, which is the ground truth's own kind of cost. This benchmark prices it at the `cpu`
preset's sizes (32 samples, the 6-step grid with its time shift, 3 trained columns per sample drawn from all 6), against
the phase the trainer already spends on sampling (the T-step ODE of 32 samples). For scale it also times the x̂_0
forward passes of the trained columns; tweedie does not pay for them, because the NFT loss makes them anyway (its own
measured cost, scoring the x̂_0, is 0.86 % of an iteration: `bench_trainer.py`). A continuation from grid index j runs
the ancestral step down the remaining T − j grid steps with ``substeps`` each; its cost per trained column is averaged
over j = 0 … T − 1, as the trainer draws its columns. The share of an iteration follows from the sampling phase's share
of a uniform iteration in `benchmarks/results/trainer.json` (the same preset, measured by `bench_trainer.py`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, also when imported by path (the tests)
from bench_solver import _time  # noqa: E402  (median of repeats after a warm-up call)

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> dict:
    from recast.config import preset
    from recast.worlds.digits.data import prompt_set
    from recast.io import write_json
    from recast.informativeness.rollout import fine_grid, sample_ancestral
    from recast.sampling import predict_velocity, sample_ode, sigma_schedule
    from recast.world import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rollouts", default="1,2", help="M continuations per trained state, comma-separated")
    ap.add_argument("--substeps", default="1,4,16", help="ancestral steps per grid step, comma-separated")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    cfg = preset("cpu")
    B, T, m = cfg.B, cfg.num_steps, cfg.train_columns
    world = load_world(f"digits:{ROOT / cfg.world}")
    prompts = prompt_set("train")[:B]
    embeds = world.encode_prompts(prompts)
    sigmas = sigma_schedule(T, cfg.shift)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn((B, *world.sample_shape), generator=gen)
    x0 = sample_ode(world.transformer, embeds, sigmas, noise=noise, return_trajectory=False).x0

    with torch.no_grad():
        t_sampling = _time(lambda: sample_ode(world.transformer, embeds, sigmas, noise=noise,
                                              return_trajectory=False), a.repeats)
        t_pass = _time(lambda: predict_velocity(world.transformer, noise, float(sigmas[1]), embeds), a.repeats)
        rows = []
        for M in (int(x) for x in a.rollouts.split(",")):
            for s in (int(x) for x in a.substeps.split(",")):
                per_column = []
                for j in range(T):
                    sigma = float(sigmas[j])
                    x_sigma = (1 - sigma) * x0 + sigma * torch.randn(x0.shape, generator=gen)
                    per_column.append(_time(lambda: sample_ancestral(
                        world.transformer, embeds.repeat(M), x_sigma.repeat(M, 1, 1, 1), fine_grid(sigmas, j, s),
                        gen), a.repeats))
                per_iteration = m * statistics.fmean(per_column)  # m trained columns per sample, drawn at random
                rows.append({"rollouts": M, "substeps": s, "seconds_per_iteration": per_iteration,
                             "vs_sampling": per_iteration / t_sampling})
    trainer = json.loads((ROOT / "benchmarks/results/trainer.json").read_text())["runs"]["uniform"][0]
    share = trainer["sampling"] / trainer["total"]
    for r in rows:
        r["pct_of_uniform_iteration"] = 100 * r["vs_sampling"] * share
    passes = m * t_pass / t_sampling  # the old-policy x̂_0 passes the NFT loss makes anyway
    out = {"preset": "cpu", "samples": B, "num_steps": T, "train_columns": m, "threads": a.threads,
           "sampling_s": t_sampling, "forward_pass_s": t_pass,
           "x0_hat_passes_vs_sampling": passes, "x0_hat_passes_pct_of_uniform_iteration": 100 * passes * share,
           "sampling_share_of_uniform_iteration": share, "continuations": rows}
    print(json.dumps(out, indent=2))
    if a.out:
        write_json(Path(a.out), out)
    return out


if __name__ == "__main__":
    main()
