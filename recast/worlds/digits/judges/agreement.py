"""Do the training rewards teach what the held-out judges check? Reward-vs-judge agreement as ROC AUC.

Each digit-world reward has a matching held-out verdict (`MATCHING_VERDICT`). On a batch of samples, the agreement of
a reward is the ROC AUC with which its scores separate the samples its judge passes from those it fails: 1 = every
pass scores above every fail, 0.5 = no relation. A reward that agrees poorly with its judge can be raised without
raising the judge, which is where reward hacking starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["MATCHING_VERDICT", "Agreement", "judge_verdicts", "reward_judge_agreement", "verdict_reward"]

# reward -> the held-out verdict it should predict (True = judge passes the sample)
MATCHING_VERDICT: dict[str, str] = {
    "digit": "digit", "color": "color", "position": "position", "position_flat": "position", "size": "size",
    "size_half_max": "size",
    "sharpness": "not_blur", "clean": "not_speckle", "clean_mass": "not_speckle",
    "speck_free": "not_speckle", "speck_free_abs": "not_speckle", "sharpness_steep": "not_blur",
    "sharpness_steep_hinged": "not_blur",
    "contrast": "not_fade", "contrast_flat": "not_fade", "wash_free": "not_fade",
    "realism": "defect_free", "realism_centred": "defect_free",
}


@dataclass(frozen=True)
class Agreement:
    """One reward's agreement with its judge.

    Attributes:
        reward: reward name.
        verdict: the judge verdict it is compared with.
        auc: ROC AUC of the reward's scores for pass (1) vs fail (0); NaN when the batch has only passes or fails.
        pass_rate: share of samples the judge passes.
        n: number of samples.
    """

    reward: str
    verdict: str
    auc: float
    pass_rate: float
    n: int


def judge_verdicts(images: torch.Tensor, prompts: list[str]) -> dict[str, torch.Tensor]:
    """Every held-out per-sample verdict, bool ``(B,)``: the four attributes, strict, and the defect verdicts."""
    from recast.worlds.digits.judges.attributes import ATTRIBUTES, judge_attributes
    from recast.worlds.digits.judges.defects import judge_defects

    a, d = judge_attributes(images, prompts), judge_defects(images)
    out = {k: getattr(a, k) for k in ATTRIBUTES + ("strict",)}
    out.update(not_blur=~d.blur, not_speckle=~d.speckle, not_fade=~d.fade, defect_free=~d.any)
    return out


def verdict_reward(key: str):
    """A held-out verdict as a 0/1 pseudo-reward ``(images, prompts) -> float (B,)`` (1 = the judge passes), for
    the probes that time the judges' own verdicts (`research/probes/verdict_timing_probe.py`, `research/probes/timing_cache.py`).
    Images are clamped to [0, 1] first, as the judges expect. An unknown ``key`` fails at the first call, naming the
    verdicts of `judge_verdicts`."""

    def reward(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        verdicts = judge_verdicts(images.clamp(0, 1), prompts)
        if key not in verdicts:
            raise ValueError(f"unknown verdict {key!r}; valid: {', '.join(verdicts)}")
        return verdicts[key].float()

    return reward


def reward_judge_agreement(images: torch.Tensor, prompts: list[str],
                           rewards: dict[str, torch.Tensor]) -> dict[str, Agreement]:
    """ROC AUC of each reward against its matching judge verdict.

    Args:
        images: ``(B, 3, H, W)`` in ``[0, 1]``.
        prompts: B prompt texts.
        rewards: reward name -> scores ``(B,)`` (names must be keys of ``MATCHING_VERDICT``).

    Raises:
        ValueError: an unknown reward name or a score tensor of the wrong length.
    """
    from sklearn.metrics import roc_auc_score

    unknown = sorted(set(rewards) - set(MATCHING_VERDICT))
    if unknown:
        raise ValueError(f"no matching judge for rewards {unknown}; known: {sorted(MATCHING_VERDICT)}")
    verdicts = judge_verdicts(images, prompts)
    out = {}
    for name, scores in rewards.items():
        if scores.shape != (len(prompts),):
            raise ValueError(f"reward {name!r}: expected scores of shape ({len(prompts)},), got {tuple(scores.shape)}")
        v = verdicts[MATCHING_VERDICT[name]].numpy()
        auc = float(roc_auc_score(v, scores.detach().float().cpu().numpy())) if 0 < v.sum() < len(v) else float("nan")
        out[name] = Agreement(name, MATCHING_VERDICT[name], auc, float(v.mean()), len(v))
    return out
