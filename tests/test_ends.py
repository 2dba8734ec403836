"""Stored continuation ends (`recast.informativeness.ends`): re-scoring a reward on them gives the ground truth's D."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recast.informativeness.ends import RolloutEnds, ends_profile, record_ends
from recast.informativeness.probe import estimate_profiles, stack_rewards
from recast.informativeness.rollout import discriminability_from_ends, reward_agreement

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("digit", "color", "sharpness", "speck_free")


@pytest.fixture(scope="module")
def world():
    from recast.world import load_world

    return load_world(f"digits:{ROOT / 'data/digit_base'}")


@pytest.fixture(scope="module")
def prompts():
    from recast.worlds.digits.data import prompt_set

    return prompt_set("train")[:16:2]


@pytest.mark.slow
def test_stored_ends_reproduce_the_ground_truth_exactly(world, prompts, tmp_path):
    """The same prompts, grid, sampler settings and seed: D on the stored ends equals estimate_profiles' rollout D
    bit for bit, after a save and load; the world's rewards are restored after recording."""
    kw = dict(num_rollouts=2, substeps=2, bootstrap=20, seed=3)
    ref = estimate_profiles(world, list(NAMES), prompts, **kw)["rollout"]
    ends = record_ends(world, prompts, **kw)
    assert "reward" not in vars(world)  # the class's reward method again
    assert ends.clean.shape == (8, 3, 24, 24) and ends.ends.shape == (5, 2, 8, 3, 24, 24)
    ends = RolloutEnds.load(ends.save(tmp_path / "ends.pt"))
    prof = ends_profile(ends, stack_rewards([world.reward(n, "cpu") for n in NAMES]), bootstrap=50)
    assert torch.equal(prof["D"], ref.D)
    assert prof["D_boot"].shape == (50, 4, 7)
    assert ((prof["com_lo"] <= prof["com"] + 1e-9) & (prof["com"] <= prof["com_hi"] + 1e-9)).all()
    torch.testing.assert_close(prof["cleanest_third_share"], prof["gains"][:, -2:].sum(1) / prof["gains"].sum(1))
    # one reward at a time gives that reward's row
    one = ends_profile(ends, world.reward("color", "cpu"), bootstrap=0)
    torch.testing.assert_close(one["D"][0], ref.D[1], rtol=0, atol=1e-12)
    assert torch.isnan(one["com_lo"]).all() and one["D_boot"] is None
    # the sampler check: the ends continued from σ_1 against the clean batch, per reward
    want = reward_agreement(prof["R_ends"][0].flatten(0, 1), prof["R_clean"])
    assert torch.equal(prof["ends_z_first"], want) and prof["R_ends"].shape == (5, 2, 8, 4)
    # ends that are the clean images themselves reproduce the batch exactly: z = 0
    same = RolloutEnds(ends.sigmas, ends.prompts, ends.clean, ends.clean.expand(5, 2, *ends.clean.shape), ends.meta)
    assert torch.equal(ends_profile(same, world.reward("color", "cpu"), bootstrap=0)["ends_z_first"],
                       torch.zeros(1, dtype=torch.float64))


def test_an_explicit_grid_is_the_shifted_one_when_equal_and_any_other_when_not(world, prompts):
    """``sigmas`` equal to the presets' grid draws the same ends bit for bit; another grid is the one recorded."""
    from recast.sampling import sigma_schedule

    kw = dict(num_rollouts=2, substeps=1, bootstrap=0, seed=1)
    small = prompts[:4]
    ref = record_ends(world, small, num_steps=3, **kw)
    same = record_ends(world, small, sigmas=sigma_schedule(3, 3.0), **kw)
    assert torch.equal(same.ends, ref.ends) and torch.equal(same.clean, ref.clean)
    assert torch.equal(same.sigmas, ref.sigmas) and same.meta["sigmas"] == ref.sigmas.tolist()
    other = record_ends(world, small, sigmas=[1.0, 0.7, 0.6, 0.0], **kw)
    torch.testing.assert_close(other.sigmas, torch.tensor([1.0, 0.7, 0.6, 0.0]))
    assert other.ends.shape == ref.ends.shape and not torch.equal(other.ends, ref.ends)


