"""Held-out judges pass on real canvases and separate real from degraded or noise."""

import numpy as np
import pytest
import torch

from recast.worlds.digits import judges
from recast.worlds.digits import data
from recast.worlds.digits.rewards.degrade import degrade


@pytest.fixture(scope="module")
def real():
    images, prompts = data.sample_batch(96, split="test", glyph_split="judge",
                                        generator=torch.Generator().manual_seed(0))
    return images, prompts


def test_strict_accuracy_on_real_heldout_canvases(real):
    report = judges.judge_report(*real)
    assert report.strict >= 0.9 and report.n == 96
    assert set(report.as_dict()) == {"strict", "digit", "color", "position", "size", "n"}
    # glyphs the judge never saw (base split) are also read correctly
    images, prompts = data.sample_batch(96, glyph_split="base", generator=torch.Generator().manual_seed(1))
    assert judges.judge_report(images, prompts).strict >= 0.9


def test_attribute_judge_catches_wrong_attributes(real):
    images, prompts = real
    for attr, values in [("color", data.COLORS), ("position", data.POSITIONS), ("size", data.SIZES)]:
        wrong = []
        for p in prompts:
            s = data.parse_prompt(p)
            vals = list(values)
            wrong.append(data.PromptSpec(**{**s.__dict__, attr: vals[(vals.index(getattr(s, attr)) + 1) % len(vals)]}))
        j = judges.judge_attributes(images, [w.text for w in wrong])
        assert getattr(j, attr).float().mean() <= 0.05 and j.strict.float().mean() <= 0.05
    empty = judges.judge_attributes(torch.zeros_like(images[:4]), prompts[:4])
    assert not empty.strict.any() and not empty.color.any()


def test_preference_prefers_real_and_ties_identical(real):
    images, prompts = real
    gen = torch.Generator().manual_seed(2)
    for kind in ("blur", "noise", "speckle", "fade"):
        wr = judges.win_rate(images, degrade(images, kind, 1.0, gen), prompts)
        assert wr.win_rate >= 0.8, (kind, wr)
    same = judges.win_rate(images, images.clone(), prompts)
    assert same.ties == len(prompts) and same.win_rate == 0.5
    flipped = judges.win_rate(degrade(images, "blur", 1.0, gen), images, prompts)
    assert flipped.win_rate <= 0.2


def test_frechet_distance_real_vs_real_much_smaller_than_vs_noise(real):
    images, prompts = real
    real_again = data.render(prompts, glyph_split="judge", generator=torch.Generator().manual_seed(3))
    noise = torch.rand(images.shape, generator=torch.Generator().manual_seed(4))
    f_real = judges.frechet_distance(judges.judge_features(images), judges.judge_features(real_again))
    f_noise = judges.frechet_distance(judges.judge_features(images), judges.judge_features(noise))
    assert f_real * 10 < f_noise
    assert judges.fid(images, prompts, generator=torch.Generator().manual_seed(3)) == pytest.approx(f_real)


def test_frechet_distance_closed_form():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4000, 3))
    b = rng.normal(size=(4000, 3)) * 2.0 + 1.0  # N(1, 4I) vs N(0, I): 3*1 + 3*(1 + 4 - 2*2) = 6
    assert judges.frechet_distance(a, b) == pytest.approx(6.0, rel=0.1)
    assert judges.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError):
        judges.frechet_distance(a[:, :2], b)


def test_diversity_detects_collapse():
    prompts = data.prompt_set("test")[:4] * 6
    images = data.render(prompts, glyph_split="judge", generator=torch.Generator().manual_seed(5))
    collapsed = images[:4].repeat(6, 1, 1, 1)
    assert judges.diversity(collapsed, prompts) == pytest.approx(0.0, abs=1e-6)
    assert judges.diversity(images, prompts) > 0.1


