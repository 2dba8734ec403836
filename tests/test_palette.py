"""The palettes a digit world can be drawn in (`recast.worlds.digits.data.PALETTES`): the equal-energy palette probe.

Closed-form checks of the palettes themselves, of the colour reward's and judges' reading of real canvases in each,
that the default world is unchanged bit for bit, and that a world carries its palette through save, load and
pretraining."""

import json
import math

import pytest
import torch

from recast.worlds.digits import data
from recast.worlds.digits.judges.attributes import judge_attributes
from recast.worlds.digits.pretrain import PretrainConfig, pretrain
from recast.worlds.digits.rewards.digit import color_reward, ink_color
from recast.worlds.digits.model import load_world, save_world, tiny_world


def test_every_palette_has_a_max_channel_of_one_and_the_vocabulary_s_names():
    for name, colours in data.PALETTES.items():
        assert tuple(colours) == ("red", "yellow", "green", "blue"), name
        assert all(max(rgb) == 1.0 and min(rgb) >= 0.0 for rgb in colours.values()), name


def test_primary_is_the_default_world_s_and_equal_energy_has_equal_norms():
    assert data.PALETTES["primary"] == {"red": (1.0, 0.0, 0.0), "yellow": (1.0, 1.0, 0.0), "green": (0.0, 1.0, 0.0),
                                        "blue": (0.0, 0.0, 1.0)}
    primary = [sum(c * c for c in rgb) for rgb in data.PALETTES["primary"].values()]
    assert primary == [1.0, 2.0, 1.0, 1.0]  # yellow alone is drawn in two channels
    assert [sum(c * c for c in rgb) for rgb in data.PALETTES["equal_energy"].values()] == [1.25] * 4


def test_set_palette_and_the_context_manager_restore_and_refuse_unknown_names():
    assert data.palette_name() == "primary" and data.palette_scale() == 1.0
    with data.palette("equal_energy"):
        assert data.palette_name() == "equal_energy"
        assert data.COLORS["yellow"] == (1.0, 0.5, 0.0)
        assert math.isclose(data.palette_scale(), 1 / math.sqrt(2), rel_tol=1e-12)
    assert data.palette_name() == "primary"
    with pytest.raises(RuntimeError, match="inside"), data.palette("equal_energy"):
        raise RuntimeError("inside")
    assert data.palette_name() == "primary"
    with pytest.raises(ValueError, match="unknown palette 'pastel'"):
        data.set_palette("pastel")
    assert data.palette_name() == "primary"


@pytest.mark.parametrize("name", list(data.PALETTES))
def test_real_canvases_read_the_same_in_either_palette(name):
    """On real canvases the ink intensity is the glyph, the normalised ink colour is the palette RGB, the colour
    reward is 1 for the prompted colour and <= 0.02 for any other, and every judge verdict is the primary
    palette's."""
    gen = torch.Generator().manual_seed(3)
    prompts = data.sample_prompts(96, generator=gen)
    primary = data.render(prompts, generator=torch.Generator().manual_seed(4))
    with data.palette(name):
        images = data.render(prompts, generator=torch.Generator().manual_seed(4))
        assert torch.equal(data.ink_intensity(images), data.ink_intensity(primary))
        want = torch.tensor([data.COLORS[data.parse_prompt(p).color] for p in prompts])
        assert torch.allclose(ink_color(images), want, atol=1e-5)
        assert (color_reward(images, prompts) > 0.999).all()
        for other in data.COLORS:
            specs = [data.parse_prompt(p) for p in prompts]
            wrong = [data.PromptSpec(s.digit, other, s.position, s.size).text for s in specs]
            off = torch.tensor([s.color != other for s in specs])
            assert (color_reward(images, wrong)[off] <= 0.02).all()
        verdicts = judge_attributes(images, prompts)
    reference = judge_attributes(primary, prompts)
    for attribute in ("strict", "digit", "color", "position", "size"):
        assert torch.equal(getattr(verdicts, attribute), getattr(reference, attribute)), attribute


