"""A minimal DiffusionNFT-style loop over a diffusers SD3 pipeline, with ReCAST's credit (the lines marked ReCAST).

    python examples/nft_sd3.py --model DIR --table recast_weights.npz   # the paper's ReCAST: W from a weight table
    python examples/nft_sd3.py --model DIR --plain                       # the same loop without it (static)
    python examples/nft_sd3.py --model DIR --live                        # our first reading: W estimated live

The loop is the user's: stock diffusers and peft, no recast trainer. ReCAST enters in two calls to
`recast.credit.Credit` (normalise the raw rewards, then each trained (sample, σ)'s signal), and costs nothing
measurable: no x̂_0 is scored (`--live` adds a third call, `observe`, and the x̂_0 rewards it needs). `--plain` is
the paper's static baseline, written out here: the λ-weighted raw sum, normalised within each prompt group.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager

import torch
from diffusers import StableDiffusion3Pipeline
from peft import LoraConfig

from recast.credit import Credit  # ReCAST

PROMPTS = ["a red circle", "a blue square", "a green field", "a white cat"]


def edges(images):  # a high-frequency reward (mean absolute Laplacian): settled late
    c = images[..., 1:-1, 1:-1]
    lap = 4 * c - images[..., :-2, 1:-1] - images[..., 2:, 1:-1] - images[..., 1:-1, :-2] - images[..., 1:-1, 2:]
    return lap.abs().mean((1, 2, 3))


REWARDS = {"brightness": lambda images: images.mean((1, 2, 3)), "edges": edges}  # brightness: settled early


def decode(pipe, z):
    z = z / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
    return (pipe.vae.decode(z).sample.float() / 2 + 0.5).clamp(0, 1)


def velocity(model, x, sigma, emb, pooled):
    t = torch.full((x.shape[0],), float(sigma) * 1000.0)
    return model(hidden_states=x, timestep=t, encoder_hidden_states=emb, pooled_projections=pooled).sample.float()


@contextmanager
def swapped(params, other):
    """Run with the adapter's weights swapped for `other` (the old policy), then swap back."""
    for p, o in zip(params, other):
        p.data, o.data = o.data, p.data
    try:
        yield
    finally:
        for p, o in zip(params, other):
            p.data, o.data = o.data, p.data


def plain_signal(R, lam, G, clip=5.0, advantage=False):
    """The static baseline per sample: λ-weighted raw sum, per-group mean and std, clip (NFT: mixing weight)."""
    r = sum(lam.double()[k] * R[k].double() for k in range(R.shape[0])).reshape(1, -1, G)
    d = r - r.mean(-1, keepdim=True)
    A = (d / (d**2).mean(-1, keepdim=True).sqrt().clamp_min(1e-6)).clamp(-clip, clip).reshape(1, -1)
    return A if advantage else (A / clip / 2 + 0.5).clamp(0, 1)


