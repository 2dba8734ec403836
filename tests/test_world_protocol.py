"""The World protocol, its registry, the digit adapter's unchanged behaviour, and a 40-line fake world."""

import sys

import pytest
import torch
from diffusers import SD3Transformer2DModel

from recast import world as W
from recast.sampling import PromptEmbeds, predict_velocity, sample_ode, sigma_schedule


class FakeWorld:
    """A complete World in ~40 lines: 2x8x8 pixel space, a hashed one-hot 'text encoder', one brightness reward."""

    sample_shape = (2, 8, 8)
    reward_settings = {"bright": ("brightness",)}

    def __init__(self):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.transformer = SD3Transformer2DModel(
                sample_size=8, patch_size=2, in_channels=2, out_channels=2, num_layers=1, attention_head_dim=8,
                num_attention_heads=2, joint_attention_dim=8, caption_projection_dim=16, pooled_projection_dim=8,
                pos_embed_max_size=4)

    def encode_prompts(self, prompts):
        h = torch.stack([torch.nn.functional.one_hot(torch.tensor(sum(map(ord, p)) % 8), 8).float()
                         for p in prompts])
        return PromptEmbeds(h[:, None].repeat(1, 3, 1), h)

    def decode(self, x):
        return ((x[:, :1].repeat(1, 3, 1, 1) + 1) / 2).clamp(0, 1)

    def to(self, device):
        self.transformer.to(device)
        return self

    def freeze(self):
        pass  # nothing but the transformer

    def prompts(self, split):
        if split not in ("train", "test"):
            raise ValueError(split)
        return [f"{split} prompt {i}" for i in range(4)]

    def reward(self, name, device):
        if name != "brightness":
            raise ValueError(name)
        return lambda images, prompts: images.mean(dim=(1, 2, 3)).to(device)

    def evaluate(self, images, prompts, *, seed=0):
        return {"mean_brightness": float(images.mean())}


def test_fake_world_satisfies_protocol_and_runs_the_sampler_and_rewards():
    world = FakeWorld()
    assert isinstance(world, W.World)
    prompts = W.sample_prompts(world, 3, generator=torch.Generator().manual_seed(0))
    assert all(p in world.prompts("train") for p in prompts)
    embeds = world.encode_prompts(prompts)
    out = sample_ode(world.transformer, embeds, sigma_schedule(2), shape=world.sample_shape,
                     generator=torch.Generator().manual_seed(0))
    images = world.decode(out.x0)
    r = world.reward("brightness", "cpu")(images, prompts)
    assert r.shape == (3,) and ((0 <= r) & (r <= 1)).all()
    assert set(world.evaluate(images, prompts)) == {"mean_brightness"}


def test_registry_custom_prefix_and_type_check():
    W.register_world("fake", lambda arg, **kw: FakeWorld())
    try:
        assert isinstance(W.load_world("fake"), FakeWorld)
        W.register_world("notaworld", lambda arg, **kw: object())
        with pytest.raises(TypeError, match="not a World"):
            W.load_world("notaworld")
    finally:
        W._REGISTRY.pop("fake"), W._REGISTRY.pop("notaworld", None)


@pytest.mark.parametrize("spec", ["", "nope", "nope:x", "digits", "digits:", "sd3:"])
def test_bad_specs_name_the_valid_prefixes(spec):
    with pytest.raises(ValueError, match="sd3-tiny"):
        W.load_world(spec)


def test_missing_path_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="valid prefixes"):
        W.load_world(f"digits:{tmp_path / 'none'}")
    with pytest.raises(FileNotFoundError, match="no such path"):
        W.load_world(f"sd3:{tmp_path / 'none'}")
    with pytest.raises(ValueError, match="prefix must be non-empty"):
        W.register_world("a:b", FakeWorld)


def test_importing_recast_world_imports_no_world_package():
    """Re-import recast.world with every world package unloaded and see what comes back (in process: fast)."""
    import importlib

    import recast

    worlds = ("recast.digits", "recast.worlds", "recast.digits.rewards", "recast.digits.judges")
    saved = {k: m for k, m in sys.modules.items() if k == "recast.world" or k.startswith(worlds)}
    for k in saved:
        del sys.modules[k]
    try:
        importlib.import_module("recast.world")
        assert not [m for m in sys.modules if m.startswith(worlds)]
    finally:
        sys.modules.update(saved)
        for k, m in saved.items():
            if k.count(".") == 1:
                setattr(recast, k.split(".")[1], m)


def test_digit_adapter_forwards_unchanged():
    from recast.digits import data
    from recast.digits.world import tiny_world
    from recast.digits.rewards import SETTINGS

    world, inner = W.load_world("tiny"), tiny_world(0)
    assert isinstance(world, W.World) and world.reward_settings == SETTINGS
    assert world.prompts("test") == data.prompt_set("test")
    with pytest.raises(ValueError, match="unknown prompt split"):
        world.prompts("val")
    # the protocol's sampler draws exactly what the digit world's own sampler draws
    assert W.sample_prompts(world, 7, generator=torch.Generator().manual_seed(3)) == \
        data.sample_prompts(7, split="train", generator=torch.Generator().manual_seed(3))
    prompts = data.prompt_set("train")[:3]
    a, b = world.encode_prompts(prompts), inner.encode_prompts(prompts)
    assert torch.equal(a.encoder_hidden_states, b.encoder_hidden_states)
    x = torch.randn(3, *world.sample_shape, generator=torch.Generator().manual_seed(0))
    assert torch.equal(predict_velocity(world.transformer, x, 0.5, a), predict_velocity(inner.transformer, x, 0.5, b))
    assert torch.equal(world.decode(x), inner.decode(x))
    world.freeze()
    assert not any(p.requires_grad for p in world.text_encoder.parameters())
    images = data.render(prompts, generator=torch.Generator().manual_seed(0))
    from recast.digits import rewards

    assert torch.equal(world.reward("color", "cpu")(images, prompts), rewards.get("color")("cpu")(images, prompts))
    with pytest.raises(ValueError, match="unknown reward"):
        world.reward("nope", "cpu")


def test_committed_digit_base_loads_by_spec():
    from pathlib import Path

    base = Path(__file__).resolve().parents[1] / "data" / "digit_base"
    world = W.load_world(f"digits:{base}")
    assert isinstance(world, W.World) and world.inner.config.num_layers == 4


def test_digit_adapter_evaluate_matches_the_trainers_judges():
    from recast.digits import data
    from recast.trainer.evaluation import _judge_scores

    prompts = [p for p in data.prompt_set("test")[:2] for _ in range(2)]
    images = data.render(prompts, glyph_split="judge", generator=torch.Generator().manual_seed(0))
    got = W.load_world("tiny").evaluate(images, prompts, seed=5)
    want = _judge_scores(images, prompts, 5)
    assert {f"judge/{k}": v for k, v in got.items()} == want
    assert got["strict"] == 1.0  # real canvases of the prompt pass the strict judge
