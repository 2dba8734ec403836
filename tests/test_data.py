"""Properties of the digit world's data: determinism, grammar round-trips, splits."""

import numpy as np
import pytest
import torch

from recast.worlds.digits import data


def test_prompt_sets_deterministic_disjoint_and_cover_every_value():
    train, test = data.prompt_set("train"), data.prompt_set("test")
    assert train == data.prompt_set("train") and test == data.prompt_set("test")
    assert not set(train) & set(test)
    assert len(train) + len(test) == len(data.all_specs()) == 320
    assert 0.15 <= len(test) / 320 <= 0.25
    specs = [data.parse_prompt(t) for t in train]
    assert {s.digit for s in specs} == set(data.DIGITS)
    assert {s.color for s in specs} == set(data.COLORS)
    assert {s.position for s in specs} == set(data.POSITIONS)
    assert {s.size for s in specs} == set(data.SIZES)
    fields = ("digit", "color", "position", "size")
    for i, a in enumerate(fields):  # every pair of attribute values is also seen in train
        for b in fields[i + 1:]:
            seen = {(getattr(s, a), getattr(s, b)) for s in specs}
            assert seen == {(getattr(s, a), getattr(s, b)) for s in data.all_specs()}


def test_parse_prompt_round_trips_and_words_in_vocab():
    for spec in data.all_specs():
        assert data.parse_prompt(spec.text) == spec
        assert set(spec.text.split()) <= set(data.VOCAB)
    assert data.PromptSpec(7, "red", "top left", "large").text == "a large red 7 at the top left"


@pytest.mark.parametrize("bad", ["", "a huge red 7 at the top left", "a large purple 7 at the top left",
                                 "a large red 12 at the top left", "a large red 7 at the middle", "large red 7"])
def test_parse_prompt_rejects_bad_text(bad):
    with pytest.raises(ValueError, match="not a digit-world prompt"):
        data.parse_prompt(bad)


def test_glyph_splits_disjoint_cover_and_stratified():
    split = data._glyph_split_indices()
    base, judge = split["base"], split["judge"]
    assert not set(base) & set(judge)
    assert len(base) + len(judge) == 1797
    gb, lb = data.load_glyphs("base")
    gj, lj = data.load_glyphs("judge")
    assert gb.dtype == torch.float32 and lb.dtype == torch.int64 and gb.shape[1:] == (8, 8)
    assert 0 <= gb.min() and gb.max() <= 1
    assert set(lj.tolist()) == set(range(10)) and set(lb.tolist()) == set(range(10))
    frac = np.bincount(lj.numpy(), minlength=10) / np.bincount(lb.numpy() + 0, minlength=10)
    assert np.all(np.abs(frac - frac.mean()) < 0.05)  # stratified


def test_render_deterministic_and_seed_sensitive():
    def draw(seed):
        return data.sample_batch(16, generator=torch.Generator().manual_seed(seed))

    (x1, p1), (x2, p2), (x3, p3) = draw(0), draw(0), draw(1)
    assert torch.equal(x1, x2) and p1 == p2
    assert p1 != p3 and not torch.equal(x1, x3)
    assert x1.shape == (16, 3, data.CANVAS, data.CANVAS) and x1.dtype == torch.float32
    assert 0 <= x1.min() and x1.max() <= 1


def test_render_places_colour_and_region():
    specs = [data.PromptSpec(d, c, p, s) for d in (1, 8) for c in data.COLORS for p in data.POSITIONS
             for s in data.SIZES]
    x = data.render(specs, generator=torch.Generator().manual_seed(0))
    for img, spec in zip(x, specs):
        ink = img.amax(0)
        ys, xs = torch.nonzero(ink > 0.3, as_tuple=True)
        cy, cx = data.region_center(spec.position)
        assert abs(ys.float().mean() - cy) < 3 and abs(xs.float().mean() - cx) < 3
        mask = ink > 0.3
        rgb = img[:, mask].mean(1) / ink[mask].mean()
        assert torch.allclose(rgb, torch.tensor(data.COLORS[spec.color]), atol=1e-5)
        assert (ink > 0).sum() > 0


def test_model_space_round_trip():
    x, _ = data.sample_batch(4, generator=torch.Generator().manual_seed(0))
    z = data.to_model(x)
    assert -1 <= z.min() and z.max() <= 1
    assert torch.allclose(data.to_images(z), x, atol=1e-6)
    assert data.to_images(torch.full((1, 3, 2, 2), 5.0)).max() == 1


def test_tile_zero_is_the_default_world_bit_for_bit_and_bad_tiles_are_refused():
    prompts = data.sample_prompts(12, generator=torch.Generator().manual_seed(3))
    plain = data.render(prompts, generator=torch.Generator().manual_seed(4))
    assert torch.equal(plain, data.render(prompts, generator=torch.Generator().manual_seed(4), tile=0.0))
    for bad in (-0.1, 1.0, "0.2", None):
        with pytest.raises(ValueError, match="tile"):
            data.render(prompts, tile=bad)


def test_tile_fills_the_prompted_quadrant_with_the_prompted_colour_under_the_glyph():
    """``ink = colour * max(tile, glyph)`` inside the prompted quadrant, the untiled canvas outside it: the glyph and
    jitter draws are those of the untiled canvas, so the two differ only where the plate shows."""
    specs = [data.PromptSpec(d, c, p, s) for d in (0, 7) for c in data.COLORS for p in data.POSITIONS
             for s in data.SIZES]
    tile = 0.25
    plain = data.render(specs, generator=torch.Generator().manual_seed(0))
    tiled = data.render(specs, generator=torch.Generator().manual_seed(0), tile=tile)
    for a, b, spec in zip(plain, tiled, specs):
        y0, x0, y1, x1 = data.POSITIONS[spec.position]
        inside = torch.zeros(data.CANVAS, data.CANVAS, dtype=torch.bool)
        inside[y0:y1, x0:x1] = True
        colour = torch.tensor(data.COLORS[spec.color])[:, None, None]
        expect = colour * torch.maximum(torch.full_like(a[0], tile), data.ink_intensity(a[None])[0])
        assert torch.allclose(b[:, inside], expect[:, inside], atol=1e-6)
        assert torch.equal(b[:, ~inside], a[:, ~inside])  # a large glyph's jitter may spill out of its quadrant
        assert torch.allclose(data.ink_intensity(b[None])[0][inside].min(), torch.tensor(tile))
