"""recast.checks (a W you can check before you train with it) and Credit.columns: properties and closed forms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from recast.archives import DensityProfile, load_profile, save_profile, save_table, table_from_profile
from recast.checks import (TableIntervals, bootstrap_table, check_table, compare_tables, degenerate_columns,
                           proposals_needed, variance_shares)
from recast.credit import Credit

ROOT = Path(__file__).resolve().parents[1]
SIGMAS = np.array([1.0, 0.75, 0.5, 0.25, 0.0])
COMPOSE = ["digit", "color", "position_flat", "size_half_max", "sharpness"]


def _profile(N=200, seed=0, **override) -> DensityProfile:
    """Two rewards with opposite timing: 'early' resolves at the first step, 'late' only at the last."""
    rng = np.random.default_rng(seed)
    z = rng.lognormal(0, 0.5, size=(N, 1))
    early = np.concatenate([z, z, z, z], axis=1) * rng.uniform(0.98, 1.02, (N, 4))
    late = np.concatenate([np.ones((N, 3)), z], axis=1) * rng.uniform(0.98, 1.02, (N, 4))
    ratios = {"early": early, "late": late}
    ratios.update(override)
    return DensityProfile(SIGMAS, ratios, {"num_continuations": 4})


# ------------------------------------------------------------------ degenerate columns

def test_a_clean_profile_has_no_degenerate_column():
    assert degenerate_columns(_profile()) == []


def test_a_constant_noisy_column_is_flagged_with_the_fix():
    p = _profile()
    late = p.ratios["late"].copy()
    late[:, 1] = 1.25  # a debiased column whose variance was removed
    found = degenerate_columns(DensityProfile(SIGMAS, {"early": p.ratios["early"], "late": late}, p.meta))
    assert [(d.reward, d.column, d.kind) for d in found] == [("late", 1, "constant")]
    assert found[0].sigma == 0.5 and "--num-continuations (M = 4 here)" in found[0].message


def test_a_constant_clean_column_says_the_reward_does_not_vary():
    late = _profile().ratios["late"].copy()
    late[:, 3] = 2.0
    (d,) = degenerate_columns(DensityProfile(SIGMAS, {"late": late}))
    assert d.column == 3 and d.sigma == 0.0 and "does not vary over the proposals" in d.message


def test_a_floored_moment_is_flagged():
    r = np.linspace(0.5, 1.5, 40).reshape(10, 4)
    r[:, 0] = 0.0
    (d,) = degenerate_columns(DensityProfile(SIGMAS, {"zero": r}))
    assert (d.column, d.kind) == (0, "floored")


def test_the_tolerance_is_relative_to_the_column_mean():
    r = np.ones((10, 4)) * 1e6
    r[0, 2] += 0.1  # range 0.1 on a mean of 1e6: within 1e-6 relative, so constant
    assert [d.column for d in degenerate_columns(DensityProfile(SIGMAS, {"x": r}))] == [0, 1, 2, 3]
    r[0, 2] += 10.0
    assert [d.column for d in degenerate_columns(DensityProfile(SIGMAS, {"x": r}))] == [0, 1, 3]


def test_the_committed_m4_renderings_profile_has_its_collapsed_digit_column_flagged():
    prof = load_profile(ROOT / "data/profiles/digit_base_renderings_T6.npz")
    found = degenerate_columns(prof)
    assert [(d.reward, d.column) for d in found] == [("digit", 2)]
    assert np.ptp(prof.ratios["digit"][:, 2]) == 0.0  # the collapse the check reports: one value for all 128
    assert degenerate_columns(load_profile(ROOT / "data/profiles/digit_base_self_T6.npz")) == []


# ------------------------------------------------------------------ bootstrap intervals

def test_identical_observations_give_a_zero_width_interval_at_the_point_estimate():
    row = np.array([[1.0, 1.5, 2.0, 3.0]])
    p = DensityProfile(SIGMAS, {"a": np.repeat(row, 20, 0), "b": np.repeat(row[:, ::-1], 20, 0)})
    iv = bootstrap_table(p, [1, 1], num_boot=20)
    np.testing.assert_allclose(iv.sd, 0, atol=1e-12)
    np.testing.assert_allclose(iv.lo, iv.W, atol=1e-7)
    np.testing.assert_allclose(iv.hi, iv.W, atol=1e-7)
    assert iv.spread < 1e-6 < iv.departure


def test_replicates_keep_the_marginals_and_the_interval_holds_the_point():
    iv = bootstrap_table(_profile(), [2, 1], num_boot=50, seed=3)
    np.testing.assert_allclose(iv.replicates.sum(2), np.broadcast_to([2 / 3, 1 / 3], (50, 2)), atol=1e-8)
    np.testing.assert_allclose(iv.replicates.sum(1), 0.25, atol=1e-8)
    assert ((iv.lo <= iv.W + 1e-6) & (iv.W <= iv.hi + 1e-6)).mean() >= 0.75
    assert iv.departure > iv.spread > 0 and iv.num_observations == (200, 200)


def test_the_spread_falls_as_one_over_root_n():
    small = _profile(N=100, seed=1)
    big = DensityProfile(SIGMAS, {k: np.tile(v, (4, 1)) for k, v in small.ratios.items()})
    a, b = bootstrap_table(small, [1, 1], num_boot=300), bootstrap_table(big, [1, 1], num_boot=300)
    assert 0.35 < b.spread / a.spread < 0.65  # 1/2 in expectation
    assert abs(b.departure - a.departure) < 1e-6  # same point estimate


def test_bootstrap_is_seeded_and_refuses_bad_arguments():
    a, b = (bootstrap_table(_profile(), [1, 1], num_boot=10, seed=7) for _ in range(2))
    np.testing.assert_array_equal(a.replicates, b.replicates)
    for kw in ({"num_boot": 1}, {"level": 1.0}, {"level": 0}):
        with pytest.raises(ValueError):
            bootstrap_table(_profile(), [1, 1], **kw)


def test_proposals_needed_closed_form():
    W = np.full((2, 4), 0.125)
    iv = TableIntervals(("a", "b"), W, W, W, W, W[None], 0.95, (100, 100), departure=0.2, spread=0.4)
    assert proposals_needed(iv) == pytest.approx(400.0)  # 100 · (0.4 / 0.2)²
    assert proposals_needed(TableIntervals(("a", "b"), W, W, W, W, W[None], 0.95, (100, 100), 0.0, 0.1)) == np.inf


# ------------------------------------------------------------------ comparing tables

def test_compare_a_table_with_itself_and_its_mirror():
    t = table_from_profile(_profile(), [1, 1])
    same = compare_tables(t, t)
    assert same.cosine == pytest.approx(1.0) and all(a == b for _, _, a, b in same.largest)
    static = np.full_like(t.W, 0.125)
    mirror = 2 * static - t.W  # the opposite departure from λ/T, same marginals
    assert compare_tables(t.W, mirror).cosine == pytest.approx(-1.0)
    assert np.isnan(compare_tables(t.W, static).cosine)


def test_centre_of_mass_and_largest_cells_closed_form():
    a = np.array([[0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5]]) / 1.0
    b = np.array([[0.0, 0.0, 0.0, 0.5], [0.5, 0.0, 0.0, 0.0]])
    cmp = compare_tables(a, b, top=2)
    assert cmp.centre_of_mass == {"reward_0": (0.0, 3.0), "reward_1": (3.0, 0.0)}
    assert {(n, j) for n, j, _, _ in cmp.largest} <= {("reward_0", 0), ("reward_0", 3), ("reward_1", 0),
                                                       ("reward_1", 3)}
    assert all(abs(x - y) == pytest.approx(4.0) for _, _, x, y in cmp.largest)  # 4 × λ/T against 0


def test_compare_matches_rows_by_name_and_refuses_other_rewards_or_budgets():
    p = _profile()
    t = table_from_profile(p, [2, 1], reward_names=["early", "late"])
    u = table_from_profile(p, [1, 2], reward_names=["late", "early"])  # the same table, rows swapped
    assert compare_tables(t, u).cosine == pytest.approx(1.0)
    with pytest.raises(ValueError, match="different budgets"):
        compare_tables(t, table_from_profile(p, [1, 1]))
    other = DensityProfile(SIGMAS, {"early": p.ratios["early"], "x": p.ratios["late"]})
    with pytest.raises(ValueError, match="different rewards"):
        compare_tables(t, table_from_profile(other, [2, 1]))


# ------------------------------------------------------------------ variance shares under pre

def _samples(sd=(1.0, 0.1), groups=50, G=8, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), G)
    R = rng.normal(size=(groups * G, 2)) * np.asarray(sd) + rng.normal(size=(groups, 2))[g] * 5  # group offsets
    return R, g


def test_shares_closed_form_with_independent_rewards():
    R, g = _samples(sd=(1.0, 0.1), groups=400)
    sh = variance_shares(R, g, np.ones((2, 3)))
    np.testing.assert_allclose(sh.share.sum(0), 1.0)
    np.testing.assert_allclose(sh.share[1], 0.01 / 1.01, rtol=0.15)  # group offsets do not count
    np.testing.assert_allclose(sh.raw_sd, [1.0, 0.1], rtol=0.05)
    np.testing.assert_allclose(sh.static_correlation, 1.0)  # T·W ∝ λ/T at every step: the static signal


def test_a_low_variance_reward_cannot_change_the_signal():
    R, g = _samples(sd=(1.0, 0.01), groups=100)
    TW = np.array([[0.2, 1.8], [1.8, 0.2]])  # the quiet reward gets 90 % of step 0
    sh = variance_shares(R, g, TW)
    assert sh.share[1, 0] < 0.01 and sh.static_correlation.min() > 0.99
    loud = variance_shares(*_samples(sd=(1.0, 1.0), groups=100), TW)
    assert loud.static_correlation.min() < 0.9  # the same W does act when the spreads are comparable


def test_variance_shares_refuse_bad_input():
    R, g = _samples()
    with pytest.raises(ValueError, match="at least 2"):
        variance_shares(R[:3], np.arange(3), np.ones((2, 2)))
    with pytest.raises(ValueError, match="one K"):
        variance_shares(R, g, np.ones((3, 2)))
    with pytest.raises(ValueError, match="finite"):
        variance_shares(np.where(R > 2, np.nan, R), g, np.ones((2, 2)))


def test_check_table_reports_a_retimed_reward_that_cannot_act():
    p = _profile()
    R, g = _samples(sd=(1.0, 0.001), groups=50)
    rep = check_table(p, [1, 1], num_boot=30, samples=(R, g))
    assert not rep.ok and any("'late'" in m and "cannot act" in m for m in rep.problems)
    assert check_table(p, [1, 1], num_boot=30, samples=_samples(sd=(1.0, 1.0))).ok
    assert "ok: W for" in check_table(p, [1, 1], num_boot=30).summary()


# ------------------------------------------------------------------ the command

def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "recast", "weights", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_weights_check_command(tmp_path):
    good = save_profile(_profile(), tmp_path / "good.npz")
    out = _cli(good, "--lam", "1,1", "--check", "--num-boot", "20", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("ok:") and not list(tmp_path.glob("recast_weights*"))
    bad = _cli(ROOT / "data/profiles/digit_base_renderings_T6.npz", "--rewards", ",".join(COMPOSE),
               "--lam", "1,1,1,1,1", "--check", "--num-boot", "20", "--out", tmp_path / "t.npz", cwd=tmp_path)
    assert bad.returncode == 1 and "reward 'digit', column 2" in bad.stdout and (tmp_path / "t.npz").is_file()
    other = save_table(table_from_profile(_profile(seed=5), [1, 1]), tmp_path / "other.npz")
    R, g = _samples()
    np.savez(tmp_path / "s.npz", rewards=R, group_ids=g)
    cmp = _cli(good, "--lam", "1,1", "--check", "--num-boot", "20", "--compare", other, "--samples",
               tmp_path / "s.npz", cwd=tmp_path)
    assert cmp.returncode == 0 and "cosine of the departures +" in cmp.stdout and "share of the pre" in cmp.stdout
    for args, msg in ((("--compare", other), "add --check"), ((), "--out is required"),
                      (("--check", "--samples", tmp_path / "none.npz"), "no such file")):
        r = _cli(good, "--lam", "1,1", *args, cwd=tmp_path)
        assert r.returncode == 2 and msg in r.stderr


def test_the_check_command_in_docs_credit_runs_as_written():
    text = (ROOT / "docs/credit.md").read_text()
    section = text.split("## Check a table before you train with it", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    command = " ".join(line.split("#")[0].rstrip().rstrip("\\") for line in block.strip().splitlines()).split()
    assert command[:2] == ["recast", "weights"]
    out = _cli(*command[2:], cwd=ROOT)
    assert out.returncode == 1 and "reward 'digit', column 2 (the step sigma 0.819 -> 0.668)" in out.stdout
    assert "departure from lambda/T (RMS relative) 0.723" in out.stdout  # the numbers the page quotes


@pytest.mark.parametrize("proposal", [(), ("--proposal", "renderings", "--num-continuations", "1", "--num-base", "1",
                                           "--substeps", "1", "--num-prompts", "2")])
def test_profile_refuses_set_without_config(tmp_path, proposal):
    r = subprocess.run([sys.executable, "-m", "recast", "profile", "--world", "tiny", "--rewards", "digit,color",
                        "--num-steps", "2", *proposal, "--set", "num_steps=3", "--out", str(tmp_path / "p.npz")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--set num_steps=3 needs --config" in r.stderr and not list(tmp_path.iterdir())


def test_the_global_index_recipe_in_docs_credit_runs_as_written():
    text = (ROOT / "docs/credit.md").read_text()
    block = text.split("**Keep each sample's global index", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    space: dict = {}
    torch.manual_seed(0)  # the block draws its rewards and shuffles from the global generator
    exec(compile(block, "docs/credit.md", "exec"), space)
    S, world, B, T = space["S"], space["world"], space["B"], space["T"]
    assert S.shape == (world * B, T) and not torch.allclose(S[:, 0], S[:, -1])  # W is not flat: steps differ
    # the natural-looking read by position after the shuffle is the wrong sample's signal for most pairs
    idx, steps = space["idx"], space["steps"]
    rank_rows = torch.arange((world - 1) * B, world * B)
    assert (S[rank_rows, steps[:, -1]] != S[idx, steps[:, -1]]).any()


# ------------------------------------------------------------------ Credit.columns

@pytest.fixture
def credit():
    return Credit(["a", "b"], 4, [1, 1], method="static", sigmas=SIGMAS)


def test_columns_exact_and_by_timestep(credit):
    assert credit.columns(sigma=[1.0, 0.75, 0.5, 0.25]).tolist() == [0, 1, 2, 3]
    assert credit.columns(timestep=[250, 1000]).tolist() == [3, 0]
    with pytest.raises(ValueError, match="not a training step"):
        credit.columns(sigma=[0.6])


def test_columns_interval_rule(credit):
    s = [1.0, 0.9, 0.75, 0.7, 0.5, 0.3, 0.25, 0.1, 1e-6]
    assert credit.columns(sigma=s, binning="interval").tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3]
    grid32 = torch.tensor(SIGMAS[:-1], dtype=torch.float32)  # a grid read back in float32 keeps its columns
    assert credit.columns(sigma=grid32, binning="interval").tolist() == [0, 1, 2, 3]
    assert credit.columns(timestep=[900.0, 1.0], binning="interval").tolist() == [0, 3]
    # agreement: on grid values the two rules give the same columns
    assert torch.equal(credit.columns(sigma=SIGMAS[:-1], binning="interval"), credit.columns(sigma=SIGMAS[:-1]))


@pytest.mark.parametrize("bad", [[0.0], [-0.1], [1.5], [float("nan")]])
def test_columns_interval_refuses_what_no_step_trains(credit, bad):
    with pytest.raises(ValueError, match="binning 'interval'"):
        credit.columns(sigma=bad, binning="interval")


def test_columns_refuses_misuse(credit):
    with pytest.raises(ValueError, match="exactly one"):
        credit.columns(sigma=[1.0], timestep=[1000], binning="interval")
    with pytest.raises(ValueError, match="binning must be"):
        credit.columns(sigma=[1.0], binning="nearest")
    with pytest.raises(ValueError, match="grid"):
        Credit(["a", "b"], 4, [1, 1], method="static").columns(sigma=[1.0], binning="interval")


def test_plot_weight_intervals_draws_one_series_per_reward_and_marks_flagged_cells():
    import matplotlib

    matplotlib.use("Agg")
    from recast.plotting import plot_weight_intervals

    iv = bootstrap_table(_profile(), [1, 2], num_boot=20)
    ax = plot_weight_intervals(iv, sigmas=SIGMAS, flagged=[("late", 1)], title="t")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["early", "late"]
    rings = [ln for ln in ax.lines if ln.get_markerfacecolor() == "none"]
    assert len(rings) == 1 and [t.get_text() for t in ax.get_xticklabels()] == ["1.00", "0.75", "0.50", "0.25"]
    np.testing.assert_allclose(rings[0].get_ydata(), iv.W[1, 1] * 4 / iv.W[1].sum())