def test_the_equal_energy_palette_changes_only_the_colour_of_the_ink():
    prompts = data.sample_prompts(16, generator=torch.Generator().manual_seed(0))
    primary = data.render(prompts, generator=torch.Generator().manual_seed(1))
    with data.palette("equal_energy"):
        probe = data.render(prompts, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(primary, probe)
    energy = (probe ** 2).sum(1)  # per-pixel squared norm: 1.25 glyph² for every colour
    assert torch.allclose(energy, 1.25 * data.ink_intensity(probe) ** 2, atol=1e-6)


def test_a_world_carries_its_palette_through_save_and_load(tmp_path):
    world = tiny_world()
    save_world(world, tmp_path / "plain")
    assert "palette" not in json.loads((tmp_path / "plain" / "world.json").read_text())  # default unchanged
    from dataclasses import replace

    save_world(replace(world, palette="equal_energy"), tmp_path / "probe")
    assert json.loads((tmp_path / "probe" / "world.json").read_text())["palette"] == "equal_energy"
    loaded = load_world(tmp_path / "probe")
    assert loaded.palette == "equal_energy" and data.palette_name() == "equal_energy"
    assert load_world(tmp_path / "plain").palette == "primary" and data.palette_name() == "primary"
    meta = json.loads((tmp_path / "probe" / "world.json").read_text())
    meta["palette"] = "pastel"
    (tmp_path / "probe" / "world.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown palette 'pastel'"):
        load_world(tmp_path / "probe")


def test_pretraining_draws_in_its_palette_saves_it_and_restores_the_caller_s(tmp_path):
    tiny = dict(preset="tiny", batch_size=8, num_threads=1, warmup_steps=2, decay_steps=0, log_every=1,
                progress=False, steps=2)
    plain, _ = pretrain(PretrainConfig(**tiny))
    probe, history = pretrain(PretrainConfig(palette="equal_energy", **tiny))
    assert plain.palette == "primary" and probe.palette == "equal_energy"
    assert history.config["palette"] == "equal_energy" and data.palette_name() == "primary"
    a, b = plain.transformer.state_dict(), probe.transformer.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the canvases it was fitted on differ
    save_world(plain, tmp_path / "init")
    tuned, _ = pretrain(PretrainConfig(palette="equal_energy", init_from=str(tmp_path / "init"), **tiny))
    assert tuned.palette == "equal_energy" and data.palette_name() == "primary"
    with pytest.raises(ValueError, match="unknown palette"):
        pretrain(PretrainConfig(palette="pastel", **tiny))


def test_the_command_line_refuses_an_unknown_palette_before_any_compute(tmp_path, monkeypatch):
    import recast.worlds.digits.pretrain as pt

    monkeypatch.setattr(pt, "pretrain", lambda *a, **k: pytest.fail("trained despite a bad --palette"))
    with pytest.raises(SystemExit):
        pt.main(["--palette", "pastel", "--out", str(tmp_path / "w")])


def test_the_preference_judge_s_real_references_follow_the_palette():
    """The pairwise judge caches its real canvases' features; a second palette in the same process gets its own."""
    from recast.worlds.digits.judges import preference

    prompts = data.sample_prompts(3, generator=torch.Generator().manual_seed(9))
    primary = preference._reference_features(prompts)
    with data.palette("equal_energy"):
        probe = preference._reference_features(prompts)
    assert not torch.allclose(primary, probe)
    assert torch.equal(preference._reference_features(prompts), primary)


@pytest.mark.research
@pytest.mark.parametrize("name", list(data.PALETTES))
def test_the_drawn_colour_probe_reads_real_canvases_in_either_palette(name):
    """`research/probes/alone_colour_probe.drawn_colour`, which `position_colour_probe` groups samples by, returns the colour a
    real canvas is drawn in, in either palette, even with the prompt asking for another."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research" / "probes"))
    from alone_colour_probe import drawn_colour

    prompts = data.sample_prompts(64, generator=torch.Generator().manual_seed(2))
    with data.palette(name):
        images = data.render(prompts, generator=torch.Generator().manual_seed(3))
        want = torch.tensor([list(data.COLORS).index(data.parse_prompt(p).color) for p in prompts])
        assert torch.equal(drawn_colour(images), want)
