"""Audit a digit-world base model: is there room to learn on every attribute, and do the rewards agree with the judges?

`audit_world` samples the model (ODE, the evaluation grid), then reports the held-out attribute accuracies, the defect
rates, and each reward's ROC AUC against its matching judge (`recast.worlds.digits.judges.agreement`). The bands the issue asks
of a base model are in `BANDS`; `tests/test_base_model.py` checks the committed base model against them.

    python -m recast.worlds.digits.audit data/digit_base --n 256 --split test
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field

import torch

__all__ = ["BANDS", "WorldAudit", "audit_world", "out_of_band"]

# metric -> (low, high): held-out judge accuracies and defect rates a base model should fall in, so that RL has
# something to learn on every attribute and every quality defect.
BANDS: dict[str, tuple[float, float]] = {
    "color": (0.4, 0.8), "position": (0.4, 0.8), "size": (0.5, 0.85), "digit": (0.25, 0.6),
    "defect_blur": (0.2, 0.6), "defect_speckle": (0.2, 0.6), "defect_fade": (0.2, 0.6),
}


@dataclass(frozen=True)
class WorldAudit:
    """What `audit_world` measured.

    Attributes:
        judges: accuracies ``strict, digit, color, position, size`` and defect rates ``defect_blur, ...,
            defect_clean`` (share with no defect).
        agreement: reward -> ROC AUC against its matching judge verdict.
        rewards: reward -> mean score.
        n: samples; split, num_steps, shift, seed: how they were drawn.
        reward_std: reward -> std of the scores over the samples (what the trainer's silencing floor reads).
    """

    judges: dict[str, float]
    agreement: dict[str, float]
    rewards: dict[str, float]
    n: int
    split: str
    num_steps: int
    shift: float
    seed: int
    reward_std: dict[str, float] = field(default_factory=dict)


@torch.no_grad()
def sample_world(world, *, n: int, split: str, num_steps: int = 10, shift: float = 3.0, seed: int = 0,
                 batch_size: int = 128, sigmas=None) -> tuple[torch.Tensor, list[str]]:
    """ODE samples of a world on ``n`` prompts drawn uniformly from a split: images ``(n, 3, H, W)`` and prompts.
    ``sigmas`` (1 > … > 0), when given, is the grid instead of `sigma_schedule(num_steps, shift)`."""
    from recast.worlds.digits.data import sample_prompts
    from recast.informativeness.probe import grid_sigmas
    from recast.sampling import sample_ode

    sigmas = grid_sigmas(num_steps, shift, sigmas)
    gen = torch.Generator().manual_seed(seed)
    prompts = sample_prompts(n, split=split, generator=gen)
    images = []
    for i in range(0, n, batch_size):
        embeds = world.encode_prompts(prompts[i:i + batch_size])
        out = sample_ode(world.transformer, embeds, sigmas, shape=world.sample_shape, generator=gen,
                         return_trajectory=False)
        images.append(world.decode(out.x0).cpu())
    return torch.cat(images), prompts


def audit_world(world, *, n: int = 256, split: str = "test", num_steps: int = 10, shift: float = 3.0,
                seed: int = 0) -> WorldAudit:
    """Judge accuracies, defect rates and reward-judge agreement of a world's ODE samples."""
    from recast.worlds.digits import rewards as R
    from recast.worlds.digits.judges.agreement import MATCHING_VERDICT, reward_judge_agreement
    from recast.worlds.digits.judges.attributes import judge_report
    from recast.worlds.digits.judges.defects import defect_report

    images, prompts = sample_world(world, n=n, split=split, num_steps=num_steps, shift=shift, seed=seed)
    judges = {k: v for k, v in judge_report(images, prompts).as_dict().items() if k != "n"}
    judges.update({f"defect_{k}": v for k, v in defect_report(images).as_dict().items() if k != "n"})
    # every setting's rewards, then the candidates that have a matching judge (position_flat, size_half_max)
    names = list(dict.fromkeys([*(name for setting in R.SETTINGS.values() for name in setting), *MATCHING_VERDICT]))
    scores = {name: R.get(name)("cpu")(images, prompts) for name in names}
    agreement = {k: a.auc for k, a in reward_judge_agreement(images, prompts, scores).items()}
    return WorldAudit(judges, agreement, {k: float(v.mean()) for k, v in scores.items()}, n, split, num_steps,
                      shift, seed, {k: float(v.float().std(unbiased=False)) for k, v in scores.items()})


def out_of_band(audit: WorldAudit) -> dict[str, float]:
    """The metrics of `BANDS` that fall outside their band, with their values (empty = all in band)."""
    return {k: audit.judges[k] for k, (lo, hi) in BANDS.items() if not lo <= audit.judges[k] <= hi}


def main(argv: list[str] | None = None) -> None:
    """CLI: print the audit of a saved world as JSON."""
    from recast.worlds.digits.model import load_world

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("world", help="a saved digit world folder, e.g. data/digit_base")
    p.add_argument("--n", type=int, default=256, help="samples")
    p.add_argument("--split", default="test", choices=["train", "test"], help="prompt split")
    p.add_argument("--num-steps", type=int, default=10, help="Euler steps")
    p.add_argument("--shift", type=float, default=3.0, help="SD3 time shift of the grid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    audit = audit_world(load_world(a.world), n=a.n, split=a.split, num_steps=a.num_steps, shift=a.shift, seed=a.seed)
    print(json.dumps({**asdict(audit), "out_of_band": out_of_band(audit)}, indent=1))


if __name__ == "__main__":
    main()
