"""Evaluation of the EMA policy on held-out test prompts: training rewards, judges, sample grids."""

from __future__ import annotations

import torch

from recast.sampling import sample_ode
from recast.trainer.metrics import write_grid

__all__ = ["EVAL_SEED_OFFSET", "evaluate"]

EVAL_SEED_OFFSET = 10_007  # the eval noise generator is seeded with cfg.seed + this, fresh at every evaluation


def _judge_scores(images: torch.Tensor, prompts: list[str], seed: int) -> dict:
    """Held-out judges (`recast.judges`): strict / per-attribute accuracy, defect rates, Fréchet distance, diversity."""
    from recast import judges

    rec = {f"judge/{k}": float(v) for k, v in judges.judge_report(images.cpu(), prompts).as_dict().items() if k != "n"}
    rec.update({f"judge/defect_{k}": float(v) for k, v in judges.defect_report(images.cpu()).as_dict().items()
                if k not in ("n", "clean")})
    rec["judge/fid"] = float(judges.fid(images.cpu(), prompts, generator=torch.Generator().manual_seed(seed)))
    if len(set(prompts)) < len(prompts):
        rec["judge/diversity"] = float(judges.diversity(images.cpu(), prompts))
    return rec


@torch.no_grad()
def evaluate(trainer, grid: bool = True) -> dict:
    """Sample the EMA policy on the first `eval_prompts` test prompts (fixed noise) and score it.

    Uses its own generator, so the training RNG stream is untouched (resume stays bit-exact).

    Returns:
        {"iteration", "reward/<name>", "reward/weighted", "judge/<name>"...}
    """
    from recast.digits.data import prompt_set

    cfg = trainer.cfg
    pool = prompt_set("test")
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
    rec.update(_judge_scores(images, prompts, cfg.seed + EVAL_SEED_OFFSET))
    if grid:
        write_grid(trainer.out / "grids" / f"iter_{trainer.iteration:05d}.png", images[:32])
    return rec