def test_breakdown_splits_prefers_verdicts_by_the_term_that_decided_them(real):
    images, prompts = real
    gen = torch.Generator().manual_seed(6)
    blurred = degrade(images, "blur", 1.0, gen)
    # half the pairs get a wrong colour in b, so those are decided by the attribute count
    colours = list(data.COLORS)
    wrong = [data.PromptSpec(**{**data.parse_prompt(p).__dict__, "color": colours[
        (colours.index(data.parse_prompt(p).color) + 1) % len(colours)]}) for p in prompts]
    b = blurred.clone()
    half = len(prompts) // 2
    b[:half] = data.render([w.text for w in wrong[:half]], glyph_split="judge",
                           generator=torch.Generator().manual_seed(7))
    v = judges.prefer(images, b, prompts)
    bd = judges.breakdown(images, b, prompts)
    assert bd.n == len(prompts)
    assert bd.faith_wins + bd.quality_wins == int((v > 0).sum())
    assert bd.faith_losses + bd.quality_losses == int((v < 0).sum())
    assert bd.ties == int((v == 0).sum())
    assert bd.win_rate == pytest.approx(judges.win_rate(images, b, prompts).win_rate)
    faith_a = judges.judge_attributes(images, prompts).count().double()
    faith_b = judges.judge_attributes(b, prompts).count().double()
    assert bd.faith_a == pytest.approx(float(faith_a.mean())) and bd.faith_b == pytest.approx(float(faith_b.mean()))
    assert bd.faith_wins + bd.faith_losses == int((faith_a != faith_b).sum())
    assert bd.faith_wins >= half * 0.8  # the recoloured half loses on the attribute count
    assert bd.quality_wins > bd.quality_losses  # the blurred half loses on quality
    assert bd.distance_b > bd.distance_a and bd.decided_distance_b > bd.decided_distance_a
    dist = judges.quality_distance(images, prompts)
    assert bd.distance_a == pytest.approx(float(dist.mean()))
    # swapping the sides mirrors every count
    swapped = judges.breakdown(b, images, prompts)
    assert (swapped.faith_wins, swapped.faith_losses, swapped.quality_wins, swapped.quality_losses, swapped.ties) == \
        (bd.faith_losses, bd.faith_wins, bd.quality_losses, bd.quality_wins, bd.ties)
    same = judges.breakdown(images, images.clone(), prompts)
    assert same.ties == len(prompts) and np.isnan(same.decided_distance_a)
    with pytest.raises(ValueError):
        judges.breakdown(images[:0], images[:0], [])
    with pytest.raises(ValueError):
        judges.breakdown(images, images[:-1], prompts)


def test_precision_recall_closed_forms():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(400, 2))
    assert judges.precision_recall(a, a) == (1.0, 1.0)
    # two far clusters; samples that collapse onto one of them keep precision and lose half the recall
    two = np.concatenate([rng.normal(size=(300, 2)), rng.normal(size=(300, 2)) + 50.0])
    one = rng.normal(size=(300, 2))
    p, r = judges.precision_recall(two, one)
    assert p > 0.95 and r == pytest.approx(0.5, abs=0.05)
    # recall is precision with the roles swapped
    assert judges.precision_recall(one, two) == pytest.approx((r, p))
    far = rng.normal(size=(300, 2)) + 50.0 * np.array([1.0, -1.0])
    assert judges.precision_recall(two, far) == (0.0, 0.0)
    # a ball reaches the k-th neighbour: on a line of unit spacing with k = 1 every radius is 1, so a point 0.9
    # beyond an end is covered and one at 1.1 is not
    line = np.stack([np.arange(10.0), np.zeros(10)], 1)
    assert judges.precision_recall(line, np.array([[-0.9, 0.0], [4.5, 0.0], [10.1, 0.0]]), k=1)[0] == \
        pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        judges.precision_recall(a, a, k=0)
    with pytest.raises(ValueError):
        judges.precision_recall(a[:3], a, k=3)
    with pytest.raises(ValueError):
        judges.precision_recall(a, a[:, :1])
