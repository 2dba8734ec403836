"""Evaluation of the EMA policy on held-out test prompts: training rewards, the world's judges, sample grids."""

from __future__ import annotations

import torch

from recast.sampling import sample_ode
from recast.trainer.metrics import write_grid

__all__ = ["EVAL_SEED_OFFSET", "evaluate"]

EVAL_SEED_OFFSET = 10_007  # the eval noise generator is seeded with cfg.seed + this, fresh at every evaluation


def _judge_scores(world, images: torch.Tensor, prompts: list[str], seed: int) -> dict:
    """The world's held-out judges (`World.evaluate`), keyed "judge/<name>"."""
    return {f"judge/{k}": float(v) for k, v in world.evaluate(images, prompts, seed=seed).items()}


@torch.no_grad()
def evaluate(trainer, grid: bool = True) -> dict:
    """Sample the EMA policy on the first `eval_prompts` test prompts (fixed noise) and score it.

    Uses its own generator, so the training RNG stream is untouched (resume stays bit-exact).

    Returns:
        {"iteration", "reward/<name>", "reward/weighted", "judge/<name>"...}
    """
    cfg = trainer.cfg
    pool = trainer.world.prompts("test")
    prompts = [pool[i % len(pool)] for i in range(cfg.eval_prompts) for _ in range(cfg.eval_group)]
    gen = torch.Generator().manual_seed(cfg.seed + EVAL_SEED_OFFSET)
    noise = torch.randn((len(prompts), *trainer.world.sample_shape), generator=gen).to(trainer.acc.device)
    embeds = trainer.world.encode_prompts(prompts)
    with trainer.policy.use("ema") as tr, trainer.acc.autocast():
        x0 = sample_ode(tr, embeds, trainer.sigmas, noise=noise, return_trajectory=False).x0.float()
    R = trainer.score(x0, prompts)
    weighted = (trainer.lam.float()[:, None] * R.cpu()).sum(0).mean()
    rec = {"iteration": trainer.iteration, "reward/weighted": float(weighted)}
    rec.update({f"reward/{n}": float(R[k].mean()) for k, n in enumerate(trainer.reward_names)})
    images = trainer.world.decode(x0)
    rec.update(_judge_scores(trainer.world, images, prompts, cfg.seed + EVAL_SEED_OFFSET))
    if grid:
        write_grid(trainer.out / "grids" / f"iter_{trainer.iteration:05d}.png", images[:32])
    trainer.last_eval_images = images[:16].detach().cpu()  # for the trackers (recast.trainer.tracking)
    return rec
