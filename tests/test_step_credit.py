"""The per-sample step credit of the per_step (CoCA-style) and otca baselines (`recast.credit.step`)."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from recast.credit.step import StepCredit, min_norm_coefficients, similarity_gain_weights, step_credit


def test_similarity_gain_weights_closed_form():
    """States rotating towards the final sample by known angles: the weights are the clipped cosine gains + ε."""
    final = torch.tensor([[1.0, 0.0]])
    angles = torch.tensor([1.5, 1.0, 1.2, 0.0])  # the third state moves away: its gain clips to 0
    states = torch.stack([torch.tensor([[torch.cos(a), torch.sin(a)]]) for a in angles])
    eps = 1e-3
    cos = torch.cos(angles)
    gain = (cos[1:] - cos[:-1]).clamp_min(0) + eps
    w = similarity_gain_weights(states, final, 3, eps)
    torch.testing.assert_close(w[0], (gain / gain.sum()).float())
    assert w.shape == (1, 3) and w[0, 1] < 2 * eps


def test_min_norm_coefficients_same_sign_takes_the_smallest_advantage():
    A = torch.tensor([[0.5, -2.0], [0.2, -0.1], [1.0, -3.0]])  # (K=3, B=2)
    c = min_norm_coefficients(A, torch.full((3,), 1 / 3))
    assert c.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]


def test_min_norm_coefficients_two_rewards_of_mixed_sign_cancel_exactly():
    A = torch.tensor([[1.0, -0.5], [-3.0, 2.0]])
    c = min_norm_coefficients(A, torch.tensor([0.5, 0.5]))
    want = torch.tensor([[3.0 / 4.0, 1.0 / 4.0], [2.0 / 2.5, 0.5 / 2.5]], dtype=torch.float64)
    torch.testing.assert_close(c, want, atol=1e-8, rtol=0)


@given(st.lists(st.floats(-3, 3), min_size=3, max_size=3), st.integers(0, 5))
@example([0.125, -2.0, -0.5], 0)  # the draw the iterative solver stopped short on (c·A = -6.6e-6)
@settings(max_examples=40, deadline=None)
def test_min_norm_with_mixed_signs_reaches_zero_nearest_the_prior(a, seed):
    A = torch.tensor(a, dtype=torch.float64)[:, None]
    if (A > 0).all() or (A < 0).all() or (A.abs() < 1e-3).any():
        return
    prior = torch.rand(3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.1
    prior = prior / prior.sum()
    c = min_norm_coefficients(A, prior)[0]
    assert abs(float(c @ A[:, 0])) < 1e-6 and abs(float(c.sum()) - 1) < 1e-9 and (c >= -1e-12).all()
    # the zero set is a segment of the triangle: its ends lie on the edges c_i = 0; the nearest point in closed form
    a = A[:, 0]
    ends = []
    for i in range(3):
        j, k = [x for x in range(3) if x != i]
        if a[j] != a[k]:
            cj = float(a[k] / (a[k] - a[j]))
            if -1e-12 <= cj <= 1 + 1e-12:
                point = torch.zeros(3, dtype=torch.float64)
                point[j], point[k] = cj, 1 - cj
                ends.append(point)
    p0, p1 = ends[0], max(ends, key=lambda q: float((q - ends[0]).norm()))
    d = p1 - p0
    s = 0.0 if float(d @ d) == 0 else min(1.0, max(0.0, float((prior - p0) @ d / (d @ d))))
    nearest = p0 + s * d
    assert float((c - prior).norm()) <= float((nearest - prior).norm()) + 1e-6


def test_uniform_step_weights_and_budget_coefficients_give_the_uniform_signal():
    """With w = 1/m and c = λ the baseline's signal is the uniform baseline's Σ_k λ_k p_k."""
    g = torch.Generator().manual_seed(0)
    A = torch.rand(3, 8, generator=g) * 10 - 5
    lam = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    sc = StepCredit(w=torch.full((8, 4), 0.25), c=lam.expand(8, 3), kind="nft", adv_clip_max=5.0)
    idx = torch.arange(8)
    p = 0.5 + A / 10
    torch.testing.assert_close(sc.signal(A, idx, 2), (lam.float()[:, None] * p).sum(0))
    gr = StepCredit(w=torch.full((8, 4), 0.25), c=lam.expand(8, 3), kind="grpo", adv_clip_max=5.0)
    torch.testing.assert_close(gr.signal(A, idx, 0), (lam.float()[:, None] * A).sum(0))
    assert torch.allclose(sc.mean_W().sum(), torch.tensor(1.0, dtype=torch.float64))


def test_step_credit_builds_each_method_and_refuses_others():
    g = torch.Generator().manual_seed(1)
    T, B, K = 4, 6, 2
    xs = torch.randn(T + 1, B, 3, generator=g)
    hats = torch.randn(T, B, 3, generator=g)
    A = torch.randn(K, B, generator=g)
    lam = torch.tensor([0.5, 0.5], dtype=torch.float64)
    kw = dict(A=A, lam=lam, latents=xs, x0_hats=hats, final=xs[-1], kind="nft", adv_clip_max=5.0, eps=1e-3,
              explore=0.5)
    per = step_credit("per_step", m=T, **kw)
    ot = step_credit("otca", m=T - 1, **kw)
    assert per.w.shape == (B, T) and ot.w.shape == (B, T - 1)
    assert torch.allclose(per.c, lam.expand(B, K)) and torch.allclose(ot.c.sum(1), torch.ones(B, dtype=torch.float64))
    assert (ot.c >= 0.25 - 1e-12).all()  # explore 0.5 keeps half of λ = 0.25 on each reward
    with pytest.raises(ValueError, match="no per-sample step credit"):
        step_credit("recast", m=T, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["per_step", "otca"])
@pytest.mark.parametrize("backend", ["nft", "grpo"])
def test_trainer_runs_each_baseline_on_each_backend(tmp_path, method, backend):
    from recast.config import preset
    from recast.trainer import train

    run = train(preset("ci", iterations=2, method=method, backend=backend), tmp_path)
    W = torch.tensor(run.metrics[-1]["W"], dtype=torch.float64)
    m = 3 if backend == "grpo" else 4
    assert W.shape == (5, m) and abs(float(W.sum()) - 1) < 1e-6
    assert all(r["loss/loss"] == r["loss/loss"] for r in run.metrics)


def test_baselines_refuse_replay(tmp_path):
    from recast.config import preset
    from recast.trainer import Trainer

    with pytest.raises(ValueError, match="replay_share"):
        Trainer(preset("ci", method="otca", replay_share=0.25), tmp_path)