def train(model, *, rewards=("brightness", "edges"), lam=None, table=None, live=False, plain=False, iterations=4,
          group=4, steps=6, columns=3, beta=1.0, lr=1e-3, seed=0, resolution=32, log=print):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    pipe = StableDiffusion3Pipeline.from_pretrained(model)
    pipe.set_progress_bar_config(disable=True)
    for m in (pipe.transformer, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3):
        if m is not None:
            m.requires_grad_(False)
    tr = pipe.transformer
    tr.add_adapter(LoraConfig(r=4, lora_alpha=8, init_lora_weights="gaussian",
                              target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    params = [p for p in tr.parameters() if p.requires_grad]
    old = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=lr)
    pipe.scheduler.set_timesteps(steps)
    sigmas = pipe.scheduler.sigmas.float()  # σ_0 = 1 > ... > σ_T = 0, the columns of W in sampling order
    lam_t = torch.tensor(lam or [1.0 / len(rewards)] * len(rewards))
    if table is not None:  # ReCAST: the paper's, W built offline (its budgets; its grid must be the scheduler's)
        credit = Credit.from_table(table, reward_names=list(rewards), sigmas=sigmas)
        lam_t = credit.lam
    else:  # ReCAST: W estimated live from the x̂_0 rewards (--live), or the static W (--plain, for the logs)
        credit = Credit(list(rewards), steps, lam_t.tolist(), method="recast_live" if live else "static",
                        sigmas=sigmas, min_pairs=8, bootstrap=16)
    prompts = [p for p in PROMPTS for _ in range(group)]
    with torch.no_grad():
        emb, _, pooled, _ = pipe.encode_prompt(prompts, prompts, prompts, do_classifier_free_guidance=False)
    history = []
    for it in range(iterations):
        with torch.no_grad(), swapped(params, old):  # rollouts from the old policy, CFG-free
            x0 = pipe(prompt_embeds=emb, pooled_prompt_embeds=pooled, num_inference_steps=steps, guidance_scale=1.0,
                      height=resolution, width=resolution, output_type="latent", generator=gen).images
            R = torch.stack([REWARDS[n](decode(pipe, x0)) for n in rewards])
        if plain:
            p_clean = plain_signal(R, lam_t, group)
        else:
            credit.normalise(R, prompts)  # ReCAST: raw rewards → every (sample, step)'s signal
        B = x0.shape[0]
        cols = torch.rand(B, steps, generator=gen).argsort(1)[:, :columns]
        pairs_s, pairs_c, pairs_R = [], [], []
        opt.zero_grad()
        for j in range(steps):
            idx = (cols == j).any(1).nonzero()[:, 0]
            if idx.numel() == 0:
                continue
            sigma = sigmas[j]
            eps = torch.randn(x0[idx].shape, generator=gen)
            x = (1 - sigma) * x0[idx] + sigma * eps
            with torch.no_grad(), swapped(params, old):
                v_old = velocity(tr, x, sigma, emb[idx], pooled[idx])
            v = velocity(tr, x, sigma, emb[idx], pooled[idx])
            p = p_clean[0, idx] if plain else credit.signal(idx, sigma=sigma.expand(idx.numel()))  # ReCAST
            pos, neg = (1 - beta) * v_old + beta * v, (1 + beta) * v_old - beta * v
            u = eps - x0[idx]
            loss = (p * ((pos - u) ** 2).mean((1, 2, 3)) + (1 - p) * ((neg - u) ** 2).mean((1, 2, 3))).mean()
            (loss * idx.numel() / (B * columns)).backward()
            if live and j > 0:  # ReCAST (live only): the rewards of x̂_0 = x_σ − σ v_old
                with torch.no_grad():
                    pairs_R.append(torch.stack([REWARDS[n](decode(pipe, x - sigma * v_old)) for n in rewards]))
                pairs_s.append(idx)
                pairs_c.append(torch.full_like(idx, j))
        opt.step()
        if live:
            credit.observe(torch.cat(pairs_s), torch.cat(pairs_c), torch.cat(pairs_R, 1))  # ReCAST: pool, re-solve W
        decay = min(0.001 * it, 0.5)
        for p, o in zip(params, old):
            o.mul_(decay).add_(p.detach(), alpha=1 - decay)
        history.append({"iteration": it + 1, **{n: float(R[k].mean()) for k, n in enumerate(rewards)},
                        "W": credit.W.tolist()})
        log(history[-1])
    return {"history": history, "params": [p.detach().clone() for p in params], "credit": credit}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a local diffusers SD3 / SD3.5 pipeline folder")
    ap.add_argument("--iterations", type=int, default=4), ap.add_argument("--rewards", default="brightness,edges")
    ap.add_argument("--table", help="a weight table (recast weights) or density profile for these rewards")
    ap.add_argument("--live", action="store_true", help="estimate W live from the x̂_0 rewards (recast_live)")
    ap.add_argument("--plain", action="store_true", help="the same loop without ReCAST (the static baseline)")
    a = ap.parse_args(argv)
    train(a.model, rewards=tuple(a.rewards.split(",")), table=a.table, live=a.live, plain=a.plain,
          iterations=a.iterations)


if __name__ == "__main__":
    main()
