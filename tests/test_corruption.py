"""Caption corruption and defect injection: rates hold, zero rates change nothing, bad rates are refused."""

import pytest
import torch

from recast.worlds.digits import data
from recast.worlds.digits.corruption import Corruption, corrupt_specs, inject_defects, sample_corrupted_batch
from recast.worlds.digits.pretrain import parse_corruption


def _specs(n, seed=0):
    return [data.parse_prompt(p) for p in data.sample_prompts(n, generator=torch.Generator().manual_seed(seed))]


@pytest.mark.parametrize("attr, q", [("color", 0.3), ("position", 0.5), ("size", 0.2), ("digit", 0.7)])
def test_each_attribute_is_swapped_at_its_rate_and_never_to_itself(attr, q):
    specs = _specs(4000)
    out = corrupt_specs(specs, Corruption(**{attr: q}), torch.Generator().manual_seed(1))
    changed = torch.tensor([getattr(a, attr) != getattr(b, attr) for a, b in zip(specs, out)], dtype=torch.float)
    se = (q * (1 - q) / len(specs)) ** 0.5
    assert abs(changed.mean().item() - q) < 4 * se
    others = [x for x in ("digit", "color", "position", "size") if x != attr]
    assert all(getattr(a, o) == getattr(b, o) for a, b in zip(specs, out) for o in others)


def test_swapped_values_are_uniform_over_the_others():
    specs = [data.PromptSpec(3, "red", "top left", "small")] * 6000
    out = corrupt_specs(specs, Corruption(color=1.0), torch.Generator().manual_seed(2))
    counts = {c: sum(s.color == c for s in out) for c in data.COLORS}
    assert counts["red"] == 0
    for c in ("yellow", "green", "blue"):
        assert abs(counts[c] / 6000 - 1 / 3) < 0.03


def test_zero_rates_draw_nothing_and_match_sample_batch():
    g1, g2, gc = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5), torch.Generator().manual_seed(9)
    state = gc.get_state()
    a, pa = sample_corrupted_batch(16, Corruption(), generator=g1, corruption_generator=gc)
    b, pb = data.sample_batch(16, generator=g2)
    assert pa == pb and torch.equal(a, b)
    assert torch.equal(gc.get_state(), state)  # no corruption draws: the original recipe reproduces bit for bit
    assert not Corruption().active and Corruption(fade=0.1).active


def test_captions_stay_in_the_train_split():
    _, prompts = sample_corrupted_batch(200, Corruption(color=1.0, position=1.0, size=1.0, digit=1.0),
                                        generator=torch.Generator().manual_seed(0),
                                        corruption_generator=torch.Generator().manual_seed(1))
    assert set(prompts) <= set(data.prompt_set("train"))


@pytest.mark.parametrize("defect, reward, direction", [("blur", "sharpness", -1), ("speckle", "clean", -1),
                                                       ("fade", "contrast", -1)])
def test_each_defect_hits_at_its_rate_and_lowers_its_reward(defect, reward, direction):
    from recast.worlds.digits import rewards

    images, prompts = data.sample_batch(400, generator=torch.Generator().manual_seed(3))
    out, applied = inject_defects(images, Corruption(**{defect: 0.4}), torch.Generator().manual_seed(4))
    hit = applied[defect]
    assert set(applied) == {defect} and abs(hit.float().mean().item() - 0.4) < 0.1
    assert torch.equal(out[~hit], images[~hit]) and not torch.equal(out[hit], images[hit])
    assert ((0 <= out) & (out <= 1)).all()
    fn = rewards.get(reward)("cpu")
    delta = fn(out[hit], [prompts[i] for i in hit.nonzero().flatten()]) - fn(images[hit], [prompts[i] for i in
                                                                                           hit.nonzero().flatten()])
    assert (direction * delta).mean() > 0.05


@pytest.mark.parametrize("kw, match", [(dict(color=1.5), "color=1.5"), (dict(blur=-0.1), "blur=-0.1"),
                                       (dict(size="x"), "size='x'"), (dict(fade=float("nan")), "fade=nan")])
def test_bad_rates_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        Corruption(**kw)


def test_parse_corruption():
    assert parse_corruption("color=0.4, size=0.2,") == Corruption(color=0.4, size=0.2)
    assert parse_corruption("") == Corruption()
    with pytest.raises(ValueError, match="unknown corruption 'hue'"):
        parse_corruption("hue=0.3")
    with pytest.raises(ValueError, match="could not convert"):
        parse_corruption("color=lots")


def test_the_tile_follows_the_images_corrupted_colour_and_quadrant():
    """With every colour and position corrupted, the plate shows the image's (wrong) colour in the image's (wrong)
    quadrant, like the glyph; the captions stay those of the train split."""
    rates = Corruption(color=1.0, position=1.0)
    tile = 0.3
    images, prompts = sample_corrupted_batch(24, rates, generator=torch.Generator().manual_seed(0),
                                             corruption_generator=torch.Generator().manual_seed(1), tile=tile)
    train = set(data.prompt_set("train"))
    for img, prompt in zip(images, prompts):
        assert prompt in train
        spec = data.parse_prompt(prompt)
        plate = (data.ink_intensity(img[None])[0] - tile).abs() < 1e-6
        ys, xs = torch.nonzero(plate, as_tuple=True)
        cy, cx = data.region_center(spec.position)
        assert abs(ys.float().mean() - cy) > 3 or abs(xs.float().mean() - cx) > 3  # another quadrant
        rgb = img[:, plate].mean(1) / tile
        assert not torch.allclose(rgb, torch.tensor(data.COLORS[spec.color]), atol=1e-3)  # another colour
        assert any(torch.allclose(rgb, torch.tensor(c), atol=1e-5) for c in data.COLORS.values())
