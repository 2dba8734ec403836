"""The authors' released recipe, as docs/method.md §0 states it: the offline weighting (gains, kernel, log-domain
Sinkhorn), its two archives and their column order, the "pre" and "loss" aggregations, the x0-space NFT loss, and the
profile generator on a world whose E[r | x_t] is known in closed form."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recast.archives import (ArchiveError, DensityProfile, load_profile, load_table, save_profile, save_table,
                             table_from_profile)
from recast.credit import Credit
from recast.offline import exp_kernel, log_sinkhorn, paper_weights, ratio_divergence
from recast.sampling import sigma_schedule
from recast.trainer.losses import nft_loss

SIGMAS = sigma_schedule(6, 3.0).double().numpy()


def _profile(seed=0, names=("a", "b", "c"), N=32, T=6):
    rng = np.random.default_rng(seed)
    ratios = {}
    for k, n in enumerate(names):  # a reward that departs from 1 at a different step each
        r = np.ones((N, T))
        r[:, (2 * k) % T:] = rng.gamma(2.0 + k, 1.0 / (2.0 + k), size=(N, T - (2 * k) % T))
        ratios[n] = r
    return DensityProfile(sigma_schedule(T, 3.0).double().numpy(), ratios, {"proposal": "synthetic"})


# ------------------------------------------------------------------------------------------ gains, kernel, projection
def test_divergence_and_gains_follow_the_closed_form_and_telescope_before_the_clip():
    rho = np.array([[1.0, 2.0, 0.5], [1.0, 0.0, 1.5], [1.0, 1.0, 1.0]])
    D, g = ratio_divergence(rho, alpha=2.0)
    want = np.log(np.mean(rho**2, axis=0))  # α = 2: log E[ρ²]
    np.testing.assert_allclose(D, want, rtol=0, atol=1e-15)
    raw = np.diff(np.concatenate([[0.0], D]))
    assert raw.sum() == pytest.approx(D[-1], abs=1e-15)  # the gains telescope to D at the clean end
    np.testing.assert_array_equal(g, np.maximum(raw, 0.0))  # then each is clipped at 0, nothing else
    assert (raw < 0).any() and (g >= 0).all()
    D3, _ = ratio_divergence(rho, alpha=3.0)
    np.testing.assert_allclose(D3, np.log(np.mean(rho**3, axis=0)) / 2, atol=1e-15)
    D0, _ = ratio_divergence(np.zeros((4, 2)))  # the moment floor keeps D finite
    assert np.all(D0 == np.log(1e-30))


@pytest.mark.parametrize("bad, msg", [(np.array([[1.0, -0.1]]), ">= 0"), (np.array([[1.0, np.nan]]), "NaN"),
                                      (np.ones(3), "2-D"), (np.ones((0, 3)), "non-empty")])
def test_ratios_are_checked(bad, msg):
    with pytest.raises(ValueError, match=msg):
        ratio_divergence(bad)
    with pytest.raises(ValueError, match="alpha"):
        ratio_divergence(np.ones((2, 2)), alpha=1.0)


@given(K=st.integers(1, 5), T=st.integers(1, 30), seed=st.integers(0, 1000))
@settings(max_examples=40, deadline=None)
def test_a_flat_gain_curve_gives_exactly_the_static_W(K, T, seed):
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.0, 3.0, K)
    lam[0] += 0.1
    gains = np.repeat(rng.uniform(0, 5, (K, 1)), T, axis=1)  # flat within each reward (scales may differ)
    W = paper_weights(gains, lam)
    np.testing.assert_array_equal(W, np.repeat((lam / lam.sum() / T)[:, None], T, axis=1))


@given(K=st.integers(2, 5), T=st.integers(2, 25), seed=st.integers(0, 1000), tau=st.sampled_from([0.5, 1.0, 3.0]))
@settings(max_examples=40, deadline=None)
def test_the_projection_meets_both_marginals_and_follows_the_kernel(K, T, seed, tau):
    rng = np.random.default_rng(seed)
    gains = rng.exponential(1.0, (K, T))
    lam = rng.uniform(0.2, 2.0, K)
    W = paper_weights(gains, lam, tau)
    np.testing.assert_allclose(W.sum(1), lam / lam.sum(), atol=1e-9, rtol=0)
    np.testing.assert_allclose(W.sum(0), np.full(T, 1.0 / T), atol=1e-9, rtol=0)
    # W = diag(a) K diag(b): the log-odds between two columns of a row are the kernel's, plus a column constant
    L = np.log(W) - exp_kernel(gains, tau)
    np.testing.assert_allclose(L - L[:, :1] - (L[0] - L[0, 0])[None], 0.0, atol=1e-7)


def test_the_kernel_is_gain_over_its_mean_over_tau_and_a_zero_row_is_flat():
    g = np.array([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(exp_kernel(g, [2.0, 1.0]), [[0.375, 1.125, 0.0], [1.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="temperatures"):
        exp_kernel(g, 0.0)
    from recast.solver import ConvergenceError

    with pytest.raises(ConvergenceError, match="did not meet the marginals"):
        log_sinkhorn(np.array([[0.0, 800.0], [800.0, 0.0], [0.0, 0.0]]) * 50, [0.6, 0.3, 0.1], [0.5, 0.5], max_iter=3)


# ------------------------------------------------------------------------------------------ the archives
def test_a_profile_and_a_table_round_trip_exactly(tmp_path):
    prof = _profile()
    save_profile(prof, tmp_path / "p.npz")
    back = load_profile(tmp_path / "p.npz")
    assert back.reward_names == prof.reward_names and back.meta == prof.meta
    for n in prof.ratios:
        np.testing.assert_array_equal(back.ratios[n], prof.ratios[n].astype(np.float32))
    table = table_from_profile(back, [2.0, 1.0, 1.0], temperature=[1.0, 0.5, 2.0])
    save_table(table, tmp_path / "t.npz")
    again = load_table(tmp_path / "t.npz")
    for f in ("W", "TW", "divergences", "raw_gains", "budgets", "temperatures", "sigmas"):
        np.testing.assert_array_equal(getattr(again, f), getattr(table, f))
    assert again.reward_names == table.reward_names and again.alpha == 2.0
    T = table.num_steps
    np.testing.assert_array_equal(table.TW, (np.float32(T) * table.W.astype(np.float32)).astype(np.float64))


def _tamper(src, dst, **changes):
    with np.load(src, allow_pickle=False) as a:
        arrays = {k: a[k] for k in a.files}
    arrays.update(changes)
    np.savez(dst, **arrays)
    return dst


@pytest.mark.parametrize("change, msg", [
    (lambda a: dict(metadata=np.asarray(json.dumps({**json.loads(str(a["metadata"])), "format_version": 1}))),
     "format_version is 1"),
    (lambda a: dict(metadata=np.asarray(json.dumps({**json.loads(str(a["metadata"])),
                                                    "weight_column_order": "noise_to_clean"}))), "weight_column_order"),
    (lambda a: dict(metadata=np.asarray("not json")), "metadata is not JSON"),
    (lambda a: dict(paper_weights=a["paper_weights"] * 1.01, weights=a["weights"] * 1.01), "columns must each sum"),
    (lambda a: dict(paper_weights=a["paper_weights"][::-1].copy(), weights=a["weights"][::-1].copy()),
     "rows .* do not match the budgets"),
    (lambda a: dict(weights=a["weights"] * 0.5), "weights must equal T \\* paper_weights"),
    (lambda a: dict(paper_source_sigmas=a["paper_destination_sigmas"]), "paper_source_sigmas do not match"),
    (lambda a: dict(raw_gains=-a["raw_gains"] - 1), ">= 0"),
    (lambda a: dict(sigmas=a["sigmas"][::-1].copy()), "sigmas must fall strictly"),
    (lambda a: {"budgets": np.ones(5, np.float32)}, "budgets must be"),
])
def test_a_tampered_table_is_refused_naming_what_is_wrong(tmp_path, change, msg):
    save_table(table_from_profile(_profile(), [2.0, 1.0, 1.0]), tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz", allow_pickle=False) as a:
        bad = _tamper(tmp_path / "t.npz", tmp_path / "bad.npz", **change(a))
    with pytest.raises(ArchiveError, match=msg):
        load_table(bad)


def test_pickled_object_arrays_and_non_archives_are_refused(tmp_path):
    save_table(table_from_profile(_profile(), [1.0, 1.0, 1.0]), tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz", allow_pickle=False) as a:
        arrays = {k: a[k] for k in a.files}
    arrays["reward_names"] = np.array([object(), "b", "c"], dtype=object)
    np.savez(tmp_path / "obj.npz", **arrays)
    with pytest.raises(ArchiveError, match="without pickle"):
        load_table(tmp_path / "obj.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(ArchiveError, match="not a NumPy archive"):
        load_table(tmp_path / "junk.npz")
    np.savez(tmp_path / "neg.npz", sigmas=SIGMAS, ratio__a=-np.ones((3, 6)))
    with pytest.raises(ArchiveError, match="ratio__a must be finite and >= 0"):
        load_profile(tmp_path / "neg.npz")
    with pytest.raises(ArchiveError, match=r"no ratios for rewards \['z'\]"):
        load_profile(_tmp_profile(tmp_path), ["z"])


def _tmp_profile(tmp_path):
    save_profile(_profile(), tmp_path / "p.npz")
    return tmp_path / "p.npz"


# the release's loader and writer, written here from docs/method.md §0 alone (an independent reading of the format)
def _release_style_effective_weights(path):
    """T·W in scheduler order, as §0 says training uses it: the stored `weights` reversed back."""
    with np.load(path, allow_pickle=False) as a:
        meta = json.loads(str(a["metadata"]))
        assert meta["format_version"] == 2 and meta["weight_column_order"] == "clean_to_noise"
        assert meta["weights_semantics"] == "num_steps_times_paper_weights"
        T = a["paper_weights"].shape[1]
        assert np.allclose(a["weights"], T * a["paper_weights"], atol=1e-6)
        assert np.allclose(a["paper_weights"].sum(0), 1.0 / T, atol=1e-5)
        return a["weights"][:, ::-1].astype(np.float32)


def _release_style_writer(path, names, sigmas, W_sched, budgets):
    T = W_sched.shape[1]
    W_paper = W_sched[:, ::-1].astype(np.float32)
    np.savez_compressed(path, reward_names=np.asarray(names, dtype=np.str_), sigmas=sigmas.astype(np.float32),
                        paper_source_sigmas=sigmas[-2::-1].astype(np.float32),
                        paper_destination_sigmas=sigmas[:0:-1].astype(np.float32), weights=T * W_paper,
                        paper_weights=W_paper, divergences=np.zeros_like(W_paper), raw_gains=np.ones_like(W_paper),
                        budgets=np.asarray(budgets, np.float32), temperatures=np.ones(len(names), np.float32),
                        metadata=np.asarray(json.dumps({"alpha": 2.0, "format_version": 2,
                                                        "profile_column_order": "scheduler_destinations_noise_to_clean",
                                                        "training_weight_scale": "num_steps",
                                                        "weight_column_order": "clean_to_noise",
                                                        "weights_semantics": "num_steps_times_paper_weights"})))


def test_a_table_written_here_trains_there_and_one_written_there_trains_here(tmp_path):
    table = table_from_profile(_profile(), [2.0, 1.0, 1.0])
    save_table(table, tmp_path / "here.npz")
    np.testing.assert_array_equal(_release_style_effective_weights(tmp_path / "here.npz"), table.TW.astype(np.float32))
    W = paper_weights(np.random.default_rng(1).exponential(1.0, (3, 6)), [1.0, 2.0, 3.0])
    _release_style_writer(tmp_path / "there.npz", ["a", "b", "c"], SIGMAS, W, [1.0, 2.0, 3.0])
    back = load_table(tmp_path / "there.npz")
    np.testing.assert_array_equal(back.TW.astype(np.float32), _release_style_effective_weights(tmp_path / "there.npz"))
    credit = Credit.from_table(tmp_path / "there.npz")
    assert torch.equal(credit.TW, torch.from_numpy(back.TW)) and credit.lam.tolist() == pytest.approx([1 / 6, 1 / 3, 0.5])


def test_column_order_scheduler_and_paper_off_by_one_both_ways(tmp_path):
    """A reward whose ratios depart from 1 only from column j on gains only at column j: the step whose destination is
    σ_{j+1}; the file stores that column at paper index T − 1 − j; training reads it back at j, which trains at σ_j."""
    T, j = 6, 3
    r = np.ones((16, T))
    r[:, j:] = np.r_[np.full(8, 0.5), np.full(8, 1.5)][:, None]
    prof = DensityProfile(SIGMAS, {"early": np.ones((16, T)) * np.r_[0.5, 1.5].repeat(8)[:, None], "late": r})
    D, g = ratio_divergence(r)
    assert np.flatnonzero(g > 0).tolist() == [j] and D[j - 1] == 0.0 and D[j] > 0
    table = table_from_profile(prof, [1.0, 1.0])
    save_table(table, tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz") as a:
        gains_paper = a["raw_gains"]
        assert gains_paper[1, T - 1 - j] > 0 and gains_paper[1, T - j] == 0 and gains_paper[1, T - 2 - j] == 0
    assert np.argmax(load_table(tmp_path / "t.npz").W[1]) == j
    c = Credit.from_table(tmp_path / "t.npz")
    R = torch.rand(2, 8, generator=torch.Generator().manual_seed(0))
    c.normalise(R, torch.arange(8) // 4)
    S = c.signal_matrix()
    idx = torch.arange(8)
    assert torch.equal(c.signal(idx, sigma=torch.full((8,), float(SIGMAS[j]))), S[:, j])
    assert torch.equal(c.signal(idx, timestep=torch.full((8,), float(SIGMAS[j + 1]) * 1000)), S[:, j + 1])
    with pytest.raises(ValueError, match="not a training step of this grid"):
        c.signal(idx, sigma=torch.full((8,), 0.0))  # σ = 0 is a destination, never a training step


# ------------------------------------------------------------------------------------------ the aggregations
def _group_reference(x, G, floor=1e-6):
    g = x.reshape(x.shape[0], -1, G)
    m = g.mean(-1, keepdim=True)
    return ((g - m) / ((g - m) ** 2).mean(-1, keepdim=True).sqrt().clamp_min(floor)).reshape(x.shape)


@pytest.mark.parametrize("kind", ["nft", "grpo"])
def test_with_a_flat_W_pre_is_the_raw_weighted_sum_with_per_group_std_bit_for_bit(kind):
    R = torch.rand(3, 24, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * torch.tensor(
        [[1.0], [30.0], [0.01]], dtype=torch.float64)  # scales that per-reward normalisation would hide
    lam = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    c = Credit(["a", "b", "c"], 5, lam.tolist(), method="static", signal=kind)
    S = c.normalise(R, torch.arange(24) // 4).S
    r = lam[0] * R[0] + lam[1] * R[1] + lam[2] * R[2]
    A = _group_reference(r[None], 4).clamp(-5, 5)[0]
    want = A if kind == "grpo" else (A / 5 / 2 + 0.5).clamp(0, 1)
    for t in range(5):
        assert torch.equal(S[:, t], want)
    assert torch.equal(c.W, lam[:, None].expand(3, 5) / 5)


def test_with_one_reward_pre_is_diffusionnft_s_single_reward_signal_at_every_step():
    """DiffusionNFT with per-prompt std (the release's normalisation: population std floored at 1e-6), any T, any W;
    float32 rewards are normalised in float64, so a loop's float32 input gives the same bits as float64."""
    R32 = torch.rand(1, 12, generator=torch.Generator().manual_seed(2))
    want = (_group_reference(R32.double(), 3).clamp(-5, 5) / 10 + 0.5)[0]
    for T in (1, 4, 25):
        c = Credit(["only"], T, method="static")
        S = c.normalise(R32, torch.arange(12) // 3).S
        assert all(torch.equal(S[:, t], want) for t in range(T))
        assert torch.equal(c.normalise(R32.double(), torch.arange(12) // 3).S, S)


def test_pre_mixes_raw_rewards_through_each_column_of_TW():
    table = table_from_profile(_profile(), [1.0, 1.0, 2.0])
    c = Credit.from_table(table)
    R = torch.rand(3, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    S = c.normalise(R, torch.arange(16) // 8).S
    TW = torch.from_numpy(table.TW)
    for t in range(6):
        r = TW[0, t] * R[0] + TW[1, t] * R[1] + TW[2, t] * R[2]
        torch.testing.assert_close(S[:, t], (_group_reference(r[None], 8).clamp(-5, 5) / 10 + 0.5)[0], rtol=0,
                                   atol=1e-15)
    assert c.observe() is None and c.tracker is None  # no x̂_0 is ever scored


def test_the_loss_aggregation_is_the_per_reward_nft_losses_weighted_by_TW():
    """Σ_k TW[k, t] (m_k L⁺ + (1 − m_k) L⁻) equals the NFT loss of p = Σ_k TW[k, t] m_k (TW's columns sum to 1)."""
    table = table_from_profile(_profile(), [1.0, 2.0, 1.0])
    c = Credit.from_table(table, aggregation="loss")
    g = torch.Generator().manual_seed(4)
    R = torch.rand(3, 8, generator=g, dtype=torch.float64)
    S = c.normalise(R, torch.arange(8) // 4).S
    m = (_group_reference(R, 4).clamp(-5, 5) / 10 + 0.5)  # each reward's own mixing weight
    t = 2
    v, v_old, u = (torch.randn(8, 3, 4, 4, generator=g, dtype=torch.float64) for _ in range(3))
    v.requires_grad_(True)
    sigma = torch.full((8,), float(SIGMAS[t]), dtype=torch.float64)
    kw = dict(nft_beta=0.1, norm="x0", sigma=sigma, scale=50.0)
    mine = nft_loss(v, v_old, u, S[:, t], **kw).per_example
    per_reward = sum(float(table.TW[k, t]) * nft_loss(v, v_old, u, m[k], **kw).per_example for k in range(3))
    torch.testing.assert_close(mine, per_reward, rtol=1e-6, atol=0)


# ------------------------------------------------------------------------------------------ the x0-space loss
def _x0_loss_from_the_spec(v_theta, v_old, v_ref, x_t, x0, sigma, mix, beta, c, kl_beta):
    """docs/method.md §0 written out: x̂0± = x_t − σ v±, scale± = mean |x̂0±.detach() − x0| clamped at 1e-5,
    L± = mean (x̂0± − x0)² / scale±, per sample (mix L⁺ + (1 − mix) L⁻) / β, batch mean × c, + kl_beta mean (v − v_ref)²."""
    s = sigma.view(-1, 1, 1, 1)
    dims = (1, 2, 3)
    pos = x_t - s * (beta * v_theta + (1 - beta) * v_old.detach())
    neg = x_t - s * ((1 + beta) * v_old.detach() - beta * v_theta)
    Lp = ((pos - x0) ** 2).mean(dims) / (pos.detach() - x0).abs().mean(dims).clamp_min(1e-5)
    Ln = ((neg - x0) ** 2).mean(dims) / (neg.detach() - x0).abs().mean(dims).clamp_min(1e-5)
    return ((mix * Lp + (1 - mix) * Ln) / beta).mean() * c + kl_beta * ((v_theta - v_ref) ** 2).mean()


def test_the_x0_space_loss_is_the_release_s_and_its_gradient_at_v_old_is_the_closed_form():
    g = torch.Generator().manual_seed(5)
    N, beta, c, kl = 6, 0.1, 5.0, 1e-4
    x0, eps, v_old, v_ref = (torch.randn(N, 2, 3, 3, generator=g, dtype=torch.float64) for _ in range(4))
    sigma = torch.rand(N, generator=g, dtype=torch.float64) * 0.9 + 0.05
    x_t = (1 - sigma.view(-1, 1, 1, 1)) * x0 + sigma.view(-1, 1, 1, 1) * eps
    u = eps - x0
    mix = torch.rand(N, generator=g, dtype=torch.float64)
    v = (v_old + 0.3 * torch.randn(v_old.shape, generator=g, dtype=torch.float64)).requires_grad_(True)
    # the trainer passes scale = c / β (nft_loss_scale): the release's "/ β, then × c"
    ours = nft_loss(v, v_old, u, mix, nft_beta=beta, norm="x0", sigma=sigma, scale=c / beta, v_ref=v_ref, kl_beta=kl)
    spec = _x0_loss_from_the_spec(v, v_old, v_ref, x_t, x0, sigma, mix, beta, c, kl)
    torch.testing.assert_close(ours.loss, spec, rtol=1e-10, atol=0)
    g1, = torch.autograd.grad(ours.loss, v)
    g2, = torch.autograd.grad(spec, v)
    torch.testing.assert_close(g1, g2, rtol=1e-9, atol=1e-15)
    # at v_θ = v_old (no KL): value c/β · σ m2/m1 per sample (p cancels), gradient 2cσ(2p − 1)(v_old − u) / (n m1 N)
    w = v_old.clone().requires_grad_(True)
    out = nft_loss(w, v_old, u, mix, nft_beta=beta, norm="x0", sigma=sigma, scale=c / beta)
    err = v_old - u
    n = err[0].numel()
    m1, m2 = err.abs().mean((1, 2, 3)), (err**2).mean((1, 2, 3))
    torch.testing.assert_close(out.per_example, c / beta * sigma * m2 / m1, rtol=1e-12, atol=0)
    grad, = torch.autograd.grad(out.loss, w)
    want = 2 * c * (sigma * (2 * mix - 1) / (n * m1 * N)).view(-1, 1, 1, 1) * err
    torch.testing.assert_close(grad, want, rtol=1e-10, atol=1e-15)
