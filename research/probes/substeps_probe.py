"""Probe: is the ground truth's sub-grid fine enough? Figure 02's D with 4 ancestral substeps per grid step against 8.

    python research/probes/timing_cache.py record --seed 0 --substeps 8 --dir runs/ends_s8   # ~20 min on 2 cores
    python research/probes/timing_cache.py record --seed 0 --substeps 16 --dir runs/ends_s16  # optional, 54 min shared
    python research/probes/timing_cache.py record --seed 0 --substeps 16 --x0-substeps 4 --dir runs/ends_s16_x4  # optional
    python research/probes/substeps_probe.py                                                  # ~1 min

docs/method.md §5 asks for continuations "on a sub-grid fine enough" that their ends, given x_σ, follow the model's
posterior. Notebook 02 uses 4 ancestral (η = 1) substeps per step of the 6-step grid. If that were too coarse, the
ends would be biased, and so would every timing research/rounds/24-figure-02.md reads from them (the centre of mass of
each reward's gains) and the lag it reports for tweedie. This scores every setting reward and the blur and speckle
verdicts on the stored ends of the same 256 prompts drawn with 8 substeps (seed 0) and compares them with the committed
4-substep batches. The null is the committed replicate: 4 substeps, seed 1, against seed 0. A sub-grid is fine enough
where doubling it moves the centre of mass of the gains no more than a second seed does. It also scores the committed
tweedie gains of seed 0 (`research/tables/informativeness_base_256.json`) against each ground truth: if the lag were the
coarse sub-grid's, tweedie would agree better with the finer one than with the same sub-grid's other batch (the
8-substep batch draws its own x_0, so it is another batch as well as another sub-grid).

Two optional batches extend it where present. ``--finest``: 16 substeps, its own clean batch (a third point, to see
whether the centre of mass converges). ``--same-x0``: seed 0's 4-substep clean batch itself, continued with 16
substeps, so that only the continuations' sub-grid differs from figure 02 (the forward noise of columns after the
first differs too, since the generator is shared), and tweedie, which reads that clean batch, is scored against a
ground truth of the same samples.

Writes ``research/tables/ground_truth_substeps.csv``: per reward, the centre of mass of each batch with its 5-95 %
bootstrap band, the differences, and the Spearman ρ of the 6 gains. Analysis only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> list[dict]:
    import torch

    import recast
    from recast.worlds.digits.judges.agreement import verdict_reward
    from recast.worlds.digits.rewards import get, setting_rewards
    from recast.informativeness import gains_centre_of_mass
    from recast.informativeness.ends import RolloutEnds, ends_profile
    from recast.informativeness.probe import spearman
    from recast.io import write_csv
    from recast.experiments.sweep import results_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coarse", default="runs/ends", help="the committed 4-substep ends (seed_0.pt, seed_1.pt)")
    ap.add_argument("--fine", default="runs/ends_s8", help="the 8-substep ends (seed_0.pt)")
    ap.add_argument("--finest", default="runs/ends_s16",
                    help="16-substep ends of seed 0, scored as well when present (a third point for convergence)")
    ap.add_argument("--same-x0", default="runs/ends_s16_x4",
                    help="seed 0's 4-substep clean batch continued with 16 substeps (record --x0-substeps 4), when present")
    ap.add_argument("--tweedie", default="research/tables/informativeness_base_256.json")
    ap.add_argument("--csv", default="ground_truth_substeps.csv")
    a = ap.parse_args(argv)
    root = Path(recast.__file__).resolve().parents[1]
    batches = {"s4_seed0": RolloutEnds.load(root / a.coarse / "seed_0.pt"),
               "s4_seed1": RolloutEnds.load(root / a.coarse / "seed_1.pt"),
               "s8_seed0": RolloutEnds.load(root / a.fine / "seed_0.pt")}
    fine, coarse = batches["s8_seed0"], batches["s4_seed0"]
    if fine.meta["substeps"] <= coarse.meta["substeps"] or fine.meta["seed"] != coarse.meta["seed"] or \
            fine.prompts != coarse.prompts:
        raise SystemExit(f"{a.fine} must hold the same prompts and seed as {a.coarse} with more substeps: "
                         f"{fine.meta} against {coarse.meta}")
    finest = root / a.finest / "seed_0.pt"
    if finest.is_file():
        batches["s16_seed0"] = RolloutEnds.load(finest)
        f16 = batches["s16_seed0"]
        if f16.meta["substeps"] <= fine.meta["substeps"] or f16.meta["seed"] != 0 or f16.prompts != coarse.prompts:
            raise SystemExit(f"{a.finest} must hold seed 0's prompts with more substeps than {a.fine}: {f16.meta}")
    same_x0 = root / a.same_x0 / "seed_0.pt"
    if same_x0.is_file():
        batches["s16x4_seed0"] = mixed = RolloutEnds.load(same_x0)
        if mixed.meta.get("x0_substeps") != coarse.meta["substeps"] or not torch.equal(mixed.clean, coarse.clean):
            raise SystemExit(f"{a.same_x0} must continue {a.coarse}'s seed-0 clean batch: {mixed.meta}")
    ref = json.loads((root / a.tweedie).read_text())
    tweedie = dict(zip(ref["tweedie"]["reward_names"], torch.tensor(ref["tweedie"]["gains"])))
    names = list(setting_rewards("compose", "quality"))
    rewards = [(n, get(n)(torch.device("cpu"))) for n in names]
    rewards += [(f"verdict:{v}", verdict_reward(v)) for v in ("not_blur", "not_speckle")]
    rows = []
    print("| reward | centre of mass: 4 substeps seed 0 / seed 1 / 8 substeps seed 0 | 8 − 4 | seed 1 − seed 0 | "
          "ρ gains, 8 vs 4 | ρ, seed 1 vs seed 0 | tweedie ρ vs 4 substeps seed 0 / seed 1 / 8 substeps seed 0 |")
    print("|---|---|---|---|---|---|---|")
    for name, fn in rewards:
        prof = {b: ends_profile(e, fn) for b, e in batches.items()}
        row = {"reward": name}
        for b, p in prof.items():
            row |= {f"com_{b}": float(p["com"][0]), f"com_lo_{b}": float(p["com_lo"][0]),
                    f"com_hi_{b}": float(p["com_hi"][0])}
        g = {b: p["gains"][0] for b, p in prof.items()}
        row["com_tweedie_s4_seed0"] = float(gains_centre_of_mass(tweedie[name])) if name in tweedie else float("nan")
        row |= {"d_com_substeps": row["com_s8_seed0"] - row["com_s4_seed0"],
                "d_com_seed": row["com_s4_seed1"] - row["com_s4_seed0"],
                "rho_substeps": spearman(g["s8_seed0"], g["s4_seed0"]),
                "rho_seed": spearman(g["s4_seed1"], g["s4_seed0"]),
                **{f"rho_tweedie_{b}": spearman(tweedie[name], g[b]) if name in tweedie else float("nan")
                   for b in batches}}
        if "s16_seed0" in batches:
            row |= {"d_com_s16_s8": row["com_s16_seed0"] - row["com_s8_seed0"],
                    "rho_s16_s8": spearman(g["s16_seed0"], g["s8_seed0"])}
        if "s16x4_seed0" in batches:  # the same clean batch: only the continuations' sub-grid differs
            row |= {"d_com_s16x4_s4": row["com_s16x4_seed0"] - row["com_s4_seed0"]}
        rows.append(row)
        print(f"| {name} | {row['com_s4_seed0']:.2f} / {row['com_s4_seed1']:.2f} / {row['com_s8_seed0']:.2f} | "
              f"{row['d_com_substeps']:+.2f} | {row['d_com_seed']:+.2f} | {row['rho_substeps']:+.2f} | "
              f"{row['rho_seed']:+.2f} | {row['rho_tweedie_s4_seed0']:+.2f} / {row['rho_tweedie_s4_seed1']:+.2f} / "
              f"{row['rho_tweedie_s8_seed0']:+.2f} |", flush=True)
    if "s16_seed0" in batches:
        print("\n| reward | centre of mass, 4 / 8 / 16 substeps (seed 0) [16's 5-95 %] | 16 − 8 | 8 − 4 | "
              "ρ gains, 16 vs 8 | tweedie ρ vs 16 substeps |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['reward']} | {r['com_s4_seed0']:.2f} / {r['com_s8_seed0']:.2f} / {r['com_s16_seed0']:.2f} "
                  f"[{r['com_lo_s16_seed0']:.2f}, {r['com_hi_s16_seed0']:.2f}] | {r['d_com_s16_s8']:+.2f} | "
                  f"{r['d_com_substeps']:+.2f} | {r['rho_s16_s8']:+.2f} | {r['rho_tweedie_s16_seed0']:+.2f} |")
    if "s16x4_seed0" in batches:
        print("\n| reward | seed 0's clean batch: continued with 4 / 16 substeps [16's 5-95 %] | 16 − 4 | "
              "tweedie's centre of mass | its lag behind 4 / 16 substeps | tweedie ρ vs 4 / 16 substeps |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            t = r["com_tweedie_s4_seed0"]
            print(f"| {r['reward']} | {r['com_s4_seed0']:.2f} / {r['com_s16x4_seed0']:.2f} "
                  f"[{r['com_lo_s16x4_seed0']:.2f}, {r['com_hi_s16x4_seed0']:.2f}] | {r['d_com_s16x4_s4']:+.2f} | "
                  f"{t:.2f} | {t - r['com_s4_seed0']:+.2f} / {t - r['com_s16x4_seed0']:+.2f} | "
                  f"{r['rho_tweedie_s4_seed0']:+.2f} / {r['rho_tweedie_s16x4_seed0']:+.2f} |")
    write_csv(results_dir() / a.csv, rows)
    return rows


if __name__ == "__main__":
    main()
