"""The World protocol, its registry, the digit adapter's unchanged behaviour, and a 40-line fake world that drives
the trainer with every world package blocked from import."""

import sys

import pytest
import torch
from diffusers import SD3Transformer2DModel

from recast import world as W
from recast.sampling import PromptEmbeds, predict_velocity, sample_ode, sigma_schedule


class FakeWorld:
    """A complete World in ~40 lines: 2x8x8 pixel space, a hashed one-hot 'text encoder', two pixel rewards."""

    sample_shape = (2, 8, 8)
    reward_settings = {"bright": ("brightness", "contrast")}

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
        fns = {"brightness": lambda images: images.mean(dim=(1, 2, 3)),
               "contrast": lambda images: images.std(dim=(1, 2, 3))}
        if name not in fns:
            raise ValueError(name)
        return lambda images, prompts: fns[name](images).to(device)

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

    worlds = ("recast.worlds.digits", "recast.worlds", "recast.worlds.digits.rewards", "recast.worlds.digits.judges")
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
    from recast.worlds.digits import data
    from recast.worlds.digits.model import tiny_world
    from recast.worlds.digits.rewards import SETTINGS

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
    from recast.worlds.digits import rewards

    assert torch.equal(world.reward("color", "cpu")(images, prompts), rewards.get("color")("cpu")(images, prompts))
    with pytest.raises(ValueError, match="unknown reward"):
        world.reward("nope", "cpu")


def test_committed_digit_base_loads_by_spec():
    from pathlib import Path

    base = Path(__file__).resolve().parents[1] / "data" / "digit_base"
    world = W.load_world(f"digits:{base}")
    assert isinstance(world, W.World) and world.inner.config.num_layers == 4


def test_digit_adapter_evaluate_matches_the_trainers_judges():
    """The numbers the trainer logged before the seam (its former `_judge_scores`, inlined here), now via evaluate."""
    from recast.worlds.digits import data, judges
    from recast.trainer.evaluation import _judge_scores

    prompts = [p for p in data.prompt_set("test")[:2] for _ in range(2)]
    images = data.render(prompts, glyph_split="judge", generator=torch.Generator().manual_seed(0))
    world = W.load_world("tiny")
    want = {f"judge/{k}": float(v) for k, v in judges.judge_report(images, prompts).as_dict().items() if k != "n"}
    want.update({f"judge/defect_{k}": float(v) for k, v in judges.defect_report(images).as_dict().items()
                 if k not in ("n", "clean")})  # added after the seam: defect rates
    want["judge/fid"] = float(judges.fid(images, prompts, generator=torch.Generator().manual_seed(5)))
    want["judge/diversity"] = float(judges.diversity(images, prompts))
    assert _judge_scores(world, images, prompts, 5) == want
    assert list(_judge_scores(world, images, prompts, 5)) == list(want)  # same keys in the same order (eval.jsonl)
    assert world.evaluate(images, prompts, seed=5)["strict"] == 1.0  # real canvases of the prompt pass the judge


def _block_world_packages(monkeypatch):
    """Make every world package unimportable (sys.modules[name] = None raises ImportError on import)."""
    for name in [m for m in sys.modules if m.startswith(("recast.worlds.digits", "recast.worlds"))] + [
            "recast.worlds.digits", "recast.worlds"]:
        monkeypatch.setitem(sys.modules, name, None)


