"""Closed-form checks of rewards -> advantages -> per-step signals (docs/method.md §3)."""

import pytest
import torch

from recast.advantages import (
    STD_EPS, group_advantages, normalise_budgets, reward_sum, step_signal, validate_W,
)


def test_group_normalisation_closed_form():
    R = torch.tensor([[1.0, 3.0, 0.0, 4.0]])  # two groups of 2
    adv = group_advantages(R, 2, adv_clip_max=5.0, std_scope="global")
    std = R.std(unbiased=False)
    expected = torch.tensor([[-1.0, 1.0, -2.0, 2.0]]) / (std + STD_EPS)
    torch.testing.assert_close(adv.A, expected)
    torch.testing.assert_close(adv.p, 0.5 + expected / 10)
    # per-group std: each group becomes ±1 (up to eps)
    g = group_advantages(R, 2, std_scope="group")
    d = torch.tensor([[1.0, 1.0, 2.0, 2.0]])  # half-range = std of each group
    torch.testing.assert_close(g.A, torch.tensor([[-1.0, 1.0, -1.0, 1.0]]) * d / (d + STD_EPS))


def test_groups_sum_to_zero_and_p_in_unit_interval():
    torch.manual_seed(0)
    R = torch.randn(3, 24) * torch.tensor([[1.0], [10.0], [0.1]])
    adv = group_advantages(R, 6, adv_clip_max=5.0)
    torch.testing.assert_close(adv.A.reshape(3, 4, 6).sum(-1), torch.zeros(3, 4), atol=1e-5, rtol=0)
    assert (adv.p >= 0).all() and (adv.p <= 1).all()
    # per-reward normalisation removes the scale of each reward
    assert adv.A.std(dim=1).max() / adv.A.std(dim=1).min() < 1.5


def test_clipping():
    R = torch.tensor([[0.0] * 99 + [100.0]])
    adv = group_advantages(R, 100, adv_clip_max=2.0)
    assert adv.A.max().item() == 2.0 and adv.p.max().item() == 1.0
    assert adv.A.min().item() >= -2.0 and adv.p.min().item() >= 0.0


def test_reward_sum_lets_large_variance_dominate():
    torch.manual_seed(1)
    R = torch.stack([torch.randn(16), 100 * torch.randn(16)])
    lam = normalise_budgets([0.5, 0.5], 2)
    raw = group_advantages(reward_sum(R, lam.float()), 4)
    per = group_advantages(R, 4)
    # the raw sum follows reward 1 (huge variance) almost perfectly; per-reward normalisation does not
    corr = torch.corrcoef(torch.stack([raw.A[0], per.A[1]]))[0, 1]
    assert corr > 0.99
    combined = step_signal(torch.full((2, 2), 0.25, dtype=torch.float64), per.p, torch.zeros(16, dtype=torch.long))
    torch.testing.assert_close(combined, per.p.mean(0))


def test_step_signal_convex_and_static_exact():
    torch.manual_seed(2)
    p = torch.rand(3, 10)
    lam = normalise_budgets([0.2, 0.3, 0.5], 3)
    T = 4
    W = (lam / T)[:, None].expand(3, T)
    cols = torch.randint(0, T, (10,))
    s = step_signal(W, p, cols)
    torch.testing.assert_close(s, (lam.float()[:, None] * p).sum(0))
    assert (s >= 0).all() and (s <= 1).all()
    # one reward: W = 1/T up to float64 round-off gives exactly p
    W1 = torch.full((1, 7), 1 / 7, dtype=torch.float64) * (1 + 1e-15)
    assert torch.equal(step_signal(W1, p[:1], torch.randint(0, 7, (10,))), p[0])


def test_step_signal_uses_columns():
    p = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    W = torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=torch.float64)  # reward 0 early, reward 1 late
    s = step_signal(W, p, torch.tensor([0, 1]))
    assert s.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("lam, msg", [([1.0], "2 rewards"), ([1.0, -1.0], ">= 0"), ([0.0, 0.0], "all zero"),
                                      ([float("nan"), 1.0], "NaN")])
def test_bad_budgets(lam, msg):
    with pytest.raises(ValueError, match=msg):
        normalise_budgets(lam, 2)


def test_group_must_divide_batch():
    with pytest.raises(ValueError, match="must divide"):
        group_advantages(torch.zeros(1, 10), 3)


def test_validate_fixed_W():
    lam = normalise_budgets([1, 1], 2)
    early_late = [[0.5, 0.0], [0.0, 0.5]]
    assert torch.equal(validate_W(early_late, lam, 2), torch.tensor(early_late, dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        validate_W([[0.5, 0.5]], lam, 2)
    with pytest.raises(ValueError, match="row sums"):
        validate_W([[0.5, 0.25], [0.0, 0.25]], lam, 2)


def test_reward_sum_is_an_aggregation_not_a_W():
    from recast.advantages import step_signal

    s = torch.tensor([[0.2, 0.9, 0.5]])
    cols = torch.tensor([0, 3, 5])
    assert torch.equal(step_signal(None, s, cols), s[0])  # the same combined signal at every column
    with pytest.raises(ValueError, match="one combined reward"):
        step_signal(None, torch.rand(2, 3), cols)


def test_advantages_from_moments_is_group_advantages_on_its_moments_and_silences_flat_rewards():
    from recast.advantages import advantages_from_moments, group_advantages, group_stats

    g = torch.Generator().manual_seed(3)
    R = torch.rand(3, 8, generator=g, dtype=torch.float64)
    R[2] = 0.5 + 1e-6 * torch.rand(8, generator=g, dtype=torch.float64)  # a reward that barely moves
    mean, std = group_stats(R, 4, "group")
    got = advantages_from_moments(R, mean, std, adv_clip_max=2.0, std_floor=1e-3, reward_range=1.0)
    want = group_advantages(R, 4, adv_clip_max=2.0, std_scope="group", std_floor=1e-3)
    assert torch.equal(got.A, want.A) and torch.equal(got.p, want.p) and got.silenced.tolist() == [False, False, True]
    assert (got.A[2] == 0).all() and (got.p[2] == 0.5).all() and got.A[:2].abs().max() <= 2.0
    kept = advantages_from_moments(R, mean, std, adv_clip_max=2.0, std_floor=0.0, reward_range=1.0)
    assert not kept.silenced.any() and kept.A[2].abs().sum() > 0  # floor 0 silences none
