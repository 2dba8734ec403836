"""The trainer's side of trajectory replay: one iteration's draw from the buffer, appended to the fresh batch.

The pure parts (the buffer, recomputed advantages, priorities, the draw) live in `recast.trainer.replay`; this glues
them to a `Trainer`'s state (its config, budgets, tracker, world and replay generator).
"""

from __future__ import annotations

import torch

from recast.advantages import Advantages, reward_sum
from recast.trainer.backends import Rollouts
from recast.trainer.replay import (draw, group_offsets, informativeness_weights, merge_replay, priorities,
                                   replay_count, restandardise)

__all__ = ["replay_batch"]


def _weights(trainer) -> torch.Tensor:
    """Per-reward weights of the |advantage| and informativeness priorities (one weight for reward_sum's sum)."""
    cfg = trainer.cfg
    if trainer.spec.method.aggregation == "reward_sum":
        return torch.ones(1, dtype=torch.float64)
    if cfg.replay_priority == "informativeness":
        tr = trainer.tracker  # validation requires the live estimate (recast_live), so the tracker exists
        return informativeness_weights(trainer.lam, tr.gains() if tr.ready() else None, tr.m)
    return trainer.lam.to(torch.float64)


def replay_batch(trainer, ro: Rollouts, R_all: torch.Tensor, train_adv: Advantages, S: torch.Tensor,
                 info_mask: torch.Tensor | None):
    """Expire old records, draw this iteration's replayed samples and append them to the fresh batch.

    Args:
        trainer: the `Trainer` (single process; its `replay` buffer and `replay_gen` are used).
        ro: the fresh rollouts (B samples).
        R_all: the fresh raw rewards (K, B).
        train_adv: the fresh batch's training advantages (per reward, or of the reward_sum aggregate).
        S: the fresh samples' signal matrix (B, T).
        info_mask: (B,) samples scored for informativeness, or None.

    Returns:
        (rollouts (B + n samples), S (B + n, T), info_mask (B + n,) or None, record), where record holds the
        replay metrics and, under "_offsets", the fresh samples' prompt offsets (K, B) for the buffer. A replayed
        sample's per-reward signal is mixed through the method's W (`recast.credit.Credit.mix`).
    """
    cfg, buf = trainer.cfg, trainer.replay
    now = trainer.iteration + 1
    R_now = R_all.detach().float().cpu()
    rec = {"_offsets": group_offsets(R_now, cfg.group_size), "replay/expired": float(buf.expire(now)),
           "replay/buffer": float(len(buf)), "replay/mean_age": 0.0}
    n = min(replay_count(cfg.replay_share, cfg.B), len(buf))
    if n == 0:
        return ro, S, info_mask, rec
    R_b, off = buf.R, buf.offset
    if trainer.spec.method.aggregation == "reward_sum":  # the aggregate is linear, so its offset is the budget-weighted sum of offsets
        R_b, off, R_now = reward_sum(R_b, trainer.lam), reward_sum(off, trainer.lam), reward_sum(R_now, trainer.lam)
    adv = restandardise(R_b, off, R_now, cfg.group_size, adv_clip_max=cfg.adv_clip_max, std_scope=cfg.std_scope,
                        silenced=train_adv.silenced.cpu())
    ages = buf.ages(now)
    idx = draw(priorities(cfg.replay_priority, adv.A, ages, _weights(trainer)), n, trainer.replay_gen)
    prompts = [buf.prompts[i] for i in idx.tolist()]
    with torch.no_grad(), trainer.acc.autocast():
        embeds = trainer.world.encode_prompts(prompts)
    rec["replay/mean_age"] = float(ages[idx].double().mean())
    batch, sig, mask = merge_replay(ro, S, info_mask, buf.x0[idx].to(ro.x0.device), prompts, embeds,
                                    trainer.credit.mix(adv.p[:, idx]))
    return batch, sig, mask, rec
