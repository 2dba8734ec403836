"""The phases of one benchmark iteration (benchmarks/bench_iteration.py), each timed by units of fixed work, and the
same passes at batch 1 for FLOP counting. Inputs are random tensors of the trainer's shapes and dtypes."""

from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from recast.credit import Credit
from recast.sampling import PromptEmbeds, predict_velocity
from recast.trainer.backends import draw_columns
from recast.trainer.losses import nft_loss
from recast.trainer.speed import merged_lora, sdpa_context

ADV_CLIP, KL_BETA = 5.0, 1e-4  # the release's advantage clip and KL weight


class _Inputs:
    """Random latents, conditioning, pixel images and token ids of the trainer's shapes, made once per variant."""

    def __init__(self, m, shape, n: int):
        self.g = torch.Generator().manual_seed(0)
        cfg, vae = m.transformer.config, m.vae.config
        self.m, self.shape = m, shape
        side = cfg.sample_size if m.tiny else 64
        self.latent = (cfg.in_channels, side, side)
        self.pixels = side * 2 ** (len(vae.block_out_channels) - 1)
        self.emb = PromptEmbeds(self.randn(n, shape.text_tokens, cfg.joint_attention_dim, dtype=m.dtype),
                                self.randn(n, cfg.pooled_projection_dim, dtype=m.dtype))
        self.sigmas = torch.linspace(1, 0, shape.steps + 1).tolist()

    def randn(self, *s, dtype=torch.float32):
        return torch.randn(s, generator=self.g).to(self.m.device, dtype)

    def embeds(self, n: int) -> PromptEmbeds:
        return PromptEmbeds(self.emb.encoder_hidden_states[:n], self.emb.pooled_projections[:n])

    def autocast(self):
        """bf16 autocast where the models are bf16 (as `accelerate` sets it for the trainer), else nothing."""
        if self.m.dtype != torch.bfloat16:
            return nullcontext()
        return torch.autocast(self.m.device.type, dtype=torch.bfloat16)

    def score(self, images: torch.Tensor) -> None:
        """Every reward stand-in on a batch of images (resized to its input, with random prompt tokens)."""
        m = self.m
        ids = torch.randint(0, 1000, (len(images), m.text_len), generator=self.g).to(m.device)
        for _, arch in self.shape.rewards:
            clip = m.clips[arch]
            side = clip.config.vision_config.image_size
            x = torch.nn.functional.interpolate(images, size=(side, side), mode="bilinear", antialias=True)
            clip(input_ids=ids, pixel_values=x.to(m.dtype)).logits_per_image.diagonal().float()


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(fn, dev) -> float:
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    return time.perf_counter() - t0


def _measure(run_units, total: int, sample: int, dev, once=None) -> dict:
    """One untimed unit, then ``sample`` timed units (0: all) scaled to ``total``; ``once`` is work done once per
    iteration (warmed up, then timed, and added)."""
    if total == 0:
        return {"units": 0, "timed": 0, "unit_s": 0.0, "seconds": 0.0, "first_call_excess_s": 0.0}
    first = _timed(lambda: run_units(1), dev)
    if once is not None:
        once()
    k = total if sample <= 0 else min(sample, total)
    mean = _timed(lambda: run_units(k), dev) / k
    once_s = _timed(once, dev) if once is not None else 0.0
    return {"units": total, "timed": k, "unit_s": mean, "seconds": mean * total + once_s, "once_s": once_s,
            "first_call_excess_s": max(first - mean, 0.0)}


def _nft_example(m, inp, policy, model, x0, eps, s: float, emb, p, N: int) -> None:
    """One update micro-batch at noise level s: old-policy (and reference) passes, trained pass, NFT loss, backward."""
    shape, n = inp.shape, x0.shape[0]
    x_s, u = (1 - s) * x0 + s * eps, eps - x0
    with inp.autocast():
        with torch.no_grad():
            with policy.use("old") as t:
                v_old = predict_velocity(t, x_s, s, emb).float()
            v_ref = None
            if shape.kl:
                with policy.use("ref") as t:
                    v_ref = predict_velocity(t, x_s, s, emb).float()
        v = predict_velocity(model, x_s, s, emb).float()
        loss = nft_loss(v, v_old, u, p, nft_beta=shape.nft_beta, norm=shape.nft_norm,
                        sigma=torch.full((n,), s, device=x0.device), scale=ADV_CLIP / shape.nft_beta, v_ref=v_ref,
                        kl_beta=KL_BETA if shape.kl else 0.0).loss
    (loss * (n / N)).backward()


