"""A minimal Flow-GRPO-style loop over a diffusers SD3 pipeline, with ReCAST's credit (the lines marked ReCAST).

    python examples/grpo_sd3.py --model DIR --table recast_weights.npz   # the paper's W on a likelihood method
    python examples/grpo_sd3.py --model DIR --plain                       # the same loop without it (static)
    python examples/grpo_sd3.py --model DIR --live                        # our first reading: W estimated live

SDE rollouts with per-step log-probs (Flow-GRPO's step, noise level a), then a PPO-clipped update on every
transition but the last, deterministic one (its column of W goes unused). With a table, each step's advantage is the
paper's: the rewards mixed by T·W[:, j], normalised within each prompt group. `--live` mixes each reward's advantage,
A_j = T · Σ_k W[k, j] A_k, with W re-estimated from the sampler's own x̂_0 (free here). `--plain` is the static
baseline (the λ-weighted raw sum, normalised in each group), computed here.
"""

from __future__ import annotations

import argparse
import math

import torch
from diffusers import StableDiffusion3Pipeline
from peft import LoraConfig

from recast.credit import Credit  # ReCAST

import nft_sd3 as common  # prompts, rewards, decode, velocity (examples/nft_sd3.py)


def sde_step(x, v, sigma, sigma_next, sigma_max, a, x_next=None, gen=None):
    """Flow-GRPO's step σ → σ_next: returns (x_next, log-prob of x_next per sample, averaged over pixels)."""
    s = min(float(sigma), float(sigma_max))
    std_t = a * math.sqrt(s / (1 - s))
    dt = float(sigma_next - sigma)
    mean = x + (v + std_t ** 2 / (2 * float(sigma)) * (x + (1 - float(sigma)) * v)) * dt
    std = std_t * math.sqrt(-dt)
    if x_next is None:
        x_next = mean + std * torch.randn(x.shape, generator=gen)
    logp = -((x_next - mean) ** 2) / (2 * std ** 2) - math.log(std) - 0.5 * math.log(2 * math.pi)
    return x_next, logp.mean((1, 2, 3))


def rollout(tr, emb, pooled, sigmas, shape, a, gen):
    """SDE samples with every state, one-step prediction and log-prob (no grad)."""
    x = torch.randn(shape, generator=gen)
    xs, hats, logps = [x], [], []
    T = len(sigmas) - 1
    for j in range(T):
        v = common.velocity(tr, x, sigmas[j], emb, pooled)
        hats.append(x - sigmas[j] * v)
        if j < T - 1:
            x, lp = sde_step(x, v, sigmas[j], sigmas[j + 1], sigmas[1], a, gen=gen)
            logps.append(lp)
        else:  # the last step into σ = 0 is deterministic (no likelihood; never trained)
            x = x + (sigmas[j + 1] - sigmas[j]) * v
        xs.append(x)
    return torch.stack(xs), torch.stack(hats), torch.stack(logps)


def train(model, *, rewards=("brightness", "edges"), lam=None, table=None, live=False, plain=False, iterations=4,
          group=4, steps=6, a=0.7, clip_range=0.2, lr=1e-3, seed=0, resolution=32, log=print):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    pipe = StableDiffusion3Pipeline.from_pretrained(model)
    for m in (pipe.transformer, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3):
        if m is not None:
            m.requires_grad_(False)
    tr = pipe.transformer
    tr.add_adapter(LoraConfig(r=4, lora_alpha=8, init_lora_weights="gaussian",
                              target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    params = [p for p in tr.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    pipe.scheduler.set_timesteps(steps)
    sigmas = pipe.scheduler.sigmas.float()
    lam_t = torch.tensor(lam or [1.0 / len(rewards)] * len(rewards))
    if table is not None:  # ReCAST: the paper's W, built offline
        credit = Credit.from_table(table, reward_names=list(rewards), sigmas=sigmas, signal="grpo")
        lam_t = credit.lam
    else:  # ReCAST: W estimated live (--live), or the static W (--plain, for the logs)
        credit = Credit(list(rewards), steps, lam_t.tolist(), method="recast_live" if live else "static",
                        signal="grpo", trained_columns=steps - 1, min_pairs=8, bootstrap=16)
    prompts = [p for p in common.PROMPTS for _ in range(group)]
    with torch.no_grad():
        emb, _, pooled, _ = pipe.encode_prompt(prompts, prompts, prompts, do_classifier_free_guidance=False)
    B = len(prompts)
    latent = (B, tr.config.in_channels, resolution // 2 ** (len(pipe.vae.config.block_out_channels) - 1),
              resolution // 2 ** (len(pipe.vae.config.block_out_channels) - 1))
    history = []
    for it in range(iterations):
        with torch.no_grad():
            xs, hats, old_logp = rollout(tr, emb, pooled, sigmas, latent, a, gen)
            R = torch.stack([common.REWARDS[n](common.decode(pipe, xs[-1])) for n in rewards])
        if plain:
            A = common.plain_signal(R, lam_t, group, advantage=True)[0]
        else:
            credit.normalise(R, prompts)  # ReCAST: raw rewards → every (sample, step)'s advantage
        opt.zero_grad()
        for j in range(steps - 1):
            A_j = A if plain else credit.signal(torch.arange(B), torch.full((B,), j))  # ReCAST
            v = common.velocity(tr, xs[j], sigmas[j], emb, pooled)
            _, logp = sde_step(xs[j], v, sigmas[j], sigmas[j + 1], sigmas[1], a, x_next=xs[j + 1])
            ratio = torch.exp(logp - old_logp[j])
            loss = -torch.min(ratio * A_j, ratio.clamp(1 - clip_range, 1 + clip_range) * A_j).mean()
            (loss / (steps - 1)).backward()
        opt.step()
        if live:  # ReCAST (live only): the sampler's x̂_0 at every interior step, scored and pooled; W re-solved
            with torch.no_grad():
                R_hat = torch.cat([torch.stack([common.REWARDS[n](common.decode(pipe, hats[j])) for n in rewards])
                                   for j in range(1, steps)], 1)
            credit.observe(torch.arange(B).repeat(steps - 1), torch.arange(1, steps).repeat_interleave(B), R_hat)
        history.append({"iteration": it + 1, **{n: float(R[k].mean()) for k, n in enumerate(rewards)},
                        "W": credit.W.tolist()})
        log(history[-1])
    return {"history": history, "params": [p.detach().clone() for p in params], "credit": credit}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a local diffusers SD3 / SD3.5 pipeline folder")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--rewards", default="brightness,edges")
    ap.add_argument("--table", help="a weight table (recast weights) or density profile for these rewards")
    ap.add_argument("--live", action="store_true", help="estimate W live from the sampler's x̂_0 (recast_live)")
    ap.add_argument("--plain", action="store_true", help="the same loop without ReCAST (the static baseline)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    train(a.model, rewards=tuple(a.rewards.split(",")), table=a.table, live=a.live, plain=a.plain,
          iterations=a.iterations, seed=a.seed)


if __name__ == "__main__":
    main()
