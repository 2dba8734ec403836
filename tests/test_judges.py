"""Held-out judges pass on real canvases and separate real from degraded or noise."""

import numpy as np
import pytest
import torch

from recast.digits import judges
from recast.digits import data
from recast.digits.rewards.degrade import degrade


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