def _recast(m, inp, shape, dev) -> dict:
    """ReCAST's own computation per iteration: normalise, the signal of every trained pair through W, and (live) the
    x̂_0 pairs pooled with a re-solve every `recast_every` iterations, timed after the window is full."""
    names = [n for n, _ in shape.rewards]
    K, B, T = len(names), shape.images, shape.steps
    groups = torch.arange(B) // shape.group
    gen = torch.Generator().manual_seed(1)
    mask = draw_columns(B, T, shape.trained, gen)
    sample, column = mask.nonzero().T
    R = inp.randn(K, B)
    if shape.proxies == 0:  # the release's recipe: the paper's method from a weight table, its "pre" aggregation
        from recast.archives import DensityProfile, table_from_profile
        from recast.sampling import sigma_schedule

        ratios = {n: torch.rand(16, T, generator=gen, dtype=torch.float64).numpy() * 2 for n in names}
        table = table_from_profile(DensityProfile(sigma_schedule(T, 3.0).double().numpy(), ratios), [1.0] * K)
        credit = Credit.from_table(table)
        warm, reps, proxy = 1, 3, None
    else:
        window, min_pairs, bootstrap, every = shape.live
        credit = Credit(names, T, method="recast_live", window=window, min_pairs=min_pairs, bootstrap=bootstrap,
                        recast_every=every)
        keep = torch.zeros(B, dtype=torch.bool)
        keep[torch.linspace(0, B - 1, shape.proxies).round().long()] = True
        sel = keep[sample] & (column > 0)
        proxy = (sample[sel], column[sel])
        warm, reps = window, every

    def iteration():
        credit.normalise(R, groups)
        credit.signal(sample, column).to(dev)
        if proxy is None:
            credit.observe()
        else:
            credit.observe(proxy[0], proxy[1], torch.rand(K, proxy[0].numel(), generator=gen))

    first = _timed(iteration, dev)
    for _ in range(warm - 1):
        iteration()
    mean = _timed(lambda: [iteration() for _ in range(reps)], dev) / reps
    return {"units": 1, "timed": reps, "unit_s": mean, "seconds": mean, "first_call_excess_s": max(first - mean, 0.0)}


def phases(m, shape, sw, policy, micro: int, sample: int, dev) -> dict:
    """Time every phase of one iteration; returns {phase: {units, timed, unit_s, seconds, first_call_excess_s}}."""
    inp = _Inputs(m, shape, max(shape.rollout_batch, micro, shape.decode_batch))
    out, sig, T = {}, inp.sigmas, shape.steps
    rb, db = shape.rollout_batch, shape.decode_batch
    state = {"x": inp.randn(rb, *inp.latent), "j": 0}

    def rollout(k):
        emb = inp.embeds(rb)
        with torch.no_grad(), inp.autocast(), sdpa_context(sw.sdpa), policy.use("old") as t:
            with merged_lora(t) if sw.merge_rollouts else nullcontext(t) as t2:
                for _ in range(k):
                    j, x = state["j"], state["x"]
                    state["x"] = x + (sig[j + 1] - sig[j]) * predict_velocity(t2, x, sig[j], emb).float()
                    state["j"] = (j + 1) % T

    out["rollout"] = _measure(rollout, shape.images // rb * T, sample, dev)
    z, images = inp.randn(db, *inp.latent), inp.randn(db, 3, inp.pixels, inp.pixels).clamp(-1, 1)

    def decode(k):
        with torch.no_grad():
            for _ in range(k):
                m.vae.decode(z).sample

    def reward(k):
        with torch.no_grad(), inp.autocast():
            for _ in range(k):
                inp.score(images)

    def recast_score(k):
        with torch.no_grad():
            for _ in range(k):
                decoded = m.vae.decode(z).sample
                with inp.autocast():
                    inp.score(decoded)

    out["decode"] = _measure(decode, shape.images // db, sample, dev)
    out["reward"] = _measure(reward, shape.images // db, sample, dev)
    out["recast_score"] = _measure(recast_score, -(-shape.proxies * shape.trained // db), sample, dev)
    out["recast"] = _recast(m, inp, shape, dev)
    N = shape.images * shape.trained
    x0, eps, emb = inp.randn(micro, *inp.latent), inp.randn(micro, *inp.latent), inp.embeds(micro)
    p, col = torch.rand(micro, generator=inp.g).to(dev), {"j": 0}

    def update(k):
        with sdpa_context(sw.sdpa):
            for _ in range(k):
                _nft_example(m, inp, policy, m.transformer, x0, eps, sig[col["j"]], emb, p, N)
                col["j"] = (col["j"] + 1) % shape.trained

    def optimiser_step():
        torch.nn.utils.clip_grad_norm_(m.policy.params, 1.0)
        m.optimizer.step()
        m.optimizer.zero_grad(set_to_none=True)
        policy.update_old(0.5)

    out["update"] = _measure(update, N // micro, sample, dev, once=optimiser_step)
    m.optimizer.zero_grad(set_to_none=True)
    return out


def one_item_passes(m, shape) -> dict:
    """The passes of each phase at batch 1 (no switches), for FLOP counting: "fwd" (a rollout step), "decode",
    "reward" and "update" (one example: old policy, reference, trained forward, loss, backward)."""
    inp = _Inputs(m, shape, 1)
    x, emb = inp.randn(1, *inp.latent), inp.embeds(1)
    z, image = inp.randn(1, *inp.latent), inp.randn(1, 3, inp.pixels, inp.pixels)
    p = torch.rand(1, generator=inp.g).to(m.device)

    def fwd():
        with torch.no_grad(), inp.autocast(), m.policy.use("old") as t:
            predict_velocity(t, x, 0.5, emb)

    def decode():
        with torch.no_grad():
            m.vae.decode(z)

    def reward():
        with torch.no_grad(), inp.autocast():
            inp.score(image)

    return {"fwd": fwd, "decode": decode, "reward": reward,
            "update": lambda: _nft_example(m, inp, m.policy, m.transformer, x, z, 0.5, emb, p, 1)}
