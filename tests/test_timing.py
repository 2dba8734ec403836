"""Where gains land on any grid (`recast.informativeness.timing`): the per-point identity, closed forms, the bracket."""

import math

import numpy as np
import pytest
import torch

from recast.informativeness import gains_centre_of_mass, telescoping_gains
from recast.informativeness.timing import (
    TimingCurve,
    centre_of_mass_on_grid,
    curve_at,
    feasible_grids,
    gap_needed,
    normalised_curve,
    pool_curves,
    third_bounds,
)
from recast.sampling import sigma_schedule


def _step(sigma, at, width=1e-3):
    """A curve decided entirely at σ = at: F = 0 above it, 1 below (a steep logistic)."""
    return 1.0 / (1.0 + np.exp((np.asarray(sigma) - at) / width))


def test_centre_of_mass_is_the_sum_of_what_is_undecided_at_each_interior_point():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        T = int(torch.randint(2, 9, (1,), generator=g))
        D = torch.rand(3, T + 1, generator=g, dtype=torch.float64)  # not monotone: PAV inside both sides
        D[:, 0] = 0.0
        F = normalised_curve(D)
        expected = gains_centre_of_mass(telescoping_gains(D)).numpy()
        np.testing.assert_allclose(centre_of_mass_on_grid(F[:, 1:-1].numpy()), expected, rtol=0, atol=1e-12)


