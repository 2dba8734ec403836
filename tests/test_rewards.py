"""Every reward moves the right way under a controlled change; registry contract."""

import pytest
import torch

import recast.digits.rewards as rewards
from recast.digits import data
from recast.digits.rewards.degrade import KINDS, degrade, random_degrade

N = 48


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(0)
    images, prompts = data.sample_batch(N, generator=gen)
    return images, prompts, gen


@pytest.fixture(scope="module")
def fns():
    return {name: rewards.get(name)("cpu") for name in rewards.names()}


def _edit(prompts, **change):
    out = []
    for p in prompts:
        s = data.parse_prompt(p)
        new = {k: v(getattr(s, k)) for k, v in change.items()}
        out.append(data.PromptSpec(**{**s.__dict__, **new}))
    return out


def _other(values, v):
    values = list(values)
    return values[(values.index(v) + 1) % len(values)]


def test_registry_names_settings_and_unknown():
    assert set(rewards.names()) == {n for s in rewards.SETTINGS.values() for n in s}
    assert rewards.SETTINGS["compose"] == ("digit", "color", "position", "size")
    assert rewards.SETTINGS["quality"] == ("sharpness", "clean", "contrast", "realism")
    assert rewards.SETTINGS["timing"] == ("color", "clean")
    with pytest.raises(ValueError, match="valid: digit"):
        rewards.get("aesthetic")


def test_missing_weights_name_path_and_script(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_reward_models.py"):
        rewards.get("digit")("cpu", weights_dir=tmp_path)


def test_outputs_shape_range_dtype(batch, fns):
    images, prompts, gen = batch
    probes = [images, random_degrade(images, gen), torch.zeros_like(images), torch.rand(images.shape, generator=gen)]
    for name, fn in fns.items():
        for x in probes:
            r = fn(x, prompts)
            assert r.shape == (N,) and r.dtype == torch.float32, name
            assert torch.isfinite(r).all() and (r >= 0).all() and (r <= 1).all(), name


def test_real_canvases_score_high(batch, fns):
    images, prompts, _ = batch
    for name, fn in fns.items():
        assert fn(images, prompts).mean() > 0.6, name


def _lower(fn, good, bad, prompts_good, prompts_bad=None, margin=0.2):
    r_good, r_bad = fn(good, prompts_good), fn(bad, prompts_bad or prompts_good)
    assert (r_good > r_bad).float().mean() >= 0.9
    assert r_good.mean() - r_bad.mean() > margin


def test_compose_rewards_respond_to_their_attribute(batch, fns):
    images, prompts, _ = batch
    gen = torch.Generator().manual_seed(1)
    for attr, values in [("color", data.COLORS), ("position", data.POSITIONS), ("size", data.SIZES),
                         ("digit", data.DIGITS)]:
        wrong = _edit(prompts, **{attr: lambda v, values=values: _other(values, v)})
        bad = data.render(wrong, generator=gen)  # same prompt scored, image drawn with the wrong attribute
        _lower(fns[attr], images, bad, prompts, margin=0.5)


@pytest.mark.parametrize("name,kind", [("sharpness", "blur"), ("clean", "speckle"), ("clean", "noise"),
                                       ("contrast", "fade"), ("contrast", "bleed"), ("color", "bleed")])
def test_quality_rewards_drop_under_degradation(batch, fns, name, kind):
    images, prompts, gen = batch
    _lower(fns[name], images, degrade(images, kind, 1.0, gen), prompts)


@pytest.mark.parametrize("kind", KINDS)
def test_realism_drops_under_every_degradation(batch, fns, kind):
    images, prompts, gen = batch
    _lower(fns["realism"], images, degrade(images, kind, 1.0, gen), prompts)


def test_rewards_are_monotone_in_degradation_strength(batch, fns):
    images, prompts, gen = batch
    for name, kind in [("sharpness", "blur"), ("clean", "noise"), ("contrast", "fade")]:
        means = [fns[name](degrade(images, kind, s, gen), prompts).mean() for s in (0.0, 0.5, 1.0)]
        assert means[0] >= means[1] >= means[2], (name, means)


def test_prompt_count_must_match(batch, fns):
    images, prompts, _ = batch
    with pytest.raises(ValueError):
        fns["color"](images, prompts[:-1])


def test_size_reward_is_a_saturating_soft_verdict():
    from recast.digits.rewards.digit import _size_threshold, ink_side, size_reward

    gen = torch.Generator().manual_seed(4)
    specs = [data.PromptSpec(d, "green", "bottom right", s) for s in data.SIZES for d in data.DIGITS for _ in range(4)]
    images = data.render(specs, generator=gen)
    right = size_reward(images, [s.text for s in specs])
    wrong = size_reward(images, [data.PromptSpec(s.digit, s.color, s.position, _other(data.SIZES, s.size)).text
                                 for s in specs])
    assert right.median() > 0.95 and wrong.median() < 0.05
    assert 8 < _size_threshold() < 12  # between the two real sides
    # a crisp square of side k has ink_side exactly k, and the reward is monotone in it and saturates
    squares = torch.zeros(9, 3, data.CANVAS, data.CANVAS)
    for i, k in enumerate(range(4, 22, 2)):
        squares[i, 0, :k, :k] = 1.0
    assert torch.allclose(ink_side(squares), torch.arange(4, 22, 2).float(), atol=0.01)
    large = size_reward(squares, ["a large red 1 at the top left"] * 9)
    assert (large.diff() > 0).all() and large[-1] > 0.99 and large[0] < 0.01
