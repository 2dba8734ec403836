"""Reward-judge agreement: AUC is 1 where a reward separates its judge's verdicts, 0.5 for noise, errors named."""

import math

import pytest
import torch

from recast.worlds.digits import rewards as R
from recast.worlds.digits import data
from recast.worlds.digits.corruption import Corruption, corrupt_specs, inject_defects
from recast.worlds.digits.judges.agreement import MATCHING_VERDICT, judge_verdicts, reward_judge_agreement


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(0)
    prompts = data.sample_prompts(240, split="test", generator=gen)
    specs = corrupt_specs([data.parse_prompt(p) for p in prompts], Corruption(color=0.5, position=0.5),
                          torch.Generator().manual_seed(1))
    images = data.render(specs, glyph_split="judge", generator=gen)
    images, _ = inject_defects(images, Corruption(speckle=0.4), torch.Generator().manual_seed(2))
    return images, prompts


@pytest.mark.parametrize("reward", ["color", "position", "clean"])
def test_rewards_separate_their_judges_verdicts(batch, reward):
    images, prompts = batch
    a = reward_judge_agreement(images, prompts, {reward: R.get(reward)("cpu")(images, prompts)})[reward]
    assert a.verdict == MATCHING_VERDICT[reward] and a.n == 240
    assert 0.3 < a.pass_rate < 0.8
    assert a.auc > 0.9


def test_noise_scores_have_auc_near_half_and_constant_verdicts_give_nan(batch):
    images, prompts = batch
    noise = torch.rand(len(prompts), generator=torch.Generator().manual_seed(3))
    a = reward_judge_agreement(images, prompts, {"color": noise, "contrast": noise})
    assert abs(a["color"].auc - 0.5) < 0.12
    assert math.isnan(a["contrast"].auc) and a["contrast"].pass_rate == 1.0  # nothing is faded


def test_verdicts_cover_every_matching_judge(batch):
    v = judge_verdicts(*batch)
    assert set(MATCHING_VERDICT.values()) <= set(v) and all(t.dtype == torch.bool for t in v.values())


@pytest.mark.parametrize("rewards, match", [({"hue": torch.zeros(240)}, "no matching judge for rewards"),
                                            ({"color": torch.zeros(7)}, r"expected scores of shape \(240,\)")])
def test_bad_input_is_named(batch, rewards, match):
    with pytest.raises(ValueError, match=match):
        reward_judge_agreement(*batch, rewards)


def test_verdict_reward_is_the_verdict_as_0_1_and_names_unknown_verdicts(batch):
    """A verdict as a pseudo-reward: 1.0 where the judge passes, 0.0 where it fails, on images clamped to [0, 1];
    an unknown verdict is refused with the valid names."""
    from recast.worlds.digits.judges.agreement import verdict_reward

    images, prompts = batch[0], batch[1]
    v = judge_verdicts(images, prompts)
    for key in ("color", "not_speckle"):
        got = verdict_reward(key)(images, prompts)
        assert got.dtype == torch.float32 and torch.equal(got, v[key].float())
    torch.testing.assert_close(verdict_reward("not_fade")(images * 2 - 0.5, prompts),
                               judge_verdicts((images * 2 - 0.5).clamp(0, 1), prompts)["not_fade"].float())
    with pytest.raises(ValueError, match="valid: digit"):
        verdict_reward("sharp")(images, prompts)