def test_x0_substeps_keeps_the_clean_batch_and_refines_only_the_continuations(world, prompts):
    """The clean batch drawn on its own sub-grid is the coarse run's batch bit for bit; the ends are the finer ones'."""
    kw = dict(num_steps=3, num_rollouts=2, bootstrap=0, seed=2)
    small = prompts[:4]
    coarse = record_ends(world, small, substeps=1, **kw)
    mixed = record_ends(world, small, substeps=2, x0_substeps=1, **kw)
    fine = record_ends(world, small, substeps=2, **kw)
    assert torch.equal(mixed.clean, coarse.clean) and not torch.equal(fine.clean, coarse.clean)
    assert not torch.equal(mixed.ends, coarse.ends) and mixed.meta["x0_substeps"] == 1 and mixed.meta["substeps"] == 2


def test_record_ends_and_load_reject_bad_input(world, prompts, tmp_path):
    with pytest.raises(ValueError, match="num_rollouts"):
        record_ends(world, prompts, num_rollouts=1)
    for bad in ([1.0, 0.5], [0.9, 0.5, 0.0], [1.0, 0.5, 0.6, 0.0], [1.0]):
        with pytest.raises(ValueError, match="strictly decreasing"):
            record_ends(world, prompts, sigmas=bad)
    with pytest.raises(FileNotFoundError, match="record them"):
        RolloutEnds.load(tmp_path / "missing.pt")


def test_discriminability_from_ends_closed_forms():
    """Ends that do not depend on the state give D = 0 at every interior point after debiasing (up to the batch's
    own sampling of a constant), ends equal to a per-state value give D(σ_j) = renyi(value) at every j; and D[T]
    pools every end; a wrong shape is refused."""
    from recast.informativeness import renyi_rows

    T, M, N = 4, 3, 50
    g = torch.Generator().manual_seed(0)
    v = torch.rand(N, 1, generator=g, dtype=torch.float64) + 0.5
    decided = v[None, None].expand(T - 1, M, N, 1).clone()
    D, boot = discriminability_from_ends(decided, T)
    want = float(renyi_rows(v[:, 0].numpy()[None], 2.0)[0])
    torch.testing.assert_close(D[0, 1:], torch.full((T,), want, dtype=torch.float64))
    assert D[0, 0] == 0 and boot is None
    undecided = torch.rand(T - 1, M, N, 1, generator=g, dtype=torch.float64) + 0.5
    D, boot = discriminability_from_ends(undecided, T, bootstrap=10, generator=g)
    assert D[0, 1:T].abs().max() < 0.02 and boot.shape == (10, 1, T + 1)
    with pytest.raises(ValueError, match="p_ends"):
        discriminability_from_ends(decided[:2], T)


@pytest.mark.slow
def test_estimate_profiles_scores_stored_ends_as_it_would_sample_them(world, prompts):
    """``ends=`` gives the sampled rollout profile's D and its ends_z and ode_z checks bit for bit, and the same
    tweedie profile; ends recorded with other arguments, or on other clean samples, are refused."""
    kw = dict(num_steps=4, num_rollouts=2, substeps=2, bootstrap=20, seed=5)
    small = prompts[:6]
    ref = estimate_profiles(world, list(NAMES), small, **kw)
    ends = record_ends(world, small, **kw)
    got = estimate_profiles(world, list(NAMES), small, ends=ends, **kw)
    assert torch.equal(got["rollout"].D, ref["rollout"].D) and torch.equal(got["tweedie"].D, ref["tweedie"].D)
    for check in ("ends_z", "ode_z"):
        assert got["rollout"].checks[check] == ref["rollout"].checks[check]
    assert got["rollout"].D_boot.shape == ref["rollout"].D_boot.shape
    lo, D, hi = got["rollout"].D_lo, got["rollout"].D, got["rollout"].D_hi
    assert ((lo <= D + 1e-9) & (D <= hi + 1e-9)).all()
    for wrong, match in ((dict(seed=6), "seed=5"), (dict(substeps=1), "substeps=2"), (dict(num_rollouts=3), "num_roll"),
                         (dict(num_steps=3), "grid"), (dict(x0_substeps=1), "x0_substeps=2")):
        with pytest.raises(ValueError, match=match):
            estimate_profiles(world, list(NAMES), small, ends=ends, **(kw | wrong))
    with pytest.raises(ValueError, match="other prompts"):
        estimate_profiles(world, list(NAMES), prompts[1:7], ends=ends, **kw)
    tampered = RolloutEnds(ends.sigmas, ends.prompts, ends.clean.flip(-1), ends.ends, ends.meta)
    with pytest.raises(ValueError, match="other clean samples"):
        estimate_profiles(world, list(NAMES), small, ends=tampered, **kw)
