"""Probe: where does the ground truth's sub-grid series settle? One clean batch continued with 4, 16 and 32 substeps.

    for s in 4 16 32; do python research/probes/timing_cache.py record --seed 0 --num-prompts 128 --substeps $s \
        --x0-substeps 4 --dir runs/p128_s${s}_x4; done        # 5 + 18 + 35 min on 2 cores
    python research/probes/subgrid_convergence_probe.py              # ~40 s: research/tables/ground_truth_subgrid.csv

The grid round found that 16 ancestral substeps per grid step decide every reward later than figure 02's 4, on the
same clean samples, and that the cross-batch series 4 → 8 → 16 did not shrink like 1 / substeps. Those cross-batch
differences carry a second batch's sampling noise. Here all three batches continue *one* clean batch (seed 0, 128
train prompts, drawn with 4 substeps), so the states' clean images are shared, and every bootstrap uses the same
resampled states in each batch (`ends_profile`'s seed), which makes the bands of the differences paired bands. (The
forward noise of the columns after the first still differs between batches: the generator is shared with the
continuations.)

The ancestral (η = 1) step is a first-order discretisation of the reverse SDE, weakly convergent of order 1. If the
series is in that regime, E[D_n] = D_∞ + c / n, so the step from 16 to 32 substeps is 1/6 of the step from 4 to 16,
and D_∞ ≈ 2 D_32 − D_16 (Richardson). The probe reports, per reward, the centre of mass of the gains at 4, 16, 32
substeps and extrapolated, the measured ratio (c_32 − c_16) / (c_16 − c_4) with its paired band (order 1 predicts
0.17; a ratio near 1 means the series is not converging), the centre of mass at 32 that order 1 fitted on 4 and
16 predicts, with the paired band of measured − predicted, and tweedie's gains on the same clean batch against each
reference (its centre of mass, lag and Spearman ρ). A last column checks the sampler itself: the continuations
from the noisiest interior state should reproduce the clean batch's reward distribution at every sub-grid (Welch z
of the mean reward; the ends share their states, so |z| is a little optimistic). Analysis only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SUBSTEPS = (4, 16, 32)
ORDER_ONE_RATIO = (1 / 16 - 1 / 32) / (1 / 4 - 1 / 16)  # (c_32 - c_16) / (c_16 - c_4) if E[D_n] = D_inf + c / n


def richardson(D_mid, D_fine, n_mid: int, n_fine: int):
    """D_∞ under E[D_n] = D_∞ + c / n from two sub-grids: (n_fine D_fine − n_mid D_mid) / (n_fine − n_mid)."""
    if not 0 < n_mid < n_fine:
        raise ValueError(f"need 0 < n_mid < n_fine, got {n_mid}, {n_fine}")
    return (n_fine * D_fine - n_mid * D_mid) / (n_fine - n_mid)


def com_of_D(D):
    """Centre of mass of the telescoping gains of D (..., T + 1), rows without gain NaN."""
    import torch

    from recast.informativeness import gains_centre_of_mass, telescoping_gains

    D = torch.as_tensor(D, dtype=torch.float64)
    flat = D.reshape(-1, D.shape[-1])
    return gains_centre_of_mass(telescoping_gains(flat)).reshape(D.shape[:-1])


def _band(x):
    import torch

    q = torch.nanquantile(x, torch.tensor([0.05, 0.95], dtype=x.dtype), dim=0)
    return float(q[0]), float(q[1])


def main(argv: list[str] | None = None) -> list[dict]:
    import torch

    import recast
    from recast.worlds.digits.judges.agreement import verdict_reward
    from recast.worlds.digits.rewards import get, setting_rewards
    from recast.informativeness import gains_centre_of_mass, telescoping_gains
    from recast.informativeness.ends import RolloutEnds, ends_profile
    from recast.informativeness.probe import estimate_profiles, spearman
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir
    from recast.world import load_world

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dirs", default="runs/p128_s{}_x4", help="the batches' folders, {} = substeps")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--csv", default="ground_truth_subgrid.csv")
    a = ap.parse_args(argv)
    root = Path(recast.__file__).resolve().parents[1]
    batches = {n: RolloutEnds.load(root / a.dirs.format(n) / "seed_0.pt") for n in SUBSTEPS}
    first = batches[SUBSTEPS[0]]
    for n, e in batches.items():
        if e.meta["substeps"] != n or e.meta.get("x0_substeps", e.meta["substeps"]) != SUBSTEPS[0] or \
                e.prompts != first.prompts or not torch.equal(e.clean, first.clean) or \
                not torch.equal(e.sigmas, first.sigmas):
            raise SystemExit(f"{a.dirs.format(n)} must continue the same {SUBSTEPS[0]}-substep clean batch with {n} "
                             f"substeps on the same grid: {e.meta}")
    names = list(setting_rewards("compose", "quality"))
    torch.set_num_threads(2)
    world = load_world(f"digits:{root / 'data/digit_base'}")
    tw = estimate_profiles(world, names, list(first.prompts), estimators=("tweedie",), num_steps=len(first.sigmas) - 1,
                           shift=first.meta["shift"], substeps=SUBSTEPS[0], seed=first.meta["seed"],
                           bootstrap=a.bootstrap)["tweedie"]
    tweedie = dict(zip(tw.reward_names, tw.gains))
    rewards = [(n, get(n)(torch.device("cpu"))) for n in names]
    rewards += [(f"verdict:{v}", verdict_reward(v)) for v in ("not_blur", "not_speckle")]
    rows = []
    print(f"| reward | centre of mass, {' / '.join(map(str, SUBSTEPS))} substeps / extrapolated [5-95 %] | 16 − 4 | "
          f"32 − 16 [paired 5-95 %] | ratio (order 1: {ORDER_ONE_RATIO:.2f}) | 32 predicted by order 1 from 4 and 16: "
          f"value, measured − predicted [paired 5-95 %] | tweedie: centre of mass, "
          f"lag behind 4 / 32 / extrapolated | tweedie ρ vs 4 / 32 / extrapolated | ρ gains, 32 vs 16 | "
          f"ends from σ_1 vs clean, z: 4 / 16 / 32 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, fn in rewards:
        prof = {n: ends_profile(e, fn, bootstrap=a.bootstrap, seed=0) for n, e in batches.items()}
        D = {n: p["D"][0] for n, p in prof.items()}
        Db = {n: p["D_boot"][:, 0] for n, p in prof.items()}  # the same resampled states in every batch
        D_inf, Db_inf = richardson(D[16], D[32], 16, 32), richardson(Db[16], Db[32], 16, 32)
        c = {n: float(com_of_D(D[n])) for n in SUBSTEPS} | {"inf": float(com_of_D(D_inf))}
        cb = {n: com_of_D(Db[n]) for n in SUBSTEPS} | {"inf": com_of_D(Db_inf)}
        d_mid, d_fine = cb[16] - cb[4], cb[32] - cb[16]
        # order 1 fitted on 4 and 16 predicts 32: D_32 = D_inf + (D_16 - D_inf) / 2 with D_inf from (4, 16)
        pred = (richardson(D[4], D[16], 4, 16) + D[16]) / 2
        pred_b = (richardson(Db[4], Db[16], 4, 16) + Db[16]) / 2
        ratio = d_fine / d_mid
        g = {n: p["gains"][0] for n, p in prof.items()} | {"inf": telescoping_gains(D_inf)}
        row = {"reward": name, **{f"com_s{n}": c[n] for n in SUBSTEPS}, "com_extrapolated": c["inf"]}
        for n in (*SUBSTEPS, "inf"):
            key = f"s{n}" if n != "inf" else "extrapolated"
            row[f"com_lo_{key}"], row[f"com_hi_{key}"] = _band(cb[n])
        row |= {"d_com_16_4": c[16] - c[4], "d_com_32_16": c[32] - c[16],
                "ratio_32_16_over_16_4": (c[32] - c[16]) / (c[16] - c[4]) if c[16] != c[4] else float("nan")}
        row["d_com_16_4_lo"], row["d_com_16_4_hi"] = _band(d_mid)
        row["d_com_32_16_lo"], row["d_com_32_16_hi"] = _band(d_fine)
        row["ratio_lo"], row["ratio_hi"] = _band(ratio)
        row["com_s32_predicted"] = float(com_of_D(pred))
        row["d_com_32_predicted"] = c[32] - row["com_s32_predicted"]
        row["d_com_32_predicted_lo"], row["d_com_32_predicted_hi"] = _band(cb[32] - com_of_D(pred_b))
        row["rho_s32_s16"] = spearman(g[32], g[16])
        for n, p in prof.items():  # ends continued from the noisiest interior state against the clean batch
            row[f"ends_z_s{n}"] = float(p["ends_z_first"][0])
        if name in tweedie:
            t = float(gains_centre_of_mass(tweedie[name]))
            row["com_tweedie"] = t
            for n in (*SUBSTEPS, "inf"):
                key = f"s{n}" if n != "inf" else "extrapolated"
                row[f"lag_tweedie_{key}"] = t - c[n]
                row[f"rho_tweedie_{key}"] = spearman(tweedie[name], g[n])
        rows.append(row)
        tw_txt = (f"{row['com_tweedie']:.2f}, {row['lag_tweedie_s4']:+.2f} / {row['lag_tweedie_s32']:+.2f} / "
                  f"{row['lag_tweedie_extrapolated']:+.2f} | {row['rho_tweedie_s4']:+.2f} / "
                  f"{row['rho_tweedie_s32']:+.2f} / {row['rho_tweedie_extrapolated']:+.2f}"
                  if name in tweedie else "— | —")
        print(f"| {name} | {c[4]:.2f} / {c[16]:.2f} / {c[32]:.2f} / {c['inf']:.2f} "
              f"[{row['com_lo_extrapolated']:.2f}, {row['com_hi_extrapolated']:.2f}] | {row['d_com_16_4']:+.2f} | "
              f"{row['d_com_32_16']:+.2f} [{row['d_com_32_16_lo']:+.2f}, {row['d_com_32_16_hi']:+.2f}] | "
              f"{row['ratio_32_16_over_16_4']:+.2f} [{row['ratio_lo']:+.2f}, {row['ratio_hi']:+.2f}] | "
              f"{row['com_s32_predicted']:.2f}, {row['d_com_32_predicted']:+.2f} [{row['d_com_32_predicted_lo']:+.2f}, "
              f"{row['d_com_32_predicted_hi']:+.2f}] | {tw_txt} | "
              f"{row['rho_s32_s16']:+.2f} | {row['ends_z_s4']:+.1f} / {row['ends_z_s16']:+.1f} / "
              f"{row['ends_z_s32']:+.1f} |", flush=True)
    write_csv(results_dir() / a.csv, rows)
    return rows


if __name__ == "__main__":
    main()
