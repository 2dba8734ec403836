"""Properties of the weight solver: marginals, limits, symmetry, and the errors bad input gets."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from recast.solver import ConvergenceError, gain_profiles, solve_weights, static_weights

LAM = torch.tensor([0.4, 0.2, 0.2, 0.2], dtype=torch.float64)


def _early_late_flat(T=10):
    """Three gain profiles: informative early, late, and flat."""
    j = torch.arange(T, dtype=torch.float64)
    return torch.stack([torch.exp(-j / 2), torch.exp((j - T) / 2), torch.ones(T)])


@st.composite
def instances(draw):
    K = draw(st.integers(1, 6))
    T = draw(st.integers(1, 25))
    gains = draw(arrays(np.float64, (K, T), elements=st.floats(0, 10, allow_subnormal=False)))
    lam = draw(arrays(np.float64, (K,), elements=st.floats(0, 5, allow_subnormal=False)))
    if lam.sum() <= 1e-3:
        lam[0] = 1.0
    tau = draw(st.sampled_from([0.3, 1.0, 3.0, math.inf]))
    return gains, lam, tau


@settings(max_examples=80, deadline=None)
@given(instances())
def test_marginals_hold_and_W_nonnegative(inst):
    gains, lam, tau = inst
    W = solve_weights(gains, lam, temperature=tau, tol=1e-9)
    K, T = gains.shape
    assert W.dtype == torch.float64 and W.shape == (K, T)
    assert (W >= 0).all()
    np.testing.assert_allclose(W.sum(1).numpy(), lam, atol=1e-9)
    np.testing.assert_allclose(W.sum(0).numpy(), np.full(T, lam.sum() / T), atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(instances(), st.floats(0, 1))
def test_uniform_mix_keeps_marginals_and_interpolates(inst, gamma):
    gains, lam, tau = inst
    W0 = solve_weights(gains, lam, temperature=tau)
    Wg = solve_weights(gains, lam, temperature=tau, uniform_mix=gamma)
    expected = (1 - gamma) * W0 + gamma * static_weights(lam, gains.shape[1])
    torch.testing.assert_close(Wg, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(Wg.sum(1).numpy(), lam, atol=1e-9)


def test_one_reward_gives_static():
    g = torch.rand(1, 7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(solve_weights(g, [0.7]), torch.full((1, 7), 0.1, dtype=torch.float64))


def test_equal_profiles_give_static_even_at_low_temperature():
    g = torch.rand(1, 9, generator=torch.Generator().manual_seed(1)).expand(4, 9) * torch.tensor([[1.0], [2.0], [0.5], [3.0]])
    W = solve_weights(g, LAM, temperature=0.2)
    torch.testing.assert_close(W, static_weights(LAM, 9), rtol=0, atol=1e-8)  # entries to ~T·tol


def test_large_temperature_approaches_static():
    g = _early_late_flat()
    lam = LAM[:3] / LAM[:3].sum()
    errs = [(solve_weights(g, lam, temperature=t) - static_weights(lam, 10)).abs().max().item() for t in (1, 10, 100, 1e4)]
    assert all(a > b for a, b in zip(errs, errs[1:]))
    assert errs[-1] < 1e-4
    assert torch.equal(solve_weights(g, lam, temperature=math.inf), static_weights(lam, 10))


def test_weight_follows_informativeness():
    W = solve_weights(_early_late_flat(), [1 / 3] * 3, temperature=0.5)
    early, late, flat = W
    assert early[0] > early[-1] and late[-1] > late[0]
    assert early[:3].sum() > late[:3].sum() and late[-3:].sum() > early[-3:].sum()
    assert flat.std() < early.std()


def test_permuting_rewards_permutes_rows():
    g = torch.rand(4, 12, generator=torch.Generator().manual_seed(2))
    perm = torch.tensor([2, 0, 3, 1])
    W = solve_weights(g, LAM, temperature=0.7)
    torch.testing.assert_close(solve_weights(g[perm], LAM[perm], temperature=0.7), W[perm], rtol=0, atol=1e-10)


def test_row_scaling_of_gains_is_irrelevant():
    g = torch.rand(3, 8, generator=torch.Generator().manual_seed(3))
    lam = [0.5, 0.3, 0.2]
    scaled = g * torch.tensor([[10.0], [0.1], [3.0]])
    torch.testing.assert_close(solve_weights(scaled, lam), solve_weights(g, lam), rtol=0, atol=1e-8)  # to ~T·tol


def test_zero_budget_row_is_zero_and_others_hold():
    W = solve_weights(_early_late_flat(), [0.5, 0.0, 0.5], temperature=0.5)
    assert torch.all(W[1] == 0)
    torch.testing.assert_close(W.sum(0), torch.full((10,), 0.1, dtype=torch.float64), rtol=0, atol=1e-9)


def test_two_rewards_closed_form_at_infinite_contrast_is_transport():
    # Reward 0 informative only in the first half, reward 1 only in the second; with λ = (1/2, 1/2) the sharp
    # limit is the block assignment, and a small τ gets close to it.
    g = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    W = solve_weights(g, [0.5, 0.5], temperature=0.05, floor=1e-6)
    torch.testing.assert_close(W, torch.tensor([[0.25, 0.25, 0, 0], [0, 0, 0.25, 0.25]], dtype=torch.float64),
                               rtol=0, atol=1e-6)


def test_accepts_lists_numpy_and_tensors_alike():
    g = _early_late_flat()
    lam = [0.2, 0.3, 0.5]
    a = solve_weights(g, lam)
    torch.testing.assert_close(solve_weights(g.numpy(), np.array(lam)), a)
    torch.testing.assert_close(solve_weights(g.tolist(), torch.tensor(lam)), a)
    torch.testing.assert_close(solve_weights(g.float(), lam), a, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "gains, budgets, kwargs, match",
    [
        ([[1.0, float("nan")]], [1.0], {}, "NaN or inf"),
        ([[1.0, float("inf")]], [1.0], {}, "NaN or inf"),
        ([[1.0, -0.1]], [1.0], {}, "gains must be >= 0"),
        ([1.0, 2.0], [1.0], {}, "2-D"),
        (np.zeros((2, 0)), [1.0, 1.0], {}, "T >= 1"),
        ([[1.0, 2.0]], [1.0, 1.0], {}, "length 2 but there are K=1 rewards"),
        ([[1.0, 2.0], [1.0, 1.0]], [0.0, 0.0], {}, "all zero"),
        ([[1.0, 2.0], [1.0, 1.0]], [-0.5, 1.0], {}, "budgets must be >= 0"),
        ([[1.0, 2.0], [1.0, 1.0]], [float("nan"), 1.0], {}, "budgets contain NaN"),
        ([[1.0, 2.0], [1.0, 1.0]], [[0.5, 0.5]], {}, "budgets must be 1-D"),
        ([[1.0, 2.0], [1.0, 1.0]], [0.5, 0.5], {"temperature": 0.0}, "temperature"),
        ([[1.0, 2.0], [1.0, 1.0]], [0.5, 0.5], {"floor": 0.0}, "floor"),
        ([[1.0, 2.0], [1.0, 1.0]], [0.5, 0.5], {"uniform_mix": 1.5}, "uniform_mix"),
        ([["a", "b"]], [1.0], {}, "gains must be numeric"),
    ],
)
def test_bad_input_raises_named_error(gains, budgets, kwargs, match):
    with pytest.raises(ValueError, match=match):
        solve_weights(gains, budgets, **kwargs)


def test_nonconvergence_is_reported_not_silent():
    g = _early_late_flat(40)
    with pytest.raises(ConvergenceError, match="max_iter"):
        solve_weights(g, [0.6, 0.3, 0.1], temperature=0.3, max_iter=2, tol=1e-12)


def test_static_weights_and_profiles():
    torch.testing.assert_close(static_weights([0.3, 0.6], 3), torch.tensor([[0.1] * 3, [0.2] * 3], dtype=torch.float64))
    with pytest.raises(ValueError, match="positive integer"):
        static_weights([1.0], 0)
    q = gain_profiles(torch.tensor([[0.0, 0.0], [1.0, 3.0]], dtype=torch.float64))
    torch.testing.assert_close(q, torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64))


def test_near_degenerate_transport_converges_to_full_precision():
    # Found by hypothesis: a zero gain where the marginals force a little mass. Newton's line search on the dual
    # used to stall at row error 2.5e-9 (F's decrease fell below float64 resolution) and spin to max_iter.
    g = [[9.06978248, 4.96510272, 4.96510272], [0.0, 6.45306706, 4.96510272], [4.96510272, 0.0, 4.96510272]]
    lam = [3.61108403, 4.9825302, 0.0]
    W = solve_weights(g, lam, temperature=1.0, tol=1e-12)
    np.testing.assert_allclose(W.sum(1).numpy(), lam, atol=1e-12)
    np.testing.assert_allclose(W.sum(0).numpy(), np.full(3, sum(lam) / 3), atol=1e-12)
    assert 0 < W[1, 0] < 1e-4  # the forced mass lands where the kernel is tiny


def test_negligible_budget_and_extreme_kernel_contrast():
    # Found by hypothesis: λ_1 = 1e-38 beside O(1) budgets, and a reward whose kernel contrast is 1e-20 (τ = 0.3)
    # but which must still put 1/6 of its mass where its kernel is tiny. The row with a negligible budget keeps
    # λ_1/T; the others converge with the preconditioned Newton steps.
    g = [[1.0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    lam = [1.0, 1.17549435e-38, 0.5, 1.0]
    W = solve_weights(g, lam, temperature=0.3)
    np.testing.assert_allclose(W.sum(1).numpy(), lam, atol=1e-9)
    np.testing.assert_allclose(W.sum(0).numpy(), np.full(3, sum(lam) / 3), atol=1e-9)
    assert (W >= 0).all() and W[0, 0] == pytest.approx(2.5 / 3, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(instances(), st.sampled_from([0.02, 0.01, 0.001]))
def test_small_temperatures_converge_to_the_marginals(inst, tau):
    # Before the log-domain rewrite, 1 in 60 random instances crashed in lstsq at τ = 0.02 and 9 in 60 at 0.001.
    gains, lam, _ = inst
    lam = lam / lam.sum()
    W = solve_weights(gains, lam, temperature=tau)
    assert torch.isfinite(W).all() and (W >= 0).all()
    np.testing.assert_allclose(W.sum(1).numpy(), lam, atol=1e-9)
    np.testing.assert_allclose(W.sum(0).numpy(), np.full(gains.shape[1], 1 / gains.shape[1]), atol=1e-9)


@pytest.mark.parametrize("scale", [1e-155, 1e-20, 1e20, 1e155])
def test_budget_scale_only_scales_W(scale):
    g = _early_late_flat()
    lam = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    W = solve_weights(g, lam * scale, temperature=0.3)
    assert torch.isfinite(W).all()
    torch.testing.assert_close(W.sum(1) / scale, lam, rtol=0, atol=1e-9)  # tol relative to Σλ = scale
    torch.testing.assert_close(W / scale, solve_weights(g, lam, temperature=0.3, tol=1e-12), rtol=0, atol=1e-8)


@pytest.mark.parametrize("row_total", [1e-300, 1e-13, 1e-12, 1e13, 1e300])
def test_gain_scale_is_irrelevant_at_any_magnitude(row_total):
    # A row totalling 1e-12 used to count as all-zero (uniform profile) and moved W by 0.044.
    g = _early_late_flat()
    scaled = g.clone()
    scaled[0] = g[0] / g[0].sum() * row_total
    torch.testing.assert_close(solve_weights(scaled, [0.4, 0.3, 0.3], temperature=0.5),
                               solve_weights(g, [0.4, 0.3, 0.3], temperature=0.5), rtol=0, atol=1e-12)


@pytest.mark.parametrize("tau, floor, tol", [(1e-7, 1e-6, 1e-9), (1e-3, 1e-6, 1e-14), (1e-5, 1e-300, 1e-9)])
def test_temperature_below_float64_resolution_is_refused_naming_the_smallest(tau, floor, tol):
    from recast.solver import min_temperature

    smallest = min_temperature(floor, tol)
    assert smallest > tau
    with pytest.raises(ValueError, match=f"smallest temperature.*{smallest:.3g}"):
        solve_weights(_early_late_flat(), [0.4, 0.3, 0.3], temperature=tau, floor=floor, tol=tol)
    W = solve_weights(_early_late_flat(), [0.4, 0.3, 0.3], temperature=smallest * 1.01, floor=floor, tol=tol)
    np.testing.assert_allclose(W.sum(1).numpy(), [0.4, 0.3, 0.3], atol=tol)


def test_solver_avoids_lstsq_which_is_not_reproducible(monkeypatch):
    # The rare kill-and-resume divergence of issue 9: torch.linalg.lstsq (MKL gelsy) gave 6 different answers in
    # 3000 identical single-threaded calls under CPU load, so two runs of one config could log different W. The
    # solver's Newton step uses eigh, which gave one answer in the same experiment.
    def refuse(*a, **kw):
        raise AssertionError("solve_weights called torch.linalg.lstsq")

    monkeypatch.setattr(torch.linalg, "lstsq", refuse)
    g = _early_late_flat(12)
    for tau in (1.0, 0.1, 0.01):
        W = solve_weights(g, [0.5, 0.3, 0.2], temperature=tau)
        assert torch.equal(W, solve_weights(g, [0.5, 0.3, 0.2], temperature=tau))
