"""The `rollout` ground truth against closed forms, and the samplers' consistency checks on the base model."""

from pathlib import Path

import pytest
import torch
from helpers import load_script

from recast.informativeness import renyi_discriminability, renyi_rows
from recast.informativeness.rollout import fine_grid, reward_agreement, rollout_estimate, sample_ancestral
from recast.sampling import PromptEmbeds, cps_step, sample_ode, sample_sde, sigma_schedule

CENTRES = torch.tensor([-0.9, -0.2, 0.8], dtype=torch.float64)  # a mixture of point masses
WEIGHTS = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)


def _posterior(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """w_m(x) ∝ π_m N(x; (1 − σ) c_m, σ² I) for x (B,) at σ < 1; the prior at σ = 1."""
    if sigma >= 1.0:
        return WEIGHTS.expand(x.shape[0], -1)
    logits = WEIGHTS.log() - (x[:, None] - (1 - sigma) * CENTRES) ** 2 / (2 * sigma**2)
    return torch.softmax(logits, dim=1)


class MixtureFlow(torch.nn.Module):
    """The exact velocity of the point-mass mixture: v = (x − E[x_0 | x_σ]) / σ, samples of shape (1, 1, 1)."""

    def forward(self, hidden_states, timestep, encoder_hidden_states, pooled_projections, return_dict=False):
        x = hidden_states.double().flatten()
        sigma = float(timestep[0]) / 1000
        x0_hat = _posterior(x, sigma) @ CENTRES
        return (((x - x0_hat) / sigma).reshape(hidden_states.shape).to(hidden_states.dtype),)


def _embeds(n: int) -> PromptEmbeds:
    return PromptEmbeds(torch.zeros(n, 1, 1, dtype=torch.float64), torch.zeros(n, 1, dtype=torch.float64))


def _reward(images, prompts):
    return torch.sigmoid(6 * (images.flatten(1).mean(1) - 0.5))  # decode below maps x0 in [-1, 1] to [0, 1]


def _decode(x):
    return (x + 1) / 2


def _exact_D(sigma: float, n: int = 200_000) -> float:
    """D(σ) of V(x_σ) = Σ_m w_m(x_σ) r(c_m), from a large sample of x_σ."""
    g = torch.Generator().manual_seed(123)
    comp = torch.multinomial(WEIGHTS, n, replacement=True, generator=g)
    x = (1 - sigma) * CENTRES[comp] + sigma * torch.randn(n, generator=g, dtype=torch.float64)
    r = _reward(_decode(CENTRES[:, None, None, None]), [])
    return renyi_discriminability(_posterior(x, sigma) @ r)


def test_ancestral_sampler_reproduces_the_mixture_from_pure_noise():
    n, sigmas = 4000, sigma_schedule(4, 1.0)
    g = torch.Generator().manual_seed(0)
    ends = sample_ancestral(MixtureFlow(), _embeds(n), torch.randn(n, 1, 1, 1, generator=g, dtype=torch.float64),
                            fine_grid(sigmas, 0, 100), g).flatten()
    nearest = (ends[:, None] - CENTRES).abs().argmin(1)
    assert (ends - CENTRES[nearest]).abs().max() < 1e-3  # ends are data points, not noisy states
    freq = torch.bincount(nearest, minlength=3).double() / n
    assert ((freq - WEIGHTS).abs() < 3 * (WEIGHTS * (1 - WEIGHTS) / n).sqrt()).all()


def test_rollout_ground_truth_matches_the_closed_form_and_the_data_processing_bound():
    N, sigmas = 400, sigma_schedule(4, 1.0)
    g = torch.Generator().manual_seed(1)
    x0 = CENTRES[torch.multinomial(WEIGHTS, N, replacement=True, generator=g)].reshape(N, 1, 1, 1)
    est = rollout_estimate(MixtureFlow(), _embeds(N), x0, sigmas, _reward, [""] * N, _decode, num_rollouts=8,
                           substeps=50, bootstrap=100, generator=g)
    assert est.scalar_reward and est.D.shape == (1, 5) and est.D[0, 0] == 0
    sd = est.D_boot.std(0)[0]
    for j in range(1, 5):
        exact = _exact_D(float(sigmas[j])) if j < 4 else renyi_discriminability(_reward(_decode(x0), []))
        assert abs(est.D[0, j].item() - exact) < 3 * sd[j].item() + 1e-3, (j, est.D[0, j].item(), exact)
    # data processing: no interior D exceeds the clean value by more than its Monte-Carlo error
    diff_sd = (est.D_boot - est.D_boot[:, :, -1:]).std(0)[0]
    assert ((est.D[0, 1:-1] - est.D[0, -1]) <= 2.5 * diff_sd[1:-1] + 1e-4).all()
    lo, hi = est.band()
    assert (lo <= est.D + 1e-12).all() and (est.D <= hi + 1e-12).all()


def test_renyi_rows_matches_the_scalar_function():
    v = torch.rand(5, 40, generator=torch.Generator().manual_seed(2)).double().numpy()
    for alpha in (1.0, 2.0, 0.5):
        expected = [renyi_discriminability(row, alpha) for row in v]
        assert renyi_rows(v, alpha) == pytest.approx(expected, rel=1e-10, abs=1e-14)


def test_cps_step_keeps_the_forward_coefficients_and_its_log_prob_is_gaussian():
    """With the exact velocity of a point mass at c, x_σ' = (1 − σ') c + σ' ε' exactly in distribution."""
    n, c = 20000, 0.4
    g = torch.Generator().manual_seed(3)
    sigma, sigma_next = 0.8, 0.3
    x = (1 - sigma) * c + sigma * torch.randn(n, 1, 1, 1, generator=g)
    v = (x - c) / sigma
    step = cps_step(x, v, sigma, sigma_next, 0.7, generator=g)
    assert abs(step.x_next.mean().item() - (1 - sigma_next) * c) < 0.01
    assert abs(step.x_next.std().item() / sigma_next - 1) < 0.02
    expected = torch.distributions.Normal(step.mean, step.std).log_prob(step.x_next).mean(dim=(1, 2, 3))
    torch.testing.assert_close(step.log_prob, expected)
    last = cps_step(x, v, sigma, 0.0, 0.7)
    torch.testing.assert_close(last.x_next, x - sigma * v)
    assert torch.equal(last.log_prob, torch.zeros(n))
    with pytest.raises(ValueError):
        cps_step(x, v, 0.3, 0.5)


# ---------------------------------------------------------------------------------------- the base model (CI-sized)
@pytest.fixture(scope="module")
def base():
    from recast.worlds.digits.data import prompt_set
    from recast.world import load_world
    from recast.worlds.digits.rewards import setting_rewards

    path = Path(__file__).resolve().parents[1] / "data" / "digit_base"  # the committed base model
    torch.set_num_threads(1)
    world = load_world(f"digits:{path}")
    names = list(setting_rewards("compose", "quality"))
    pool = prompt_set("train")
    return world, names, pool


@pytest.mark.slow
def test_cps_samples_score_like_ode_samples_on_every_reward(base):
    import recast.worlds.digits.rewards
    from recast.config import preset
    from recast.informativeness.probe import stack_rewards

    world, names, pool = base
    prompts = pool[::8][:32]
    reward = stack_rewards([recast.worlds.digits.rewards.get(n)("cpu") for n in names])
    sigmas = sigma_schedule(6, 3.0)
    a = preset("cpu").sde_noise_level
    with torch.no_grad():
        e = world.encode_prompts(prompts)
        ode = sample_ode(world.transformer, e, sigmas, shape=world.sample_shape,
                         generator=torch.Generator().manual_seed(0), return_trajectory=False).x0
        cps = sample_sde(world.transformer, e, sigmas, shape=world.sample_shape, noise_level=a, sde_type="cps",
                         generator=torch.Generator().manual_seed(1), return_trajectory=False).x0
        old = sample_sde(world.transformer, e, sigmas, shape=world.sample_shape, noise_level=0.7,
                         generator=torch.Generator().manual_seed(1), return_trajectory=False).x0
        r_ode, r_cps, r_old = (reward(world.decode(x), prompts) for x in (ode, cps, old))
    z = reward_agreement(r_cps, r_ode)
    assert (z.abs() < 3.5).all(), dict(zip(names, z.tolist()))
    # Flow-GRPO's step at T = 6 leaves noise in the samples: some rewards are far outside Monte-Carlo error
    # (on the committed base: sharpness z = 9.0, clean z = -16.3; the others 0.8 to 4.6)
    assert (reward_agreement(r_old, r_ode).abs() > 5).sum() >= 2


@pytest.mark.slow
def test_ground_truth_consistency_on_the_base_model(base):
    from recast.informativeness.probe import estimate_profiles

    world, names, pool = base
    prof = estimate_profiles(world, names, pool[::16][:12], estimators=("rollout",), num_steps=3, num_rollouts=3,
                             substeps=2, bootstrap=50, seed=0)["rollout"]
    checks = prof.checks
    assert max(checks["dp_z"]) <= 3.0, dict(zip(names, checks["dp_z"]))  # data processing, up to MC error
    # Continuations of forward-noised samples end on the samples' own reward distribution, for every reward.
    ends = dict(zip(names, checks["ends_z"]))
    assert max(abs(z) for z in ends.values()) <= 3.0, ends
    torch.testing.assert_close(prof.W.sum(1), torch.full((8,), 1 / 8, dtype=torch.float64))
    # Every reward has signal on this base: colour (constant on the old one) now varies, and quality's realism, whose
    # CNN is confident that every sample is fake, has its spread clear the silencing floor: realism at temperature 3
    # (at temperature 1 it was silenced here), realism_centred since the centred-realism round by each size head's
    # zero moved to the base model's mean logit.
    silenced = dict(zip(names, prof.silenced.tolist()))
    assert not any(silenced.values()), silenced
    assert (prof.D[names.index("realism_centred")] > 0).any()


@pytest.mark.slow
def test_designed_timing_on_the_base_model(base):
    """The timing setting's premise: colour is decided before sharpness, and colour and position before digit.

    Measured with the cheap estimator on the 64 samples of figure 02 (tweedie centres of mass of 6 columns: colour 2.2,
    position_flat 2.33 (the old position 2.38), digit 3.18, sharpness 3.96; the ground truth's at 256 samples, with
    the old position: 1.85, 1.97, 2.69, 3.18). A CI-sized
    ground truth (32 samples, 4 continuations) is too noisy to order them: colour 2.1, clean 2.5, digit 2.3. Clean,
    the timing setting's late reward until its ink gate moved its ground truth to 2.40, is no longer checked here.
    """
    from recast.informativeness import gains_centre_of_mass
    from recast.informativeness.probe import estimate_profiles

    world, names, pool = base
    prompts = pool[:: max(1, len(pool) // 64)][:64]  # notebook 02's samples
    prof = estimate_profiles(world, names, prompts, estimators=("tweedie",), num_steps=6, substeps=4, bootstrap=0,
                             seed=0)["tweedie"]
    com = dict(zip(names, gains_centre_of_mass(prof.gains).tolist()))
    assert com["color"] + 0.5 < min(com["sharpness"], com["speck_free"]), com
    assert max(com["color"], com["position_flat"]) + 0.5 < com["digit"], com


def test_committed_ground_truth_orders_the_rewards_as_designed():
    """Figure 02's ground truth (256 samples, 8 continuations, two independent batches; research/rounds/24-figure-02.md "When is each reward
    informative?"): colour and position are decided before digit and size, and those before sharpness and
    speck_free, in both batches; speck_free is the latest reward, and the two batches agree within 0.3."""
    import json

    from recast.informativeness import gains_centre_of_mass

    d = json.loads((Path(__file__).resolve().parents[1] / "research/tables/informativeness_base_256.json").read_text())
    coms = []
    for gt in (d["rollout"], d["replicate"]["rollout"]):
        com = dict(zip(gt["reward_names"], gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()))
        early, mid, late = ([com[k] for k in group] for group in (("color", "position_flat"),
                                                                  ("digit", "size_half_max"),
                                                                  ("sharpness", "speck_free")))
        assert max(early) + 0.5 < min(mid) and max(mid) < min(late), com
        assert com["speck_free"] == max(com.values()), com
        coms.append(com)
    assert all(abs(coms[0][k] - coms[1][k]) < 0.3 for k in coms[0]), coms


@pytest.mark.research
def test_committed_verdict_timing_matches_figure_02_and_puts_the_defects_late():
    """`research/probes/verdict_timing_probe.py` draws figure 02's batch, noise and continuations, so its reward rows are
    figure 02's ground truth; the blur and speckle verdicts have most of their gains in columns 4-5 and sit later
    than the rewards that match them (research/rounds/24-figure-02.md "When are the judges' verdicts decided?")."""
    import json

    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    rows = {r["name"]: r for r in read_csv(root / "verdict_timing.csv")}
    gt = json.loads((root / "informativeness_base_256.json").read_text())["rollout"]
    com = gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()
    for name, c in zip(gt["reward_names"], com):
        assert float(rows[name]["com"]) == pytest.approx(c, abs=1e-6), name  # K differs: float rounding only
    for verdict, reward in (("not_blur", "sharpness"), ("not_speckle", "speck_free")):
        v = rows[f"verdict:{verdict}"]
        assert float(v["cleanest_third_share"]) > 0.5 and float(v["com"]) > float(rows[reward]["com"]) + 0.5
    assert float(rows["verdict:not_fade"]["cleanest_third_share"]) < 0.05


@pytest.mark.research
def test_committed_timing_candidates_reproduce_figure_02_and_put_sharpness_steep_late():
    """`research/probes/timing_cache.py` scores rewards on figure 02's stored continuation ends: its rows for the registered
    rewards are figure 02's ground truth in both batches; sharpness_steep, read from the steepest edges, has its
    centre of mass at 3.5 or later with most of its gains in the cleanest third (columns 4-5), where sharpness has
    a tenth of them (research/rounds/24-figure-02.md "When is each reward informative?")."""
    import json

    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    rows = {(r["name"], int(r["seed"])): r for r in read_csv(root / "timing_candidates.csv")}
    d = json.loads((root / "informativeness_base_256.json").read_text())
    for seed, gt in ((0, d["rollout"]), (1, d["replicate"]["rollout"])):
        com = dict(zip(gt["reward_names"], gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()))
        for name in ("sharpness", "speck_free"):
            assert float(rows[(name, seed)]["com"]) == pytest.approx(com[name], abs=1e-6), (name, seed)
        steep = rows[("sharpness_steep", seed)]
        assert float(steep["com"]) >= 3.5 - 1e-9 and float(steep["cleanest_third_share"]) > 0.5
        assert float(steep["com"]) > com["sharpness"] + 0.5
        assert float(rows[("sharpness", seed)]["cleanest_third_share"]) < 0.15


@pytest.mark.research
def test_committed_substeps_probe_twice_the_sub_grid_keeps_the_design_and_does_not_close_tweedies_gap():
    """`research/probes/substeps_probe.py` (research/rounds/11-grid.md "Is the ground truth's sub-grid fine enough?"): the same 256 prompts'
    ground truth with 8 ancestral substeps per step instead of 4. Its rows for the 4-substep batches are figure 02's
    ground truth; doubling the sub-grid moves no setting reward's centre of mass by more than 0.25 columns (a second
    seed moves them by up to 0.27), keeps the designed order and both defect verdicts in the cleanest third; and
    tweedie's committed gains still miss ρ 0.8 for the three rewards that miss it against the committed truth."""
    import json

    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    rows = {r["reward"]: r for r in read_csv(root / "ground_truth_substeps.csv")}
    d = json.loads((root / "informativeness_base_256.json").read_text())
    for batch, gt in (("s4_seed0", d["rollout"]), ("s4_seed1", d["replicate"]["rollout"])):
        com = dict(zip(gt["reward_names"], gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()))
        for name, c in com.items():
            assert float(rows[name][f"com_{batch}"]) == pytest.approx(c, abs=1e-6), (name, batch)
    rewards = d["rollout"]["reward_names"]
    assert max(abs(float(rows[k]["d_com_substeps"])) for k in rewards) <= 0.25
    assert max(abs(float(rows[k]["d_com_seed"])) for k in rewards) <= 0.3
    fine = {k: float(r["com_s8_seed0"]) for k, r in rows.items()}
    assert max(fine["color"], fine["position_flat"]) + 0.5 < min(fine["digit"], fine["size_half_max"])
    assert max(fine["digit"], fine["size_half_max"]) < min(fine["sharpness"], fine["speck_free"])
    assert fine["verdict:not_blur"] >= 3.5 and fine["verdict:not_speckle"] >= 3.5
    for name in ("position_flat", "size_half_max", "contrast"):
        assert float(rows[name]["rho_tweedie_s4_seed0"]) < 0.8 and float(rows[name]["rho_tweedie_s8_seed0"]) < 0.8


@pytest.mark.research
def test_committed_substeps_probe_sixteen_substeps_decide_every_reward_later_and_have_not_converged():
    """The grid round's two 16-substep batches (research/rounds/11-grid.md "Is the ground truth's sub-grid fine enough?"). Seed 0's own
    clean batch continued with 16 substeps instead of 4 decides every setting reward later (+0.12 to +0.54 columns),
    puts speck_free in the cleanest third, and shrinks tweedie's lag for every reward, yet tweedie still misses ρ 0.8
    for three rewards. A 16-substep batch with its own clean samples moves most rewards as far again from 8 as 8
    moved from 4 (across batches; the sub-grid round's paired 32-substep batch reads this as batch noise for the
    attribute rewards: `test_committed_subgrid_probe_converges_...`)."""
    from recast.io import read_csv

    rows = {r["reward"]: r for r in read_csv(Path(__file__).resolve().parents[1] / "research/tables/"
                                                                                  "ground_truth_substeps.csv")}
    setting = ["digit", "color", "position_flat", "size_half_max", "sharpness", "speck_free", "contrast", "realism"]
    moves = {k: float(rows[k]["d_com_s16x4_s4"]) for k in setting}
    assert min(moves.values()) > 0.1 and max(moves.values()) < 0.6, moves
    assert float(rows["speck_free"]["com_lo_s16x4_seed0"]) >= 3.5
    for k in setting:
        t = float(rows[k]["com_tweedie_s4_seed0"])
        assert abs(t - float(rows[k]["com_s16x4_seed0"])) < abs(t - float(rows[k]["com_s4_seed0"])), k
    assert sum(float(rows[k]["rho_tweedie_s16x4_seed0"]) < 0.8 for k in setting) >= 3
    assert sum(float(rows[k]["d_com_s16_s8"]) >= 0.5 * float(rows[k]["d_com_substeps"]) for k in setting) >= 6


@pytest.mark.research
def test_committed_shift_1_grid_moves_every_reward_earlier_together():
    """`research/probes/timing_cache.py record --shift 1` then `score ... --csv timing_shift1.csv` (research/rounds/01-targets.md "Where the issue
    targets stand"): on a 6-step grid without the presets' time shift, colour and position are decided in the
    noisiest third, but so early that the latest reward, speck_free, is decided before column 2.5; the spread from
    the earliest to the latest setting reward stays below the 2 columns that the issue's outer thirds need, as it is
    on the presets' shift-3 grid (figure 02), so no uniform shift of the grid meets both thirds."""
    import json

    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    com1 = {r["name"]: float(r["com"]) for r in read_csv(root / "timing_shift1.csv")}
    gt = json.loads((root / "informativeness_base_256.json").read_text())["rollout"]
    com3 = dict(zip(gt["reward_names"], gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()))
    assert max(com1["color"], com1["position_flat"]) <= 1.5 and com1["speck_free"] < 2.5
    assert all(com1[k] < com3[k] for k in com3)
    for com in (com1, com3):
        assert max(com[k] for k in com3) - min(com[k] for k in com3) < 2.0


def _committed_grid_search(name: str):
    """A committed grid-probe JSON and the feasible grids re-searched from its curve, as the probe searched them."""
    import json

    import numpy as np

    from recast.informativeness.timing import TimingCurve, feasible_grids, third_bounds

    d = json.loads((Path(__file__).resolve().parents[1] / "research/tables" / name).read_text())
    names = list(d["F"])
    curve = TimingCurve(np.array(d["sigma"]), np.array([d["F"][n] for n in names]))
    b = third_bounds(6)
    bounds = {names.index(n): tuple(b[t]) for n, t in d["design"].items()}
    lattice = np.round(np.arange(d["lattice_step"], 1.0 - d["lattice_step"] / 2, d["lattice_step"]), 6)
    return d, feasible_grids(curve, lattice, 6, bounds)


def test_committed_grid_design_probe_only_a_degenerate_grid_meets_the_thirds():
    """`research/probes/grid_design_probe.py` (research/rounds/11-grid.md "The grid round"): with the ground truth's curves pooled from the three
    stored batches, the centre of mass on any 6-step grid is a sum over its interior points. The search reproduces
    from the committed curve; the presets' grids meet no outer third; every grid on the lattice that meets all five
    designed thirds crowds its interior points into the middle noise levels and ends with one step of at least 0.5
    to σ = 0; and on such a grid the base model's samples lose the speckle the late reward is meant to find while
    blur and fade leave their bands."""
    from recast.informativeness.timing import gap_needed, third_bounds

    d, grids = _committed_grid_search("grid_design.json")
    b = third_bounds(6)
    assert len(grids) == d["feasible_linear"]["count"] > 0
    assert grids[:, -1].min() >= 0.5 and grids[:, 0].max() <= 0.85
    assert d["gap_needed"] == pytest.approx(gap_needed(6)) and d["gap_color_speck_free"]["max"] > gap_needed(6)
    assert d["bootstrap"]["lowest_last_sigma_5_50_95"][0] >= 0.45
    rows = {r["name"]: r for r in d["grids"]}
    presets = rows["presets (SD3, shift 3)"]
    feasible = rows["feasible, lowest last point"]
    assert not presets["meets_thirds"] and not rows["presets (SD3, shift 1)"]["meets_thirds"]
    corners = [r for name, r in rows.items() if name.startswith("feasible")]
    assert len(corners) >= 3 and all(r["meets_thirds"] for r in corners)
    for r in corners:  # each corner of the feasible set: the speckle nearly gone, blur and fade out of their band
        assert r["samples"]["defect_speckle"] < 0.2 <= presets["samples"]["defect_speckle"], r["name"]
        for defect in ("defect_blur", "defect_fade"):
            assert r["samples"][defect] > max(0.6, presets["samples"][defect]), (r["name"], defect)
    # the prediction checked on that grid's own ground truth (its own samples, 4 substeps)
    m = feasible["measured"]
    assert m["meta"]["sigmas"] == pytest.approx(feasible["sigmas"], abs=1e-4)
    for name, third in d["design"].items():
        assert m["com"][name] == pytest.approx(feasible["com"][name], abs=0.25), name
        lo, hi = b[third]
        assert m["com_lo"][name] <= hi and m["com_hi"][name] >= lo, name  # its band reaches the designed third
    assert max(m["com"]["color"], m["com"]["position_flat"]) <= 1.5 and m["com"]["speck_free"] >= 3.5


def test_committed_grid_design_on_the_16_substep_curve_still_crowds_the_grid_and_spoils_the_samples():
    """The grid probe on the 16-substep continuation of figure 02's seed-0 batch alone (research/rounds/11-grid.md "The grid round",
    the caveat): more grids pass, but each still crowds four interior points into σ 0.52-0.74, and on every corner
    of the feasible set the speckle is nearly gone while blur and fade leave their bands."""
    d, grids = _committed_grid_search("grid_design_s16.json")
    assert len(grids) == d["feasible_linear"]["count"] > 108  # more than the 4-substep curves let through
    assert grids[:, 0].max() <= 0.74 + 1e-9 and (((grids >= 0.52) & (grids <= 0.74)).sum(1) >= 4).all()
    rows = {r["name"]: r for r in d["grids"]}
    presets = rows["presets (SD3, shift 3)"]
    corners = [r for name, r in rows.items() if name.startswith("feasible")]
    assert len(corners) >= 3 and not presets["meets_thirds"]
    for r in corners:
        assert r["meets_thirds"] and r["samples"]["defect_speckle"] < 0.2 <= presets["samples"]["defect_speckle"]
        for defect in ("defect_blur", "defect_fade"):
            assert r["samples"][defect] > max(0.6, presets["samples"][defect]), (r["name"], defect)


_script = load_script  # a script of ``research/probes/`` imported as a module


def _subgrid_probe():
    return _script("subgrid_convergence_probe")


def test_richardson_recovers_the_limit_of_a_first_order_series_and_the_order_one_ratio_is_a_sixth():
    """`research/probes/subgrid_convergence_probe.py`: for D_n = D_∞ + c / n exactly, two sub-grids give D_∞ back, and the
    step 16 → 32 is 1/6 of the step 4 → 16; a bad pair of sub-grids raises."""
    probe = _subgrid_probe()
    g = torch.Generator().manual_seed(0)
    D_inf, c = torch.rand(3, 7, generator=g, dtype=torch.float64), torch.randn(3, 7, generator=g, dtype=torch.float64)
    D = {n: D_inf + c / n for n in (4, 16, 32)}
    assert torch.allclose(probe.richardson(D[16], D[32], 16, 32), D_inf, atol=1e-12)
    assert torch.allclose(probe.richardson(D[4], D[16], 4, 16), D_inf, atol=1e-12)
    assert torch.allclose((D[32] - D[16]) / (D[16] - D[4]), torch.full_like(c, probe.ORDER_ONE_RATIO), atol=1e-9)
    assert probe.ORDER_ONE_RATIO == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="n_mid < n_fine"):
        probe.richardson(D[16], D[4], 16, 4)


def test_subgrid_probe_centre_of_mass_of_D_matches_the_gains_form_over_batch_dimensions():
    """`com_of_D` is `gains_centre_of_mass` of `telescoping_gains` on any leading shape: D linear in the column
    (equal gains) has its centre at (T − 1) / 2, all gain in the last column at T − 1, no gain is NaN."""
    from recast.informativeness import gains_centre_of_mass, telescoping_gains

    probe = _subgrid_probe()
    D = torch.rand(5, 2, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = gains_centre_of_mass(telescoping_gains(D.reshape(10, 7))).reshape(5, 2)
    assert torch.allclose(probe.com_of_D(D), want, equal_nan=True)
    assert float(probe.com_of_D(torch.arange(7.0))) == pytest.approx(2.5)
    assert float(probe.com_of_D(torch.tensor([0.0, 0, 0, 0, 0, 0, 1]))) == pytest.approx(5.0)
    assert torch.isnan(probe.com_of_D(torch.zeros(7)))


@pytest.mark.research
def test_committed_subgrid_probe_converges_for_the_attributes_and_mixes_samplers_for_the_textures():
    """`research/probes/subgrid_convergence_probe.py` (research/rounds/10-sub-grid.md "The sub-grid round"): one 128-prompt clean batch continued
    with 4, 16 and 32 substeps. For the attribute rewards the continuations reproduce the clean batch at every
    sub-grid (|z| < 2), and 32 − 16 is within 0.05 columns and within 0.05 of what first order fitted on 4 and 16
    predicts: the series has settled. For the texture scores the 16- and 32-substep ends do not reproduce the
    4-substep clean batch (|z| ≥ 2.5 at 32, < 2 at 4), so on these samples their fine-sub-grid "truth" mixes two
    samplers. Tweedie against the extrapolated truth passes ρ 0.8 for colour, position_flat and size_half_max and
    still misses it for digit."""
    from recast.io import read_csv

    rows = {r["reward"]: {k: (v if k == "reward" else float("nan") if v in (None, "") else float(v))
                          for k, v in r.items()}
            for r in read_csv(Path(__file__).resolve().parents[1] / "research/tables/ground_truth_subgrid.csv")}
    for r in rows.values():  # the columns are what their names say
        assert r["d_com_32_16"] == pytest.approx(r["com_s32"] - r["com_s16"], abs=1e-9)
        assert r["d_com_16_4"] == pytest.approx(r["com_s16"] - r["com_s4"], abs=1e-9)
        assert r["ratio_32_16_over_16_4"] == pytest.approx(r["d_com_32_16"] / r["d_com_16_4"], rel=1e-9)
        assert r["d_com_32_predicted_lo"] <= r["d_com_32_predicted"] <= r["d_com_32_predicted_hi"]
        assert abs(r["ends_z_s4"]) < 2, r["reward"]  # figure 02's sampler reproduces its own clean batch
    attributes = ("digit", "color", "position_flat", "size_half_max")
    for k in attributes:
        r = rows[k]
        assert r["d_com_16_4"] > 0.1 and abs(r["d_com_32_16"]) <= 0.05 and abs(r["d_com_32_predicted"]) <= 0.05, k
        assert max(abs(r[f"ends_z_s{n}"]) for n in (4, 16, 32)) < 2, k
    textures = ("sharpness", "speck_free", "contrast", "realism", "verdict:not_blur", "verdict:not_speckle")
    assert all(abs(rows[k]["ends_z_s32"]) >= 2.5 for k in textures)
    assert all(rows[k]["rho_tweedie_extrapolated"] >= 0.8 for k in ("color", "position_flat", "size_half_max"))
    assert rows["digit"]["rho_tweedie_extrapolated"] < 0.8


def _figure02(gains_gt, gains_tw, rho, rho_gt, checks=0.0, sigmas=(1.0, 0.5, 0.0)):
    """A notebook-02 JSON with the same profiles in both batches (only what `compare` reads)."""
    K = len(gains_gt)
    prof = lambda g: {"reward_names": [f"r{k}" for k in range(K)], "sigmas": list(sigmas), "gains": g,  # noqa: E731
                      "D": [[0.0, *[sum(row[:j + 1]) for j in range(len(row))]] for row in g],
                      "noise_share": [0.1] * K,
                      "checks": {c: [checks] * K for c in ("dp_z", "ends_z", "ode_z")}}
    return {"rollout": prof(gains_gt), "tweedie": prof(gains_tw), "spearman_gains": rho,
            "replicate": {"rollout": prof(gains_gt), "tweedie": prof(gains_tw), "spearman_gains": rho,
                          "spearman_ground_truth_seeds": rho_gt}}


@pytest.mark.research
def test_figure02_subgrid_compare_reads_centres_lags_and_checks_of_both_figures():
    """`research/probes/figure02_subgrid_compare.py`: centres of mass of the gains (closed form on two columns), tweedie's lag
    behind the ground truth, the move from 4 to 16 substeps, and the notebook's ρ and checks passed through; two
    figures on other rewards or grids, or without a second batch, are refused."""
    cmp = _script("figure02_subgrid_compare")
    old = _figure02([[1.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [0.0, 1.0]], [0.5, 0.6], [0.9, 0.8])
    new = _figure02([[1.0, 3.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]], [0.7, 1.0], [1.0, 0.95], checks=1.5)
    rows = cmp.compare(old, new)
    assert [r["reward"] for r in rows] == ["r0", "r1"]
    r0, r1 = rows
    assert r0["com_gt_s4_b1"] == pytest.approx(0.0) and r0["com_gt_s16_b2"] == pytest.approx(0.75)
    assert r0["d_com_gt_s16_s4_b1"] == pytest.approx(0.75) and r1["d_com_gt_s16_s4_b2"] == pytest.approx(0.5)
    assert r0["lag_tweedie_s4_b1"] == pytest.approx(0.5) and r0["lag_tweedie_s16_b1"] == pytest.approx(0.25)
    assert r1["lag_tweedie_s16_b2"] == pytest.approx(0.0)
    assert (r0["rho_tweedie_s4_b1"], r1["rho_tweedie_s16_b2"], r1["rho_gt_b1_b2_s16"]) == (0.5, 1.0, 0.95)
    assert r0["ends_z_s16_b1"] == 1.5 and r0["ode_z_s4_b2"] == 0.0 and r1["D0_gt_s16_b1"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="second batch"):
        cmp.compare(old, new | {"replicate": None})
    with pytest.raises(ValueError, match="same rewards on the same grid"):
        cmp.compare(old, _figure02([[1.0, 0.0]], [[1.0, 0.0]], [1.0], [1.0]))
    with pytest.raises(ValueError, match="same rewards on the same grid"):
        cmp.compare(old, _figure02([[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0]] * 2, [1.0] * 2, [1.0] * 2,
                                   sigmas=(1.0, 0.4, 0.0)))


@pytest.mark.research
def test_committed_figure_02_at_16_substeps_is_consistent_and_what_it_says_holds():
    """Figure 02 re-drawn with 16 substeps for the clean batch and the continuations (research/rounds/09-settled-sub-grid.md "The settled sub-grid
    round"; `research/probes/figure02_subgrid_compare.py`), as it was drawn then, with contrast in quality
    (`informativeness_base_256_s16_contrast.json`; the realism-size round re-drew it from the same ends with wash_free,
    `test_committed_figure_02_with_wash_free_...` below). The committed comparison CSV is what `compare` gives on the
    two committed figures. One sampler throughout passes the ground truth's checks in both batches (data-processing
    bound within 2 s.d., continuation ends' mean p within |z| < 2), while the T-step ODE the trainer samples with
    draws other textures (ode_z ≥ 2.5 for sharpness, speck_free, contrast and realism in both batches). Every reward
    is decided later than at 4 substeps, the designed order holds, colour and position are still outside the noisiest
    third, and tweedie meets ρ 0.8 on both batches for colour, position_flat and speck_free, not for digit,
    size_half_max, sharpness and contrast. `timing_cache.py score` on the stored ends gives the same centres of mass."""
    import json

    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    old, new = (json.loads((root / f).read_text()) for f in ("informativeness_base_256.json",
                                                             "informativeness_base_256_s16_contrast.json"))
    assert new["parameters"]["substeps"] == 16 and new["parameters"]["num_prompts"] == 256
    want = _script("figure02_subgrid_compare").compare(old, new)
    got = read_csv(root / "informativeness_s4_vs_s16.csv")
    assert [r["reward"] for r in got] == [r["reward"] for r in want]
    for g, w in zip(got, want):
        for key, value in w.items():
            if key != "reward":
                assert float(g[key]) == pytest.approx(value, abs=1e-9), (w["reward"], key)
    rows = {r["reward"]: r for r in want}
    for r in rows.values():
        for b in ("b1", "b2"):
            assert r[f"dp_z_s16_{b}"] <= 2 and abs(r[f"ends_z_s16_{b}"]) < 2, r["reward"]
            assert r[f"d_com_gt_s16_s4_{b}"] > 0, r["reward"]
    for k in ("sharpness", "speck_free", "contrast", "realism"):
        assert min(rows[k]["ode_z_s16_b1"], rows[k]["ode_z_s16_b2"]) >= 2.5, k
    for b in ("b1", "b2"):
        com = {k: r[f"com_gt_s16_{b}"] for k, r in rows.items()}
        early, mid, late = ([com[k] for k in g] for g in (("color", "position_flat"), ("digit", "size_half_max"),
                                                          ("sharpness", "speck_free")))
        assert max(early) + 0.5 < min(mid) and max(mid) < min(late) and min(early) > 1.5, com
    passes = {k for k, r in rows.items() if min(r["rho_tweedie_s16_b1"], r["rho_tweedie_s16_b2"]) >= 0.8}
    assert passes == {"color", "position_flat", "speck_free"}, passes
    timing = {(r["name"], int(r["seed"])): r for r in read_csv(root / "timing_s16.csv")}
    for seed, gt in ((0, new["rollout"]), (1, new["replicate"]["rollout"])):
        com = dict(zip(gt["reward_names"], gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()))
        for name, c in com.items():
            assert float(timing[(name, seed)]["com"]) == pytest.approx(c, abs=1e-6), (name, seed)
        for v in ("not_blur", "not_speckle"):
            assert float(timing[(f"verdict:{v}", seed)]["cleanest_third_share"]) > 0.5


@pytest.mark.research
def test_timing_cache_records_any_world_folder_names_it_in_the_meta_and_refuses_a_missing_one(tmp_path):
    """`research/probes/timing_cache.py record --world DIR` draws from that model folder (the tile probe's fine-tunes) and
    stores ``meta["world"]``, which `research/probes/tile_timing_probe.py timing` reports beside each row; a folder
    without a world is refused before any model is loaded."""
    from recast.worlds.digits.model import save_world, tiny_world
    from recast.informativeness.ends import RolloutEnds

    cache, probe = _script("timing_cache"), _script("tile_timing_probe")
    world_dir = save_world(tiny_world(0), tmp_path / "tiny")
    with pytest.raises(SystemExit):
        cache.main(["record", "--world", str(tmp_path / "nowhere"), "--dir", str(tmp_path / "ends")])
    assert not (tmp_path / "ends").exists()
    cache.main(["record", "--world", str(world_dir), "--num-prompts", "4", "--num-rollouts", "2", "--substeps", "1",
                "--threads", "1", "--dir", str(tmp_path / "ends")])
    ends = RolloutEnds.load(tmp_path / "ends" / "seed_0.pt")
    assert ends.meta["world"] == str(world_dir) and ends.meta["substeps"] == 1 and len(ends.prompts) == 4
    rows = probe.timing_rows([str(tmp_path / "ends")], names=("color",), seeds="0,1")  # seed 1 absent: skipped
    assert [(r["world"], r["folder"], r["name"], r["seed"]) for r in rows] == [(str(world_dir), "ends", "color", 0)]
    with pytest.raises(FileNotFoundError, match="seed_"):
        probe.timing_rows([str(tmp_path)], names=("color",))


@pytest.mark.research
def test_tile_probe_wrong_canvases_are_wrong_on_exactly_the_reward_attribute_or_defect():
    """`research/probes/tile_timing_probe.py`'s negatives: another colour scores < 0.1 on colour and keeps the quadrant; another
    quadrant scores ~0 on position and keeps the colour; a blurred canvas is less sharp than its own correct canvas,
    on every tile level."""
    from recast.worlds.digits import data
    from recast.worlds.digits.rewards import get

    probe = _script("tile_timing_probe")
    prompts = data.sample_prompts(32, generator=torch.Generator().manual_seed(5))
    colour, position, sharp = (get(n)("cpu") for n in ("color", "position_flat", "sharpness"))
    for tile in (0.0, 0.3):
        right = data.render(prompts, generator=torch.Generator().manual_seed(9), tile=tile)
        other_colour = probe.wrong_canvases(prompts, "color", tile, 9)
        other_place = probe.wrong_canvases(prompts, "position", tile, 9)
        blurred = probe.wrong_canvases(prompts, "blur", tile, 9)
        assert colour(other_colour, prompts).max() < 0.1 and position(other_colour, prompts).min() > 0.95
        assert position(other_place, prompts).max() < 0.1 and colour(other_place, prompts).min() > 0.95
        assert (sharp(blurred, prompts) < sharp(right, prompts)).all()


@pytest.mark.research
def test_committed_wash_free_timing_is_scored_on_figure_02s_first_batch():
    """The wash-free round's ground truth of wash_free (`timing_cache.py score ... --seeds 0 --csv
    timing_wash_free_s16.csv` on figure 02's re-recorded first batch, 256 prompts, 16 substeps): every reward shared
    with the committed figure 02 has its centre of mass there to 1e-6, so these are figure 02's ends. wash_free is
    decided earlier than contrast, which it replaced, in the noisiest half, close to the fade verdict; the 64-prompt
    batches (`timing_wash_free_64.csv`) agree."""
    import json

    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    gt = json.loads((root / "informativeness_base_256_s16_contrast.json").read_text())["rollout"]
    figure = dict(zip(gt["reward_names"], gains_centre_of_mass(torch.tensor(gt["gains"])).tolist()))
    rows = {r["name"]: r for r in read_csv(root / "timing_wash_free_s16.csv")}
    assert {int(r["seed"]) for r in rows.values()} == {0}
    shared = set(figure) & set(rows)
    assert shared == {"digit", "color", "position_flat", "size_half_max", "sharpness", "speck_free", "contrast",
                      "realism"}
    for name in shared:
        assert float(rows[name]["com"]) == pytest.approx(figure[name], abs=1e-6), name
    verdict = {(r["name"], int(r["seed"])): r for r in read_csv(root / "timing_s16.csv")}[("verdict:not_fade", 0)]
    assert float(rows["verdict:not_fade"]["com"]) == pytest.approx(float(verdict["com"]), abs=1e-6)
    com = {k: float(r["com"]) for k, r in rows.items()}
    assert com["wash_free"] + 0.3 < com["contrast"] and float(rows["wash_free"]["com_hi"]) < float(rows["contrast"]["com_lo"])
    assert com["verdict:not_fade"] < com["wash_free"] < 2.5 and com["wash_free"] < min(com["color"], com["position_flat"])
    small = {(r["name"], int(r["seed"])): float(r["com"]) for r in read_csv(root / "timing_wash_free_64.csv")}
    for seed in (0, 1):
        assert small[("verdict:not_fade", seed)] < small[("wash_free", seed)] < small[("contrast", seed)] < 2.5


@pytest.mark.research
def test_committed_figure_02_with_wash_free_is_the_contrast_figure_with_one_row_changed():
    """Figure 02 re-drawn in the realism-size round from the same stored ends (both batches recorded again, 256
    prompts x 8 continuations x 16 substeps) with wash_free in contrast's place: every other reward's profiles, bands
    and checks, of both estimators and both batches, are the contrast-era figure's exactly, and so are the compose
    and timing W (the noise shares move: each is read against the mean profile of all rows). wash_free is the
    earliest of the eight rewards in both batches (1.89 / 1.95); tweedie misses rho 0.8 on both (0.77 / 0.64). In
    batch 2 its D at sigma 0.43 lies 4.2 bootstrap s.d. above D(0), the one
    data-processing check over 2 in the figure (research/rounds/05-realism-size.md "The realism-size round"). That
    figure is kept as `informativeness_base_256_s16_realism.json` since the centred-realism round re-drew it with
    realism_centred."""
    from recast.informativeness import gains_centre_of_mass
    from recast.io import read_csv

    root = Path(__file__).resolve().parents[1] / "research/tables"
    old, new, k = _figure_with_one_row_changed("informativeness_base_256_s16_contrast.json",
                                               "informativeness_base_256_s16_realism.json", "contrast", "wash_free")
    coms = {}
    for b, n in {"b1": new, "b2": new["replicate"]}.items():
        com = gains_centre_of_mass(torch.tensor(n["rollout"]["gains"])).tolist()
        coms[b] = com[k]
        assert com[k] == min(com) and com[k] < 2.0, (b, com)
        assert n["spearman_gains"][k] < 0.8
        assert abs(n["rollout"]["checks"]["ends_z"][k]) < 2
    assert coms["b1"] == pytest.approx(1.890, abs=5e-4) and coms["b2"] == pytest.approx(1.949, abs=5e-4)
    dp = new["replicate"]["rollout"]["checks"]["dp_z"]
    assert dp[k] > 4 and max(v for i, v in enumerate(dp) if i != k) <= 2
    assert max(new["rollout"]["checks"]["dp_z"]) <= 2
    for setting in ("compose", "timing"):
        for est in ("rollout", "tweedie"):
            assert new["W"][f"{setting}/{est}"] == old["W"][f"{setting}/{est}"]
    assert new["W"]["quality/rollout"] != old["W"]["quality/rollout"]
    w = new["W"]["quality/rollout"][2]  # quality: sharpness, speck_free, wash_free, realism
    assert sum(w[:3]) == pytest.approx(0.196, abs=5e-4) and sum(w) == pytest.approx(0.25, abs=1e-6)
    scored = {r["name"]: float(r["com"]) for r in read_csv(root / "timing_wash_free_s16.csv")}
    assert scored["wash_free"] == pytest.approx(coms["b1"], abs=1e-6)


def test_committed_figure_02_with_realism_centred_is_the_realism_figure_with_one_row_changed():
    """Figure 02 re-drawn in the centred-realism round from the same stored ends with realism_centred in realism's
    place: every other reward's profiles, bands and checks, of both estimators and both batches, are the realism-era
    figure's exactly, and so are the compose and timing W. realism_centred is decided earlier than realism (ground
    truth's centre of mass 2.61 / 2.36 against 3.05 / 2.73), passes every consistency check, agrees with itself
    across the batches at rho 0.94 (realism 0.66), and tweedie ranks its gains at rho 0.89 / 0.71
    (research/rounds/04-centred-realism.md "The centred-realism round")."""
    from recast.informativeness import gains_centre_of_mass

    old, new, k = _figure_with_one_row_changed("informativeness_base_256_s16_realism.json",
                                               "informativeness_base_256_s16.json", "realism", "realism_centred")
    coms, old_coms = {}, {}
    for b, (o, n) in {"b1": (old, new), "b2": (old["replicate"], new["replicate"])}.items():
        checks = n["rollout"]["checks"]
        assert checks["dp_z"][k] <= 2 and abs(checks["ends_z"][k]) < 1, (b, checks)
        coms[b] = gains_centre_of_mass(torch.tensor(n["rollout"]["gains"])).tolist()[k]
        old_coms[b] = gains_centre_of_mass(torch.tensor(o["rollout"]["gains"])).tolist()[k]
        assert coms[b] < old_coms[b] - 0.3, b
    assert coms["b1"] == pytest.approx(2.609, abs=5e-4) and coms["b2"] == pytest.approx(2.361, abs=5e-4)
    assert (new["spearman_gains"][k], new["replicate"]["spearman_gains"][k]) == pytest.approx((0.886, 0.714), abs=1e-3)
    assert new["replicate"]["spearman_ground_truth_seeds"][k] == pytest.approx(0.943, abs=1e-3)
    assert old["replicate"]["spearman_ground_truth_seeds"][k] == pytest.approx(0.657, abs=1e-3)
    for setting in ("compose", "timing"):
        for est in ("rollout", "tweedie"):
            assert new["W"][f"{setting}/{est}"] == old["W"][f"{setting}/{est}"]
    w = new["W"]["quality/rollout"][3]  # quality: sharpness, speck_free, wash_free, realism_centred
    assert sum(w[:3]) == pytest.approx(0.150, abs=5e-4) and sum(w) == pytest.approx(0.25, abs=1e-6)


def _figure_with_one_row_changed(old_file: str, new_file: str, old_name: str, new_name: str):
    """Two committed figure-02 JSONs under research/tables drawn from the same stored ends, the second with reward
    ``new_name`` in ``old_name``'s row: checks that every other row's profiles, bands, gains and checks, of both
    estimators and both batches, are equal, and returns (old, new, the changed row's index). The noise share is
    not compared: it reads every row's mean profile, so it moves."""
    import json

    root = Path(__file__).resolve().parents[1] / "research/tables"
    old, new = (json.loads((root / f).read_text()) for f in (old_file, new_file))
    assert new["parameters"] == old["parameters"]
    names = old["rollout"]["reward_names"]
    k = names.index(old_name)
    assert new["rollout"]["reward_names"] == names[:k] + [new_name] + names[k + 1:]
    for b, (o, n) in {"b1": (old, new), "b2": (old["replicate"], new["replicate"])}.items():
        for est in ("rollout", "tweedie"):
            for key in ("D", "D_lo", "D_hi", "gains"):
                for i in range(len(names)):
                    if i != k:
                        assert n[est][key][i] == o[est][key][i], (b, est, key, names[i])
        for check, values in n["rollout"]["checks"].items():
            before = o["rollout"]["checks"][check]
            assert [v for i, v in enumerate(values) if i != k] == [v for i, v in enumerate(before) if i != k], \
                (b, check)
    return old, new, k