def test_fake_world_drives_the_trainer_on_the_protocol_alone(tmp_path, monkeypatch):
    from recast.config import TrainConfig, resolve_rewards
    from recast.trainer import Trainer

    W.register_world("fake", lambda arg, **kw: FakeWorld())
    try:
        _block_world_packages(monkeypatch)
        with pytest.raises(ImportError):
            import recast.worlds.digits.data  # noqa: F401 - the block works
        cfg = TrainConfig(world="fake", setting="bright", iterations=1, prompts_per_iter=2, group_size=2, num_steps=3,
                          informativeness_subset=4, lora_rank=2, lora_alpha=4.0, eval_prompts=2, progress=False,
                          num_threads=1, method="recast_live")
        assert resolve_rewards(cfg) == ("brightness", "contrast")  # from the world itself (no static info given)
        with pytest.raises(ValueError, match="unknown reward 'digit' for world 'fake'; valid: brightness, contrast"):
            resolve_rewards(cfg.replace(rewards=("digit",)))
        tr = Trainer(cfg, tmp_path / "live")
        before = [p.detach().clone() for p in tr.policy.params]
        run = tr.run()
        # the paper's recipe on the same protocol: a profile of the world's own samples, then a run from it
        from recast.archives import load_table, save_profile
        from recast.informativeness.ratios import density_ratios
        from recast.sampling import sample_ode, sigma_schedule

        world, sig = FakeWorld(), sigma_schedule(3, cfg.shift)
        prompts = world.prompts("train")[:4]
        with torch.no_grad():
            x0 = sample_ode(world.transformer, world.encode_prompts(prompts), sig, shape=world.sample_shape,
                            generator=torch.Generator().manual_seed(0), return_trajectory=False).x0
        prof = density_ratios(world, ("brightness", "contrast"), prompts, x0, sigmas=sig, num_continuations=2,
                              num_base=2, substeps=1)
        save_profile(prof, tmp_path / "profile.npz")
        paper = Trainer(cfg.replace(method="recast", weight_file=str(tmp_path / "profile.npz")), tmp_path / "paper")
        paper_run = paper.run()
    finally:
        W._REGISTRY.pop("fake")
    rec = run.metrics[-1]
    assert run.reward_names == ("brightness", "contrast") and rec["iteration"] == 1
    assert 0 <= rec["reward/brightness/mean"] <= 1 and rec["D"] is not None
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.policy.params))
    assert set(run.evals[-1]) >= {"reward/weighted", "judge/mean_brightness"}
    table = load_table(tmp_path / "paper" / "recast_weights.npz")
    assert paper_run.metrics[-1]["W"] == table.W.tolist() and table.reward_names == ("brightness", "contrast")


def test_a_world_without_static_info_may_set_its_settings_default_budgets():
    """`world_info` reads a live world's optional `setting_budgets`; `resolve_budgets` applies them to their setting."""
    from recast.config import TrainConfig, resolve_budgets

    weighted = FakeWorld()
    weighted.setting_budgets = {"bright": (3.0, 1.0)}
    W.register_world("fake3", lambda arg, **kw: weighted)
    W.register_world("fake4", lambda arg, **kw: FakeWorld())
    try:
        assert W.world_info("fake3").setting_budgets == {"bright": (3.0, 1.0)}
        assert W.world_info("fake4").setting_budgets == {}
        cfg = TrainConfig(world="fake3", setting="bright")
        assert resolve_budgets(cfg) == (3.0, 1.0)
        assert resolve_budgets(cfg.replace(lam=(1.0, 1.0))) == (1.0, 1.0)  # an explicit λ wins
        assert resolve_budgets(cfg.replace(rewards=("brightness", "contrast"))) == ()  # a list is not the setting
        assert resolve_budgets(cfg.replace(world="fake4")) == ()  # no defaults: equal budgets
    finally:
        W._REGISTRY.pop("fake3"), W._REGISTRY.pop("fake4")


def test_world_info_is_static_and_refuses_bad_worlds_before_loading(tmp_path, monkeypatch):
    calls = []
    W.register_world("fake2", lambda arg, **kw: calls.append(arg) or FakeWorld(),
                     info=lambda arg: W.WorldInfo({"s": ("brightness",)}, ("brightness",)))
    try:
        assert W.world_info("fake2").reward_names == ("brightness",) and not calls  # the world was never built
    finally:
        W._REGISTRY.pop("fake2"), W._INFO.pop("fake2")
    info = W.world_info("sd3:stabilityai/stable-diffusion-3.5-medium")  # a hub id: nothing is downloaded or loaded
    assert info.reward_settings["composition"] == ("geneval", "ocr", "pickscore", "clipscore")
    assert {"jpeg", "rank:jpeg"} <= set(info.reward_names) and info.splits == ("train", "test")
    with pytest.raises(FileNotFoundError, match="model_index.json"):
        W.world_info(f"sd3:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="world.json missing"):
        W.world_info(f"digits:{tmp_path}")
    assert W.world_info("tiny").reward_settings["compose"] == ("digit", "color", "position_flat", "size_half_max",
                                                                "sharpness")