def test_normalised_curve_runs_from_zero_to_one_and_marks_rows_without_information():
    F = normalised_curve(torch.tensor([[0.0, 0.2, 0.1, 0.4], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(F[0], torch.tensor([0.0, 0.375, 0.375, 1.0], dtype=torch.float64))
    assert torch.isnan(F[1]).all()


def test_a_linear_curve_puts_the_centre_of_mass_at_the_sum_of_the_interior_sigmas():
    """F(σ) = 1 − σ: com = Σ σ_j; on the uniform grid that is (T − 1) / 2, the middle column."""
    s = np.linspace(1.0, 0.0, 11)
    curve = pool_curves([(s, torch.from_numpy(1.0 - s)[None])])
    for T in (3, 6, 10):
        interior = np.linspace(1.0, 0.0, T + 1)[1:-1]
        com = centre_of_mass_on_grid(curve.at(interior))
        assert com[0] == pytest.approx(interior.sum()) == pytest.approx((T - 1) / 2)


def test_pooling_merges_shared_sigmas_orders_noisy_to_clean_and_stays_monotone():
    s = sigma_schedule(6, 3.0).double()
    D1 = torch.tensor([[0.0, 0.1, 0.3, 0.5, 0.9, 1.0, 1.0]], dtype=torch.float64)
    D2 = torch.tensor([[0.0, 0.3, 0.2, 0.6, 1.0, 1.0, 2.0]], dtype=torch.float64)  # same grid, another batch
    s1 = sigma_schedule(6, 1.0).double()
    c = pool_curves([(s, D1), (s, D2), (s1, D1)])
    sig, F = c.sigma, c.F
    assert sig[0] == 1.0 and sig[-1] == 0.0 and (np.diff(sig) < 0).all() and sig.size == 2 + 5 + 5
    assert F[0, 0] == 0.0 and F[0, -1] == 1.0 and (np.diff(F[0]) >= 0).all()
    c2 = pool_curves([(s, D1), (s, D2)])  # D2 normalised after PAV: [0, .125, .125, .3, .5, .5, 1]
    np.testing.assert_allclose(c2.sigma, s.numpy())
    np.testing.assert_allclose(c2.F[0], [0.0, 0.1125, 0.2125, 0.4, 0.7, 0.75, 1.0])
    # the shift-1 points interleave and break monotonicity (0.2125 at σ = 0.82, 0.1 at 0.80): PAV pools them
    assert F[0, 2] == F[0, 3] == pytest.approx((0.2125 + 0.1) / 2)


@pytest.mark.parametrize("bad", [
    [],
    [(torch.tensor([1.0, 0.5, 0.0]), torch.zeros(1, 3))],  # no information
    [(torch.tensor([1.0, 0.6, 0.7, 0.0]), torch.tensor([[0.0, 0.1, 0.2, 1.0]]))],  # grid not decreasing
    [(torch.tensor([1.0, 0.5, 0.0]), torch.tensor([[0.0, 0.5, 1.0]])),
     (torch.tensor([1.0, 0.5, 0.0]), torch.tensor([[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]]))],  # rows disagree
])
def test_pool_curves_rejects_what_has_no_curve(bad):
    with pytest.raises(ValueError):
        pool_curves(bad)


def test_the_bracket_holds_every_monotone_curve_through_the_points():
    sig = np.array([1.0, 0.8, 0.5, 0.2, 0.0])
    F = np.array([[0.0, 0.1, 0.5, 0.9, 1.0]])
    q = np.array([1.0, 0.9, 0.8, 0.6, 0.3, 0.1, 0.0])
    lo, mid, hi = (curve_at(sig, F, q, m)[0] for m in ("lower", "linear", "upper"))
    np.testing.assert_allclose(lo, [0.0, 0.0, 0.1, 0.1, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(hi, [0.0, 0.1, 0.1, 0.5, 0.9, 1.0, 1.0])
    assert (lo <= mid).all() and (mid <= hi).all()
    with pytest.raises(ValueError):
        curve_at(sig, F, q, "cubic")
    with pytest.raises(ValueError):
        curve_at(sig, F, [1.5])


def test_third_bounds_and_the_gap_a_pair_of_thirds_needs():
    assert third_bounds(6) == {"early": (0.0, 1.5), "mid": (1.5, 3.5), "late": (3.5, 5.0)}
    assert gap_needed(6) == pytest.approx(0.4) and gap_needed(30) > 1 / 3 > gap_needed(10**6) - 1e-6
    with pytest.raises(ValueError):
        third_bounds(2)


def test_a_step_early_and_a_step_late_meet_the_thirds_on_the_uniform_grid():
    """Decided at σ = 0.7 and 0.3: on the uniform 6-step grid one interior point (5/6) is above 0.7 (com 1) and four
    are above 0.3 (com 4), so the uniform grid is feasible; the same curve for both rows never is."""
    sig = np.linspace(1.0, 0.0, 201)
    F = np.stack([_step(sig, 0.7), _step(sig, 0.3)])
    F[:, 0], F[:, -1] = 0.0, 1.0
    b = third_bounds(6)
    lattice = np.round(np.arange(1, 12) / 12, 6)
    grids = feasible_grids(TimingCurve(sig, F), lattice, 6, {0: b["early"], 1: b["late"]})
    uniform = np.linspace(1.0, 0.0, 7)[1:-1]
    assert any(np.allclose(g, uniform) for g in grids)
    assert ((grids > 0.7).sum(1) <= 1).all() and ((grids > 0.3).sum(1) >= 4).all()
    # the lattice has 3 points above 0.7, 5 in (0.3, 0.7] and 3 below: grids with none above 0.7 and ≥ 4 of the 5
    # middle ones, or one above 0.7 and ≥ 3 middle ones
    count = math.comb(5, 4) * 3 + 1 + 3 * (math.comb(5, 3) * 3 + math.comb(5, 4))
    assert len(grids) == count == 121
    same = np.stack([F[0], F[0]])
    assert feasible_grids(TimingCurve(sig, same), lattice, 6, {0: b["early"], 1: b["late"]}).shape == (0, 5)


def test_the_bracket_keeps_every_grid_the_interpolation_keeps_and_rules_out_only_what_the_points_rule_out():
    sig = np.array([1.0, 0.9, 0.75, 0.6, 0.45, 0.3, 0.0])
    F = np.array([[0.0, 0.2, 0.7, 0.95, 1.0, 1.0, 1.0], [0.0, 0.0, 0.05, 0.15, 0.4, 0.8, 1.0]])
    b = third_bounds(6)
    lattice = np.round(np.arange(1, 20) / 20, 6)
    c = TimingCurve(sig, F)
    lin = {tuple(g) for g in feasible_grids(c, lattice, 6, {0: b["early"], 1: b["late"]})}
    br = {tuple(g) for g in feasible_grids(c, lattice, 6, {0: b["early"], 1: b["late"]}, mode="bracket")}
    assert lin <= br and len(br) > len(lin)
    # a grid with all five points at σ ≤ 0.3 leaves the late row nothing undecided: com ≤ 5 (1 − 0.8) = 1 < 3.5
    assert not any(max(g) <= 0.3 for g in br)


@pytest.mark.parametrize("kw", [
    {"lattice": [0.5, 1.0, 0.2, 0.3, 0.4]},
    {"lattice": [0.5, 0.4]},
    {"bounds": {2: (0.0, 1.5)}},
    {"bounds": {0: (2.0, 1.0)}},
    {"mode": "cubic"},
    {"lattice": np.linspace(0.001, 0.999, 400)},  # C(400, 5) grids
])
def test_feasible_grids_rejects_bad_input_before_searching(kw):
    sig = np.array([1.0, 0.5, 0.0])
    F = np.array([[0.0, 0.5, 1.0], [0.0, 0.2, 1.0]])
    args = {"lattice": [0.9, 0.7, 0.5, 0.3, 0.1], "bounds": {0: (0.0, 1.5)}, "mode": "linear"} | kw
    with pytest.raises(ValueError):
        feasible_grids(TimingCurve(sig, F), args["lattice"], 6, args["bounds"], mode=args["mode"])
