"""recast.profile: a density-ratio profile for any SD3 pipeline (or transformer + functions), reward callables the
repo does not know, and any sampler grid; then a table and its check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recast.archives import load_profile, table_from_profile
from recast.checks import check_table
from recast.profile import build_profile, grid_sigmas

LINEAR = 1 - np.linspace(0, 1, 4)  # T = 3, unshifted: not diffusers' default grid


def warm(images, prompts):  # rewards defined here, under names this repo has never heard of
    return torch.exp(400 * (images[:, 0].mean((1, 2)) - images[:, 2].mean((1, 2))))


def texture(images, prompts):
    return torch.exp(300 * images.std((1, 2, 3)))


REWARDS = {"warm": warm, "texture": texture}


@pytest.fixture(scope="module")
def pipe():
    from recast.worlds.sd3.tiny import build_tiny_pipeline

    return build_tiny_pipeline(0)


@pytest.fixture(scope="module")
def proposals():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(16, 3, 32, 32, generator=g)
    images[:8, 0] = images[:8, 0] ** 0.3
    return images, [f"a photo of {w}" for w in ("a cat", "a dog", "a red car", "a tree")] * 4


KW = dict(sigmas=LINEAR, num_continuations=4, num_base=2, substeps=2, max_sequence_length=16, progress=False)


@pytest.fixture(scope="module")
def profile(pipe, proposals):
    return build_profile(pipe, REWARDS, proposals[1], proposals=proposals[0], **KW)


def test_grid_from_a_scheduler_sigmas_or_timesteps(pipe):
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    s = grid_sigmas(sched, num_steps=6)
    np.testing.assert_allclose(s, sched.sigmas.double().numpy())
    assert s[0] == 1.0 and s[-1] == 0.0 and s.size == 7
    np.testing.assert_array_equal(grid_sigmas(sigmas=LINEAR), LINEAR)
    np.testing.assert_array_equal(grid_sigmas(sigmas=LINEAR[:-1]), LINEAR)  # the T step starts: 0 appended
    np.testing.assert_allclose(grid_sigmas(timesteps=1000 * LINEAR[:-1]), LINEAR)


@pytest.mark.parametrize("kw, msg", [({}, "exactly one"), ({"sigmas": [1.0, 0.5, 0.6, 0.0]}, "fall strictly"),
                                     ({"sigmas": [0.9, 0.5, 0.0]}, "fall strictly"),
                                     ({"sigmas": LINEAR, "timesteps": [1000]}, "exactly one")])
def test_bad_grids_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        grid_sigmas(**kw)


def test_the_profile_has_the_grid_the_rewards_and_its_cost(profile):
    assert profile.reward_names == ("warm", "texture")
    np.testing.assert_array_equal(profile.sigmas, LINEAR)
    assert all(r.shape == (16, 3) and (r >= 0).all() for r in profile.ratios.values())
    cost = profile.meta["cost"]
    # base: 2 samples x 4 prompts x 6 fine steps; column 0: 4 x 16 x 4; column 1: 4 x 16 x 2; column 2 (sigma 0): none
    assert cost["transformer_passes"] == 48 + 256 + 128
    assert cost["reward_queries"] == 8 + 64 + 64 + 16 and cost["processes"] == 1 and cost["seconds"] > 0
    assert profile.meta["num_continuations"] == 4 and profile.meta["builder"] == "recast.profile.build_profile"


def test_a_table_from_it_departs_from_static_and_is_checked(profile):
    table = table_from_profile(profile, [1.0, 2.0])
    assert np.abs(table.W * 3 / table.W.sum(1, keepdims=True) - 1).max() > 0.1
    report = check_table(profile, [1.0, 2.0], num_boot=20)
    assert report.table.reward_names == ("warm", "texture") and report.intervals.W.shape == (2, 3)
    assert "W for ['warm', 'texture']" in report.summary()


def test_written_archive_reads_back_and_a_rerun_is_refused(pipe, proposals, tmp_path):
    out = tmp_path / "p.npz"
    a = build_profile(pipe, REWARDS, proposals[1][:4], proposals=proposals[0][:4], out=out, **KW)
    b = load_profile(out)
    for k in a.ratios:
        np.testing.assert_allclose(b.ratios[k], a.ratios[k].astype(np.float32))
    assert b.meta["cost"] == a.meta["cost"]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        build_profile(pipe, REWARDS, proposals[1][:4], proposals=proposals[0][:4], out=out, **KW)


def test_same_seed_same_profile_and_the_functions_path_equals_the_pipeline_path(pipe, proposals, profile):
    from recast.world import pipeline_parts

    encode, decode, encode_images = pipeline_parts(pipe, max_sequence_length=16, resolution=32)
    latents = encode_images(proposals[0])
    again = build_profile(None, REWARDS, proposals[1], latents=latents, transformer=pipe.transformer, encode=encode,
                          decode=decode, **KW)
    for k in profile.ratios:
        np.testing.assert_array_equal(again.ratios[k], profile.ratios[k])
    other = build_profile(pipe, REWARDS, proposals[1], proposals=proposals[0], seed=1, **KW)
    assert not np.array_equal(other.ratios["warm"], profile.ratios["warm"])


@pytest.mark.parametrize("change, msg", [
    ({"prompts": ["one prompt"]}, "one prompt per proposal"),
    ({"rewards": {"warm": 3.0}}, "callable"),
    ({"latents": torch.zeros(16, 16, 4, 4)}, "exactly one of proposals"),
    ({"pipeline": None}, "without a pipeline, give transformer, encode, decode, encode_images"),
])
def test_bad_input_is_refused_before_any_model_call(pipe, proposals, change, msg):
    kw = dict(pipeline=pipe, rewards=REWARDS, prompts=proposals[1], proposals=proposals[0], **KW)
    kw.update(change)
    calls = []
    handle = pipe.transformer.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ValueError, match=msg):
            build_profile(**kw)
    finally:
        handle.remove()
    assert not calls


def test_the_block_in_docs_credit_runs_as_written(tmp_path, monkeypatch):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs/credit.md").read_text()
    block = text.split("## Make a table for your own model", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    block = block.replace("/tmp/my_weights.npz", str(tmp_path / "my_weights.npz"))
    exec(compile(block, "docs/credit.md", "exec"), {})
    from recast.credit import Credit

    credit = Credit.from_table(tmp_path / "my_weights.npz")
    assert tuple(credit.reward_names) == ("warm", "texture") and credit.T == 3


def make_warm():  # a factory without a device
    return warm


def make_texture(device):  # a factory that takes the device
    assert str(device) == "cpu"
    return texture


def test_package_module_factory_rewards(pipe, proposals, profile):
    from recast.profile import resolve_reward

    assert resolve_reward(warm) is warm
    assert resolve_reward(f"{__name__}:make_warm") is warm
    assert resolve_reward(f"{__name__}:make_texture", "cpu") is texture
    named = build_profile(pipe, {"warm": f"{__name__}:make_warm",
                                 "texture": f"{__name__}:make_texture"},
                          proposals[1], proposals=proposals[0], **KW)
    for k in profile.ratios:
        np.testing.assert_array_equal(named.ratios[k], profile.ratios[k])


@pytest.mark.parametrize("spec, msg", [("nocolon", "package.module:factory"), ("no_such_module_x:f", "does not import"),
                                       (f"{__name__}:nothing", "does not import"),
                                       (f"{__name__}:LINEAR", "not callable"),
                                       (f"{__name__}:KW", "not callable")])
def test_bad_factory_specs_are_refused(spec, msg):
    from recast.profile import resolve_reward

    with pytest.raises(ValueError, match=msg):
        resolve_reward(spec)


def test_a_pipeline_no_world_drives_is_refused_by_name_before_any_call():
    class FluxPipeline:  # a stand-in: only its class name is read
        transformer = None

    with pytest.raises(TypeError, match=r"no world drives a FluxPipeline.*StableDiffusion3Pipeline.*transformer="):
        build_profile(FluxPipeline(), {"r": lambda im, p: im.mean((1, 2, 3))}, ["a"],
                      latents=torch.zeros(1, 4, 4, 4), sigmas=[1.0, 0.5])
